// Lowering (lowering.h): what Transformer Engine keeps under fp8 (FrameworkRules::
// te_fp8_storage): the fp8 copies of the linear layers' saved inputs, and the fp8 cache of
// their weights with its one cast per step.
#include "sim/lower/lowering.h"

namespace stepcast::lowering {

bool Lowerer::te_fp8() const { return te_fp8_copies(shard_); }

// The change to a layer's saved activations (layer_activation_bytes counts them in the
// activation dtype, e bytes) when Transformer Engine runs its linears in fp8: each linear
// saves for its backward only an fp8 copy of its input (`module/linear.py`,
// `module/layernorm_linear.py`: the column-wise fp8 data, or under sequence parallel with
// the per-tensor recipe the row-wise fp8 shard, re-gathered in fp8 in backward), 1 byte an
// element. With T tokens (b*s/cp), Tn = T/tp under sequence parallel:
//   QKV input (ln1 output, saved by LayerNormLinear)   Tn*h*(1 - e)
//   fc1 input (ln2 output)                             Tn*h*(1 - e)
//   fc2 input (the activation's output; no other user) T*ffn/tp*(1 - e)
//   proj input: the attention kernel still keeps its 16-bit output O for its own backward,
//   so the fp8 copy comes on top                        + T*(a/tp)*dv*1
// Full recompute keeps only the layer input (no change). MoE layers: the attention part
// only (the experts' saved inputs are left to the MoE lowering).
double Lowerer::te_fp8_activation_delta(int layer, Recompute rc) const {
  if (!te_fp8() || rc == Recompute::kFull) return 0;
  const double e = act_elem_bytes_;
  const double t = par_.tp;
  const double tokens =
      static_cast<double>(shard_.microbatch) * static_cast<double>(shard_.seq_len) / par_.cp;
  const double tn = par_.sequence_parallel && par_.tp > 1 ? tokens / t : tokens;
  const double h = static_cast<double>(arch_.hidden);
  double delta = tn * h * (1 - e);
  delta +=
      tokens * static_cast<double>(arch_.heads) / t * static_cast<double>(arch_.dim_per_head());
  if (!arch_.is_moe_layer(layer))
    delta += (tn * h + tokens * static_cast<double>(arch_.ffn_hidden) / t) * (1 - e);
  return delta;
}

// Elements of the weights a unit's fp8 GEMMs read (forward GEMM C[T, out] = x[T, in] W:
// n x k per batched GEMM).
double Lowerer::fp8_weight_elems(const Unit& u) const {
  double elems = 0;
  if (u.kind != Unit::Kind::kLayer) return 0;
  for (const Step& st : u.ops->fwd)
    if (!st.is_comm && st.op.kind == OpKind::kGemm && st.op.gemm.dtype == DType::kFp8)
      elems += static_cast<double>(st.op.gemm.n) * static_cast<double>(st.op.gemm.k) *
               static_cast<double>(st.op.gemm.batch);
  return elems;
}

// TE's fp8 weight workspace (`module/base.py (quantize_weight)`): per fp8 linear the weight in
// fp8 row-wise and transposed (2 bytes a parameter), kept from the step's first microbatch
// (is_first_microbatch, set by Megatron-Core's schedules.py) to the step's end. With FP8
// primary weights (fp8_param_gather) the fp8 data and its transpose are the weight itself,
// 2 bytes a parameter in place of the 16-bit one the "weights" allocation counts: nothing
// beside it.
double Lowerer::fp8_weight_cache_bytes(int s) const {
  if (!te_fp8() || sc_.framework.fp8_param_gather) return 0;
  double elems = 0;
  for (int c = 0; c < v_; ++c)
    for (const Unit& u : chunks_[static_cast<size_t>(vstage(c, s))]) elems += fp8_weight_elems(u);
  return 2.0 * elems;
}

// The cast + transpose that fills a unit's fp8 weight cache, on its chunk's first forward:
// reads the 16-bit weights, writes the two fp8 copies. With FP8 primary weights only the
// transpose of the fp8 data: 1 byte read and 1 written a parameter.
void Lowerer::emit_fp8_weight_cast(Emit& e, const Unit& u, int mb, int chunk) {
  const double elems = te_fp8() ? fp8_weight_elems(u) : 0.0;
  if (elems <= 0) return;
  const bool fp8_primary = sc_.framework.fp8_param_gather;
  Op op;
  op.name = "fp8_weight_cast";
  op.kind = OpKind::kMemoryBound;
  op.bytes_read = elems * (fp8_primary ? 1.0 : act_elem_bytes_);
  op.bytes_written = (fp8_primary ? 1.0 : 2.0) * elems;
  emit_compute(e, op, Phase::kFwd, Category::kCompute, "fwd", u, mb, chunk);
}

}  // namespace stepcast::lowering
