# Included by calibrate/bench and calibrate/exec (standalone or in-tree).
# NCCL as an imported target: headers and library from the toolkit directories, $NCCL_HOME
# or the system (the NVIDIA HPC SDK / deb packages install it beside CUDA).
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS $ENV{NCCL_HOME} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}
  PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl
  HINTS $ENV{NCCL_HOME} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
  PATH_SUFFIXES lib lib64)
# Else the NCCL of a Python wheel (nvidia-nccl-cu12/13, beside PyTorch on GPU images that
# have no NCCL package): its prefix holds include/nccl.h and lib/libnccl.so.2 (no libnccl.so).
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  set(_nccl_py "import glob, os, nvidia\nfor p in nvidia.__path__:\n  for h in glob.glob(")
  string(APPEND _nccl_py "os.path.join(p, '**', 'include', 'nccl.h'), recursive=True):\n")
  string(APPEND _nccl_py "    print(os.path.dirname(os.path.dirname(h)))")
  execute_process(COMMAND python3 -c "${_nccl_py}"
    OUTPUT_VARIABLE _nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  string(REPLACE "\n" ";" _nccl_wheel "${_nccl_wheel}")
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_wheel} PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_wheel} PATH_SUFFIXES lib lib64)
endif()
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  message(FATAL_ERROR "NCCL not found (nccl.h / libnccl): set NCCL_HOME to its install prefix")
endif()
message(STATUS "NCCL: ${NCCL_LIBRARY}")
if(NOT TARGET stepcast::nccl)
  add_library(stepcast::nccl UNKNOWN IMPORTED)
  set_target_properties(stepcast::nccl PROPERTIES
    IMPORTED_LOCATION ${NCCL_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
endif()
