// The search's closed-form step bound (search_bound.h): per stage, the compute-stream kernel
// costs of one step plus the pipeline's fill, from the model's per-layer ops and the cost
// model, memoised by shape, without lowering the plan.
#include "sim/report/search_bound.h"

#include <algorithm>
#include <vector>

#include "model/error.h"
#include "model/workload.h"
#include "sim/cost/cost.h"
#include "sim/cost/coster.h"

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
// is_moe_layer, model/workload.h); -1 when the model has none.
int first_layer(const ModelArch& arch, bool moe) {
  for (int l = 0; l < arch.layers; ++l)
    if (arch.is_moe_layer(l) == moe) return l;
  return -1;
}

}  // namespace

StepBound::StepBound(const Scenario& base) : base_(base) {}

size_t StepBound::shapes_costed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return memo_.size();
}

StepBound::UnitCost StepBound::cost_unit(UnitKind kind, const ParallelSpec& par) const {
  const ModelArch& arch = base_.model;
  const HwProfile& hw = base_.profile;
  ShardSpec shard;  // as the lowering's (sim/lower/lower.cc, Lowerer::Lowerer)
  shard.microbatch = par.microbatch;
  shard.seq_len = base_.training.seq_len;
  shard.tp = par.tp;
  shard.cp = par.cp;
  shard.ep = par.ep;
  shard.expert_tp = par.expert_tp;
  shard.sequence_parallel = par.sequence_parallel;
  shard.dtype = base_.training.dtype;
  shard.flash_attention = hw.compute.attn_flash;
  LayerOps ops;
  if (kind == UnitKind::kEmbed) {
    ops = embedding_ops(arch, shard);
  } else if (kind == UnitKind::kHead) {
    ops = logits_loss_ops(arch, shard);
  } else {
    const int layer = first_layer(arch, kind == UnitKind::kMoeLayer);
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
  if (kind == UnitKind::kDenseLayer || kind == UnitKind::kMoeLayer) {
    c.rc_full = pass_ns(ops.fwd, 2, false);
    c.rc_selective = pass_ns(ops.fwd, 2, true);
  }
  return c;
}

StepBound::UnitCost StepBound::unit_cost(UnitKind kind, const ParallelSpec& par) {
  const Key key{
      static_cast<int>(kind),        par.microbatch,       par.tp, par.cp, par.ep, par.expert_tp,
      static_cast<int>(par.cp_kind), par.sequence_parallel};
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = memo_.find(key);
  if (it == memo_.end()) it = memo_.emplace(key, cost_unit(kind, par)).first;
  return it->second;
}

StepBound::StageFloors StepBound::stage_floors(const ParallelSpec& par) {
  if (!base_.stragglers.empty()) return {};  // a GPU off nominal speed: no bound
  const int p = par.pp, nv = par.pp * par.vpp;
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
    const UnitCost dense =
        first_layer(arch, false) >= 0 ? unit_cost(UnitKind::kDenseLayer, par) : UnitCost{};
    const UnitCost moe =
        first_layer(arch, true) >= 0 ? unit_cost(UnitKind::kMoeLayer, par) : UnitCost{};
    const UnitCost embed = unit_cost(UnitKind::kEmbed, par);
    const UnitCost head = unit_cost(UnitKind::kHead, par);
    auto all = [&](const UnitCost& u) {
      const TimeNs rc = par.recompute == Recompute::kFull        ? u.rc_full
                        : par.recompute == Recompute::kSelective ? u.rc_selective
                                                                 : TimeNs{0};
      return u.fwd + u.bwd_input + u.bwd_weight + rc;
    };
    // Per virtual stage: its units' forward and backward (one microbatch) and all their
    // compute.
    std::vector<TimeNs> fwd(static_cast<size_t>(nv), 0), work(static_cast<size_t>(nv), 0);
    std::vector<TimeNs> bwd(static_cast<size_t>(nv), 0);
    int layer = 0;
    for (int vs = 0; vs < nv; ++vs) {
      auto add = [&](const UnitCost& u) {
        fwd[static_cast<size_t>(vs)] += u.fwd;
        work[static_cast<size_t>(vs)] += all(u);
        bwd[static_cast<size_t>(vs)] += all(u) - u.fwd;
      };
      if (vs == 0) add(embed);
      for (int i = 0; i < layers[static_cast<size_t>(vs)]; ++i, ++layer)
        add(arch.is_moe_layer(layer) ? moe : dense);
      if (vs == nv - 1) add(head);
    }
    // Schedules whose last pass on every stage is B(m - 1, chunk 0) (search_bound.h).
    const bool drains = par.schedule != Schedule::kZbH1;
    StageFloors out;
    for (int s = 0; s < p; ++s) {
      TimeNs stage = 0;
      for (int c = 0; c < par.vpp; ++c) stage += work[static_cast<size_t>(c * p + s)];
      out.compute.push_back(m * stage);
      out.first_forward.push_back(fwd[static_cast<size_t>(s)]);
      if (drains) out.last_backward.push_back(bwd[static_cast<size_t>(s)]);
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
    best = std::max(best, head + f.compute[s] + tail);
    head += f.first_forward[s];  // stage s's first forward, which stage s + 1 waits for
    if (!f.last_backward.empty()) tail += f.last_backward[s];  // and its last backward
  }
  return best;
}

}  // namespace stepcast
