# Sources of sim/network, listed by name (appended to STAGE_SOURCES).
set(STAGE_SOURCES network/topology.cc network/maxmin.cc network/flows.cc network/routing.cc)
