# Sources of sim/program, listed by name (appended to STAGE_SOURCES).
list(APPEND STAGE_SOURCES
  program/program.cc
  program/matching.cc
  program/program_json.cc
  program/json_locator.cc
)
