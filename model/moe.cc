// The MoE block of a layer: router, token dispatcher and grouped experts, kernel by kernel
// as Megatron-Core runs them (megatron/core/transformer/moe/: moe_layer.py MoELayer.forward,
// router.py TopKRouter, token_dispatcher.py, experts.py TEGroupedMLP; fusions on:
// --moe-router-fusion, --moe-permute-fusion, --moe-grouped-gemm). Forward order:
//   shared experts (unless overlapped) -> router GEMM [T,h]x[h,E] -> score + top-k ->
//   routing statistics (per-expert counts, aux loss) -> dispatch -> grouped fc1 -> activation
//   weighted by the probabilities -> grouped fc2 -> combine -> unpermute (+ shared output).
// T = tokens routed on this rank, k = top_k, E = experts, R = expert rows on this rank.
//
// Dispatchers (ShardSpec::dispatcher, parallel.moe_dispatcher):
//  - alltoall (MoEAlltoAllTokenDispatcher): all-gather of the E per-expert counts over the
//    ep group, permute (gather the T*k token copies into expert-major order, with their
//    probabilities), device-to-host copy of the counts and a host sync (NCCL needs the split
//    sizes on the host: _maybe_update_cuda_sync_point("before_ep_alltoall")) when dropless,
//    all-to-all of the token rows, then of the fp32 probabilities, sort_chunks_by_idxs into
//    local-expert order when a rank holds more than one expert; the way back mirrors it.
//  - allgather (MoEAllGatherTokenDispatcher): all-gather of the tokens over ep, each rank
//    picks the rows of its experts; reduce-scatter back. (Megatron gathers over tp x ep;
//    the tp part is not modelled.)
//  - deepep (MoEFlexTokenDispatcher + DeepEP fused_a2a.py): one fused dispatch in which a
//    token travels once per destination node over RDMA (to the GPU of the same local index)
//    and is forwarded over NVLink (DeepEP internode.cu; DeepSeek-V3 paper section 3.2.2);
//    the host busy-waits for the received counts; tokens are permuted per local expert
//    after arrival. The dispatch is costed as an all-to-all whose bytes are the distinct
//    destinations per token: destination nodes when the ep group spans several (the
//    all-to-all's NIC term is then the RDMA volume; NVLink, 3x faster per GPU, is not the
//    bound while fewer than ~3.2 copies of a token land on one node: paper section 3.2.2),
//    destination GPUs inside one node.
// Token drop (moe.capacity_factor given: --moe-expert-capacity-factor with
// --moe-pad-expert-input-to-capacity): every expert receives exactly ceil(cf*T*k/E) rows
// from each source rank (static shapes, no host sync). Dropless (default): rows follow the
// routing; moe.imbalance (the most loaded expert's rows over the mean) puts one expert of
// the busiest rank at imbalance x the mean, and that rank sets the pace of the grouped GEMMs
// and of the all-to-all (it receives (E_loc - 1 + imbalance)/E_loc of the mean).
#include <algorithm>
#include <cmath>
#include <iterator>

#include "model/error.h"
#include "model/workload_parts.h"

namespace stepcast {

double expected_distinct_bins(int experts, int bins, int picks) {
  STEPCAST_CHECK(experts > 0 && bins > 0 && picks > 0 && picks <= experts,
                 "expected_distinct_bins: bad sizes");
  if (bins == 1) return 1.0;
  // k distinct experts drawn uniformly from E spread evenly over B bins: a bin is missed
  // with probability C(E - E/B, k) / C(E, k).
  const double per_bin = static_cast<double>(experts) / bins;
  double miss = 1.0;
  for (int i = 0; i < picks; ++i)
    miss *= std::max(0.0, (experts - per_bin - i) / (static_cast<double>(experts) - i));
  return bins * (1.0 - miss);
}

MoeLoad moe_load(const ModelArch& a, const ShardSpec& sh) {
  STEPCAST_CHECK(a.moe.has_value(), "moe_load: not a MoE model");
  const MoeSpec& m = *a.moe;
  const int tp = sh.tp;
  const int ep = sh.ep;
  const int etp = expert_tp_of(sh);
  const bool expert_tp = etp > 1 && ep == 1;
  const bool sp = sh.sequence_parallel && tp > 1;
  const std::int64_t tokens_all = sh.microbatch * sh.seq_len / sh.cp;
  MoeLoad ld;
  ld.tokens = expert_tp ? tokens_all : tokens_all / tp;
  (void)sp;
  const double gathered = etp > 1 && ep > 1 ? etp : 1.0;
  const int local = m.experts / ep;
  const double t = static_cast<double>(ld.tokens);
  if (m.capacity_factor > 0) {
    // Megatron get_capacity: ceil(T*k/E * cf) per expert on each source rank.
    const double cap = std::ceil(t * m.top_k / m.experts * m.capacity_factor - 1e-9);
    ld.send_copies = cap * m.experts;
    ld.rows_per_expert = static_cast<std::int64_t>(cap * ep * gathered);
    ld.rows = static_cast<double>(ld.rows_per_expert) * local;
    ld.recv_factor = 1.0;
  } else {
    const double mean = t * m.top_k * ep / m.experts * gathered;
    ld.send_copies = t * m.top_k;
    ld.recv_factor = (local - 1.0 + m.imbalance) / local;
    ld.rows = mean * local * ld.recv_factor;
    ld.rows_per_expert = static_cast<std::int64_t>(std::ceil(ld.rows / local - 1e-9));
  }
  return ld;
}

namespace workload_parts {
namespace {

// Destinations per token the dispatcher's all-to-all moves a row to (see the top).
double dispatch_copies(const MoeSpec& m, const Local& l, const MoeLoad& ld) {
  if (l.dispatcher != MoeDispatcher::kDeepEp) return ld.send_copies;
  const double t = static_cast<double>(ld.tokens);
  const int nodes = std::max(1, l.ep_nodes);
  if (nodes == 1) return t * expected_distinct_bins(m.experts, l.ep, m.top_k);
  // Node-limited routing (moe.router_groups / router_group_topk, Megatron
  // --moe-router-num-groups / --moe-router-group-topk): a token's experts lie in
  // group_topk of the groups, on group_topk x nodes/groups nodes.
  int pool_nodes = nodes, pool_experts = m.experts;
  if (m.router_groups > 0 && m.router_group_topk > 0 && nodes % m.router_groups == 0) {
    pool_nodes = m.router_group_topk * (nodes / m.router_groups);
    pool_experts = m.experts / m.router_groups * m.router_group_topk;
  }
  return t * expected_distinct_bins(pool_experts, pool_nodes, m.top_k);
}

// Per-tensor fp8 expert GEMMs (Transformer Engine GroupedLinear, module/grouped_linear.py):
// each GEMM's activation or gradient operand (A: m x k, the dispatched rows, the activation
// output, or an output gradient) is quantized by its own kernel, tex.split_quantize over the
// experts' row blocks, before the grouped GEMM; no producer kernel has the cast fused into
// it, as a dense LayerNormLinear has. Hopper's fp8 GEMMs take only the TN layout, so the
// kernel writes the row-wise copy and the transposed (column-wise) copy the weight gradient
// reads: reads m x k at e bytes, writes 2 x m x k at 1 byte (cast_transpose). Under current
// scaling (training.fp8_recipe: current) the amax pass that reads the operand once more
// goes before this kernel (add_amax_ops, model/dtypes.cc). mxfp8 / nvfp4 get their quantize
// kernels on every GEMM already (add_quantize_ops, model/dtypes.cc). Forward: before each GEMM;
// backward (rev, reversed by the caller): after each input-gradient GEMM in rev, i.e. before it
// once reversed.
//
// Kernels (Task::launches): split_quantize hands the experts' row blocks to
// multi_tensor_quantize_impl (pytorch/csrc/extensions/cast.cpp), which runs one fused
// nvte_multi_cast_transpose for all of them only when every quantizer is a delayed-scaling
// Float8Quantizer; any other quantizer is run tensor by tensor. Delayed scaling: 1 launch.
// Current scaling: one cast-transpose per expert here, and per expert the amax task's memset,
// amax reduction and scale computation (Float8CurrentScalingQuantizer::quantize, TE 2.x
// quantizer.cpp; amax_launches, model/dtypes.cc).
void quantize_expert_operands(std::vector<Step>& fwd, std::vector<Step>& rev, std::size_t rev_from,
                              const Local& l) {
  if (l.dt != DType::kFp8) return;
  auto quant = [&](const Step& s) {
    const GemmShape& g = s.op.gemm;
    const double elems = d(g.m) * d(g.k) * d(g.batch);
    Op op = memory_op(s.op.name + ".quant", elems * l.e, 2.0 * elems);
    op.launches = l.current_scaling ? static_cast<int>(g.batch) : 1;
    return op_step(std::move(op));
  };
  auto is_gemm = [](const Step& s) { return !s.is_comm && s.op.kind == OpKind::kGemm; };
  std::vector<Step> out;
  for (Step& s : fwd) {
    if (is_gemm(s)) out.push_back(quant(s));
    out.push_back(std::move(s));
  }
  fwd = std::move(out);
  std::vector<Step> back(
      std::make_move_iterator(rev.begin() + static_cast<std::ptrdiff_t>(rev_from)),
      std::make_move_iterator(rev.end()));
  rev.resize(rev_from);
  for (Step& s : back) {
    const bool gemm = is_gemm(s);
    Step q = gemm ? quant(s) : Step{};
    rev.push_back(std::move(s));
    if (gemm) rev.push_back(std::move(q));
  }
}

// The experts' and the dispatcher's steps between the router and the combine, forward and
// (into rev, reversed by the caller) backward.
void routed_path(const ModelArch& a, const Local& l, const MoeLoad& ld, Block& blk,
                 std::vector<Step>& rev, Block* beside) {
  const MoeSpec& m = *a.moe;
  const double e = l.e, h = d(a.hidden);
  const double t = d(ld.tokens), te = t * m.experts;
  const int local = m.experts / l.ep;
  const int etp = l.etp;
  const bool gather_dispatched = etp > 1 && l.ep > 1;
  const bool a2a = l.dispatcher == MoeDispatcher::kAllToAll;
  const bool deepep = l.dispatcher == MoeDispatcher::kDeepEp;
  const bool allgather = l.dispatcher == MoeDispatcher::kAllGather;
  const bool dropless = m.capacity_factor <= 0;
  const double sent = ld.send_copies * h * e;  // rows this rank sends (or permutes)
  const double rows = ld.rows * h * e;         // rows its experts process
  auto both = [&](Op op, Op back) {
    blk.fwd.push_back(op_step(std::move(op)));
    rev.push_back(op_step(std::move(back)));
  };
  // Routing statistics: per-expert counts from the [T, E] bool routing map and the
  // load-balancing loss terms from the fp32 scores (fused router kernels, TE
  // fused_moe_aux_loss); backward scatters the loss gradient into the scores.
  both(memory_op("moe.route_stats", te * 5.0, d(m.experts) * 4.0),
       memory_op("moe.route_stats", te * 5.0, te * 4.0));
  if (a2a && l.ep > 1)
    blk.fwd.push_back(
        dispatcher_comm_step(CommPointKind::kEpGather, d(m.experts) * 4.0 * l.ep, "moe.counts"));
  // Permute (TE moe_permute_with_probs): the row-id map from the routing map (read [T,E]
  // bool, write [T,E] int32), then one gathered row per copy with its fp32 probability.
  // Backward: the k copies' gradients summed back per token. DeepEP permutes after arrival.
  blk.fwd.push_back(op_step(memory_op("moe.permute_map", te, te * 4.0)));
  const double permuted = deepep ? rows : sent;
  both(memory_op("moe.permute", permuted + te * 4.0, permuted + ld.send_copies * 4.0),
       memory_op("moe.permute", permuted + te * 4.0, t * h * e));
  if (deepep && l.ep > 1) {
    // DeepEP's notify kernel (csrc/deep_ep.cpp, the dispatch's second kernel after the
    // layout one): each rank's per-expert counts to every rank of the ep group, by DeepEP's
    // own NVLink and RDMA kernels; the host then waits for the received counts (below).
    Step notify =
        dispatcher_comm_step(CommPointKind::kEpGather, d(m.experts) * 4.0 * l.ep, "moe.notify");
    notify.comm.ep_kernels = true;
    blk.fwd.push_back(std::move(notify));
  }
  if (dropless && !allgather && (l.ep > 1 || l.tp > 1)) {
    // The host waits for the device-to-host copy of the counts (Op::host_sync) before it
    // issues the all-to-all, whose split sizes it needs (Megatron-Core cuda_sync_point
    // "before_ep_alltoall"; DeepEP's dispatch busy-waits for the counts its notify kernel
    // received).
    Op sync = memory_op("moe.host_sync", 0, 0);
    sync.host_sync = true;
    blk.fwd.push_back(op_step(sync));
  }
  const double recv = dispatch_copies(m, l, ld) * h * e * ld.recv_factor;
  // DeepEP's fused dispatch / combine run as its own kernels, not NCCL's all-to-all.
  auto ep_step = [&](CommPointKind kind, const char* name) {
    Step s = comm_step(kind, recv, name);
    s.comm.ep_kernels = deepep;
    return s;
  };
  if (l.ep > 1 && (a2a || deepep)) {
    blk.fwd.push_back(ep_step(CommPointKind::kEpDispatch, "moe.dispatch"));
    rev.push_back(ep_step(CommPointKind::kEpCombine, "moe.combine"));
    if (a2a) {
      const double probs = ld.send_copies * 4.0 * ld.recv_factor;
      blk.fwd.push_back(comm_step(CommPointKind::kEpDispatch, probs, "moe.dispatch_probs"));
      rev.push_back(comm_step(CommPointKind::kEpCombine, probs, "moe.combine_probs"));
    }
  }
  if (l.ep > 1 && allgather) {
    const double all = t * h * e * l.ep;
    blk.fwd.push_back(dispatcher_comm_step(CommPointKind::kEpGather, all, "moe.dispatch"));
    rev.push_back(dispatcher_comm_step(CommPointKind::kEpScatter, all, "moe.dispatch"));
  }
  if (beside) {
    // Shared experts overlapped (--moe-shared-expert-overlap): launched on their own
    // stream after the token all-to-all, beside the dispatcher's communication.
    for (auto& s : beside->fwd) {
      s.beside_comm = true;
      blk.fwd.push_back(std::move(s));
    }
  }
  // The dispatched rows of the etp ranks gathered (bytes: the gathered size), then
  // sort_chunks_by_idxs into local-expert order (alltoall with several local experts).
  const double gathered = ld.rows * h * e;
  if (gather_dispatched) {
    blk.fwd.push_back(dispatcher_comm_step(CommPointKind::kTpGather, gathered, "moe.tp_in"));
    rev.push_back(dispatcher_comm_step(CommPointKind::kTpReduce, gathered, "moe.tp_in"));
  }
  if (a2a && l.ep > 1 && local > 1)
    both(memory_op("moe.sort", rows, rows), memory_op("moe.sort", rows, rows));
  {
    Block ex;
    const std::size_t rev_from = rev.size();
    append_mlp(a, l, "moe.", ld.rows_per_expert, m.ffn_hidden / etp, local, ex, rev);
    quantize_expert_operands(ex.fwd, rev, rev_from, l);
    for (auto& s : ex.fwd) {
      // The activation is weighted by the fp32 probabilities (weighted_bias_swiglu_impl).
      if (!s.is_comm && s.op.name == "moe.act") s.op.bytes_read += ld.rows * 4.0;
      blk.fwd.push_back(std::move(s));
    }
    for (auto& s : ex.bwd_weight) blk.bwd_weight.push_back(std::move(s));
    blk.params += ex.params;
    blk.expert_params = ex.params;
  }
  if (a2a && l.ep > 1 && local > 1)
    both(memory_op("moe.unsort", rows, rows), memory_op("moe.unsort", rows, rows));
  if (gather_dispatched) {
    blk.fwd.push_back(dispatcher_comm_step(CommPointKind::kTpReduce, gathered, "moe.tp_out"));
    rev.push_back(dispatcher_comm_step(CommPointKind::kTpGather, gathered, "moe.tp_out"));
  }
  if (beside) {
    // Backward: the shared experts' backward beside the combine-gradient all-to-all.
    for (auto it = beside->bwd_input.rbegin(); it != beside->bwd_input.rend(); ++it) {
      it->beside_comm = true;
      rev.push_back(std::move(*it));
    }
  }
  if (l.ep > 1 && (a2a || deepep)) {
    blk.fwd.push_back(ep_step(CommPointKind::kEpCombine, "moe.combine"));
    rev.push_back(ep_step(CommPointKind::kEpDispatch, "moe.dispatch"));
  }
  if (l.ep > 1 && allgather) {
    const double all = t * h * e * l.ep;
    blk.fwd.push_back(dispatcher_comm_step(CommPointKind::kEpScatter, all, "moe.combine"));
    rev.push_back(dispatcher_comm_step(CommPointKind::kEpGather, all, "moe.combine"));
  }
  // Unpermute: scatter-add of the k weighted copies per token; backward gathers them.
  both(memory_op("moe.unpermute", permuted + te * 4.0, t * h * e),
       memory_op("moe.unpermute", t * h * e + te * 4.0, permuted));
}

}  // namespace

Block moe_block(const ModelArch& a, const Local& l) {
  const MoeSpec& m = *a.moe;
  STEPCAST_CHECK(m.experts % l.ep == 0, "moe.experts " + std::to_string(m.experts) +
                                            " not divisible by ep " + std::to_string(l.ep));
  // Three layouts (workload.cc, top): experts split over tp without ep (all T tokens, as the
  // dense MLP); experts split over tp with ep (each rank routes its sequence-parallel shard,
  // the dispatched tokens gathered across tp: "moe.tp_in" / "moe.tp_out"); experts whole
  // (etp = 1), each rank routing its own 1/tp of the tokens.
  const int etp = l.etp;
  const bool expert_tp = etp > 1 && l.ep == 1;
  STEPCAST_CHECK(m.ffn_hidden % etp == 0, "moe.ffn_hidden not divisible by expert tp");
  STEPCAST_CHECK(!(etp > 1 && l.ep > 1) || l.sp,
                 "moe: experts split over tp with ep need sequence parallelism");
  STEPCAST_CHECK(expert_tp || l.tokens % l.tp == 0, "moe: tokens per rank not divisible by tp");
  ShardSpec sh;
  sh.microbatch = l.b;
  sh.seq_len = l.s;
  sh.tp = l.tp;
  sh.cp = l.cp;
  sh.ep = l.ep;
  sh.expert_tp = etp;
  sh.sequence_parallel = l.sp;
  const MoeLoad ld = moe_load(a, sh);
  const double full = d(l.tokens) * d(a.hidden) * l.e;
  const double h = d(a.hidden);
  const double te = d(ld.tokens) * m.experts;

  // Shared experts (Megatron-Core SharedExpertMLP): a dense MLP of shared x ffn split over
  // the attention's tp, on the block input. Without --moe-shared-expert-overlap they run
  // first on the main stream (MoELayer.forward); with it, beside the dispatcher.
  Block shared;
  const bool overlap_shared = l.shared_overlap && l.ep > 1 && m.shared_experts > 0 &&
                              l.dispatcher != MoeDispatcher::kAllGather;
  if (m.shared_experts > 0)
    shared = tp_mlp_block(a, l, "shared.", "shared", m.shared_experts * m.ffn_hidden);

  Block blk;
  std::vector<Step> rev;
  if (!overlap_shared) {
    for (auto& s : shared.fwd) blk.fwd.push_back(std::move(s));
  }
  const bool gather = expert_tp && l.sp;                 // as the dense MLP
  const bool reduce = l.tp > 1 && (expert_tp || !l.sp);  // partial sums / slices
  if (gather) blk.fwd.push_back(dispatcher_comm_step(CommPointKind::kTpGather, full, "mlp.in"));
  if (reduce) rev.push_back(dispatcher_comm_step(CommPointKind::kTpReduce, full, "mlp.in"));

  // Router GEMM (replicated over tp; fp32 logits), then the fused score + top-k kernel
  // (TE fused_topk_with_score_function: reads the [T, E] fp32 logits, writes the [T, E]
  // fp32 probabilities and the bool routing map; backward reads the saved scores and the
  // probability gradient, writes the logit gradient). The router runs in the activation
  // dtype under every GEMM dtype: Megatron-Core's RouterGatingLinearFunction calls TE's
  // general_gemm on the 16-bit input and weight, outside the fp8 autocast.
  Local lr = l;
  lr.dt = l.act;
  const Linear router{"router", ld.tokens, a.hidden, m.experts, 1};
  blk.fwd.push_back(op_step(router.fwd(lr)));
  rev.push_back(op_step(router.dgrad(lr)));
  blk.params += (h + (a.has_bias() ? 1.0 : 0.0)) * m.experts;
  blk.fwd.push_back(op_step(memory_op("moe.topk", te * 4.0, te * 5.0)));
  rev.push_back(op_step(memory_op("moe.topk", te * 8.0, te * 4.0)));

  routed_path(a, l, ld, blk, rev, overlap_shared && m.shared_experts > 0 ? &shared : nullptr);
  blk.bwd_weight.push_back(op_step(router.wgrad(lr)));

  if (gather) rev.push_back(dispatcher_comm_step(CommPointKind::kTpGather, full, "mlp.out"));
  if (reduce) blk.fwd.push_back(dispatcher_comm_step(CommPointKind::kTpReduce, full, "mlp.out"));
  blk.bwd_input.assign(rev.rbegin(), rev.rend());
  if (!overlap_shared) {
    // Backward: the shared experts' backward last (the reverse of forward).
    for (auto& s : shared.bwd_input) blk.bwd_input.push_back(std::move(s));
  }
  for (auto& s : shared.bwd_weight) blk.bwd_weight.push_back(std::move(s));
  blk.params += shared.params;
  return blk;
}

}  // namespace workload_parts
}  // namespace stepcast
