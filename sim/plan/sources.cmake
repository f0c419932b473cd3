# Sources of sim/plan, listed by name (appended to STAGE_SOURCES).
