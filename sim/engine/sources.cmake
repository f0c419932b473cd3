# Sources of sim/engine, listed by name.
set(STAGE_SOURCES
  engine/engine.cc
  engine/engine_build.cc
  engine/engine_flows.cc
  engine/contention.cc
  engine/accounting.cc
  engine/step_floor.cc
  engine/critical_path.cc
  engine/flow_network.cc
)
