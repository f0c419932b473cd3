# Sources of sim/engine, listed by name (appended to STAGE_SOURCES).
list(APPEND STAGE_SOURCES
  engine/engine.cc
  engine/critical_path.cc
  engine/flow_network.cc
  engine/flow_mode.cc
)
