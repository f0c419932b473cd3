# Sources of sim/scenario, listed by name (appended to STAGE_SOURCES).
list(APPEND STAGE_SOURCES scenario/yaml_util.cc)
list(APPEND STAGE_SOURCES scenario/scenario.cc)
