# Sources of sim/program, listed by name (appended to STAGE_SOURCES).
