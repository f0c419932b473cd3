# Sources of sim/program, listed by name.
set(STAGE_SOURCES
  program/program.cc
  program/matching.cc
  program/program_json_read.cc
  program/program_json_write.cc
)
