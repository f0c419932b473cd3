# Sources of sim/lower, listed by name (appended to STAGE_SOURCES).
set(STAGE_SOURCES
  lower/schedule.cc
  lower/lower.cc
  lower/groups.cc
  lower/emit.cc
  lower/tensor_parallel.cc
  lower/context_parallel.cc
  lower/fp8.cc
  lower/data_parallel.cc
  lower/zero3_fetch.cc
  lower/moe_overlap.cc
  lower/passes.cc
  lower/pipeline_p2p.cc
)
