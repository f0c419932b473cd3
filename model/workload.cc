// Per-layer ops under a Megatron split (Shoeybi et al. 2019; Korthikanti et al. 2022):
//  - QKV and fc1 (SwiGLU: gate + up fused) are column-parallel, proj and fc2 row-parallel;
//    heads/tp query heads and kv_heads/tp KV heads per rank (one replicated KV head per rank
//    when kv_heads < tp).
//  - Forward: a TpGather (allgather under sequence parallel) after each norm and before the
//    column-parallel GEMM — the norm runs on the sequence shard, as in Korthikanti Fig. 5 —
//    and a TpReduce (allreduce, or reduce-scatter under sp) after each row-parallel GEMM.
//    Backward mirrors it: a TpGather of the output gradient before the row-parallel
//    input-gradient GEMM (sp only), a TpReduce after the column-parallel input-gradient GEMM.
//    Comm points are emitted only where the tp group has more than one rank.
//  - GEMM FLOPs are 2mnk per batch entry; backward input and weight gradients are each one
//    GEMM of the same FLOPs (bwd = 2x fwd). Memory-bound ops carry flops = 0: their cost is
//    their bytes, and model FLOPs (MFU) count matmuls only, as Korthikanti eq. 7 does.
//  - MoE: the expert tensor parallel size etp (expert_tp_of: parallel.expert_tp, by default
//    tp without ep and 1 with it) is 1 or tp. etp = tp without ep: the experts are split over
//    tp like the dense MLP, on all T tokens. etp = 1: experts whole, each tp rank routes its
//    own 1/tp of the tokens (the sequence-parallel shard; without sp its slice of the
//    replicated tokens, re-assembled by the "mlp.out" TpReduce). etp = tp with ep: each rank
//    routes its sp shard, and after the dispatch all-to-all the copies are gathered across
//    tp ("moe.tp_in") and reduce-scattered before the combine ("moe.tp_out"). Shared experts are a
//    dense MLP split over tp in either case (Megatron-Core SharedExpertMLP), with their own
//    sequence-parallel gather and reduction.
#include "model/workload.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "model/error.h"
#include "model/workload_parts.h"

namespace stepcast {

namespace workload_parts {

Local make_local(const ModelArch& a, const ShardSpec& sh) {
  STEPCAST_CHECK(sh.tp >= 1 && sh.cp >= 1 && sh.ep >= 1 && sh.microbatch >= 1,
                 "shard sizes must be >= 1");
  STEPCAST_CHECK(
      sh.seq_len > 0 && sh.seq_len % sh.cp == 0,
      "seq_len " + std::to_string(sh.seq_len) + " not divisible by cp " + std::to_string(sh.cp));
  STEPCAST_CHECK(a.heads % sh.tp == 0, "heads " + std::to_string(a.heads) +
                                           " not divisible by tp " + std::to_string(sh.tp));
  STEPCAST_CHECK(a.kv_heads % sh.tp == 0 || sh.tp % a.kv_heads == 0,
                 "kv_heads " + std::to_string(a.kv_heads) + " and tp " + std::to_string(sh.tp) +
                     ": neither divides the other");
  Local l;
  l.b = sh.microbatch;
  l.s = sh.seq_len;
  l.tp = sh.tp;
  l.cp = sh.cp;
  l.ep = sh.ep;
  l.etp = expert_tp_of(sh);
  STEPCAST_CHECK(l.etp == 1 || l.etp == sh.tp, "expert_tp " + std::to_string(l.etp) +
                                                   " must be 1 or tp " + std::to_string(sh.tp));
  l.sp = sh.sequence_parallel && sh.tp > 1;
  l.dt = sh.dtype;
  l.act = activation_dtype(sh.dtype);
  l.e = dtype_bytes(l.act);
  l.tokens = l.b * l.s / l.cp;
  STEPCAST_CHECK(!l.sp || l.tokens % l.tp == 0,
                 "sequence parallel: tokens per rank not divisible by tp");
  l.norm_tokens = l.sp ? l.tokens / l.tp : l.tokens;
  l.heads = a.heads / l.tp;
  l.kv_heads = a.kv_heads >= l.tp ? a.kv_heads / l.tp : 1;
  l.dqk = a.dim_qk();
  l.dv = a.dim_per_head();
  if (a.qkv_features > 0) {
    STEPCAST_CHECK(a.qkv_features % l.tp == 0, "qkv_features not divisible by tp");
    l.qkv_n = a.qkv_features / l.tp;
  } else if (a.mla()) {  // the up-projections' outputs (model/mla.cc)
    l.qkv_n = (a.mla_q_up_features() + a.mla_kv_up_features()) / l.tp;
  } else {
    l.qkv_n = l.heads * l.dqk + l.kv_heads * (l.dqk + l.dv);
  }
  l.grad_acc = sh.grad_accumulation;
  l.main_grad_bytes = sh.main_grad_bytes;
  l.proj_k = l.heads * l.dv;
  l.dispatcher = sh.dispatcher;
  l.ep_nodes = sh.ep_nodes;
  l.shared_overlap = sh.shared_expert_overlap;
  l.current_scaling = sh.dtype == DType::kFp8 && sh.fp8_recipe == Fp8Recipe::kCurrent;
  return l;
}

Step op_step(Op op, bool selective) {
  Step s;
  s.is_comm = false;
  s.op = std::move(op);
  s.recompute_selective = selective;
  return s;
}

Step comm_step(CommPointKind kind, double bytes, std::string name) {
  Step s;
  s.is_comm = true;
  s.comm.kind = kind;
  s.comm.bytes = bytes;
  s.comm.name = std::move(name);
  return s;
}

Step dispatcher_comm_step(CommPointKind kind, double bytes, std::string name) {
  Step s = comm_step(kind, bytes, std::move(name));
  s.comm.gemm_overlap = false;
  return s;
}

// Sequence parallel backward of the column-parallel linear `gemm`: its [T, h] input is
// all-gathered again for the weight gradient, issued just before the input-gradient GEMM
// (which does not wait for it). Inserted before the first op of that name in `steps`.
void insert_wgrad_gather(std::vector<Step>& steps, const std::string& gemm, double bytes) {
  Step g = comm_step(CommPointKind::kTpGather, bytes, gemm + ".in.wgrad");
  g.comm.feeds_wgrad = gemm;
  for (auto it = steps.begin(); it != steps.end(); ++it)
    if (!it->is_comm && it->op.kind == OpKind::kGemm && it->op.name == gemm) {
      steps.insert(it, std::move(g));
      return;
    }
  STEPCAST_CHECK(false, "insert_wgrad_gather: no GEMM " + gemm);
}

// C[m,n] = A[m,k] B[k,n], `batch` times: 2mnk FLOPs each; reads A and B in the GEMM dtype,
// writes C in the activation dtype.
Op gemm(std::string name, I m, I n, I k, I batch, const Local& l, GemmLayout layout) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::kGemm;
  op.gemm.m = m;
  op.gemm.n = n;
  op.gemm.k = k;
  op.gemm.batch = batch;
  op.gemm.dtype = l.dt;
  op.gemm.layout = layout;
  const double in = dtype_storage_bytes(l.dt);  // with the block scales (mxfp8, nvfp4)
  op.flops = 2.0 * d(m) * d(n) * d(k) * d(batch);
  op.bytes_read = (d(m) * d(k) + d(k) * d(n)) * in * d(batch);
  op.bytes_written = d(m) * d(n) * l.e * d(batch);
  // A grouped expert GEMM (batch > 1) is one cuBLAS GEMM per local expert (Transformer
  // Engine GroupedLinear, nvte_multi_stream_cublas_gemm), each launched by the host.
  op.launches = static_cast<int>(batch);
  return op;
}

Op memory_op(std::string name, double bytes_read, double bytes_written) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::kMemoryBound;
  op.flops = 0;
  op.bytes_read = bytes_read;
  op.bytes_written = bytes_written;
  return op;
}

// A weight-gradient GEMM dW[in, out] = x^T dy writes its [m, n] output per expert (m = in,
// n = out). Fused accumulation (GradAccumulation::kFused: Megatron's
// wgrad_gemm_accum_fp32, cuBLAS with beta = 1 into param.main_grad; Transformer Engine's
// fuse_wgrad_accumulation) makes that output the buffer itself: the GEMM reads and writes
// it in the buffer's dtype. The hook (kHook: Megatron-LM's 2021 DDP hook
// main_grad.add_(grad), PyTorch's AccumulateGrad) leaves the GEMM writing a fresh gradient
// in the activation dtype and adds it into the buffer with a kernel of its own right after:
// reads the gradient and the buffer, writes the buffer; one kernel per parameter tensor
// (an expert's weight is one). Every microbatch, the first too (the buffer is zeroed at the
// start of the step, zero_grad_op). The fresh gradient is freed by the hook at once: its
// transient bytes are not modelled.
void add_grad_accumulation(std::vector<Step>& bwd_weight, const Local& l) {
  if (l.grad_acc == GradAccumulation::kNone) return;
  auto weights = [](const GemmShape& g) { return d(g.m) * d(g.n) * d(std::max<I>(g.batch, 1)); };
  auto wgrad = [](const Step& s) { return !s.is_comm && s.op.kind == OpKind::kGemm; };
  if (l.grad_acc == GradAccumulation::kFused) {  // in place: the planner's common case
    for (Step& s : bwd_weight)
      if (wgrad(s)) {
        const double p = weights(s.op.gemm);
        s.op.bytes_written = p * l.main_grad_bytes;
        s.op.bytes_read += p * l.main_grad_bytes;
      }
    return;
  }
  std::vector<Step> out;
  out.reserve(bwd_weight.size() * 2);
  for (Step& s : bwd_weight) {
    const bool w = wgrad(s);
    const GemmShape g = s.op.gemm;
    const std::string name = s.op.name;
    out.push_back(std::move(s));
    if (!w) continue;
    const double p = weights(g);
    Op add = memory_op(name + ".gradacc", p * (l.e + l.main_grad_bytes), p * l.main_grad_bytes);
    add.launches = static_cast<int>(std::max<I>(g.batch, 1));
    out.push_back(op_step(std::move(add)));
  }
  bwd_weight = std::move(out);
}

// A (dense or expert) MLP of width `ffn_local` per rank over `tokens`, `batch` experts.
void append_mlp(const ModelArch& a, const Local& l, const std::string& prefix, I tokens,
                I ffn_local, I batch, Block& blk, std::vector<Step>& bwd_in_rev) {
  const I fc1_out = a.gated_mlp() ? 2 * ffn_local : ffn_local;
  const Linear fc1{prefix + "fc1", tokens, a.hidden, fc1_out, batch};
  const Linear fc2{prefix + "fc2", tokens, ffn_local, a.hidden, batch};
  const double n = d(tokens) * d(batch);
  // GeLU reads fc1's output and writes its input to fc2; SwiGLU reads gate and up, writes
  // silu(gate) * up.
  const double act_read = n * d(fc1_out) * l.e;
  const double act_write = n * d(ffn_local) * l.e;
  blk.fwd.push_back(op_step(fc1.fwd(l)));
  blk.fwd.push_back(op_step(memory_op(prefix + "act", act_read, act_write)));
  blk.fwd.push_back(op_step(fc2.fwd(l)));
  // Backward in reverse order (the caller reverses bwd_in_rev at the end).
  bwd_in_rev.push_back(op_step(fc1.dgrad(l)));
  bwd_in_rev.push_back(op_step(memory_op(prefix + "act", act_read + act_write, act_read)));
  bwd_in_rev.push_back(op_step(fc2.dgrad(l)));
  blk.bwd_weight.push_back(op_step(fc2.wgrad(l)));
  blk.bwd_weight.push_back(op_step(fc1.wgrad(l)));
  blk.params += d(batch) * (d(a.hidden) * d(fc1_out) + d(ffn_local) * d(a.hidden));
  if (a.has_bias()) {
    blk.params += d(batch) * (d(fc1_out) + d(a.hidden));
    for (I i = 0; i < batch; ++i) blk.vectors.insert(blk.vectors.end(), {d(fc1_out), d(a.hidden)});
  }
}

// A Megatron tensor-parallel MLP of width `ffn` over all T tokens: column-parallel fc1,
// row-parallel fc2, with its own sequence-parallel gather before fc1 and reduction after fc2
// (backward: the output-gradient gather, the input-gradient reduction and the weight-gradient
// re-gather of fc1's input). Comm points are named `comm` + ".in" / ".out".
Block tp_mlp_block(const ModelArch& a, const Local& l, const std::string& prefix,
                   const std::string& comm, I ffn) {
  STEPCAST_CHECK(ffn % l.tp == 0, prefix + "ffn " + std::to_string(ffn) + " not divisible by tp " +
                                      std::to_string(l.tp));
  Block blk;
  const double full = d(l.tokens) * d(a.hidden) * l.e;
  if (l.sp) blk.fwd.push_back(comm_step(CommPointKind::kTpGather, full, comm + ".in"));
  std::vector<Step> rev;
  if (l.tp > 1) rev.push_back(comm_step(CommPointKind::kTpReduce, full, comm + ".in"));
  append_mlp(a, l, prefix, l.tokens, ffn / l.tp, 1, blk, rev);
  if (l.sp) rev.push_back(comm_step(CommPointKind::kTpGather, full, comm + ".out"));
  if (l.tp > 1) blk.fwd.push_back(comm_step(CommPointKind::kTpReduce, full, comm + ".out"));
  blk.bwd_input.assign(rev.rbegin(), rev.rend());
  if (l.sp) insert_wgrad_gather(blk.bwd_input, prefix + "fc1", full);
  return blk;
}

void append_norm_vectors(std::vector<double>& vectors, const ModelArch& a) {
  vectors.push_back(d(a.hidden));
  if (a.norm == Norm::kLayerNorm) vectors.push_back(d(a.hidden));
}

Block dense_block(const ModelArch& a, const Local& l) {
  return tp_mlp_block(a, l, "", "mlp", a.ffn_hidden);
}

}  // namespace workload_parts

using namespace workload_parts;

double attention_keys_per_row(const AttentionShape& a) {
  const double s = static_cast<double>(a.seq_kv > 0 ? a.seq_kv : a.seq_q);
  return a.causal && a.seq_q == a.seq_kv ? 0.5 * s : s;
}

double flash_attention_flops(double batch, double heads, double seq_q, double seq_kv,
                             double dqk_plus_dv, bool causal, bool backward) {
  return 2.0 * batch * heads * seq_q * seq_kv * dqk_plus_dv * (causal ? 0.5 : 1.0) *
         (backward ? 2.5 : 1.0);
}

Op attention_op(const ModelArch& arch, const ShardSpec& shard, std::int64_t seq_q,
                std::int64_t seq_kv, bool causal, bool backward, std::int64_t window) {
  STEPCAST_CHECK(seq_q > 0 && seq_kv > 0, "attention_op: empty block");
  const Local l = make_local(arch, shard);
  Op op;
  op.name = "attn";
  op.kind = OpKind::kAttention;
  op.attn.batch = l.b;
  op.attn.heads = l.heads;
  op.attn.kv_heads = l.kv_heads;
  op.attn.seq_q = seq_q;
  op.attn.seq_kv = seq_kv;
  // One head size for the kernel: the mean of q/k and v sizes keeps 4*b*h*sq*skv*d exact
  // when they differ (MLA: (192 + 128) / 2 = 160).
  op.attn.head_dim = (l.dqk + l.dv) / 2;
  op.attn.causal = causal;
  op.attn.backward = backward;
  op.attn.dtype = l.act;
  // Scores Q K^T: 2*sq*skv*dqk per head, probabilities times V: 2*sq*skv*dv (Korthikanti
  // 2022: 2bs^2h + 2bs^2h for MHA). Causal: half of the score block is computed — exact
  // for a block on the diagonal (sq == skv) up to the diagonal itself, and the average
  // share of a load-balanced (zigzag) context-parallel rank (sq = s/cp against skv = s).
  double f = 2.0 * d(l.b) * d(l.heads) * d(seq_q) * d(seq_kv) * d(l.dqk + l.dv);
  op.attn.flash = shard.flash_attention;
  if (shard.flash_attention && causal && window > 0 && window < seq_kv && seq_q == seq_kv) {
    // Sliding window on a square causal block: query i sees min(i + 1, w) keys, in all
    // s*w - w(w-1)/2 of the s x s scores (FlashAttention's local attention skips the
    // blocks outside the band).
    const double w = d(window), sq = d(seq_q);
    f = 2.0 * d(l.b) * d(l.heads) * (sq * w - w * (w - 1.0) / 2.0) * d(l.dqk + l.dv);
    if (backward) f *= 2.5;
  } else if (shard.flash_attention) {
    f = flash_attention_flops(d(l.b), d(l.heads), d(seq_q), d(seq_kv), d(l.dqk + l.dv), causal,
                              backward);
  } else if (backward) {
    // Unfused: the full s x s block is computed (the mask is applied after the GEMM);
    // backward is 4 batched GEMMs (dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q).
    f *= 2.0;
  }
  op.flops = f;
  const double e = l.e;
  const double q = d(l.b) * d(seq_q) * d(l.heads) * d(l.dqk) * e;
  const double k = d(l.b) * d(seq_kv) * d(l.kv_heads) * d(l.dqk) * e;
  const double v = d(l.b) * d(seq_kv) * d(l.kv_heads) * d(l.dv) * e;
  const double o = d(l.b) * d(seq_q) * d(l.heads) * d(l.dv) * e;
  const double lse = d(l.b) * d(seq_q) * d(l.heads) * 4.0;  // fp32 log-sum-exp per row
  if (!backward) {
    op.bytes_read = q + k + v;
    op.bytes_written = o + lse;
  } else {
    op.bytes_read = q + k + v + 2 * o + lse;  // Q, K, V, O, dO, LSE
    op.bytes_written = q + k + v;             // dQ, dK, dV
  }
  if (!shard.flash_attention) {
    // Score-matrix traffic of Megatron's unfused path, 16-bit scores, 1-byte dropout mask,
    // per score element: forward writes S (2), scale-mask-softmax reads S and writes P
    // (2 + 2), dropout reads P, writes P' and the mask (2 + 2 + 1), the second GEMM reads
    // P' (2): 13 bytes. Backward: dropout-backward reads dP' and the mask, writes dP
    // (2 + 1 + 2), softmax-backward reads P and dP, writes dS (2 + 2 + 2), the GEMMs read P'
    // and dS (2 + 2): 15 bytes. (Korthikanti et al. 2022, Sec. 4.1: these are the 5as^2b
    // stored bytes plus their transient reads/writes.)
    const double scores = d(l.b) * d(l.heads) * d(seq_q) * d(seq_kv);
    op.bytes_read += scores * (backward ? 9.0 : 6.0);
    op.bytes_written += scores * (backward ? 6.0 : 7.0);
    // Kernels: 2 batched GEMMs, scale-mask-softmax, dropout; backward 4 GEMMs and the
    // three element-wise backward kernels (as sim/cost/compute.cc times them).
    op.launches = backward ? 7 : 4;
  }
  return op;
}

LayerOps layer_ops(const ModelArch& arch, int layer, const ShardSpec& shard) {
  STEPCAST_CHECK(layer >= 0 && layer < arch.layers, "layer_ops: layer " + std::to_string(layer) +
                                                        " outside 0.." +
                                                        std::to_string(arch.layers - 1));
  const Local l = make_local(arch, shard);
  const double e = l.e;
  const double h = d(arch.hidden);
  const double tn = d(l.norm_tokens);
  const double mask = arch.dropout ? 1.0 : 0.0;  // 1-byte dropout mask per element
  const double full = d(l.tokens) * h * e;

  const Linear qkv{"qkv", l.tokens, arch.hidden, l.qkv_n, 1};
  const Linear proj{"proj", l.tokens, l.proj_k, arch.hidden, 1};
  Block ffn = arch.is_moe_layer(layer) ? moe_block(arch, l) : dense_block(arch, l);
  const std::int64_t window = arch.windowed_layer(layer) ? arch.window : 0;
  // qk-norm (Qwen3; Megatron --qk-layernorm): an RMSNorm over each head's query and key
  // after the QKV GEMM, one kernel reading and writing Q and K; backward reads Q, K and
  // their gradients and writes the input gradients.
  const double qk_bytes = d(l.tokens) * (d(l.heads) + d(l.kv_heads)) * d(l.dqk) * e;

  LayerOps out;
  // ---- forward
  auto& f = out.fwd;
  f.push_back(op_step(memory_op("ln1", tn * h * e, tn * h * e)));
  // MLA (model/mla.cc) replaces the fused QKV with its down- and up-projections.
  MlaFront mla;
  if (arch.mla()) {
    mla = mla_front(arch, l);
    for (auto& s : mla.fwd) f.push_back(std::move(s));
  } else {
    if (l.sp) f.push_back(comm_step(CommPointKind::kTpGather, full, "attn.in"));
    f.push_back(op_step(qkv.fwd(l)));
  }
  if (arch.qk_norm) f.push_back(op_step(memory_op("qk_norm", qk_bytes, qk_bytes)));
  // Rank-local attention: s/cp queries against all s keys (the lowering splits it into
  // ring-attention chunks with attention_op).
  f.push_back(op_step(attention_op(arch, shard, l.s / l.cp, l.s, true, false, window), true));
  f.push_back(op_step(proj.fwd(l)));
  if (l.tp > 1) f.push_back(comm_step(CommPointKind::kTpReduce, full, "attn.out"));
  // ln2 fuses the attention-output dropout and residual add: reads the block output and
  // the residual, writes the new residual, the normed input and the dropout mask.
  f.push_back(op_step(memory_op("ln2", 2 * tn * h * e, 2 * tn * h * e + tn * h * mask)));
  for (auto& s : ffn.fwd) f.push_back(std::move(s));
  f.push_back(op_step(memory_op("residual", 2 * tn * h * e, tn * h * e + tn * h * mask)));

  // ---- backward, input gradients (reverse order)
  auto& bi = out.bwd_input;
  bi.push_back(op_step(memory_op("residual", tn * h * (e + mask), tn * h * e)));
  for (auto& s : ffn.bwd_input) bi.push_back(std::move(s));
  bi.push_back(op_step(memory_op("ln2", 3 * tn * h * e + tn * h * mask, 2 * tn * h * e)));
  if (l.sp) bi.push_back(comm_step(CommPointKind::kTpGather, full, "attn.out"));
  bi.push_back(op_step(proj.dgrad(l)));
  bi.push_back(op_step(attention_op(arch, shard, l.s / l.cp, l.s, true, true, window)));
  if (arch.qk_norm) bi.push_back(op_step(memory_op("qk_norm", 2 * qk_bytes, qk_bytes)));
  if (arch.mla()) {
    for (auto& s : mla.bwd_input) bi.push_back(std::move(s));
  } else {
    bi.push_back(op_step(qkv.dgrad(l)));
    if (l.tp > 1) bi.push_back(comm_step(CommPointKind::kTpReduce, full, "attn.in"));
  }
  bi.push_back(op_step(memory_op("ln1", 3 * tn * h * e, tn * h * e)));
  if (l.sp && !arch.mla()) insert_wgrad_gather(bi, "qkv", full);

  // ---- backward, weight gradients (GEMMs only; norm/bias gradients are negligible)
  auto& bw = out.bwd_weight;
  for (auto& s : ffn.bwd_weight) bw.push_back(std::move(s));
  bw.push_back(op_step(proj.wgrad(l)));
  if (arch.mla()) {
    for (auto& s : mla.bwd_weight) bw.push_back(std::move(s));
  } else {
    bw.push_back(op_step(qkv.wgrad(l)));
  }

  add_quantize_ops(out.fwd, l);
  add_quantize_ops(out.bwd_input, l);
  add_amax_ops(out.fwd, l);
  add_amax_ops(out.bwd_input, l);
  add_grad_accumulation(out.bwd_weight, l);

  // ---- parameters held on this rank
  double p = 2.0 * d(arch.norm_params()) + d(l.proj_k) * h;
  p += arch.mla() ? mla.params : h * d(l.qkv_n);
  if (arch.has_bias()) p += d(l.qkv_n) + h;
  if (arch.qk_norm) p += 2.0 * d(l.dqk);      // q and k norm gains (replicated)
  if (arch.attention_sinks) p += d(l.heads);  // one sink logit per local head
  p += ffn.params;
  // The same parameters' vectors, module by module (ln1, attention, ln2, MLP).
  append_norm_vectors(out.vectors, arch);
  if (arch.mla()) {
    if (arch.q_lora_rank > 0) out.vectors.push_back(d(arch.q_lora_rank));
    out.vectors.push_back(d(arch.kv_lora_rank));
  }
  if (arch.has_bias()) out.vectors.insert(out.vectors.end(), {d(l.qkv_n), h});
  if (arch.qk_norm) out.vectors.insert(out.vectors.end(), {d(l.dqk), d(l.dqk)});
  if (arch.attention_sinks) out.vectors.push_back(d(l.heads));
  append_norm_vectors(out.vectors, arch);
  if (!arch.is_moe_layer(layer))
    out.vectors.insert(out.vectors.end(), ffn.vectors.begin(), ffn.vectors.end());
  out.param_count = p;
  out.expert_param_count = ffn.expert_params;
  out.grad_bytes_fp32 = 4.0 * p;
  out.tp_grad_params = mla.tp_grad_params;
  return out;
}

double model_flops_per_sequence(const ModelArch& arch, std::int64_t seq_len) {
  STEPCAST_CHECK(seq_len > 0, "model_flops_per_sequence: seq_len must be positive");
  ModelArch a = arch;
  if (a.moe.has_value()) a.moe->capacity_factor = 1.0;
  ShardSpec one;
  one.microbatch = 1;
  one.seq_len = seq_len;
  double fwd = 0;
  for (int l = 0; l < a.layers; ++l) {
    for (const Step& s : layer_ops(a, l, one).fwd) {
      if (s.is_comm) continue;
      if (s.op.kind == OpKind::kGemm) fwd += s.op.flops;
      // Full score matrix: twice the causal half layer_ops computes.
      if (s.op.kind == OpKind::kAttention) fwd += 2.0 * s.op.flops;
    }
  }
  // Logits: 2shV with the true vocabulary (Korthikanti 2022 eq. 7), not the padded shard.
  fwd += 2.0 * d(seq_len) * d(a.hidden) * d(a.vocab);
  return 3.0 * fwd;
}

}  // namespace stepcast
