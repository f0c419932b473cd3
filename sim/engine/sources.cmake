# Sources of sim/engine, listed by name (appended to STAGE_SOURCES).
