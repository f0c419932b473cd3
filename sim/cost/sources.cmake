# Sources of sim/cost, listed by name (appended to STAGE_SOURCES).
list(APPEND STAGE_SOURCES cost/params.cc)
