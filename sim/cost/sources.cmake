# Sources of sim/cost, listed by name.
set(STAGE_SOURCES
  cost/compute.cc
  cost/collective.cc
  cost/coster.cc
)
