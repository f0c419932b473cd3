# Sources of sim/scenario, listed by name.
set(STAGE_SOURCES
  scenario/scenario.cc
  scenario/scenario_sections.cc
  scenario/framework_section.cc
  scenario/plan_checks.cc
  scenario/sweep.cc
  scenario/search_space.cc
  scenario/limits.cc
)
