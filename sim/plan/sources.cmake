# Sources of sim/plan, listed by name (appended to STAGE_SOURCES).
set(STAGE_SOURCES plan/plan.cc plan/layout.cc plan/framework.cc)
