// The vocabulary ends of the model, per pipeline stage that holds them: the vocab-parallel
// embedding lookup (first stage) and the final norm, output layer and cross entropy (last
// stage), under the Megatron split of workload.cc's top.
#include "model/error.h"
#include "model/workload.h"
#include "model/workload_parts.h"

namespace stepcast {

using namespace workload_parts;

// Rows of the vocabulary on one tp rank. Megatron pads the vocabulary to a multiple of
// make_vocab_size_divisible_by (default 128) x tp (training/tokenizer _vocab_size_with_padding;
// GPT-2's 50257 becomes 50304 at tp 1, 51200 at tp 8), so each rank's shard is a multiple
// of 128 rows: ceil(V / (128 tp)) x 128. The padded rows are computed and stored like the
// others; model FLOPs (MFU) count the true V.
I vocab_shard_rows(const ModelArch& arch, int tp) {
  const I multiple = I{128} * tp;
  return (arch.vocab + multiple - 1) / multiple * 128;
}

LayerOps embedding_ops(const ModelArch& arch, const ShardSpec& shard) {
  const Local l = make_local(arch, shard);
  const double e = l.e;
  const double h = d(arch.hidden);
  const double t = d(l.tokens);
  const double full = t * h * e;
  const double pos = arch.max_positions > 0 ? 1.0 : 0.0;
  LayerOps out;
  // Vocab-parallel lookup (Megatron VocabParallelEmbedding): each rank reads the rows of
  // its vocab shard (on average T/tp of them), writes a full [T, h] partial, then the tp
  // group sums (allreduce, or reduce-scatter under sp); learned positions are added after.
  out.fwd.push_back(op_step(memory_op("embed", t * h * e / l.tp + t * 8.0, full)));
  if (l.tp > 1) out.fwd.push_back(comm_step(CommPointKind::kTpReduce, full, "embed.out"));
  const double tn = d(l.norm_tokens);
  if (pos > 0) out.fwd.push_back(op_step(memory_op("pos_embed", 2 * tn * h * e, tn * h * e)));
  // Backward: no input gradient; under sp the gradient shards are gathered first.
  if (l.sp) out.bwd_input.push_back(comm_step(CommPointKind::kTpGather, full, "embed.out"));
  // Weight gradient (Megatron's VocabParallelEmbedding is a dense F.embedding, its main_grad
  // accumulated by the DDP hook, main_grad.add_(grad), every microbatch): PyTorch's
  // embedding_dense_backward zero-fills a [V/tp, h] gradient in the parameter dtype (write
  // e per element), scatter-adds the token gradients into it (reads [T, h] and the ids,
  // writes the rows of this shard's T/tp tokens on average), then the hook reads it and
  // the main_grad and writes main_grad (read e + g, write g per element; g = 4 for fp32
  // main grads, ShardSpec::main_grad_bytes).
  const double table = d(vocab_shard_rows(arch, l.tp)) * h;
  const double g = l.main_grad_bytes;
  out.bwd_weight.push_back(op_step(
      memory_op("embed", full + t * 8.0 + table * (e + g), table * (e + g) + t * h * e / l.tp)));
  out.param_count = table + d(arch.max_positions) * h;
  out.grad_bytes_fp32 = 4.0 * out.param_count;
  return out;
}

LayerOps logits_loss_ops(const ModelArch& arch, const ShardSpec& shard) {
  Local l = make_local(arch, shard);
  // Megatron's output layer is its own ColumnParallelLinear (tensor_parallel/layers.py;
  // GPTModel.output_layer), not a Transformer Engine module, so Transformer Engine's fp8
  // autocast does not reach it: under every narrow recipe (fp8 per-tensor or block-scaled)
  // its three GEMMs run in the activation dtype, bf16, with no quantize kernel and no fp8
  // weight copy (the MTP modules' losses share it).
  if (narrow_gemm_dtype(l.dt)) l.dt = l.act;
  const double e = l.e;
  const double h = d(arch.hidden);
  const double tn = d(l.norm_tokens);
  const double full = d(l.tokens) * h * e;
  const I vocab_local = vocab_shard_rows(arch, l.tp);
  const Linear logits{"logits", l.tokens, arch.hidden, vocab_local, 1};
  const double lg = d(l.tokens) * d(vocab_local);
  LayerOps out;
  out.fwd.push_back(op_step(memory_op("final_ln", tn * h * e, tn * h * e)));
  if (l.sp) out.fwd.push_back(comm_step(CommPointKind::kTpGather, full, "logits.in"));
  out.fwd.push_back(op_step(logits.fwd(l)));
  // Vocab-parallel cross entropy in fp32, unfused (Megatron-LM / Megatron-Core
  // tensor_parallel/cross_entropy.py, _VocabParallelCrossEntropy; the GPT model passes the
  // 16-bit logits through .float() unless --fp16-lm-cross-entropy, and the fused kernel is
  // opt-in): one elementwise PyTorch kernel per line, over the [T, V/tp] logits, bytes per
  // element read + written:
  //   forward:  .float() e + 4, max 4, subtract max (in place) 4 + 4, exp (in place) 4 + 4,
  //             sum 4, divide by the sum (in place; the softmax kept for backward) 4 + 4
  //             -> read e + 20, write 16;
  //   backward: subtract 1 at the targets (T elements, negligible), scale by the loss
  //             gradient (in place) 4 + 4, .float()'s backward cast to 16 bits 4 + e
  //             -> read 8, write 4 + e.
  // The max / sum-exp / target-logit allreduces move 3 x T fp32 values across tp,
  // negligible next to the [T, h] gathers, and are not emitted.
  //
  // Fused (shard.fused_cross_entropy: Transformer Engine's pytorch/triton/cross_entropy.py,
  // Megatron-Core cross_entropy_fusion_impl 'te'), on the 16-bit logits themselves:
  //   forward:  online_softmax_kernel reads the logits for each row's max and sum of
  //             exponentials (e), cross_entropy_kernel reads them again and writes the
  //             gradient over them in place (e + e) -> read 2e, write e;
  //   backward: element_mul_kernel scales that gradient by the per-token loss gradient in
  //             place -> read e, write e.
  // Kernels the host launches: the unfused lines above, 6 forward and 3 backward; fused, 2
  // and 1.
  const bool fused = shard.fused_cross_entropy;
  Op ce_fwd = fused ? memory_op("softmax_ce", lg * 2.0 * e, lg * e)
                    : memory_op("softmax_ce", lg * (e + 20.0), lg * 16.0);
  Op ce_bwd = fused ? memory_op("softmax_ce", lg * e, lg * e)
                    : memory_op("softmax_ce", lg * 8.0, lg * (4.0 + e));
  ce_fwd.launches = fused ? 2 : 6;
  ce_bwd.launches = fused ? 1 : 3;
  // The loss checked for NaN on the host every microbatch (shard.loss_nan_check): the host
  // waits for the loss before it launches the backward.
  ce_fwd.host_sync = shard.loss_nan_check;
  out.fwd.push_back(op_step(ce_fwd));
  out.bwd_input.push_back(op_step(ce_bwd));
  out.bwd_input.push_back(op_step(logits.dgrad(l)));
  if (l.tp > 1) out.bwd_input.push_back(comm_step(CommPointKind::kTpReduce, full, "logits.in"));
  out.bwd_input.push_back(op_step(memory_op("final_ln", 3 * tn * h * e, tn * h * e)));
  if (l.sp) insert_wgrad_gather(out.bwd_input, "logits", full);
  out.bwd_weight.push_back(op_step(logits.wgrad(l)));
  add_grad_accumulation(out.bwd_weight, l);
  // The output weight (tied: Megatron's copy of the word embedding) and the final norm.
  out.param_count = d(vocab_local) * h + d(arch.norm_params());
  append_norm_vectors(out.vectors, arch);
  out.grad_bytes_fp32 = 4.0 * out.param_count;
  return out;
}

}  // namespace stepcast
