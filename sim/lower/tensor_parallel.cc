// Lowering (lowering.h): the model's CommPoints as collectives: tensor parallel (allreduce,
// or reduce-scatter / all-gather with sequence parallel), the TP communication overlap
// (Transformer Engine userbuffers) and the backward in Transformer Engine's order, and the
// expert-parallel all-to-all.
#include "sim/lower/lowering.h"

namespace stepcast::lowering {

// One model CommPoint -> the collective the plan calls for (or nothing).
void Lowerer::emit_comm_point(Emit& e, const CommPoint& cp, Phase phase, const char* prefix,
                              const Unit& u, int mb, int chunk) {
  CollOp op = CollOp::kAllReduce;
  GroupKind gk = GroupKind::kTp;
  StreamKind stream = StreamKind::kTp;
  Category cat = Category::kTpComm;
  switch (cp.kind) {
    case CommPointKind::kTpReduce:
      if (par_.tp == 1) return;
      op = par_.sequence_parallel ? CollOp::kReduceScatter : CollOp::kAllReduce;
      break;
    case CommPointKind::kTpGather:
      if (par_.tp == 1 || !par_.sequence_parallel) return;
      op = CollOp::kAllGather;
      break;
    case CommPointKind::kEpDispatch:
    case CommPointKind::kEpCombine:
      if (par_.ep == 1) return;
      op = CollOp::kAllToAll;
      gk = GroupKind::kEp;
      stream = StreamKind::kEp;
      cat = Category::kEpComm;
      break;
    case CommPointKind::kEpGather:
    case CommPointKind::kEpScatter:
      if (par_.ep == 1) return;
      op = cp.kind == CommPointKind::kEpGather ? CollOp::kAllGather : CollOp::kReduceScatter;
      gk = GroupKind::kEp;
      stream = StreamKind::kEp;
      cat = Category::kEpComm;
      break;
  }
  std::vector<int> deps;
  if (e.last_compute >= 0) deps.push_back(e.last_compute);
  if (!cp.feeds_wgrad.empty()) {
    // Runs alongside the input-gradient GEMM that follows (Megatron issues it async before
    // that GEMM; TE's userbuffers overlap it in bulk): only the weight gradient waits. Its
    // gathered [T, h] copy is transient, like the forward's gathered GEMM inputs, and is not
    // allocated: one at a time in Megatron (each linear's weight gradient follows its input
    // gradient), about half of one layer's stored activations.
    e.wgrad_inputs[{&u, mb, cp.feeds_wgrad}] =
        emit_collective(e, op, gk, stream, cat, cp.bytes, act_dtype_, phase,
                        label_of(prefix, u.name, cp.name, mb), u.layer, mb, chunk, std::move(deps));
    return;
  }
  if (par_.overlap_tp_comm && cp.gemm_overlap && gk == GroupKind::kTp && op != CollOp::kAllReduce) {
    emit_tp_overlap(e, cp, op, gk, stream, cat, phase, prefix, u, mb, chunk, std::move(deps));
    return;
  }
  const int id = emit_collective(e, op, gk, stream, cat, cp.bytes, act_dtype_, phase,
                                 label_of(prefix, u.name, cp.name, mb), u.layer, mb, chunk,
                                 std::move(deps), cp.ep_kernels);
  e.pending.push_back(id);
}

// TP communication overlap (Transformer Engine userbuffers, Megatron-Core
// --tp-comm-overlap), pipelined with the adjacent GEMM:
//  - all-gather before a column-parallel GEMM (forward qkv/fc1, and the gathered output
//    gradient before the proj/fc2 input-gradient GEMMs): TE's ring exchange. The GEMM
//    starts on the rank's own chunk while the other tp - 1 arrive around the ring, one
//    per step, so none is waited for; the op after the GEMM waits for the exchange. Its
//    time is the all-gather's: (tp-1)/tp of the bytes over the link. TE issues the
//    per-chunk GEMMs on several streams, where they overlap one another, so the GEMM
//    is costed whole, not as tp GEMMs of s/tp rows run one after another.
//  - reduce-scatter after a forward row-parallel GEMM (proj, fc2): (tp-1)/tp of it runs
//    alongside the producing GEMM (issued when the GEMM starts), the last chunk after it.
//  - reduce-scatter after a backward input-gradient GEMM (qkv, fc1): TE's bulk overlap,
//    whole after the GEMM and beside the weight-gradient GEMM that follows it
//    (emit_backward_te_order), which does not wait for it; the op after does. With W
//    split from B (ZB-H1) it is chunked as in forward.
void Lowerer::emit_tp_overlap(Emit& e, const CommPoint& cp, CollOp op, GroupKind gk,
                              StreamKind stream, Category cat, Phase phase, const char* prefix,
                              const Unit& u, int mb, int chunk, std::vector<int> deps) {
  const double first = cp.bytes / par_.tp;
  const double rest = cp.bytes - first;
  std::string base = label_of(prefix, u.name, cp.name, mb);
  if (op == CollOp::kAllGather) {
    e.after_next.push_back(emit_collective(e, op, gk, StreamKind::kTpRing, cat, cp.bytes,
                                           act_dtype_, phase, std::move(base), u.layer, mb, chunk,
                                           std::move(deps)));
  } else if (phase == Phase::kBwdInput && !split_w_) {
    e.pending.push_back(emit_collective(e, op, gk, stream, cat, cp.bytes, act_dtype_, phase,
                                        std::move(base), u.layer, mb, chunk, std::move(deps)));
  } else {
    std::vector<int> early;
    if (e.prev_compute >= 0) early.push_back(e.prev_compute);
    const int c0 = emit_collective(e, op, gk, stream, cat, rest, act_dtype_, phase, base + ".c0",
                                   u.layer, mb, chunk, std::move(early));
    deps.push_back(c0);
    const int c1 = emit_collective(e, op, gk, stream, cat, first, act_dtype_, phase, base + ".c1",
                                   u.layer, mb, chunk, std::move(deps));
    e.pending.push_back(c1);
  }
}

// The backward order of Megatron-Core's and Transformer Engine's linear layers (with W not
// split from B; FrameworkRules::async_tp_dgrad_reduce, or the TP overlap on): each linear's
// weight-gradient GEMM right after its input-gradient GEMM and after the launch of the TP
// reduction (all-reduce, or reduce-scatter under sequence parallel) of that input gradient,
// which runs beside the weight gradient (Megatron LinearWithGradAccumulationAndAsync
// Communication.backward: dgrad, async reduction, wgrad, wait; TE's bulk overlap with
// userbuffers); the op after the weight gradient waits for the reduction. The weight
// gradients emitted here are marked in emitted_w_; emit_weight_grads emits the rest.
void Lowerer::emit_backward_te_order(Emit& e, const Unit& u, int mb, int c) {
  const std::vector<Step>& bi = u.ops->bwd_input;
  const std::vector<Step>& bw = u.ops->bwd_weight;
  emitted_w_.assign(bw.size(), 0);
  int owed = -1;
  std::vector<int> after_dgrad;  // what the weight gradient waits for: as its input gradient
  for (size_t i = 0; i < bi.size(); ++i) {
    emit_steps(e, std::span<const Step>(&bi[i], 1), Phase::kBwdInput, Category::kCompute, "bwd", u,
               mb, c, 1);
    if (!bi[i].is_comm && bi[i].op.kind == OpKind::kGemm) {
      owed = -1;
      for (size_t j = 0; j < bw.size(); ++j)
        if (!emitted_w_[j] && !bw[j].is_comm && bw[j].op.kind == OpKind::kGemm &&
            bw[j].op.name == bi[i].op.name) {
          owed = static_cast<int>(j);
          break;
        }
      // The ring exchange of the output gradient feeds both GEMMs (the op after the
      // input-gradient GEMM waits for it); the reduce-scatter emitted next does not.
      after_dgrad = e.pending;
    }
    // Only a linear's own TP reduction of its input gradient runs behind its weight
    // gradient; any other collective (the expert all-to-all, the MoE dispatcher's tp
    // collectives) belongs to the next autograd node and starts after the weight gradient.
    const bool comm_next = i + 1 < bi.size() && bi[i + 1].is_comm &&
                           bi[i + 1].comm.kind == CommPointKind::kTpReduce &&
                           bi[i + 1].comm.gemm_overlap;
    if (owed < 0 || comm_next) continue;
    std::vector<int> stash;
    stash.swap(e.pending);
    e.pending = after_dgrad;
    emit_steps(e, std::span<const Step>(&bw[static_cast<size_t>(owed)], 1), Phase::kBwdWeight,
               Category::kCompute, "wgt", u, mb, c, 1);
    e.pending = std::move(stash);
    emitted_w_[static_cast<size_t>(owed)] = 1;
    owed = -1;
  }
}

}  // namespace stepcast::lowering
