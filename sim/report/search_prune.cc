// The search's pruned pipeline (search_prune.h): predict() giving up early on a plan that
// cannot fit in memory or cannot be among the best, by bounds below the simulated step.
#include "sim/report/search_prune.h"

#include <algorithm>
#include <limits>

#include "model/params.h"
#include "sim/cost/coster.h"
#include "sim/lower/lower.h"
#include "sim/report/pipeline.h"
#include "sim/report/search_bound.h"

namespace stepcast {

namespace {

// A plan reported without simulating it (SearchRunOptions::skip_when_state_exceeds_memory):
// it does not fit, and its memory fields hold a lower bound per stage.
Result unsimulated_result(const Scenario& sc, std::vector<double> per_stage_gib, bool folded) {
  Result r = result_header(sc);
  for (double g : per_stage_gib) r.memory_peak_gib = std::max(r.memory_peak_gib, g);
  r.memory_peak_gib_per_stage = std::move(per_stage_gib);
  r.fits_memory = false;
  r.simulated = false;
  r.folded = folded;
  return r;
}

// The resident state (weights, gradients, optimizer) per pipeline stage in GiB, and
// whether the largest exceeds a GPU's memory.
bool state_exceeds_memory(const Scenario& sc, std::vector<double>& state_per_stage_gib) {
  // The state is known before lowering (training_state_bytes: the same numbers as the
  // program's "weights" / "grads" / "optimizer" allocations, summed in that order).
  const double capacity_gib = sc.profile.gpu.usable_memory_bytes() / kGiB;
  // With the activations each stage holds at its first backward (search_bound.h): a floor
  // too, allocated besides the state. A margin for the order of the sums.
  const std::vector<double> held = held_activation_floor_bytes(sc);
  double state_gib = 0, floor_gib = 0;
  for (const auto& stage : training_state_bytes(sc)) {
    double bytes = 0;
    for (double b : stage) bytes += b;
    const size_t s = state_per_stage_gib.size();
    state_per_stage_gib.push_back(bytes / kGiB);
    state_gib = std::max(state_gib, bytes / kGiB);
    if (s < held.size()) floor_gib = std::max(floor_gib, (bytes + held[s]) * (1 - 1e-9) / kGiB);
  }
  if (state_gib <= capacity_gib && floor_gib > capacity_gib) {
    for (size_t s = 0; s < held.size() && s < state_per_stage_gib.size(); ++s)
      state_per_stage_gib[s] += held[s] * (1 - 1e-9) / kGiB;
    return true;
  }
  return state_gib > capacity_gib;
}

// What the stage-by-stage hook (LowerOptions::stop_after_stage) found.
struct StageBounds {
  std::vector<double> floor;   // memory_floor_bytes per lowered rank
  bool stopped = false;        // a stage cannot fit
  TimeNs stage_bound_ns = -1;  // a stage's step_floor_ns beyond the bound: the plan is pruned
  Durations staged;            // each stage's durations, costed once in the hook
};

// Give up on the plan at the first stage that cannot fit or whose chain of dependent tasks
// alone exceeds the bound (both below), before lowering the rest: stage 0 holds the most
// microbatches in flight, so most plans that cannot fit stop there.
void stop_at_unfit_stage(const Scenario& sc, const SearchRunOptions& opt, const GpuSpeeds& speeds,
                         bool bounded, LowerOptions& lo, StageBounds& sb) {
  const double capacity = sc.profile.gpu.usable_memory_bytes();
  lo.stop_after_stage = [&sc, &opt, &speeds, bounded, capacity, &sb](const Program& so_far) {
    const RankProgram& rp = so_far.ranks.back();
    if (opt.skip_when_state_exceeds_memory) {
      sb.floor.push_back(memory_floor_bytes(rp));
      if (sb.floor.back() > capacity) return sb.stopped = true;
    }
    if (bounded) {
      Program stage;  // the stage alone, costed as in the whole program
      stage.world_size = so_far.world_size;
      stage.folded = so_far.folded;
      stage.gpus_per_node = so_far.gpus_per_node;
      stage.groups = so_far.groups;
      stage.ranks = {rp};
      const Durations d = task_durations(stage, sc.profile, speeds);
      sb.staged.push_back(d[0]);
      const TimeNs ns = step_floor_ns(stage, d);
      if (to_s(ns) > opt.skip_when_compute_exceeds_s) {
        sb.stage_bound_ns = ns;
        return true;
      }
    }
    return false;
  };
}

// A plan that cannot be among the best (SearchRunOptions::skip_when_compute_exceeds_s).
void mark_pruned(const Scenario& sc, TimeNs bound_ns, Prediction& out) {
  out.result = result_header(sc);
  out.result.step_time_s = to_s(bound_ns);

  out.result.simulated = false;
  out.result.pruned = true;
  out.result.folded = out.program.folded;
  out.result.simulated_ranks = static_cast<int>(out.program.ranks.size());
}

Prediction predict_pruned_unlocated(const Scenario& sc, const SearchRunOptions& opt) {
  Prediction out;
  std::vector<double> state_per_stage_gib;
  if (opt.skip_when_state_exceeds_memory && state_exceeds_memory(sc, state_per_stage_gib)) {
    out.result = unsimulated_result(sc, std::move(state_per_stage_gib), opt.folded);
    return out;
  }
  // A slow GPU or link breaks the symmetry folding relies on: every rank is simulated.
  const GpuSpeeds speeds = gpu_speeds(sc);
  LowerOptions lo;
  lo.folded = opt.folded && speeds.empty();  // lower() checks the size of what it holds
  lo.labels = opt.labels;
  const double capacity = sc.profile.gpu.usable_memory_bytes();
  const bool bounded = opt.skip_when_compute_exceeds_s < std::numeric_limits<double>::infinity() &&
                       sc.network != NetworkMode::kFlow;
  StageBounds sb;
  if (lo.folded && (opt.skip_when_state_exceeds_memory || bounded))
    stop_at_unfit_stage(sc, opt, speeds, bounded, lo, sb);
  out.program = lower(sc, lo);
  if (opt.progress) opt.progress(1, 3);
  if (opt.skip_when_state_exceeds_memory) {
    // The compute stream's own allocations bound the simulated peak from below
    // (memory_floor_bytes): a plan that cannot fit by them is not costed or simulated.
    if (!lo.stop_after_stage) sb.floor = memory_floor_bytes(out.program);
    if (!sb.floor.empty() && *std::max_element(sb.floor.begin(), sb.floor.end()) > capacity) {
      // Stages not lowered (the lowering stopped before them) are bounded by their state.
      std::vector<double> per_stage =
          sb.stopped ? state_per_stage_gib
                     : std::vector<double>(static_cast<size_t>(sc.parallel.pp), 0.0);
      for (size_t i = 0; i < sb.floor.size(); ++i) {
        double& slot = per_stage[static_cast<size_t>(out.program.ranks[i].pp_stage)];
        slot = std::max(slot, sb.floor[i] / kGiB);
      }
      out.result = unsimulated_result(sc, std::move(per_stage), out.program.folded);
      out.result.simulated_ranks = static_cast<int>(out.program.ranks.size());
      return out;
    }
  }
  if (sb.stage_bound_ns >= 0) {
    mark_pruned(sc, sb.stage_bound_ns, out);
    return out;
  }
  if (!bounded) {  // no step bound (or network: flow): the plain pipeline
    simulate_and_report(sc, opt, speeds, nullptr, out);
    return out;
  }
  // Folded and bounded: every stage was costed and bounded in the hook already.
  const bool costed = static_cast<bool>(lo.stop_after_stage);
  Durations d = costed ? std::move(sb.staged) : task_durations(out.program, sc.profile, speeds);
  if (!costed) {
    // Each rank's chain of dependent tasks bounds the step from below (SearchRunOptions).
    const TimeNs floor_ns = step_floor_ns(out.program, d);
    if (to_s(floor_ns) > opt.skip_when_compute_exceeds_s) {
      mark_pruned(sc, floor_ns, out);
      return out;
    }
  }
  simulate_and_report(sc, opt, speeds, &d, out);
  return out;
}

}  // namespace

Prediction predict_pruned(const Scenario& sc, const SearchRunOptions& opt) {
  return predict_located(sc, [&] { return predict_pruned_unlocated(sc, opt); });
}

}  // namespace stepcast
