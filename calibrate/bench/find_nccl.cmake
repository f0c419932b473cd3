# Included by calibrate/bench and calibrate/exec (standalone or in-tree).
# NCCL as an imported target: headers and library from the toolkit directories, $NCCL_HOME
# or the system (the NVIDIA HPC SDK / deb packages install it beside CUDA).
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS $ENV{NCCL_HOME} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}
  PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl
  HINTS $ENV{NCCL_HOME} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
  PATH_SUFFIXES lib lib64)
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  message(FATAL_ERROR "NCCL not found (nccl.h / libnccl): set NCCL_HOME to its install prefix")
endif()
if(NOT TARGET stepcast::nccl)
  add_library(stepcast::nccl UNKNOWN IMPORTED)
  set_target_properties(stepcast::nccl PROPERTIES
    IMPORTED_LOCATION ${NCCL_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
endif()
