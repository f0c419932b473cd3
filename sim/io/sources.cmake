# Sources of sim/io, listed by name.
set(STAGE_SOURCES
  io/yaml_util.cc
  io/json_locator.cc
  io/dotted.cc
)
