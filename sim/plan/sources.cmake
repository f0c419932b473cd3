# Sources of sim/plan, listed by name (appended to STAGE_SOURCES).
list(APPEND STAGE_SOURCES plan/layout.cc)
