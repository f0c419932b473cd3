# Sources of sim/report, listed by name (appended to STAGE_SOURCES).
