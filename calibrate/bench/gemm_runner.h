// One cuBLASLt GEMM (buffers, descriptors, heuristic algorithm) that can be launched and
// timed repeatedly, shared by the GEMM sweep, the overlap benchmark and the executor; and a
// grouped GEMM of several as Transformer Engine runs a MoE layer's experts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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
  static constexpr std::size_t kWorkspaceBytes = 32u << 20;
  // Allocates and fills A and B on the current device; picks cuBLASLt's first heuristic
  // algorithm with a 32 MiB workspace: `workspace` when given (kWorkspaceBytes, owned by the
  // caller, used by nothing that can run beside this GEMM: runners that share one must share
  // the stream), else one of its own. Throws BenchError.
  GemmRunner(const GemmShapeSpec& s, cudaStream_t stream, void* workspace = nullptr);
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
  void init();              // the constructor's work
  void release() noexcept;  // frees whatever was created (destructor, failed constructor)
  GemmShapeSpec shape_;
  cudaStream_t stream_;
  std::string layout_;
  void* a_ = nullptr;
  void* b_ = nullptr;
  void* d_ = nullptr;
  void* workspace_ = nullptr;
  bool own_workspace_ = true;
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, ld_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

// A grouped expert GEMM as Transformer Engine's GroupedLinear runs it on Hopper
// (transformer_engine/common/gemm/cublaslt_gemm.cu, nvte_multi_stream_cublas_gemm): `groups`
// cuBLAS GEMMs of the simulator's C[m,n] = A[m,k] B[k,n], each called as a Program GEMM of
// `phase` is (a Program phase name, passed to cublas_gemm: "bwd_input" NN, "bwd_weight" NT,
// any other TN as forward; fp8 always TN),
// each with operands of its own, issued round-robin over min(groups, kStreams) streams of
// its own that are forked from the caller's stream with an event and joined back to it (the
// caller waits for each stream's end event).
class GroupedGemmRunner {
 public:
  static constexpr int kStreams = 4;  // TE's compute streams (nvte_get_num_compute_streams)
  // On the current device: per group GemmRunner's A, B and D filled pseudo-randomly, one
  // 32 MiB workspace per stream, the streams and events. Throws BenchError (bad dtype, no
  // cuBLASLt algorithm, out of memory), freeing what it made.
  GroupedGemmRunner(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t groups,
                    const std::string& dtype, const std::string& phase);
  ~GroupedGemmRunner();
  GroupedGemmRunner(const GroupedGemmRunner&) = delete;
  GroupedGemmRunner& operator=(const GroupedGemmRunner&) = delete;

  // Enqueues the grouped GEMM behind the work already on `stream`; later work on `stream`
  // waits for every group. Host-asynchronous; may be captured into a CUDA graph (the fork
  // and join become graph edges). One run at a time per runner: its streams and events are
  // reused by the next run.
  void run(cudaStream_t stream);
  // Times `repeats` runs on `stream` (each between two events recorded on it) after `warmup`,
  // queued behind a GPU-side wait as GemmRunner::time_us; microseconds.
  std::vector<double> time_us(int warmup, int repeats, cudaStream_t stream);
  double flops() const;                                                   // 2*m*n*k*groups
  const std::string& layout() const { return gemms_.front()->layout(); }  // as run
  int streams() const { return static_cast<int>(streams_.size()); }

 private:
  void init(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t groups,
            const std::string& dtype, const std::string& phase);
  void release() noexcept;
  std::vector<cudaStream_t> streams_;
  std::vector<void*> workspaces_;  // one per stream
  std::vector<std::unique_ptr<GemmRunner>> gemms_;
  cudaEvent_t fork_ = nullptr;
  std::vector<cudaEvent_t> join_;  // one per stream
};

}  // namespace stepcast::bench
