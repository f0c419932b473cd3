# Sources of sim/lower, listed by name (appended to STAGE_SOURCES).
