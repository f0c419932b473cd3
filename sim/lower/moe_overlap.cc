// Lowering (lowering.h): the MoE all-to-all overlap with another microbatch (Megatron-Core
// --overlap-moe-expert-parallel-comm with --delay-wgrad-compute; parallel.overlap.moe_ep_comm).
//
// Megatron-Core splits each transformer layer into nodes (models/common/
// model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run): the part before the
// dispatch (attention, the MLP's norm, the router, the permutation), the dispatch
// all-to-all, the experts, the combine all-to-all and what follows it. The schedule runs the
// forward of one microbatch and the backward of another as one step (PassOp::paired,
// schedule.h), layer by layer, the forward's layer i with the backward's layer n-1-i, the
// all-to-alls on their own stream:
//
//   compute stream                         all-to-all stream
//   F: attention .. permute
//   B: unpermute gradient                  B: combine gradient
//                                          F: dispatch
//   B: experts' input, then weight grads   B: dispatch gradient
//   F: experts                             F: combine
//   B: attention's input and weight grads
//   F: unpermute
//
// so each all-to-all runs beside the other microbatch's compute. Here a unit's steps are cut
// after each run of expert all-to-all steps (EP dispatch / combine): the forward's pieces
// are [its first body, that body's all-to-alls, then each further segment], the backward's
// its segments; the two passes' pieces are emitted alternately, forward first, each pass with
// its own dependency state (what its next compute waits for), so that neither pass's compute
// waits for the other's communication. With --delay-wgrad-compute the weight gradients leave
// Transformer Engine's per-linear order: the experts' after the experts' input gradients,
// filling the gap while the dispatch gradient's all-to-all runs, the rest after the layer's
// input gradients. The embedding runs first in the forward and the output layer first in the
// backward (pre_process / post_process, outside the layer pairs); a layer without
// all-to-alls (a dense layer) is one piece. The selective recompute of the attention core
// runs before the backward's last segment, where the attention's input gradients need it.
// DualPipeV's overlapped pairs (schedule.h) are lowered the same way; its code waits for
// both passes' pipeline messages before the pair (pair_waits_both_).
#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "sim/lower/lowering.h"

namespace stepcast::lowering {

namespace {

bool is_a2a(const Step& s) {
  return s.is_comm &&
         (s.comm.kind == CommPointKind::kEpDispatch || s.comm.kind == CommPointKind::kEpCombine);
}

// The steps' segments: each ends after a run of all-to-all steps (the last one at the end).
// Returns the segments' [begin, body end, end): the body is what precedes the run.
struct Segment {
  size_t begin, body_end, end;
};
std::vector<Segment> segments(const std::vector<Step>& steps) {
  std::vector<Segment> out;
  size_t begin = 0, i = 0;
  while (i < steps.size()) {
    if (!is_a2a(steps[i])) {
      ++i;
      continue;
    }
    const size_t body_end = i;
    while (i < steps.size() && is_a2a(steps[i])) ++i;
    out.push_back({begin, body_end, i});
    begin = i;
  }
  if (begin < steps.size() || out.empty()) out.push_back({begin, steps.size(), steps.size()});
  return out;
}

// The experts' weight gradients (model/moe.cc names the routed experts' GEMMs "moe.*"): with
// delayed weight gradients they run after the experts' input gradients.
bool expert_wgrad(const Step& s) { return !s.is_comm && s.op.name.rfind("moe.", 0) == 0; }

}  // namespace

void Lowerer::swap_deps(Emit& e, PassDeps& d) {
  std::swap(e.last_compute, d.last_compute);
  std::swap(e.prev_compute, d.prev_compute);
  e.pending.swap(d.pending);
  e.after_next.swap(d.after_next);
  e.host_waits.swap(d.host_waits);
  e.held_comm.swap(d.held_comm);
  std::swap(e.beside, d.beside);
}

// One pass's side of a pair: the unit being emitted and its pieces, each a range of its
// steps (forward: [body 0], [all-to-alls 0], [segment 1], ...; backward: its segments).
struct Lowerer::PairSide {
  const PassOp* op = nullptr;
  int index = 0;                                  // the pass's index in the stage's order
  int unit = -1;                                  // the current unit's index in the chunk
  std::vector<std::pair<size_t, size_t>> pieces;  // of the current unit: [from, to)
  size_t piece = 0;                               // the next one
  PassDeps deps;
  bool more() const { return piece < pieces.size(); }
};

void Lowerer::merged_passes(Emit& e, RankState& rs, int fi, int bi) {
  const auto& order = orders_[static_cast<size_t>(e.coord.pp)];
  PairSide f, b;
  f.op = &order[static_cast<size_t>(fi)];
  b.op = &order[static_cast<size_t>(bi)];
  f.index = fi;
  b.index = bi;
  STEPCAST_CHECK(f.op->kind == PassKind::kF && b.op->kind == PassKind::kB && !b.op->defer_w &&
                     par_.zero <= 1 && par_.recompute != Recompute::kFull && !pp_blocking(),
                 "the all-to-all overlap pairs an F with a B (ZeRO 0/1, no full recompute, "
                 "asynchronous p2p)");
  // The forward goes on from the rank's state; the backward starts with its own input only.
  b.deps.last_compute = e.last_compute;
  b.deps.prev_compute = e.prev_compute;
  swap_deps(e, f.deps);  // f.deps: the rank's state; e: unused until the end
  // Each pass waits for its own pipeline message (and its gather, pipeline_p2p.cc); under
  // pair_waits_both_ for the other's too.
  std::vector<int> got[2];
  for (int i = 0; i < 2; ++i) {
    PairSide& side = i == 0 ? f : b;
    swap_deps(e, side.deps);
    const size_t before = e.pending.size();
    take_pp_recv(e, rs, *side.op, static_cast<size_t>(side.index));
    got[i].assign(e.pending.begin() + static_cast<std::ptrdiff_t>(before), e.pending.end());
    swap_deps(e, side.deps);
  }
  if (pair_waits_both_) {
    f.deps.pending.insert(f.deps.pending.end(), got[1].begin(), got[1].end());
    b.deps.pending.insert(b.deps.pending.end(), got[0].begin(), got[0].end());
  }

  // Units: the forward's embedding first, then layers, then the rest (the output layer);
  // the backward's output layer first, then layers in reverse, then the embedding.
  const auto& fu = chunks_[static_cast<size_t>(vstage(f.op->chunk, e.coord.pp))];
  const auto& bu = chunks_[static_cast<size_t>(vstage(b.op->chunk, e.coord.pp))];
  std::vector<int> f_pre, f_layers, f_post, b_pre, b_layers, b_post;
  for (int k = 0; k < static_cast<int>(fu.size()); ++k) {
    const auto kind = fu[static_cast<size_t>(k)].kind;
    (kind == Unit::Kind::kEmbed   ? f_pre
     : kind == Unit::Kind::kLayer ? f_layers
                                  : f_post)
        .push_back(k);
  }
  for (int k = static_cast<int>(bu.size()) - 1; k >= 0; --k) {
    const auto kind = bu[static_cast<size_t>(k)].kind;
    (kind == Unit::Kind::kHead    ? b_pre
     : kind == Unit::Kind::kLayer ? b_layers
                                  : b_post)
        .push_back(k);
  }
  run_side_units(e, rs, f, f_pre);
  run_side_units(e, rs, b, b_pre);
  for (size_t i = 0; i < std::max(f_layers.size(), b_layers.size()); ++i) {
    if (i < f_layers.size()) start_unit(f, fu, f_layers[i]);
    if (i < b_layers.size()) start_unit(b, bu, b_layers[i]);
    while (f.more() || b.more()) {
      if (f.more()) side_piece(e, rs, f, fu);
      if (b.more()) side_piece(e, rs, b, bu);
    }
  }
  run_side_units(e, rs, f, f_post);
  run_side_units(e, rs, b, b_post);

  // The passes' sends, as forward_pass and backward_pass record them.
  rs.chunk_started[static_cast<size_t>(f.op->chunk)] = 1;
  const int s = e.coord.pp, fvs = vstage(f.op->chunk, s), bvs = vstage(b.op->chunk, s);
  auto send = [&](PairSide& side, MsgKey key, int to_stage) {
    SendRec r{key, to_stage, side.deps.pending, side.op->chunk, side.op->mb, side.index};
    if (side.deps.last_compute >= 0) r.deps.push_back(side.deps.last_compute);
    rs.sends.push_back(std::move(r));
  };
  if (fvs < nv_ - 1 && stage_of(fvs + 1) != s)
    send(f, MsgKey{f_start_[vidx(fvs + 1, f.op->mb)], fvs + 1, 0, f.op->mb}, stage_of(fvs + 1));
  if (bvs > 0 && stage_of(bvs - 1) != s)
    send(b, MsgKey{b_start_[vidx(bvs - 1, b.op->mb)], bvs - 1, 1, b.op->mb}, stage_of(bvs - 1));

  // The rank goes on after both: its next compute waits for what either left pending.
  swap_deps(e, f.deps);  // e: the forward's state
  e.pending.insert(e.pending.end(), b.deps.pending.begin(), b.deps.pending.end());
  e.after_next.insert(e.after_next.end(), b.deps.after_next.begin(), b.deps.after_next.end());
  e.host_waits.insert(e.host_waits.end(), b.deps.host_waits.begin(), b.deps.host_waits.end());
  e.pending.insert(e.pending.end(), b.deps.held_comm.begin(), b.deps.held_comm.end());
  e.last_compute = std::max(e.last_compute, b.deps.last_compute);
}

// Starts unit k of a side: its pieces (the forward's first segment in two: body, then its
// all-to-alls).
void Lowerer::start_unit(PairSide& side, const std::vector<Unit>& units, int k) {
  const Unit& u = units[static_cast<size_t>(k)];
  const bool fwd = side.op->kind == PassKind::kF;
  const std::vector<Segment> segs = segments(fwd ? u.ops->fwd : u.ops->bwd_input);
  side.unit = k;
  side.piece = 0;
  side.pieces.clear();
  for (size_t i = 0; i < segs.size(); ++i) {
    if (fwd && i == 0 && segs.size() > 1) {
      side.pieces.emplace_back(segs[0].begin, segs[0].body_end);
      side.pieces.emplace_back(segs[0].body_end, segs[0].end);
    } else {
      side.pieces.emplace_back(segs[i].begin, segs[i].end);
    }
  }
}

// Emits a list of units of one side whole (the embedding, the output layer).
void Lowerer::run_side_units(Emit& e, RankState& rs, PairSide& side,
                             const std::vector<int>& units) {
  const auto& chunk = chunks_[static_cast<size_t>(vstage(side.op->chunk, e.coord.pp))];
  for (int k : units) {
    start_unit(side, chunk, k);
    while (side.more()) side_piece(e, rs, side, chunk);
  }
}

// Emits the next piece of a side's current unit, under that side's dependency state.
void Lowerer::side_piece(Emit& e, RankState& rs, PairSide& side, const std::vector<Unit>& units) {
  const int k = side.unit;
  const Unit& u = units[static_cast<size_t>(k)];
  const int c = side.op->chunk, mb = side.op->mb;
  const size_t piece = side.piece++;
  const auto [from, to] = side.pieces[piece];
  swap_deps(e, side.deps);
  if (side.op->kind == PassKind::kF) {
    if (piece == 0) {
      if (u.act_bytes > 0)
        emit_mem(e, TaskKind::kAlloc, u.act_bytes, act_what(u, mb), Phase::kFwd, u.layer, mb, c);
      if (!rs.chunk_started[static_cast<size_t>(c)]) {
        if (!rs.pg_ready.empty()) {
          const auto& ids = rs.pg_ready[static_cast<size_t>(c)][static_cast<size_t>(k)];
          e.pending.insert(e.pending.end(), ids.begin(), ids.end());
        }
        emit_fp8_weight_cast(e, u, mb, c);
      }
    }
    emit_steps(e, std::span<const Step>(u.ops->fwd).subspan(from, to - from), Phase::kFwd,
               Category::kCompute, "fwd", u, mb, c, 0);
  } else {
    const size_t pieces = side.pieces.size();
    const bool last = !side.more();
    if (last) emit_recompute(e, u, mb, c);
    emit_steps(e, std::span<const Step>(u.ops->bwd_input).subspan(from, to - from),
               Phase::kBwdInput, Category::kCompute, "bwd", u, mb, c, 1);
    // The experts' weight gradients after the experts' input gradients (the segment between
    // the two all-to-all runs), the rest after the layer's.
    const auto& w = u.ops->bwd_weight;
    std::vector<char> done(w.size(), 0);
    if (pieces >= 3 && piece == 1) {
      for (size_t j = 0; j < w.size(); ++j) done[j] = !expert_wgrad(w[j]);
      emit_weight_grads(e, u, mb, c, &done);
    } else if (last) {
      if (pieces >= 3)
        for (size_t j = 0; j < w.size(); ++j) done[j] = expert_wgrad(w[j]);
      emit_weight_grads(e, u, mb, c, &done);
      finish_unit_grads(e, rs.bucketers[static_cast<size_t>(c)], u, mb, c, k == 0, mb == m_ - 1);
    }
  }
  swap_deps(e, side.deps);
}

}  // namespace stepcast::lowering
