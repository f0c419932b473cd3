# Sources of sim/cost, listed by name (appended to STAGE_SOURCES).
list(APPEND STAGE_SOURCES cost/params.cc)
list(APPEND STAGE_SOURCES cost/compute.cc cost/collective.cc cost/coster.cc)
