# Sources of sim/network, listed by name (appended to STAGE_SOURCES).
