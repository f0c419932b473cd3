// Memory terms. Training state: Megatron mixed precision and the ZeRO paper (Rajbhandari
// et al. 2020, section 3.1 and Fig. 1). Activations: Korthikanti et al. 2022, section 4 and
// Table 2, generalised tensor by tensor (see layer_activation_bytes below and README.md).
#include "model/memory.h"

#include <algorithm>
#include <cmath>

#include "model/error.h"

namespace stepcast {

StateBytesPerParam state_bytes_per_param(DType dtype, bool adam, int zero_stage, int dp,
                                         int grad_bytes, bool fp32_shards, bool master_remainders) {
  STEPCAST_CHECK(zero_stage >= 0 && zero_stage <= 3,
                 "zero stage must be 0..3, got " + std::to_string(zero_stage));
  STEPCAST_CHECK(dp >= 1, "dp must be >= 1, got " + std::to_string(dp));
  STEPCAST_CHECK(grad_bytes > 0, "grad_bytes must be positive");
  StateBytesPerParam s;
  const bool fp32 = dtype == DType::kFp32;
  // fp8 training keeps 16-bit weights (Transformer Engine casts per GEMM).
  s.weights = dtype_bytes(activation_dtype(dtype));
  s.grads = grad_bytes;
  // fp32 master copy (absent when the weights are already fp32) + Adam m, v or momentum.
  s.optimizer = (fp32 ? 0.0 : 4.0) + (adam ? 8.0 : 4.0);
  if (master_remainders && zero_stage >= 1) {
    STEPCAST_CHECK(activation_dtype(dtype) == DType::kBf16,
                   "master weight remainders need bf16 weights");
    s.optimizer -= 2.0;  // the fp32 master's low half only; the bf16 weight is its high half
  }
  if (fp32_shards && zero_stage == 3) {
    // FSDP2: the fp32 shard is parameter and master at once
    // (torch/distributed/fsdp/_fully_shard/_fsdp_param.py); with fp32 compute it already
    // was (no master counted), so the weights stay.
    if (!fp32) s.weights = 0;
    s.grads = 4;
  }
  const double n = dp;
  if (zero_stage >= 1) s.optimizer /= n;
  if (zero_stage >= 2) s.grads /= n;
  if (zero_stage >= 3) s.weights /= n;
  return s;
}

namespace {
double d(std::int64_t v) { return static_cast<double>(v); }
}  // namespace

// Stored tensors of one layer per microbatch on one rank (Korthikanti 2022, section 4.1),
// with T = b*s/cp tokens through the GEMMs, Tn = T/tp under sequence parallel (else T),
// e = bytes per activation element, one byte per dropout-mask element:
//   ln1 input              Tn*h*e      QKV input (ln1 output)   Tn*h*e
//   Q                      T*(a/t)*dqk*e   K  T*(kv/t)*dqk*e    V  T*(kv/t)*dv*e
//   scores (no flash, no selective recompute): (a/t)*T*s_kv*(e [softmax out]
//                          + dropout ? 1 [mask] + e [dropout out] : 0)
//   proj input             T*(a/t)*dv*e    attn dropout mask    Tn*h*1
//   ln2 input              Tn*h*e      fc1 input (ln2 output)   Tn*h*e
//   act input              T*f1/t*e  (GeLU f1 = ffn; SwiGLU f1 = 2 ffn: gate and up)
//   fc2 input              T*ffn/t*e   mlp dropout mask         Tn*h*1
// For GPT (MHA, ffn = 4h, e = 2, dropout) that is sbh(10 + 24/t + 5as/(ht)) without sp
// and (sbh/t)(34 + 5as/h) with sp — Table 2. GQA shrinks K and V by kv/a; SwiGLU stores
// 3*ffn instead of 2*ffn per token in the MLP; Llama-style models have no dropout masks.
// MoE layers replace the MLP by the terms listed at the MoE block below.
// Full recompute keeps the layer input only (2sbh; sharded by sp).
double layer_activation_bytes(const ModelArch& arch, int layer, const ShardSpec& shard,
                              Recompute rc, bool flash_attention) {
  STEPCAST_CHECK(
      shard.tp >= 1 && shard.cp >= 1 && shard.ep >= 1 && shard.microbatch >= 1 && shard.seq_len > 0,
      "layer_activation_bytes: bad shard");
  STEPCAST_CHECK(layer >= 0 && layer < arch.layers, "layer_activation_bytes: bad layer");
  STEPCAST_CHECK(arch.heads % shard.tp == 0, "heads not divisible by tp");
  const double e = dtype_bytes(activation_dtype(shard.dtype));
  const double t = shard.tp;
  const bool sp = shard.sequence_parallel && shard.tp > 1;
  const double tokens = d(shard.microbatch) * d(shard.seq_len) / shard.cp;
  const double tn = sp ? tokens / t : tokens;
  const double h = d(arch.hidden);
  const double mask = arch.dropout ? 1.0 : 0.0;
  if (rc == Recompute::kFull) return tn * h * e;

  const double heads = d(arch.heads) / t;
  const double kv = arch.kv_heads >= shard.tp ? d(arch.kv_heads) / t : 1.0;
  const double dqk = d(arch.dim_qk());
  const double dv = d(arch.dim_per_head());
  const double gate = arch.gated_mlp() ? 2.0 : 1.0;

  double bytes = 0;
  // Attention block.
  bytes += 2 * tn * h * e;                                // ln1 input, QKV input
  bytes += tokens * (heads * dqk + kv * (dqk + dv)) * e;  // Q, K, V
  if (arch.mla()) {
    // MLA (model/mla.cc): the q and kv latents and the rope key (the latent norms' inputs)
    // and the normed latents (the up-projections' inputs), on the rank's T/tp tokens under
    // sequence parallel (the up-projections re-gather theirs for the weight gradient).
    const double q = d(arch.q_lora_rank), kv_lat = d(arch.kv_lora_rank);
    bytes += tn * (q + kv_lat + d(arch.qk_rope_head_dim)) * e + tn * (q + kv_lat) * e;
  }
  if (rc == Recompute::kNone && !flash_attention) {
    const double per_score = e + mask * (1.0 + e);
    bytes += heads * tokens * d(shard.seq_len) * per_score;
  }
  bytes += tokens * heads * dv * e;  // proj input
  bytes += tn * h * mask;            // attention dropout mask
  // MLP block.
  bytes += tn * h * e;     // ln2 input
  bytes += tn * h * mask;  // mlp dropout mask
  if (!arch.is_moe_layer(layer)) {
    const double ffn = d(arch.ffn_hidden) / t;
    bytes += tn * h * e;                       // fc1 input
    bytes += tokens * ffn * (gate + 1.0) * e;  // act input, fc2 input
    return bytes;
  }
  // MoE block, split as in layer_ops (model/moe.cc): with expert tp (expert_tp_of) and no ep
  // all T tokens are routed; otherwise each tp rank routes its 1/tp of them. Saved for
  // backward, per Megatron-Core's code paths (R = the busiest rank's expert rows,
  // moe_load): the router input; the fp32 router logits and probabilities [T, E] and the
  // bool routing map; the permutation's int32 row-id map [T, E]; per row the fc1 input
  // (R x h: the dispatched tokens themselves), the act input (R x 2f gated), the fc2 input
  // (R x f) and the fp32 probability (since Megatron-Core 0.13 the probabilities weight
  // the activation, so the expert output is not kept for the unpermute backward).
  // Where the stack saves Transformer Engine's narrow copies (ShardSpec::te_fp8_storage)
  // and the GEMMs run narrow, those copies are the fc1 and fc2 inputs kept (1 byte, with
  // the block scales under mxfp8 and nvfp4); else they are kept in 16 bits. Shared experts
  // as a tp-split dense MLP, under fp8 stored as the dense MLP is (sim/lower/fp8.cc,
  // te_fp8_activation_delta): its fc2 input as the fp8 copy, and its fc1's fp8 copy of the
  // input beside the router's 16-bit one.
  const MoeSpec& m = *arch.moe;
  const double etp = expert_tp_of(shard);
  const bool expert_tp = etp > 1 && shard.ep == 1;
  const MoeLoad ld = moe_load(arch, shard);
  const double routed_tokens = static_cast<double>(ld.tokens);
  const bool whole_input = expert_tp || m.shared_experts > 0;
  bytes += (whole_input ? tn : routed_tokens) * h * e;           // router / shared fc1 input
  bytes += routed_tokens * m.experts * (4.0 + 4.0 + 1.0 + 4.0);  // logits, probs, map, ids
  const double ffn_e = d(m.ffn_hidden) / etp;
  const double gemm_in =
      shard.te_fp8_storage ? std::min(dtype_storage_bytes(shard.dtype), e) : e;  // TE's copies
  bytes += ld.rows * ((h + ffn_e) * gemm_in + gate * ffn_e * e + 4.0);
  const double ffn_s = m.shared_experts * d(m.ffn_hidden) / t;
  const bool shared_fp8 = m.shared_experts > 0 && te_fp8_copies(shard);
  bytes += tokens * ffn_s * (gate * e + (shared_fp8 ? 1.0 : e));  // shared act, fc2 inputs
  if (shared_fp8) bytes += tn * h;                                // shared fc1's fp8 copy
  return bytes;
}

double head_activation_bytes(const ModelArch& arch, const ShardSpec& shard) {
  const double bytes = shard.fused_cross_entropy ? dtype_bytes(activation_dtype(shard.dtype)) : 4.0;
  return d(shard.microbatch) * d(shard.seq_len / shard.cp) * d(arch.vocab) / shard.tp * bytes;
}

double layer_activation_bytes(const ModelArch& arch, const ShardSpec& shard, Recompute rc,
                              bool flash_attention) {
  // The largest over the layers (dense and MoE layers differ).
  double most = 0;
  bool seen_dense = false, seen_moe = false;
  for (int l = 0; l < arch.layers && !(seen_dense && seen_moe); ++l) {
    const bool moe = arch.is_moe_layer(l);
    if (moe ? seen_moe : seen_dense) continue;
    (moe ? seen_moe : seen_dense) = true;
    most = std::max(most, layer_activation_bytes(arch, l, shard, rc, flash_attention));
  }
  return most;
}

}  // namespace stepcast
