# Sources of sim/cost, listed by name (appended to STAGE_SOURCES).
