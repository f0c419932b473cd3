// A multi-token-prediction module's own kernels (ModelArch::mtp_layers), as Megatron-Core
// runs one (megatron/core/transformer/multi_token_prediction.py,
// MultiTokenPredictionLayer.forward; DeepSeek-V3 section 2.2): the embedding of the tokens
// shifted by one depth (the shared word embedding: a lookup, no parameters of its own),
// RMSNorm of it (enorm) and of the previous depth's hidden states (hnorm), their
// concatenation [T, 2h] through eh_proj (a column-parallel linear 2h -> h/tp), then one
// transformer layer (the lowering's own unit) and the shared output layer with its loss
// (logits_loss_ops). The tp gathers of eh_proj's input and output are not emitted (each
// [T, h]-sized, once a microbatch against a layer's four).
#include "model/workload_parts.h"

namespace stepcast {

using namespace workload_parts;

LayerOps mtp_input_ops(const ModelArch& arch, const ShardSpec& shard) {
  const Local l = make_local(arch, shard);
  const double e = l.e, h = d(arch.hidden);
  const double tn = d(l.norm_tokens);
  const Linear eh{"eh_proj", l.tokens, 2 * arch.hidden, arch.hidden / l.tp, 1};
  LayerOps out;
  // Lookup: read the ids and T rows of the table, write [T, h].
  out.fwd.push_back(op_step(memory_op("embed", tn * 8.0 + tn * h * e, tn * h * e)));
  for (const char* n : {"enorm", "hnorm"}) {
    out.fwd.push_back(op_step(memory_op(n, tn * h * e, tn * h * e)));
    out.bwd_input.push_back(op_step(memory_op(n, 3 * tn * h * e, tn * h * e)));
  }
  out.fwd.push_back(op_step(eh.fwd(l)));
  out.bwd_input.insert(out.bwd_input.begin(), op_step(eh.dgrad(l)));
  out.bwd_weight.push_back(op_step(eh.wgrad(l)));
  add_grad_accumulation(out.bwd_weight, l);
  // eh_proj and three norms (enorm, hnorm, and the module's final norm before the shared
  // output layer, whose own norm parameters the lowering's shared head unit drops).
  out.param_count = 2.0 * h * h / l.tp + 3.0 * d(arch.norm_params());
  for (int i = 0; i < 3; ++i) append_norm_vectors(out.vectors, arch);
  out.grad_bytes_fp32 = 4.0 * out.param_count;
  return out;
}

}  // namespace stepcast
