// The workload: per layer, the ops of forward, backward-input-gradient and
// backward-weight-gradient (kept apart for zero-bubble schedules), each with FLOPs, bytes
// moved and real GEMM / attention shapes, for one microbatch on one rank under a
// tp / cp / sp / ep split. Knows no hardware and no time.
//
// Where tensor-parallel partial results must be reduced, or tokens exchanged between expert
// ranks, the model says so with a CommPoint (bytes per rank, in the order the ops run); the
// lowering turns each into the collective the plan calls for (allreduce, or reduce-scatter +
// allgather under sequence parallel; all-to-all over the ep group).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/arch.h"

namespace stepcast {

// fp8: E4M3/E5M2 with one fp32 scale per tensor (Hopper's "current"/"delayed" scaling).
// mxfp8 and nvfp4: the block-scaled (microscaling) formats of Blackwell's tensor cores
// (NVIDIA Blackwell architecture technical brief; OCP Microscaling Formats v1.0): mxfp8 is
// E4M3 with one 8-bit power-of-two (E8M0) scale per 32 elements, nvfp4 E2M1 (4 bits) with
// one E4M3 scale per 16 elements plus one fp32 scale per tensor. Both run at the FP8 / FP4
// tensor-core rates; everything but the GEMMs stays in bf16 (activation_dtype).
enum class DType { kBf16, kFp16, kFp8, kFp32, kMxfp8, kNvfp4 };
// How per-tensor fp8 (DType::kFp8) scales its tensors (training.fp8_recipe; Megatron-Core
// `fp8_recipe`, default 'delayed'): delayed scaling casts with the amax history of earlier
// steps, so the cast fuses into the kernel that produces the tensor; current scaling
// (Transformer Engine Float8CurrentScalingQuantizer, Megatron-Bridge's fp8_cs recipes) takes
// each tensor's amax in the same step, one more pass over it before its cast.
enum class Fp8Recipe { kDelayed, kCurrent };
inline constexpr int kDTypeCount = static_cast<int>(DType::kNvfp4) + 1;
// Whole bytes per element; nvfp4 (half a byte) has none: InvariantError.
int dtype_bytes(DType t);
// Bytes per element of the data alone: dtype_bytes, 0.5 for nvfp4.
double dtype_element_bytes(DType t);
// Bytes per element stored, with the block scales: mxfp8 1 + 1/32 (one 1-byte scale per 32
// elements, +3.1%), nvfp4 0.5 + 1/16 (one 1-byte scale per 16 elements, +12.5% of its
// 8 data bytes; the per-tensor fp32 scale is negligible); the element bytes otherwise.
double dtype_storage_bytes(DType t);
// mxfp8 and nvfp4: each GEMM operand is quantized by a kernel of its own (model/dtypes.cc).
bool block_scaled(DType t);
// fp8, mxfp8, nvfp4: GEMMs below 16 bits, at compute.gemm.fp8_max_efficiency of their peak.
bool narrow_gemm_dtype(DType t);
const char* dtype_name(DType t);  // "bf16", ...
// Activations, attention and communication run in 16 bits when GEMMs run in fp8, mxfp8 or
// nvfp4 (Megatron / Transformer Engine); otherwise in the compute dtype.
DType activation_dtype(DType compute);

enum class OpKind { kGemm, kAttention, kMemoryBound };

// The MoE token dispatcher (Megatron-Core --moe-token-dispatcher-type; model/moe.cc):
// alltoall, allgather, or flex with DeepEP's fused dispatch/combine.
enum class MoeDispatcher { kAllToAll, kAllGather, kDeepEp };
const char* moe_dispatcher_name(MoeDispatcher d);  // "alltoall", "allgather", "deepep"

// Operand layout of a GEMM for the executor: N = as stored, T = transposed (A then B).
enum class GemmLayout : std::uint8_t { kNN, kNT, kTN, kTT };
inline constexpr int kGemmLayoutCount = static_cast<int>(GemmLayout::kTT) + 1;
const char* gemm_layout_name(GemmLayout l);  // "NN", "NT", "TN", "TT"

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;  // C[m,n] = A[m,k] * B[k,n]
  std::int64_t batch = 1;            // batched GEMM count (e.g. experts)
  DType dtype = DType::kBf16;
  GemmLayout layout = GemmLayout::kNN;
};

struct AttentionShape {
  std::int64_t batch = 0, heads = 0, kv_heads = 0;  // heads on this rank
  std::int64_t seq_q = 0, seq_kv = 0, head_dim = 0;
  bool causal = true;
  bool backward = false;  // pass: fwd | bwd
  DType dtype = DType::kBf16;
  // Kernel: fused flash attention (FlashAttention-2/3, cuDNN), or the unfused attention of
  // Megatron-LM before 2022 (two batched GEMMs with the s x s score matrix materialised in
  // HBM, fused scale-mask-softmax and dropout between them).
  bool flash = true;
};

// Keys each query row attends to, the s of the attention efficiency curve
// (sim/cost/compute.cc, fitted by calibrate/fit/fit_attention.cc): seq_kv, halved for a
// causal square block (a row sees half the keys on average).
double attention_keys_per_row(const AttentionShape& a);

// FLOPs of one fused (flash) attention kernel with head sizes dqk (scores) and dv (values):
// 2*b*h*sq*skv*(dqk + dv), i.e. 4*b*h*sq*skv*d for one head size (Korthikanti et al. 2022:
// 2bs^2h for the scores and 2bs^2h for the weighted values); half of it for a causal block
// (the kernel skips the masked half), 2.5x backward (FlashAttention-2: recomputed S, dV, dP,
// dQ, dK: 5 matmuls against 2).
double flash_attention_flops(double batch, double heads, double seq_q, double seq_kv,
                             double dqk_plus_dv, bool causal, bool backward);

struct Op {
  std::string name;  // "qkv", "attn", "proj", "fc1", "act", "fc2", "ln1", "router", ...
  OpKind kind = OpKind::kMemoryBound;
  GemmShape gemm;         // kind == kGemm
  AttentionShape attn;    // kind == kAttention
  double flops = 0;       // floating point operations of this op on this rank
  double bytes_read = 0;  // HBM traffic estimate
  double bytes_written = 0;
  // Kernel launches the host issues for this op (Task::launches).
  int launches = 1;
  // The host waits for this op to finish before it issues anything after it (Task::host_sync).
  bool host_sync = false;
};

// Where a collective goes between ops. bytes: the full (unsharded-by-sp) activation tensor
// on this rank that the collective reduces or gathers; for all-to-all, bytes this rank sends.
enum class CommPointKind {
  kTpReduce,    // partial sums after a row-parallel GEMM: allreduce, or RS under sp
  kTpGather,    // before a column-parallel GEMM under sp: allgather (no-op without sp)
  kEpDispatch,  // all-to-all tokens to experts
  kEpCombine,   // all-to-all tokens back
  kEpGather,    // all-gather over the ep group (bytes: the gathered tensor)
  kEpScatter,   // reduce-scatter over the ep group (bytes: the unscattered tensor)
};

struct CommPoint {
  CommPointKind kind;
  double bytes = 0;
  std::string name;  // "attn.out", "mlp.out", "moe.dispatch", ...
  // Non-empty: the collective's result feeds only this GEMM's weight gradient (the op of
  // that name in bwd_weight), not the next op. Sequence parallelism keeps a column-parallel
  // linear's input sharded and all-gathers it again in backward for the weight gradient,
  // overlapped with the input-gradient GEMM (Megatron LinearWithGradAccumulationAndAsync
  // Communication.backward; Transformer Engine's Linear/LayerNormLinear likewise).
  std::string feeds_wgrad;
  // A tensor-parallel gather / reduce-scatter of a linear layer, which Transformer Engine's
  // userbuffers can pipeline with the adjacent GEMM (parallel.overlap.tp_comm). False for the
  // MoE token dispatcher's own tp gathers and reduce-scatters, which are plain collectives.
  bool gemm_overlap = true;
  // The MoE dispatch / combine of the deepep dispatcher: DeepEP's own kernels, not NCCL's
  // all-to-all (Task::ep_kernels).
  bool ep_kernels = false;
};

// One entry of an ordered op sequence: either an op or a communication point.
struct Step {
  bool is_comm = false;
  Op op;                             // !is_comm
  CommPoint comm;                    // is_comm
  bool recompute_selective = false;  // re-run under selective recompute (attention core)
  // Runs on its own stream beside the communication issued before it: waits for none of
  // it (the MoE shared experts under --moe-shared-expert-overlap, model/moe.cc); the next
  // step without the flag waits for that communication as usual.
  bool beside_comm = false;
};

// How a linear layer's weight gradient reaches the gradient buffer that accumulates over
// the step's microbatches (FrameworkRules::grad_accumulation_fusion; add_grad_accumulation,
// model/workload.cc).
enum class GradAccumulation {
  kNone,   // a fresh gradient each microbatch, reduced as it is (ZeRO-2/3): the GEMM writes it
  kFused,  // the GEMM accumulates into the buffer: reads and writes it in its dtype
  kHook,   // the GEMM writes a fresh gradient, then a kernel adds it into the buffer
};

// How one layer's microbatch is split on one rank.
struct ShardSpec {
  std::int64_t microbatch = 1;  // sequences
  std::int64_t seq_len = 0;     // full sequence length
  int tp = 1;
  int cp = 1;  // sequence split across cp ranks (seq per rank = s/cp)
  int ep = 1;
  // Expert tensor parallel size (Megatron-Core --expert-tensor-parallel-size): 1 or tp;
  // 0 = the default, expert_tp_of() below.
  int expert_tp = 0;
  bool sequence_parallel = false;
  DType dtype = DType::kBf16;   // compute dtype of GEMMs (fp8, mxfp8, nvfp4 allowed); others bf16
  bool flash_attention = true;  // attention kernel: flash (true) or unfused (false)
  MoeDispatcher dispatcher = MoeDispatcher::kAllToAll;  // parallel.moe_dispatcher
  int ep_nodes = 1;                    // nodes one ep group spans (DeepEP's RDMA dedup)
  bool shared_expert_overlap = false;  // parallel.overlap.moe_shared_experts
  bool fused_cross_entropy = false;    // FrameworkRules::fused_cross_entropy (logits_loss_ops)
  bool loss_nan_check = false;         // FrameworkRules::loss_nan_check (logits_loss_ops)
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;  // training.fp8_recipe (fp8 only)
  // FrameworkRules::te_fp8_storage: Transformer Engine saves the narrow copies of its linear
  // layers' inputs for backward (model/memory.cc: the MoE experts' and shared experts'; the
  // dense linears' in the lowering, sim/lower/fp8.cc).
  bool te_fp8_storage = true;
  GradAccumulation grad_accumulation = GradAccumulation::kNone;
  // Bytes an element of the accumulated gradient buffer (Megatron's main_grad): 4 for fp32
  // main grads, 2 where they stay 16-bit (training.grad_reduce_dtype).
  double main_grad_bytes = 4;
};

// Whether Transformer Engine's per-tensor fp8 copies replace the 16-bit saved inputs of the
// linear layers (and fill its fp8 weight cache): the stack keeps them and the GEMMs run fp8.
inline bool te_fp8_copies(const ShardSpec& s) { return s.te_fp8_storage && s.dtype == DType::kFp8; }

// The expert tensor parallel size of a shard: ShardSpec::expert_tp when set, else tp without
// expert parallelism (the experts split like the dense MLP) and 1 with it (each rank holds
// its local experts whole: the usual setting with ep, e.g. DeepSeek-V3's; Megatron-Core's
// flag itself defaults to tp).
inline int expert_tp_of(int tp, int ep, int expert_tp) {
  return expert_tp > 0 ? expert_tp : (ep == 1 ? tp : 1);
}
inline int expert_tp_of(const ShardSpec& s) { return expert_tp_of(s.tp, s.ep, s.expert_tp); }

// The routed load of one MoE layer on one rank (model/moe.cc): tokens routed here, token
// copies sent, and the expert rows of the busiest ep rank, which sets the pace.
struct MoeLoad {
  std::int64_t tokens = 0;           // T routed on this rank per microbatch
  double send_copies = 0;            // token copies sent: T*k (capacity x E when padded)
  double rows = 0;                   // expert rows on the busiest rank
  std::int64_t rows_per_expert = 0;  // one local expert's GEMM rows: ceil(rows / E_loc)
  double recv_factor = 1.0;          // the busiest rank's received rows over the mean
};
MoeLoad moe_load(const ModelArch& arch, const ShardSpec& shard);

// Expected number of the `bins` (equal shares of `experts`) that `picks` distinct experts
// drawn uniformly fall in: bins x (1 - C(E - E/bins, k) / C(E, k)).
double expected_distinct_bins(int experts, int bins, int picks);

// One transformer layer on one rank, in execution order. Attention appears in `fwd` as one
// op over the rank's local sequence (s/cp queries against s keys, causal); the lowering
// splits it into cp chunks for ring attention using attention_op().
struct LayerOps {
  std::vector<Step> fwd;
  std::vector<Step> bwd_input;    // activation gradients, reverse order
  std::vector<Step> bwd_weight;   // weight gradients (GEMMs only); ZB-H1 delays these
  double param_count = 0;         // parameters of this layer held on this rank
  double expert_param_count = 0;  // of which routed experts' (their gradients are reduced
                                  // over the expert data-parallel group, dp / ep)
  double grad_bytes_fp32 = 0;     // main-grad bytes for this layer on this rank
  // Of param_count, the replicated parameters whose gradients are partial sums over this
  // rank's sequence shard and are all-reduced over tp once per step (MLA's down-projections
  // and latent norms under sequence parallel: model/mla.cc).
  double tp_grad_params = 0;
  // Of param_count, the one-dimensional tensors (norm gains and biases, linear biases,
  // qk-norm gains, attention sinks, MLA's latent-norm gains), one element count each as this
  // rank holds it; a MoE layer lists those outside its routed block. The rest of param_count
  // is weight matrices. DeepSpeed ZeRO-3 keeps the small ones gathered
  // (sim/lower/zero3_fetch.cc).
  std::vector<double> vectors;
};

// Depends on `layer` only through arch.is_moe_layer(layer): the lowering computes it once per
// kind of layer (tested over the built-in models).
LayerOps layer_ops(const ModelArch& arch, int layer, const ShardSpec& shard);

// Attention core for a (seq_q, seq_kv) block: FLOPs 4*b*heads*sq*skv*d (fwd, halved when
// causal and sq == skv), bwd 2.5x fwd (FlashAttention-2: 5 matmuls vs 2).
// `causal` means "cut by the causal diagonal": it halves the FLOPs for any sq, which is the
// average share of a load-balanced context-parallel rank (sq = s/cp against skv = s); pass
// causal = false for a fully visible block. With q/k head size != v head size (MLA) the
// FLOPs are 2*b*heads*sq*skv*(dqk + dv), and the shape's head_dim is (dqk + dv)/2.
// window > 0: sliding-window attention (a square causal block only; model/arch.h).
Op attention_op(const ModelArch& arch, const ShardSpec& shard, std::int64_t seq_q,
                std::int64_t seq_kv, bool causal, bool backward, std::int64_t window = 0);

// Embedding lookup (first stage), and logits + softmax cross-entropy loss (last stage):
// vocab-parallel over tp as in Megatron.
LayerOps embedding_ops(const ModelArch& arch, const ShardSpec& shard);
LayerOps logits_loss_ops(const ModelArch& arch, const ShardSpec& shard);
// What one multi-token-prediction module adds before its transformer layer (model/mtp.cc):
// the shifted tokens' embedding lookup, the two norms and eh_proj.
LayerOps mtp_input_ops(const ModelArch& arch, const ShardSpec& shard);

// Model FLOPs of one training sequence of `seq_len` tokens (forward + backward, no
// recomputation): 3 x the forward matmul FLOPs of every layer and the logits, with the
// attention scores counted over the full s x s matrix and MoE layers over top_k routed +
// shared experts without capacity padding — the convention of Korthikanti et al. 2022
// eq. 7 (72BLsh^2(1 + s/(6h) + V/(12hL)) for GPT) and of Megatron-Core's reported TFLOP/s.
// MFU = model FLOPs per step / (step time x peak).
double model_flops_per_sequence(const ModelArch& arch, std::int64_t seq_len);

// How the optimizer step runs (optimizer_op).
struct OptimizerSpec {
  bool adam = true;  // else SGD with momentum
  // The dtype of the accumulated gradients: 16-bit ones are first copied to fp32.
  DType grads = DType::kFp32;
  // fp16 training: the fp32 gradients are unscaled in place.
  bool loss_scaling = false;
  // One multi-tensor kernel (apex / Transformer Engine / DeepSpeed FusedAdam, torch
  // fused=True); false: torch.optim's foreach implementation, one pass per arithmetic step.
  bool fused = true;
  // The parameters are the fp32 master itself (FSDP2's shards, FrameworkRules::
  // zero3_fp32_shards): no 16-bit copy to refresh, gradients already fp32.
  bool fp32_params = false;
};

// Optimizer update of `params` parameters (the local shard): memory-bound op; Adam reads
// fp32 master, m, v, grad (the grad once more for the clipping norm, the master once more
// for the 16-bit copy) and writes master, m, v and the 16-bit copy.
Op optimizer_op(double params, const OptimizerSpec& spec = {});

// Bytes the optimizer update holds beside the training state while it runs: torch.optim's
// foreach Adam(W) materializes sqrt(v) for every parameter of the shard (4 B each,
// _multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)); the fused
// kernels and SGD hold nothing.
double optimizer_temp_bytes(double params, bool adam, bool fused);

// Zeroing the gradient buffer at the start of a step (Megatron's zero_grad_buffer: a memset
// of the whole contiguous buffer the backward accumulates into).
Op zero_grad_op(double grad_buffer_bytes);

// Copying gradients into a reduce bucket (DeepSpeed ZeRO-2's contiguous_gradients): reads
// and writes each byte once.
Op grad_copy_op(double grad_bytes);

}  // namespace stepcast
