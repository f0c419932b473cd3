# Sources of sim/report, listed by name.
set(STAGE_SOURCES
  report/report.cc
  report/search_prune.cc
  report/search_bound.cc
  report/flow_mode.cc
  report/validate.cc
  report/validate_lofo.cc
  report/validate_tasks.cc
  report/regress.cc
  report/explore.cc
  report/explore_output.cc
  report/visual.cc
  report/parallel.cc
)
