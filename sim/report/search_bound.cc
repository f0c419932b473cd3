// The search's closed-form step bound (search_bound.h): per stage, the compute-stream kernel
// costs of one step plus the pipeline's fill, from the model's per-layer ops and the cost
// model, memoised by shape, without lowering the plan.
#include "sim/report/search_bound.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/error.h"
#include "model/memory.h"
#include "model/workload.h"
#include "sim/cost/cost.h"
#include "sim/cost/coster.h"
#include "sim/lower/lower.h"
#include "sim/lower/schedule.h"
#include "sim/plan/layout.h"

namespace stepcast {

namespace {

// An op's cost as the lowering's compute task has it (sim/lower/emit.cc, emit_compute; the
// engine's duration, sim/cost/coster.cc: task_ns(compute_time_s)).
TimeNs op_ns(const Op& op, const HwProfile& hw) {
  Task t;
  t.kind = op.kind == OpKind::kGemm        ? TaskKind::kGemm
           : op.kind == OpKind::kAttention ? TaskKind::kAttention
                                           : TaskKind::kMemoryBound;
  t.stream = StreamKind::kCompute;
  if (op.kind == OpKind::kGemm) t.gemm = op.gemm;
  if (op.kind == OpKind::kAttention) t.attn = op.attn;
  if (op.kind == OpKind::kMemoryBound) t.what = op.name;
  t.flops = op.flops;
  t.launches = op.launches;
  t.bytes_read = op.bytes_read;
  t.bytes_written = op.bytes_written;
  return task_ns(compute_time_s(t, hw), t);
}

// The compute tasks of one pass over `steps` (pass 0 forward, 1 backward, 2 recompute), as
// emit_steps emits them: communication points are not compute; attention under ring context
// parallelism is cp blocks (sim/lower/context_parallel.cc: the own block causal, then
// cp - 1 blocks of sl x sl/2), under all-gather context parallelism the one op.
TimeNs steps_ns(const std::vector<Step>& steps, int pass, bool selective_only,
                const ModelArch& arch, const ShardSpec& shard, CpKind cp_kind,
                const HwProfile& hw) {
  TimeNs sum = 0;
  for (const Step& st : steps) {
    if (st.is_comm || (selective_only && !st.recompute_selective)) continue;
    if (st.op.kind == OpKind::kAttention && shard.cp > 1 && cp_kind == CpKind::kRing) {
      const std::int64_t sl = shard.seq_len / shard.cp;
      for (int j = 0; j < shard.cp; ++j)
        sum += op_ns(j == 0 ? attention_op(arch, shard, sl, sl, true, pass == 1)
                            : attention_op(arch, shard, sl, sl / 2, false, pass == 1),
                     hw);
    } else {
      sum += op_ns(st.op, hw);
    }
  }
  return sum;
}

// The first layer of the wanted kind (layer_ops depends on the layer only through
// is_moe_layer and windowed_layer, model/workload.h); -1 when the model has none.
int first_layer(const ModelArch& arch, bool moe, bool windowed) {
  for (int l = 0; l < arch.layers; ++l)
    if (arch.is_moe_layer(l) == moe && arch.windowed_layer(l) == windowed) return l;
  return -1;
}

using UnitKind = StepBound::UnitKind;

UnitKind layer_kind(bool moe, bool windowed) {
  if (windowed) return moe ? UnitKind::kWindowedMoe : UnitKind::kWindowedDense;
  return moe ? UnitKind::kMoeLayer : UnitKind::kDenseLayer;
}

bool is_layer(UnitKind k) { return k != UnitKind::kEmbed && k != UnitKind::kHead; }

// A collective's time as the coster has it (sim/cost/coster.cc, task_durations).
TimeNs collective_ns(CollOp op, double bytes, const GroupShape& g, const HwProfile& hw,
                     bool nccl = true) {
  return to_ns(collective_time(op, bytes, g, hw, nccl).time_s);
}

// The communication the compute stream waits for in one pass over `steps` (search_bound.h):
// each run of communication steps between two compute steps. Every collective of a run
// starts after the compute task before it (emit_comm_point: it depends on last_compute) and
// the compute task after it waits for it (`pending`), so the stream is idle between them for
// at least the longest of the run's per-stream sums (a stream runs its collectives one at a
// time; the TP and the EP streams side by side). Counted: the TP collectives when `tp`, as
// emit_comm_point and emit_tp_overlap emit them (the ring all-gather under its GEMM adds
// nothing, the overlapped reduce-scatter its last chunk, bytes / tp); the expert-parallel
// ones when `ep` (the dispatcher's all-to-alls, count and notify gathers, all-gather and
// reduce-scatter, DeepEP's kernels costed as DeepEP's). None when a step runs beside the
// communication (the MoE shared experts' overlap), nor a collective that feeds only a
// weight gradient (it runs beside the input-gradient GEMM).
TimeNs comm_waits_ns(const std::vector<Step>& steps, const ParallelSpec& par,
                     const GroupShape& tp_group, const GroupShape& ep_group, const HwProfile& hw,
                     bool tp, bool ep) {
  for (const Step& st : steps)
    if (st.beside_comm) return 0;  // its communication is waited for after the run beside it
  TimeNs sum = 0, run_tp = 0, run_ep = 0;
  auto close_run = [&] {
    sum += std::max(run_tp, run_ep);
    run_tp = run_ep = 0;
  };
  for (const Step& st : steps) {
    if (!st.is_comm) {
      close_run();
      continue;
    }
    const CommPoint& cp = st.comm;
    if (!cp.feeds_wgrad.empty()) continue;
    switch (cp.kind) {
      case CommPointKind::kTpReduce:
      case CommPointKind::kTpGather: {
        if (!tp || par.tp <= 1 || tp_group.ranks <= 1) break;
        CollOp op;
        if (cp.kind == CommPointKind::kTpReduce)
          op = par.sequence_parallel ? CollOp::kReduceScatter : CollOp::kAllReduce;
        else if (par.sequence_parallel)
          op = CollOp::kAllGather;
        else
          break;
        if (par.overlap_tp_comm && cp.gemm_overlap && op != CollOp::kAllReduce) {
          if (op == CollOp::kReduceScatter)
            run_tp += collective_ns(op, cp.bytes / par.tp, tp_group, hw);
        } else {
          run_tp += collective_ns(op, cp.bytes, tp_group, hw);
        }
        break;
      }
      case CommPointKind::kEpDispatch:
      case CommPointKind::kEpCombine:
      case CommPointKind::kEpGather:
      case CommPointKind::kEpScatter: {
        if (!ep || par.ep <= 1 || ep_group.ranks <= 1) break;
        const CollOp op = cp.kind == CommPointKind::kEpGather    ? CollOp::kAllGather
                          : cp.kind == CommPointKind::kEpScatter ? CollOp::kReduceScatter
                                                                 : CollOp::kAllToAll;
        run_ep += collective_ns(op, cp.bytes, ep_group, hw, !cp.ep_kernels);
        break;
      }
    }
  }
  close_run();
  return sum;
}

// Whether a calibrated entry may replace the model for `op` on groups of this shape (then
// the time is not the concave model's, search_bound.h).
bool calibrated_for(CollOp op, const GroupShape& g, const HwProfile& hw) {
  for (const CollectiveCalib& c : hw.collectives.calibrated)
    if (c.op == coll_op_name(op) && c.ranks == g.ranks && c.nodes == g.nodes) return true;
  return false;
}

}  // namespace

StepBound::StepBound(const Scenario& base) : base_(base) {}

size_t StepBound::shapes_costed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return memo_.size();
}

StepBound::UnitCost StepBound::cost_unit(UnitKind kind, const ParallelSpec& par,
                                         const GroupShape& tp_group,
                                         const GroupShape& ep_group) const {
  const ModelArch& arch = base_.model;
  const HwProfile& hw = base_.profile;
  const ShardSpec shard = shard_spec(base_, par);  // as the lowering's
  LayerOps ops;
  if (kind == UnitKind::kEmbed) {
    ops = embedding_ops(arch, shard);
  } else if (kind == UnitKind::kHead) {
    ops = logits_loss_ops(arch, shard);
  } else {
    const bool moe = kind == UnitKind::kMoeLayer || kind == UnitKind::kWindowedMoe;
    const bool windowed = kind == UnitKind::kWindowedDense || kind == UnitKind::kWindowedMoe;
    const int layer = first_layer(arch, moe, windowed);
    STEPCAST_CHECK(layer >= 0, "StepBound: no layer of the kind asked for");
    ops = layer_ops(arch, layer, shard);
  }
  auto pass_ns = [&](const std::vector<Step>& steps, int pass, bool selective) {
    return steps_ns(steps, pass, selective, arch, shard, par.cp_kind, hw);
  };
  UnitCost c;
  c.fwd = pass_ns(ops.fwd, 0, false);
  c.bwd_input = pass_ns(ops.bwd_input, 1, false);
  c.bwd_weight = pass_ns(ops.bwd_weight, 1, false);
  // Recomputation re-runs layers only (sim/lower/passes.cc, emit_recompute).
  if (is_layer(kind)) {
    c.rc_full = pass_ns(ops.fwd, 2, false);
    c.rc_selective = pass_ns(ops.fwd, 2, true);
  }
  if (comm_counted()) {
    c.fwd_comm = comm_waits_ns(ops.fwd, par, tp_group, ep_group, hw, true, false);
    // Recomputation passes add their own waits; left out (they only add).
    c.ep_comm = comm_waits_ns(ops.fwd, par, tp_group, ep_group, hw, true, true) - c.fwd_comm +
                comm_waits_ns(ops.bwd_input, par, tp_group, ep_group, hw, false, true);
  }
  // Parameters as the lowering's units hold them (lower.cc, build_units / make_aux).
  c.expert_params = is_layer(kind) ? ops.expert_param_count : 0.0;
  c.dense_params = ops.param_count - c.expert_params;
  return c;
}

StepBound::UnitCost StepBound::unit_cost(UnitKind kind, const ParallelSpec& par,
                                         const GroupShape& tp_group, const GroupShape& ep_group) {
  const Key key{
      .kind = static_cast<int>(kind),
      .microbatch = par.microbatch,
      .tp = par.tp,
      .cp = par.cp,
      .ep = par.ep,
      .expert_tp = par.expert_tp,
      .cp_kind = static_cast<int>(par.cp_kind),
      .dispatcher = static_cast<int>(par.moe_dispatcher),
      .sequence_parallel = par.sequence_parallel,
      .overlap_tp_comm = par.overlap_tp_comm,
      .overlap_moe_shared = par.overlap_moe_shared,
      .tp_group = {tp_group.ranks, tp_group.nodes, tp_group.ranks_per_node, tp_group.pods},
      .ep_group = {ep_group.ranks, ep_group.nodes, ep_group.ranks_per_node, ep_group.pods}};
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = memo_.find(key);
  if (it == memo_.end()) it = memo_.emplace(key, cost_unit(kind, par, tp_group, ep_group)).first;
  return it->second;
}

bool StepBound::comm_counted() const { return base_.network != NetworkMode::kFlow; }

GroupShape StepBound::dp_group_shape(const RankLayout& layout, int rank, bool expert) const {
  const ShapeKey key{layout.tp(), layout.cp(),  layout.dp(), layout.pp(),
                     layout.ep(), layout.etp(), rank,        expert};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = dp_shapes_.find(key); it != dp_shapes_.end()) return it->second;
  }
  const GroupShape g = group_shape(expert            ? layout.edp_group(rank)
                                   : layout.cp() > 1 ? layout.dp_cp_group(rank)
                                                     : layout.dp_group(rank),
                                   base_.profile.node.gpus, base_.profile.fabric.pod_gpus);
  std::lock_guard<std::mutex> lock(mutex_);
  dp_shapes_.emplace(key, g);
  return g;
}

TimeNs StepBound::dp_stream_floor(const ParallelSpec& par, int s, double dense,
                                  double expert) const {
  if (!comm_counted()) return 0;
  const HwProfile& hw = base_.profile;
  const RankLayout layout(par.tp, par.cp, par.dp, par.pp, par.ep,
                          expert_tp_of(par.tp, par.ep, par.expert_tp));
  const int rank = layout.rank(0, 0, 0, s);  // the rank a folded program lowers (lower.cc)
  const FrameworkRules& fw = base_.framework;
  const double grad_bytes = dtype_bytes(grad_reduce_dtype(base_.training));
  const double param_bytes = dtype_bytes(activation_dtype(base_.training.dtype));
  // FP8 primary weights (fp8_param_gather): ZeRO 1 and 2 gather the dense fp8 linears'
  // weights at 1 byte (data_parallel.cc); 1 byte for all dense parameters is a floor.
  const bool fp8_gather = fw.fp8_param_gather && fw.te_fp8_storage &&
                          base_.training.dtype == DType::kFp8 && (par.zero == 1 || par.zero == 2);
  const double m = static_cast<double>(base_.training.global_batch / (par.dp * par.microbatch));
  // Gradient reductions and parameter gathers per step, in units of the stage's gradients
  // and parameters (search_bound.h). ZeRO 3 without zero3_reduce_every_microbatch reduces
  // once a step; with either reshard rule off a unit stays gathered between passes for as
  // long as the schedule lets it (passes.cc), so only its first gather of the step is sure.
  const double reduces = par.zero == 3   ? (fw.zero3_reduce_every_microbatch ? m : 1.0)
                         : par.zero == 2 ? m
                                         : 1.0;
  const bool per_unit_z3 = fw.zero3_gather != GatherUnit::kSubmodule;
  const bool reshard_each_pass = fw.zero3_reshard_after_forward && fw.zero3_reshard_after_backward;
  const double gathers = par.zero == 1 || par.zero == 2 ? 1.0
                         : par.zero == 3 && per_unit_z3 ? (reshard_each_pass ? 2.0 * m : 1.0)
                                                        : 0.0;
  const CollOp reduce_op = par.zero >= 1 ? CollOp::kReduceScatter : CollOp::kAllReduce;
  // Float sums of the same bytes in another order may differ in the last bits: a margin.
  constexpr double kMargin = 1 - 1e-9;
  TimeNs floor = 0;
  auto add = [&](CollOp op, double bytes, const GroupShape& g) {
    if (g.ranks <= 1 || !(bytes > 0) || calibrated_for(op, g, hw)) return;
    // Down to the nanosecond below: each bucket's time is rounded to the nearest one.
    floor += static_cast<TimeNs>(
        std::floor(std::min(collective_time(op, bytes * kMargin, g, hw).time_s, 1e9) * 1e9));
  };
  for (const bool x : {false, true}) {
    const double params = x ? expert : dense;
    if (!(params > 0)) continue;
    const GroupShape g = dp_group_shape(layout, rank, x);
    add(reduce_op, reduces * params * grad_bytes, g);
    add(CollOp::kAllGather, gathers * params * (fp8_gather && !x ? 1.0 : param_bytes), g);
  }
  return floor;
}

StepBound::StageFloors StepBound::stage_floors(const ParallelSpec& par) {
  if (!base_.stragglers.empty()) return {};  // a GPU off nominal speed: no bound
  const int p = par.pp, nv = par.pp * par.vpp;
  const bool paired = par.overlap_moe_ep && par.ep > 1;  // as the lowering (lower.cc)
  const ModelArch& arch = base_.model;
  if (p < 1 || nv < 1 || par.dp < 1 || par.microbatch < 1) return {};
  const std::int64_t m = base_.training.global_batch / (par.dp * par.microbatch);
  if (m < 1) return {};
  // Layers per virtual stage (lower.h, virtual_stage_layers).
  std::vector<int> layers = par.pipeline_layers;
  if (layers.empty()) {
    if (arch.layers % nv != 0) return {};
    layers.assign(static_cast<size_t>(nv), arch.layers / nv);
  }
  if (static_cast<int>(layers.size()) != nv) return {};
  try {
    const HwProfile& hw = base_.profile;
    const RankLayout layout(par.tp, par.cp, par.dp, par.pp, par.ep,
                            expert_tp_of(par.tp, par.ep, par.expert_tp));
    std::vector<int> first_layer_of(static_cast<size_t>(nv), 0);  // per virtual stage
    for (int vs = 1; vs < nv; ++vs)
      first_layer_of[static_cast<size_t>(vs)] =
          first_layer_of[static_cast<size_t>(vs - 1)] + layers[static_cast<size_t>(vs - 1)];
    StageFloors out;
    std::array<UnitCost, 6> kinds{};  // by UnitKind, costed when first met
    std::array<bool, 6> costed{};
    std::array<GroupShape, 2> costed_for{GroupShape{0, 0, 0, 0}, GroupShape{0, 0, 0, 0}};
    for (int s = 0; s < p; ++s) {
      // The TP and EP groups of the rank a folded program lowers for stage s.
      const int rank = layout.rank(0, 0, 0, s);
      const GroupShape tp_group =
          group_shape(layout.tp_group(rank), hw.node.gpus, hw.fabric.pod_gpus);
      const GroupShape ep_group =
          par.ep > 1 ? group_shape(layout.ep_group(rank), hw.node.gpus, hw.fabric.pod_gpus)
                     : GroupShape{1, 1, 1, 1};
      if (!(tp_group == costed_for[0]) || !(ep_group == costed_for[1])) costed.fill(false);
      costed_for = {tp_group, ep_group};
      auto cost = [&](UnitKind k) -> const UnitCost& {
        const auto i = static_cast<size_t>(k);
        if (!costed[i]) kinds[i] = unit_cost(k, par, tp_group, ep_group);
        costed[i] = true;
        return kinds[i];
      };
      auto all = [&](const UnitCost& u) {
        const TimeNs rc = par.recompute == Recompute::kFull        ? u.rc_full
                          : par.recompute == Recompute::kSelective ? u.rc_selective
                                                                   : TimeNs{0};
        return u.fwd + u.bwd_input + u.bwd_weight + rc;
      };
      TimeNs work = 0, comm = 0, ep_comm = 0, first = 0, first_comm = 0, last = 0, deferred = 0;
      double dense = 0, expert = 0;
      for (int c = 0; c < par.vpp; ++c) {
        const int vs = virtual_stage(par.schedule, c, s, p);
        int layer = first_layer_of[static_cast<size_t>(vs)];
        auto add = [&](const UnitCost& u, bool head) {
          work += all(u);
          // DualPipeV's overlapped pairs run the other pass's kernels in the gaps; so do the
          // pairs of the MoE all-to-all overlap (sim/lower/moe_overlap.cc) in a MoE layer's.
          if (par.schedule != Schedule::kDualPipeV && !(paired && u.ep_comm > 0)) {
            comm += u.fwd_comm;
            ep_comm += u.ep_comm;
          }
          if (c == 0) {
            first += u.fwd;
            first_comm += u.fwd_comm;
            last += all(u) - u.fwd;
          }
          // Megatron-Core's deferred output-layer weight gradients run after the stage's
          // last backward (emit_output_wgrad_drain): all of them, whatever the limit, is
          // the safe side (step_floor_ns).
          if (head && base_.framework.defer_embedding_wgrad_compute) deferred += u.bwd_weight;
          // The tied output layer on the embedding's stage is held once (build_units).
          double own = u.dense_params;
          if (head && arch.tied_embeddings &&
              stage_of_virtual(par.schedule, 0, p) == stage_of_virtual(par.schedule, nv - 1, p))
            own = std::max(0.0, own - static_cast<double>(arch.vocab) *
                                          static_cast<double>(arch.hidden) / par.tp);
          dense += own;
          expert += u.expert_params;
        };
        if (vs == 0) add(cost(UnitKind::kEmbed), false);
        for (int i = 0; i < layers[static_cast<size_t>(vs)]; ++i, ++layer)
          add(cost(layer_kind(arch.is_moe_layer(layer), arch.windowed_layer(layer))), false);
        if (vs == nv - 1) add(cost(UnitKind::kHead), true);
      }
      out.compute.push_back(m * work);
      out.fwd_comm.push_back(m * comm);
      out.ep_comm.push_back(m * ep_comm);
      out.deferred_wgrad.push_back(m * deferred);
      out.first_forward.push_back(first);
      out.first_forward_comm.push_back(first_comm);
      // Schedules whose last pass on every stage is B(m - 1, chunk 0) (search_bound.h).
      // (ZB-H1 and DualPipeV end on W passes.)
      if (par.schedule != Schedule::kZbH1 && par.schedule != Schedule::kDualPipeV)
        out.last_backward.push_back(last);
      // The optimizer step on the rank's shard (sim/lower/passes.cc, emit_step_end).
      const double local = dense / (par.zero >= 1 ? par.dp * par.cp : 1) +
                           expert / (par.zero >= 1 ? layout.edp() : 1);
      const Op opt =
          optimizer_op(local, {.adam = base_.training.optimizer == Optimizer::kAdam,
                               .grads = grad_reduce_dtype(base_.training),
                               .loss_scaling = base_.training.dtype == DType::kFp16,
                               .fused = base_.framework.fused_optimizer,
                               .fp32_params = par.zero == 3 && base_.framework.zero3_fp32_shards});
      out.optimizer.push_back(op_ns(opt, hw));
      out.dp_comm.push_back(dp_stream_floor(par, s, dense, expert));
    }
    return out;
  } catch (const InputError&) {
    return {};
  } catch (const InvariantError&) {
    return {};
  }
}

TimeNs StepBound::step_floor_ns(const ParallelSpec& par) {
  const StageFloors f = stage_floors(par);
  TimeNs best = 0, head = 0, tail = 0;
  for (size_t s = 0; s < f.compute.size(); ++s) {
    const TimeNs opt = f.optimizer[s];
    // The deferred output-layer weight gradients W (in C(s)) run after the stage's last
    // backward, beside the drain of the stages before it, and the optimizer after them:
    // head + (C - W) + max(tail, W + opt). A W above the stage's true deferred work still
    // bounds the step: the compute stream alone needs C + opt.
    const TimeNs w = f.deferred_wgrad[s];
    best = std::max(
        best, head + f.compute[s] + f.fwd_comm[s] + f.ep_comm[s] - w + std::max(tail, w + opt));
    best = std::max(best, f.dp_comm[s] + opt);  // the optimizer waits for the DP stream
    // Stage s's first forward, with its TP waits, which stage s + 1 waits for; and its last
    // backward.
    head += f.first_forward[s] + f.first_forward_comm[s];
    if (!f.last_backward.empty()) tail += f.last_backward[s];
  }
  return best;
}

std::vector<double> held_activation_floor_bytes(const Scenario& sc) {
  const ModelArch& arch = sc.model;
  const ParallelSpec& par = sc.parallel;
  const DType dt = sc.training.dtype;
  if (arch.moe || !(dt == DType::kBf16 || dt == DType::kFp16 || dt == DType::kFp32)) return {};
  const int p = par.pp, v = par.vpp, nv = p * v;
  const std::int64_t m64 = sc.microbatches();
  if (p < 1 || v < 1 || m64 < 1 || m64 > (1 << 20)) return {};
  const int m = static_cast<int>(m64);
  std::vector<int> layers = par.pipeline_layers;
  if (layers.empty()) {
    if (arch.layers % nv != 0) return {};
    layers.assign(static_cast<size_t>(nv), arch.layers / nv);
  }
  if (static_cast<int>(layers.size()) != nv) return {};
  const ShardSpec shard = shard_spec(sc, par);  // as the lowering's
  // Per virtual stage, one microbatch's saved activations (lower.cc, build_units).
  std::vector<double> per_chunk(static_cast<size_t>(nv), 0.0);
  int layer = 0;
  for (int vs = 0; vs < nv; ++vs) {
    double& b = per_chunk[static_cast<size_t>(vs)];
    for (int i = 0; i < layers[static_cast<size_t>(vs)]; ++i, ++layer)
      b += layer_activation_bytes(arch, layer, shard, par.recompute, shard.flash_attention);
    if (vs == nv - 1) b += head_activation_bytes(arch, shard);  // as the lowering's head
  }
  std::vector<std::vector<PassOp>> orders;
  try {
    orders = pipeline_schedule(par.schedule, p, v, m);
  } catch (const InvariantError&) {
    return {};
  }
  std::vector<double> out;
  for (int s = 0; s < p; ++s) {
    double held = 0;
    for (const PassOp& op : orders[static_cast<size_t>(s)]) {
      if (op.kind != PassKind::kF) break;  // the first backward (or weight pass)
      held += per_chunk[static_cast<size_t>(virtual_stage(par.schedule, op.chunk, s, p))];
    }
    out.push_back(held);
  }
  return out;
}

}  // namespace stepcast
