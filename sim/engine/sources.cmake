# Sources of sim/engine, listed by name.
set(STAGE_SOURCES
  engine/engine.cc
  engine/critical_path.cc
  engine/flow_network.cc
)
