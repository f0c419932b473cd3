// Fused attention for the executor through cuDNN's graph API (attention_cudnn.cu): the
// scaled-dot-product attention Transformer Engine runs on Hopper (its FusedAttention
// backend, `transformer_engine/common/fused_attn/fused_attn_f16_arbitrary_seqlen.cu`, builds
// the same cuDNN graph through cudnn-frontend's `sdpa` and `sdpa_backward` nodes), described
// here op by op as cudnn-frontend lowers those nodes to the backend API
// (`include/cudnn_frontend/node/scaled_dot_product_flash_attention.h`, `softmax.h`):
//   forward   S = Q K^T · scale, causal rows masked to -inf (row index >= column index kept),
//             Stats = max + log(sum exp(S - max)), P = exp(S - max) / sum, O = P V;
//   backward  the row sums of dO·O, P recomputed from Stats, dV = P^T dO, dP = dO V^T,
//             dS = P (dP - rowsum) · scale, dK = dS^T Q, dQ = dS K.
// cuDNN's heuristics then pick its fused flash-attention engine for the graph. Without cuDNN
// in the build (STEPCAST_EXEC_CUDNN unset), or when cuDNN cannot run a shape, `plan` says
// why and the executor runs that task unfused (gpu_local.cu), and the result's provenance
// counts both.
//
// What differs from a training step, and why it does not move the timing: inputs are
// pseudo-random values in shared buffers (the rank's attention tasks run one at a time on
// its compute stream), so the backward reads the Stats and O of whichever forward ran last:
// finite values, the same kernels. Grouped-query attention runs grouped in the forward
// (K and V with kv_heads heads, as TE passes them; as multi-head attention where cuDNN
// refuses the grouped graph); the backward always as multi-head attention with K and V
// repeated per query head (the graph here has no reduction of dK and dV over a head
// group): the same FLOPs (every product is per query head), K/V read h/kv_heads times over. fp8
// tasks run in bf16, as the simulator costs fused attention at the 16-bit rate whatever the GEMM
// dtype (sim/cost/compute.cc); dropout is off, as in the runs the cases model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <cuda_runtime.h>

namespace stepcast::exec {

struct SdpaShape {
  std::int64_t batch = 1, heads = 1, kv_heads = 1, seq_q = 1, seq_kv = 1, head_dim = 64;
  bool causal = true, backward = false, fp16 = false;  // fp16 or else bf16
  bool operator<(const SdpaShape& o) const;
};

// One planned attention graph, bound to the rank's buffers once they exist.
class Sdpa {
 public:
  virtual ~Sdpa() = default;
  virtual void launch(cudaStream_t s) = 0;
  virtual bool grouped() const = 0;  // K/V with kv_heads heads (else repeated per query head)
};

// One rank's cuDNN state: its handle, the planned graphs by shape, and the Q, K, V, O, dO,
// Stats, dQ, dK, dV buffers and workspace every attention task of the rank shares.
class SdpaRank {
 public:
  SdpaRank();
  ~SdpaRank();
  SdpaRank(const SdpaRank&) = delete;
  SdpaRank& operator=(const SdpaRank&) = delete;

  // Whether this build has cuDNN and its version ("cudnn 9.19.0"), or why not.
  static std::string library();
  static bool available();

  // Creates the handle on the current device (call after cudaSetDevice); false and `why`
  // when there is no cuDNN or no handle.
  bool open(std::string& why);
  // The graph for a shape (planned once per shape), or nullptr with `why` set when cuDNN
  // cannot run it; a backward shape also plans its forward, which fills O and Stats.
  Sdpa* plan(const SdpaShape& shape, std::string& why);
  // After every plan: allocates the shared buffers (values, not zeros) and the workspace
  // for the largest shape, binds every graph to them and runs each once, the forwards
  // first (they fill O and Stats for the backwards). A graph whose run cuDNN refuses is
  // dropped: `failure` then says why, and its tasks run unfused. Throws bench::BenchError on
  // a CUDA failure.
  void bind(cudaStream_t s);
  // Why a planned graph was dropped by bind, or "" when it runs.
  std::string failure(const Sdpa* g) const;
  void close();  // frees everything, never throws

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stepcast::exec
