// Checking macros for CUDA, cuBLAS(Lt) and NCCL calls (docs/contributing.md, Errors): a failed call
// throws BenchError with "file:line: call: error string"; main() prints it and exits 1.
// Depends on nothing but the CUDA toolkit and NCCL headers.
#pragma once

#include <string>

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "bench_error.h"

#define STEPCAST_CUDA_CHECK(call)                                                 \
  do {                                                                            \
    cudaError_t err_ = (call);                                                    \
    if (err_ != cudaSuccess)                                                      \
      ::stepcast::bench::call_failed(                                             \
          __FILE__, __LINE__, #call,                                              \
          std::string(cudaGetErrorName(err_)) + ": " + cudaGetErrorString(err_)); \
  } while (0)

#define STEPCAST_CUBLAS_CHECK(call)                                                          \
  do {                                                                                       \
    cublasStatus_t st_ = (call);                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                        \
      ::stepcast::bench::call_failed(__FILE__, __LINE__, #call, cublasGetStatusString(st_)); \
  } while (0)

#define STEPCAST_NCCL_CHECK(call)                                                         \
  do {                                                                                    \
    ncclResult_t nr_ = (call);                                                            \
    if (nr_ != ncclSuccess)                                                               \
      ::stepcast::bench::call_failed(__FILE__, __LINE__, #call, ncclGetErrorString(nr_)); \
  } while (0)

// Kernel launches: checks the launch itself (configuration errors).
#define STEPCAST_CUDA_CHECK_LAUNCH() STEPCAST_CUDA_CHECK(cudaGetLastError())
