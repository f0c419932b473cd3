# Sources of sim/report, listed by name (appended to STAGE_SOURCES).
list(APPEND STAGE_SOURCES report/report.cc)
list(APPEND STAGE_SOURCES report/validate.cc)
list(APPEND STAGE_SOURCES report/regress.cc)
list(APPEND STAGE_SOURCES report/explore.cc)
list(APPEND STAGE_SOURCES report/visual.cc)
list(APPEND STAGE_SOURCES report/parallel.cc)
