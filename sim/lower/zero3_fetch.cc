// Lowering (lowering.h): ZeRO-3 parameter fetches at submodule granularity, as DeepSpeed
// stage 3 runs them (framework zero3_gather: submodule; sim/plan/framework.h).
//
// DeepSpeed (deepspeed/runtime/zero/partitioned_param_coordinator.py,
// PartitionedParameterCoordinator.fetch_sub_module; parameter_offload.py) puts hooks on every
// nn.Module: before a module runs, its *direct* parameters are fetched (all-gathered over the
// data-parallel group, all_gather_coalesced on an all-gather stream of its own) and the
// compute stream waits for them; the fetch is released after the module's forward or
// backward. So a transformer block is several fetches, one per Linear (its weight and bias);
// its norms' scales and the biases are each below stage3_param_persistence_threshold (1e5
// elements in the default config) in the models here, so they are persistent: kept gathered,
// not fetched per use, and gathered again after every optimizer step (z3_regather_persistent).
// Here a fetch is a forward GEMM's weight (k x n x batch of its shape); the unit's other
// parameters that are not persistent are one fetch at its start.
//  - Prefetch (stage3_prefetch_bucket_size, 5e7 elements): once a fetch has been waited for,
//    the next ones in trace order not yet in flight are issued while the elements issued so
//    far stay below the bucket, so at least one: with weights of 1.5e8-6e8 elements (GPT-3
//    175B) exactly one fetch ahead. Only with overlap.param_gather (else each fetch is issued
//    when reached).
//  - The host records an event per fetch waited for and blocks on the oldest when more than
//    __max_ongoing_fetch_events (2) are outstanding, so it issues fetch i's prefetch only once
//    the compute stream has reached fetch i-2: the all-gathers issued at use i depend on the
//    compute task before use i-2 (and on that fetch).
//  - Backward: the pre-backward hook fetches again. Under full recompute the checkpoint's
//    recomputed forward re-enters the modules' forward hooks, so each is fetched for it; a
//    fetch is then kept for its backward only when the parameters used in between (the
//    later modules' recompute and backward) sum to at most stage3_max_reuse_distance (1e9
//    elements), else released and fetched again (for GPT-3 175B only the last Linear, fc2,
//    is kept). Without full recompute every backward use is fetched again.
//  - The wait rebuilds each fetched parameter by a torch.cat of its dp slices on the compute
//    stream (framework zero3_copies: deepspeed; zero3_gather_copy below), so the module's
//    first kernel follows that copy and the prefetch is issued after it.
// Expert (MoE) parameters are not split per submodule: a MoE unit is fetched as one block.
// Gradients are reduce-scattered per unit as for the block presets (data_parallel.cc).
#include <fmt/format.h>

#include "sim/lower/lowering.h"

namespace stepcast::lowering {

bool Lowerer::z3_submodule() const {
  return par_.zero == 3 && sc_.framework.zero3_gather == GatherUnit::kSubmodule;
}

std::vector<Lowerer::Z3Fetch> Lowerer::z3_fetches(const Unit& u) const {
  std::vector<Z3Fetch> out;
  if (dense_dp_size() <= 1) return out;
  if (u.expert_params > 0) {  // a MoE unit: one block fetch
    out.push_back(Z3Fetch{u.dense_params, ""});
    return out;
  }
  double weights = 0;
  for (const Step& st : u.ops->fwd) {
    if (st.is_comm || st.op.kind != OpKind::kGemm) continue;
    const double w = static_cast<double>(st.op.gemm.k) * static_cast<double>(st.op.gemm.n) *
                     static_cast<double>(st.op.gemm.batch);
    if (weights + w > u.dense_params) break;  // not a weight GEMM of this unit's parameters
    weights += w;
    out.push_back(Z3Fetch{w, st.op.name});
  }
  double persistent = 0;
  for (double v : z3_persistent(u)) persistent += v;
  // Half an element: what the sums of the same tensors in another order may differ by.
  const double rest = u.dense_params - weights - persistent;
  if (rest > 0.5) out.insert(out.begin(), Z3Fetch{rest, ""});
  return out;
}

std::vector<double> Lowerer::z3_persistent(const Unit& u) const {
  std::vector<double> out;
  const double limit = sc_.framework.zero3_persistence_elements;
  if (!z3_submodule() || limit <= 0 || u.expert_params > 0 || u.ops == nullptr) return out;
  for (double v : u.ops->vectors)
    if (v <= limit) out.push_back(v);
  return out;
}

// DeepSpeed's optimizer updates only each rank's shard of a persistent parameter, so after
// the step every one is gathered again (stage3.py DeepSpeedZeroOptimizer_Stage3._post_step:
// persistent_parameters[0].all_gather(persistent_parameters)). That is the blocking path of
// partition_parameters.py _all_gather -> _allgather_params_coalesced: one async all-gather
// per parameter, issued back to back on the current stream, the last handle waited for and
// the device synchronized ("guarantee the communication to be completed"). Under
// list_collectives each is the list form, with its narrow views and per-rank copies.
std::vector<int> Lowerer::z3_regather_persistent(Emit& e, int after) {
  std::vector<int> out;
  if (!z3_submodule() || dense_dp_size() <= 1) return out;
  const bool list = sc_.framework.list_collectives;
  int last = -1;
  for (int c = 0; c < v_; ++c)
    for (const Unit& u : chunks_[static_cast<size_t>(vstage(c, e.coord.pp))]) {
      const std::vector<double> vs = z3_persistent(u);
      for (size_t i = 0; i < vs.size(); ++i) {
        const double bytes = vs[i] * act_elem_bytes_;
        const std::string op = fmt::format("persist{}", i);
        std::vector<int> deps{after};
        if (last >= 0) deps.push_back(last);  // issued in order by the one host thread
        const int ag =
            emit_collective(e, CollOp::kAllGather, dense_dp_kind(), StreamKind::kDp,
                            Category::kDpComm, bytes, act_dtype_, Phase::kOptimizer,
                            label_of("ag", u.name, op, -1), u.layer, -1, c, std::move(deps));
        if (list) e.rp.tasks.mut(static_cast<size_t>(ag)).host_ops = dense_dp_size();
        last = list ? emit_list_copy(e, bytes, dense_dp_size(), Phase::kOptimizer,
                                     label_of("agcopy", u.name, op, -1), u.layer, -1, c, {ag})
                    : ag;
      }
    }
  if (last < 0) return out;
  // The device synchronize the host waits on before the next step.
  out.push_back(z3_device_sync(e, Phase::kOptimizer, -1, -1, -1, "sync.persistent", last));
  return out;
}

int Lowerer::z3_device_sync(Emit& e, Phase phase, int layer, int mb, int c, std::string label,
                            int dep) {
  Task t = base_task(TaskKind::kMemoryBound, StreamKind::kCompute, phase, Category::kDpComm, layer,
                     mb, c);
  t.what = "device_sync";
  t.label = std::move(label);
  t.launches = 0;
  t.host_sync = true;
  t.deps = {dep};
  return add(e, std::move(t));
}

Lowerer::Z3Pass Lowerer::z3_plan(const std::vector<Unit>& units, bool backward) const {
  Z3Pass zp;
  const int n = static_cast<int>(units.size());
  const bool full = par_.recompute == Recompute::kFull;
  const double reuse = sc_.framework.zero3_reuse_distance_elements;
  for (int i = 0; i < n; ++i) {
    const Unit& u = units[static_cast<size_t>(backward ? n - 1 - i : i)];
    const std::vector<Z3Fetch> fetches = z3_fetches(u);
    if (!backward) {
      for (const Z3Fetch& f : fetches) zp.uses.push_back(Z3Use{&u, f, false, true, {}, false, ""});
      continue;
    }
    const bool recomputed = full && u.kind == Unit::Kind::kLayer;
    // kept[j]: a recompute fetch held for the backward (the reuse distance rule).
    std::vector<char> kept(fetches.size(), 0);
    if (recomputed) {
      // The unit-start fetch (norms and biases when not persistent) is kept to the end.
      double later = 0;  // elements of the fetches after j
      for (size_t j = fetches.size(); j-- > 0;) {
        kept[j] = reuse < 0 || 2 * later <= reuse;
        later += fetches[j].elements;
      }
      if (!fetches.empty() && fetches[0].op.empty()) kept[0] = 1;
      for (size_t j = 0; j < fetches.size(); ++j)
        zp.uses.push_back(Z3Use{&u, fetches[j], true, !kept[j], {}, false, ""});
    }
    // Backward uses in the backward's order: the unit-start fetch first, then the GEMMs'
    // in reverse.
    if (!fetches.empty() && fetches[0].op.empty() && !kept[0])
      zp.uses.push_back(Z3Use{&u, fetches[0], false, false, {}, false, ""});
    for (size_t j = fetches.size(); j-- > 0;)
      if (!fetches[j].op.empty() && !kept[j])
        zp.uses.push_back(Z3Use{&u, fetches[j], false, false, {}, false, ""});
  }
  return zp;
}

void Lowerer::z3_issue(Emit& e, Z3Pass& zp, size_t i, int mb, int c, Phase phase) {
  Z3Use& use = zp.uses[i];
  if (use.issued) return;
  use.issued = true;
  std::vector<int> deps;
  const size_t limit = static_cast<size_t>(sc_.framework.zero3_max_inflight_fetches);
  // The use being reached (its hook issues this fetch): the last one z3_reach recorded.
  const size_t at = zp.before.empty() ? 0 : zp.before.size() - 1;
  if (limit > 0 && !zp.before.empty() && at >= limit) {
    // The host blocked on the event of the fetch `limit` uses back.
    const size_t j = at - limit;
    if (zp.before[j] >= 0) deps.push_back(zp.before[j]);
    deps.insert(deps.end(), zp.uses[j].ids.begin(), zp.uses[j].ids.end());
  } else if (e.last_compute >= 0) {
    deps.push_back(e.last_compute);
  }
  // The host launches the gather after its last device synchronize has returned.
  if (zp.last_sync >= 0) deps.push_back(zp.last_sync);
  const Unit& u = *use.u;
  const char* tag = use.recompute ? "r" : phase == Phase::kFwd ? "f" : "b";
  const std::string op = fmt::format("{}.{}", tag, use.f.op.empty() ? "unit" : use.f.op);
  use.what = make_label("zp", u.name, op, mb);
  emit_mem(e, TaskKind::kAlloc, use.f.elements * act_elem_bytes_, use.what, phase, u.layer, mb, c,
           StreamKind::kDp, deps);
  const double bytes = use.f.elements * act_elem_bytes_;
  const int ag = emit_collective(e, CollOp::kAllGather, dense_dp_kind(), StreamKind::kDp,
                                 Category::kDpComm, bytes, act_dtype_, phase,
                                 label_of("ag", u.name, op, mb), u.layer, mb, c, std::move(deps));
  // The list form's output list, one narrow view of the gathered buffer per rank built in a
  // Python loop before the call (_allgather_params_coalesced): host time, no kernel.
  if (sc_.framework.list_collectives)
    e.rp.tasks.mut(static_cast<size_t>(ag)).host_ops = dense_dp_size();
  use.ids.push_back(sc_.framework.list_collectives
                        ? emit_list_copy(e, bytes, dense_dp_size(), phase,
                                         label_of("agcopy", u.name, op, mb), u.layer, mb, c, {ag})
                        : ag);
}

int Lowerer::emit_list_copy(Emit& e, double bytes, int ranks, Phase phase, std::string label,
                            int layer, int mb, int c, std::vector<int> deps) {
  Task t =
      base_task(TaskKind::kMemoryBound, StreamKind::kDp, phase, Category::kDpComm, layer, mb, c);
  t.what = "list_copy";
  t.label = std::move(label);
  t.bytes_read = bytes;
  t.bytes_written = bytes;
  t.launches = ranks;  // one copy_ per rank's tensor
  t.deps = std::move(deps);
  return add(e, std::move(t));
}

void Lowerer::zero3_gather_copy(Emit& e, const Unit& u, double bytes, const std::string& op, int mb,
                                int c, Phase phase) {
  const Zero3Copies rule = sc_.framework.zero3_copies;
  if (rule == Zero3Copies::kNone || bytes <= 0) return;
  Op copy;
  copy.kind = OpKind::kMemoryBound;
  copy.bytes_read = bytes;
  copy.bytes_written = bytes;
  if (rule == Zero3Copies::kDeepSpeed) {
    // torch.cat of the dp slices: one kernel per 128 inputs (Shape.cu CAT_ARRAY_BATCH_SIZE).
    copy.name = "z3_cat";
    copy.launches = (dense_dp_size() + 127) / 128;
  } else {
    copy.name = "z3_copy_out";  // split_with_sizes_copy: one kernel
  }
  // A compute task that waits for the fetch (e.pending); what waits for the module's kernel
  // after next (Emit::after_next) still does, the copy not counting as one of its kernels.
  std::vector<int> after_next;
  after_next.swap(e.after_next);
  emit_compute_as(e, copy, phase, Category::kDpComm, label_of("z3copy", u.name, op, mb), u, mb, c);
  e.after_next.swap(after_next);
}

std::vector<int> Lowerer::zero3_reduce_copy(Emit& e, const Unit& u, double bytes, bool expert,
                                            int mb, int c, std::vector<int> deps) {
  const Zero3Copies rule = sc_.framework.zero3_copies;
  if (rule == Zero3Copies::kNone || bytes <= 0) return deps;
  const std::string label = label_of(expert ? "rsxprep" : "rsprep", u.name, "g", mb);
  if (rule == Zero3Copies::kFsdp2) {
    // foreach_reduce's chunk-cat into the reduce-scatter input, on the compute stream.
    Op copy;
    copy.kind = OpKind::kMemoryBound;
    copy.name = "z3_chunk_cat";
    copy.bytes_read = bytes;
    copy.bytes_written = bytes;
    return {emit_compute_as(e, copy, Phase::kBwdWeight, Category::kDpComm, label, u, mb, c)};
  }
  // DeepSpeed: the gradients copied into the flat reduce bucket, interleaved per rank by a
  // torch.cat and divided by dp in place, each a full read and write, on the reduce stream.
  Task t = base_task(TaskKind::kMemoryBound, StreamKind::kDp, Phase::kBwdWeight, Category::kDpComm,
                     u.layer, mb, c);
  t.what = "z3_bucket_cat_div";
  t.label = label;
  t.bytes_read = 3 * bytes;
  t.bytes_written = 3 * bytes;
  t.launches = 3;
  t.deps = std::move(deps);
  return {add(e, std::move(t))};
}

// Reaches the next use, which must be (u, op): issues it if not yet, makes the next compute
// wait for it, and prefetches.
void Lowerer::z3_reach(Emit& e, Z3Pass& zp, const Unit& u, const std::string& op, int mb, int c,
                       Phase phase) {
  const size_t i = zp.reached;
  STEPCAST_CHECK(i < zp.uses.size() && zp.uses[i].u == &u && zp.uses[i].f.op == op,
                 "ZeRO-3 fetch out of order at " + u.name + " " + op);
  zp.before.push_back(e.last_compute);
  z3_issue(e, zp, i, mb, c, phase);
  if (sc_.framework.zero3_fetch_sync && !zp.uses[i].ids.empty()) {
    // Waiting for the fetch synchronizes the device (zero3_fetch_sync): the host waits for
    // it before it goes on (prefetching, launching the module).
    std::string label = zp.uses[i].what;
    label.replace(0, 2, "sync");  // "zp.<unit>..." -> "sync.<unit>..."
    zp.last_sync =
        z3_device_sync(e, phase, u.layer, mb, c, std::move(label), zp.uses[i].ids.back());
  }
  ++zp.reached;
  e.pending.insert(e.pending.end(), zp.uses[i].ids.begin(), zp.uses[i].ids.end());
  if (!zp.uses[i].ids.empty()) {
    const char* tag = zp.uses[i].recompute ? "r" : phase == Phase::kFwd ? "f" : "b";
    zero3_gather_copy(e, u, zp.uses[i].f.elements * act_elem_bytes_,
                      fmt::format("{}.{}", tag, op.empty() ? "unit" : op), mb, c, phase);
  }
  if (!zp.uses[i].release) zp.held.push_back(i);
  if (!par_.overlap_param_gather) return;
  double ahead = 0;
  zp.considered = std::max(zp.considered, i + 1);
  while (zp.considered < zp.uses.size() && ahead < sc_.framework.zero3_prefetch_elements) {
    const size_t j = zp.considered++;
    if (zp.uses[j].issued) continue;
    z3_issue(e, zp, j, mb, c, phase);
    ahead += zp.uses[j].f.elements;
  }
}

void Lowerer::z3_emit_steps(Emit& e, Z3Pass& zp, const std::vector<Step>& steps, Phase phase,
                            Category cat, const char* prefix, const Unit& u, int mb, int c,
                            int pass) {
  auto next_is = [&](const std::string& op) {
    return zp.reached < zp.uses.size() && zp.uses[zp.reached].u == &u &&
           zp.uses[zp.reached].f.op == op;
  };
  if (next_is("")) z3_reach(e, zp, u, "", mb, c, phase);
  const size_t unit_start = zp.reached == 0 ? 0 : zp.reached - 1;
  for (const Step& st : steps) {
    const bool gemm = !st.is_comm && st.op.kind == OpKind::kGemm;
    const bool fetch = gemm && next_is(st.op.name);
    if (fetch) z3_reach(e, zp, u, st.op.name, mb, c, phase);
    emit_steps(e, std::vector<Step>{st}, phase, cat, prefix, u, mb, c, pass);
    if (fetch && zp.uses[zp.reached - 1].release && phase != Phase::kBwdInput)
      emit_mem(e, TaskKind::kFree, zp.uses[zp.reached - 1].f.elements * act_elem_bytes_,
               zp.uses[zp.reached - 1].what, phase, u.layer, mb, c);
  }
  // The unit-start fetch of a forward is released after the unit.
  if (phase == Phase::kFwd && unit_start < zp.reached && zp.uses[unit_start].u == &u &&
      zp.uses[unit_start].f.op.empty())
    emit_mem(e, TaskKind::kFree, zp.uses[unit_start].f.elements * act_elem_bytes_,
             zp.uses[unit_start].what, phase, u.layer, mb, c);
}

void Lowerer::z3_backward_start(Emit& e, Z3Pass& zp, const Unit& u, int mb, int c) {
  if (par_.recompute == Recompute::kFull && u.kind == Unit::Kind::kLayer) {
    // emit_recompute's full branch, with the fetches reached before their GEMMs.
    emit_mem(e, TaskKind::kAlloc, u.act_full_bytes - u.act_bytes, rc_what(u, mb), Phase::kRecompute,
             u.layer, mb, c);
    z3_emit_steps(e, zp, u.ops->fwd, Phase::kRecompute, Category::kRecompute, "rc", u, mb, c, 2);
  } else {
    emit_recompute(e, u, mb, c);
  }
  if (te_order_ || split_w_)  // the backward's fetches at the unit's start
    while (zp.reached < zp.uses.size() && zp.uses[zp.reached].u == &u)
      z3_reach(e, zp, u, zp.uses[zp.reached].f.op, mb, c, Phase::kBwdInput);
}

// Backward uses and the recompute's kept fetches are held until the unit's backward ends
// (its weight gradients use them too).
void Lowerer::z3_free_held(Emit& e, Z3Pass& zp, const Unit& u, int mb, int c, Phase phase) {
  std::vector<size_t> rest;
  for (size_t i : zp.held) {
    const Z3Use& use = zp.uses[i];
    if (use.u != &u) {
      rest.push_back(i);
      continue;
    }
    emit_mem(e, TaskKind::kFree, use.f.elements * act_elem_bytes_, use.what, phase, u.layer, mb, c);
  }
  zp.held.swap(rest);
}

}  // namespace stepcast::lowering
