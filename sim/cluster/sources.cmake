# Sources of sim/cluster, listed by name (appended to STAGE_SOURCES).
