# Sources of sim/lower, listed by name (appended to STAGE_SOURCES).
set(STAGE_SOURCES
  lower/schedule.cc
  lower/lower.cc
)
