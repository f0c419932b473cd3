// One cuBLASLt GEMM (buffers, descriptors, heuristic algorithm) that can be launched and
// timed repeatedly; shared by the GEMM sweep and the overlap benchmark.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "bench.h"

namespace stepcast::bench {

// Pseudo-random values in [-1, 1) of `dtype` (bf16, fp16, fp8, fp32) in `elems` elements.
void fill_values(void* p, std::size_t elems, const std::string& dtype, unsigned seed,
                 cudaStream_t s);

// bf16/fp16 always; fp8 needs compute capability 8.9+ (Ada, Hopper and newer).
bool dtype_supported(const std::string& dtype, int device);

class GemmRunner {
 public:
  // Allocates and fills A and B on the current device; picks cuBLASLt's first heuristic
  // algorithm with a 32 MiB workspace. Throws BenchError.
  GemmRunner(const GemmShapeSpec& s, cudaStream_t stream);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  void launch();  // enqueues one GEMM on the stream
  // Times `repeats` launches (each between two events) after `warmup`, queued behind a
  // short GPU-side wait so that host launch latency stays out of the samples; microseconds.
  std::vector<double> time_us(int warmup, int repeats);
  double flops() const;  // 2*m*n*k*batch
  const std::string& layout() const { return layout_; }

 private:
  static constexpr std::size_t kWorkspaceBytes = 32u << 20;
  void init();              // the constructor's work
  void release() noexcept;  // frees whatever was created (destructor, failed constructor)
  GemmShapeSpec shape_;
  cudaStream_t stream_;
  std::string layout_;
  void* a_ = nullptr;
  void* b_ = nullptr;
  void* d_ = nullptr;
  void* workspace_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, ld_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

}  // namespace stepcast::bench
