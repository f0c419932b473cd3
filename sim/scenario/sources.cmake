# Sources of sim/scenario, listed by name.
set(STAGE_SOURCES
  scenario/scenario.cc
)
