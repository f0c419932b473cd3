// A closed-form lower bound of a plan's simulated step, computed without lowering it: the
// search orders its plans by it and simulates only those whose bound can still beat the
// `top`-th best step (explore.h, search_in_chunks). Kernel costs are memoised by shape across
// the plans of one search, so a plan's bound costs a few sums.
//
// The bound, for a plan with pp stages, vpp chunks and m microbatches, is
//   max over stages s of  head(s) + C(s) + tail(s)
// where
//  - C(s) is the sum of the compute-stream kernel costs of stage s in one step: for every
//    microbatch and every unit (embedding, layers, head) of its chunks, the forward, the
//    input- and weight-gradient ops and the recomputation (full: the forward again;
//    selective: the attention core), ring-attention split into its cp steps as the lowering
//    splits it (sim/lower/context_parallel.cc). The lowering emits each of these ops as one
//    compute task of exactly this cost (emit_compute, task_ns(compute_time_s)), on the one
//    compute stream of the rank, which runs one kernel at a time; the engine only ever
//    lengthens a kernel (SM and HBM interference); zeroing the gradients, ZeRO-2's copies
//    and the optimizer are left out (they only add). So stage s's compute stream is busy
//    C(s) at least after its first forward starts, whatever the schedule, ZeRO stage,
//    overlap or bucket size.
//  - head(s) is the sum over the stages j < s of their first forward (microbatch 0, chunk 0):
//    every schedule starts with it, and stage j + 1's first forward waits for the activation
//    stage j sends after its own (the pipeline's fill, the forward part of the bubble
//    (p - 1) / m of Narayanan et al. 2021, Sec. 2.2, that no schedule removes).
//  - tail(s), for the schedules whose last pass on every stage is the backward of the last
//    microbatch, chunk 0 (GPipe, 1F1B, interleaved: sim/lower/schedule.cc), is the sum over
//    the stages j < s of that backward (input and weight gradients, recomputation): stage
//    s's compute ends with it, and stage j's waits for the gradient stage j + 1 sends after
//    its own (the drain, the backward part of the bubble). 0 under ZB-H1, whose weight
//    passes may follow.
// Communication is not counted (any of it may overlap compute). Scenarios with stragglers
// (a GPU faster or slower than nominal) get no bound (0), nor do plans whose ops the model
// cannot shape (the full evaluation reports why).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "model/units.h"
#include "sim/scenario/scenario.h"

namespace stepcast {

class StepBound {
 public:
  // `base`: the scenario whose model, hardware and training settings every plan shares (only
  // `parallel` differs between plans); kept by reference.
  explicit StepBound(const Scenario& base);

  // The lower bound (above) of the simulated step of `base` run with plan `par`; 0 when there
  // is none. Safe to call from several threads.
  TimeNs step_floor_ns(const ParallelSpec& par);

  // The two terms of the bound per pipeline stage s (search_bound.h): compute[s] = C(s), the
  // compute-stream work of one step; first_forward[s], its first forward (microbatch 0,
  // chunk 0), so that head(s) = the sum of first_forward[j] for j < s. Empty when there is
  // no bound.
  // last_backward[s]: its backward of the last microbatch, chunk 0, when the schedule ends
  // every stage with it (tail(s) = the sum of last_backward[j] for j < s); else empty.
  struct StageFloors {
    std::vector<TimeNs> compute, first_forward, last_backward;
  };
  StageFloors stage_floors(const ParallelSpec& par);

  // Distinct unit shapes costed so far (the memo's size).
  size_t shapes_costed() const;

  // Per unit and microbatch, the compute-stream cost of: forward, input gradient, weight
  // gradient, full recompute, selective recompute.
  struct UnitCost {
    TimeNs fwd = 0, bwd_input = 0, bwd_weight = 0, rc_full = 0, rc_selective = 0;
  };
  enum class UnitKind { kEmbed, kDenseLayer, kMoeLayer, kHead };
  // The memoised cost of one unit under `par` (the shard its ops take: microbatch, tp, cp
  // and its kind, ep, expert tp, sequence parallelism).
  UnitCost unit_cost(UnitKind kind, const ParallelSpec& par);

 private:
  using Key = std::tuple<int, std::int64_t, int, int, int, int, int, bool>;
  UnitCost cost_unit(UnitKind kind, const ParallelSpec& par) const;

  const Scenario& base_;
  mutable std::mutex mutex_;
  std::map<Key, UnitCost> memo_;
};

}  // namespace stepcast
