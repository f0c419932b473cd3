# Sources of sim/cluster, listed by name.
set(STAGE_SOURCES
  cluster/params.cc
  cluster/profile.cc
)
# Where the shipped profiles live when $STEPCAST_PROFILES is not set (profile.cc,
# default_profiles_dir).
set_source_files_properties(cluster/profile.cc PROPERTIES COMPILE_DEFINITIONS
  "STEPCAST_DEFAULT_PROFILES_DIR=\"${PROJECT_SOURCE_DIR}/hw_profiles\"")
