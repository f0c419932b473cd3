// Multi-head latent attention's projections (DeepSeek-V2/V3, arXiv 2405.04434 section 2.1;
// Megatron-Core transformer/multi_latent_attention.py, MLASelfAttention), the part of a layer
// between ln1 and the attention core (docs/moe.md, "Multi-head latent attention").
//
// Per layer, on every tp rank (`a` the whole layer, `l` this rank):
//  - linear_q_down_proj [h -> q_lora_rank] and linear_kv_down_proj [h -> kv_lora_rank +
//    qk_rope_head_dim] are duplicated (Transformer Engine parallel_mode "duplicated": the
//    whole weight on each rank). Under sequence parallel they run on the rank's own T/tp
//    tokens (the module's comments: "q_compressed: [s / TP, b, q_lora_rank]"), so the [T, h]
//    gather of standard attention is not needed; each rank's weight gradient is then a
//    partial sum over its tokens, all-reduced over tp once per step (finalize_model_grads,
//    _allreduce_non_tensor_model_parallel_grads, for parameters marked sequence_parallel).
//    Without sequence parallel each rank runs all T tokens and their gradients are equal.
//  - q_layernorm and kv_layernorm (RMSNorm) on the latents, duplicated like the
//    down-projections (one memory-bound kernel each way).
//  - linear_q_up_proj [q_lora_rank -> heads x qk_head_dim] and linear_kv_up_proj
//    [kv_lora_rank -> heads x (qk_nope + v_head_dim)], column-parallel (heads over tp):
//    under sequence parallel each gathers its latent over the sequence (the kv gather also
//    brings the shared rope key, gather_from_sequence_parallel_region(k_pos_emb)); backward
//    reduces (reduce-scatters under sp) the latents' input gradients.
// Without q_lora_rank the queries come from a column-parallel [h -> heads x qk_head_dim]
// (linear_q_proj) on the gathered [T, h] input, as standard attention's QKV does.
#include "model/error.h"
#include "model/workload_parts.h"

namespace stepcast::workload_parts {

MlaFront mla_front(const ModelArch& a, const Local& l) {
  STEPCAST_CHECK(a.mla(), "mla_front: not an MLA model");
  const I h = a.hidden;
  const I rope = a.qk_rope_head_dim;
  const I q_in = a.q_lora_rank > 0 ? a.q_lora_rank : h;  // q up-projection's input width
  const I q_up_n = l.heads * l.dqk;
  const I kv_up_n = l.heads * (l.dqk - rope + l.dv);
  const double e = l.e;
  const double t = d(l.tokens), tn = d(l.norm_tokens);
  const Linear q_down{"q_down", l.norm_tokens, h, a.q_lora_rank, 1};
  const Linear kv_down{"kv_down", l.norm_tokens, h, a.kv_lora_rank + rope, 1};
  const Linear q_up{a.q_lora_rank > 0 ? "q_up" : "q_proj", l.tokens, q_in, q_up_n, 1};
  const Linear kv_up{"kv_up", l.tokens, a.kv_lora_rank, kv_up_n, 1};
  // The latent norms read and write the q and kv latents (not the rope part).
  const double latents = tn * d(a.q_lora_rank + a.kv_lora_rank) * e;
  const double q_bytes = t * d(q_in) * e;
  const double kv_bytes = t * d(a.kv_lora_rank + rope) * e;

  MlaFront out;
  auto& f = out.fwd;
  if (a.q_lora_rank > 0) f.push_back(op_step(q_down.fwd(l)));
  f.push_back(op_step(kv_down.fwd(l)));
  f.push_back(op_step(memory_op("latent_norm", latents, latents)));
  if (l.sp) f.push_back(comm_step(CommPointKind::kTpGather, q_bytes, "attn.q.in"));
  f.push_back(op_step(q_up.fwd(l)));
  if (l.sp) f.push_back(comm_step(CommPointKind::kTpGather, kv_bytes, "attn.kv.in"));
  f.push_back(op_step(kv_up.fwd(l)));

  auto& bi = out.bwd_input;
  bi.push_back(op_step(kv_up.dgrad(l)));
  if (l.tp > 1) bi.push_back(comm_step(CommPointKind::kTpReduce, kv_bytes, "attn.kv.in"));
  bi.push_back(op_step(q_up.dgrad(l)));
  if (l.tp > 1) bi.push_back(comm_step(CommPointKind::kTpReduce, q_bytes, "attn.q.in"));
  bi.push_back(op_step(memory_op("latent_norm", 2 * latents, latents)));
  bi.push_back(op_step(kv_down.dgrad(l)));
  if (a.q_lora_rank > 0) bi.push_back(op_step(q_down.dgrad(l)));
  if (l.sp) {
    insert_wgrad_gather(bi, q_up.name, q_bytes);
    insert_wgrad_gather(bi, kv_up.name, t * d(a.kv_lora_rank) * e);
  }

  out.bwd_weight.push_back(op_step(kv_up.wgrad(l)));
  out.bwd_weight.push_back(op_step(q_up.wgrad(l)));
  out.bwd_weight.push_back(op_step(kv_down.wgrad(l)));
  if (a.q_lora_rank > 0) out.bwd_weight.push_back(op_step(q_down.wgrad(l)));

  const double replicated = d(a.mla_replicated_params());
  out.params = d(q_in) * d(q_up_n) + d(a.kv_lora_rank) * d(kv_up_n) + replicated;
  out.tp_grad_params = l.sp ? replicated : 0.0;
  return out;
}

}  // namespace stepcast::workload_parts
