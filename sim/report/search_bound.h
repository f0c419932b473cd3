// A closed-form lower bound of a plan's simulated step, computed without lowering it: the
// search orders its plans by it and simulates only those whose bound can still beat the
// `top`-th best step (explore.h, search_in_chunks). Kernel costs are memoised by shape across
// the plans of one search, so a plan's bound costs a few sums.
//
// The bound, for a plan with pp stages, vpp chunks and m microbatches, is
//   max over stages s of  head(s) + C(s) + max(tail(s), opt(s)),  DP(s) + opt(s)
// where
//  - C(s) is the sum of the compute-stream kernel costs of stage s in one step: for every
//    microbatch and every unit (embedding, layers, head) of its chunks, the forward, the
//    input- and weight-gradient ops and the recomputation (full: the forward again;
//    selective: the attention core), ring-attention split into its cp steps as the lowering
//    splits it (sim/lower/context_parallel.cc). The lowering emits each of these ops as one
//    compute task of exactly this cost (emit_compute, task_ns(compute_time_s)), on the one
//    compute stream of the rank, which runs one kernel at a time; the engine only ever
//    lengthens a kernel (SM and HBM interference); zeroing the gradients, ZeRO-2's copies,
//    ZeRO-3's copies (FSDP2, DeepSpeed), TE's fp8 weight casts, the gradient buckets' NaN
//    checks and the optimizer are left out (they only add). So stage s's
//    compute stream is busy C(s) at least after its first forward starts, whatever the schedule,
//    ZeRO stage, overlap or bucket size.
//  - head(s) is the sum over the stages j < s of their first forward (microbatch 0, chunk 0):
//    every schedule starts with it, and stage j + 1's first forward waits for the activation
//    stage j sends after its own (the pipeline's fill, the forward part of the bubble
//    (p - 1) / m of Narayanan et al. 2021, Sec. 2.2, that no schedule removes).
//  - tail(s), for the schedules whose last pass on every stage is the backward of the last
//    microbatch, chunk 0 (GPipe, 1F1B, interleaved: sim/lower/schedule.cc), is the sum over
//    the stages j < s of that backward (input and weight gradients, recomputation): stage
//    s's compute ends with it, and stage j's waits for the gradient stage j + 1 sends after
//    its own (the drain, the backward part of the bubble). 0 under ZB-H1 and DualPipeV,
//    whose weight passes may follow.
// Communication that cannot overlap is counted in three ways (none with network: flow,
// where communication runs as flows and takes other times):
//  - In every forward, a tensor-parallel collective the lowering emits behind a compute task
//    and before the next one waits for it (sim/lower/tensor_parallel.cc, emit_comm_point:
//    it depends on the last compute task and goes into `pending`, which the next compute
//    task waits for) separates those two kernels by at least its duration, so the compute
//    stream's span grows by it: all of them without TP overlap; with it, the last chunk of
//    each reduce-scatter (emit_tp_overlap: bytes / tp after the GEMM). Costed as the coster
//    costs them (same op, bytes, group shape), counted in C(s) and in the first forward of
//    head(s). Collectives that feed only a weight gradient and units with steps beside their
//    communication (MoE shared experts) add nothing; nor, in C(s), do DualPipeV's, whose
//    forwards run interleaved with another microbatch's backward, which fills the gaps
//    (sim/lower/moe_overlap.cc).
//  - Likewise the expert-parallel collectives of a MoE layer, forward and backward: the
//    dispatcher's all-to-alls (or all-gather and reduce-scatter), its count gathers, DeepEP's
//    notify, dispatch and combine (costed as DeepEP's kernels), each emitted behind the last
//    compute task and waited for by the next one, in the backward after the weight gradient
//    before it (emit_backward_te_order). A run of collectives between two kernels counts its
//    longest per-stream sum: the EP and TP streams run side by side. Counted in C(s) only,
//    and not under DualPipeV nor, in MoE layers, under the all-to-all overlap
//    (overlap.moe_ep_comm), whose paired passes fill the gaps.
//  - The data-parallel stream of stage s runs its collectives one at a time, so the step
//    is at least their sum. Per kind of collective and group (dense over dp (x cp), experts
//    over the expert-dp group) the bytes it moves in a step are known without lowering
//    (data_parallel.cc): ZeRO 0 all-reduces the gradients G once, ZeRO 1 reduce-scatters
//    them once, ZeRO 2 and 3 in every one of the m microbatches (ZeRO 3 once without
//    zero3_reduce_every_microbatch); ZeRO 1 and 2 all-gather the parameters P once (the
//    dense ones at 1 byte a parameter at least with fp8_param_gather), ZeRO 3 (per unit,
//    not DeepSpeed's per-submodule fetches) in every forward and every backward, 2 m P, or
//    with either zero3_reshard rule off once (a unit is kept gathered between passes as
//    long as the schedule lets it: only its first gather is sure). A collective's modelled time is
//    the cheapest of affine functions of the bytes with positive latency (sim/cost/collective.cc),
//    a concave function f with f(0) > 0, so f(a) + f(b) >= f(a + b) + f(0): however the lowering
//    cuts those bytes into buckets, their times add up to at least f(all bytes). Groups whose op
//    has a calibrated entry (measured, not affine in the bytes) add nothing. The optimizer step
//    waits for every gradient collective, so the bound of stage s is at least this sum plus the
//    step.
//  - The optimizer step (optimizer_op on the rank's shard) runs on the compute stream after
//    the stage's last backward, beside the drain: head(s) + C(s) + max(tail(s), opt(s)).
//    When Megatron-Core defers the output layer's weight gradients (W(s) of C(s), on the
//    last stage) they too run after that backward, beside the drain, and the optimizer
//    after them: head(s) + C(s) - W(s) + max(tail(s), W(s) + opt(s)).
// The rest of the communication is not counted (any of it may overlap compute). Scenarios
// with stragglers (a GPU faster or slower than nominal) get no bound (0), nor do plans whose
// ops the model cannot shape (the full evaluation reports why).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "model/units.h"
#include "sim/cost/cost.h"
#include "sim/plan/layout.h"
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
  // The communication terms (above), per stage: fwd_comm[s], the TP collectives between
  // the compute kernels of its forwards in one step (added to C(s)); first_forward_comm[s],
  // those of its first forward (added to its first forward in head(s)); dp_comm[s], the
  // floor of its data-parallel stream; optimizer[s], its optimizer step. All 0 under
  // network: flow.
  // ep_comm[s]: the expert-parallel collectives its compute stream waits for in one step,
  // forward and backward, beyond the TP waits (added to C(s); none under DualPipeV, nor in a
  // MoE layer under the all-to-all overlap, whose paired passes fill the gaps).
  // deferred_wgrad[s]: the output layer's weight gradients in C(s) when Megatron-Core defers
  // them to after the stage's last backward (defer_embedding_wgrad_compute), else 0.
  struct StageFloors {
    std::vector<TimeNs> compute, first_forward, last_backward;
    std::vector<TimeNs> fwd_comm, ep_comm, first_forward_comm, dp_comm, optimizer;
    std::vector<TimeNs> deferred_wgrad;
  };
  StageFloors stage_floors(const ParallelSpec& par);

  // Distinct unit shapes costed so far (the memo's size).
  size_t shapes_costed() const;

  // Per unit and microbatch, the compute-stream cost of: forward, input gradient, weight
  // gradient, full recompute, selective recompute; the TP collectives its forward's compute
  // waits for (above); its dense and expert parameters on a rank (LayerOps::param_count).
  // ep_comm: the expert-parallel waits of its forward (beyond fwd_comm, in the same runs)
  // and of its input-gradient pass.
  struct UnitCost {
    TimeNs fwd = 0, bwd_input = 0, bwd_weight = 0, rc_full = 0, rc_selective = 0;
    TimeNs fwd_comm = 0, ep_comm = 0;
    double dense_params = 0, expert_params = 0;
  };
  // Layers by kind as the lowering shapes them (layer_ops depends on the layer only through
  // is_moe_layer and windowed_layer).
  enum class UnitKind { kEmbed, kDenseLayer, kMoeLayer, kHead, kWindowedDense, kWindowedMoe };
  // The memoised cost of one unit under `par` (the shard its ops take: microbatch, tp, cp
  // and its kind, ep, expert tp, sequence parallelism, the MoE dispatcher and shared-expert
  // overlap; the TP overlap), its TP collectives on a group of shape `tp_group` (fwd_comm 0
  // without one), its expert-parallel ones on `ep_group` (ep_comm 0 without one).
  UnitCost unit_cost(UnitKind kind, const ParallelSpec& par, const GroupShape& tp_group = {},
                     const GroupShape& ep_group = {});

 private:
  struct Key {
    int kind;
    std::int64_t microbatch;
    int tp, cp, ep, expert_tp, cp_kind, dispatcher;
    bool sequence_parallel, overlap_tp_comm, overlap_moe_shared;
    std::array<int, 4> tp_group, ep_group;
    auto operator<=>(const Key&) const = default;
  };
  UnitCost cost_unit(UnitKind kind, const ParallelSpec& par, const GroupShape& tp_group,
                     const GroupShape& ep_group) const;
  // The floor of stage s's data-parallel stream (above) for a stage holding `dense` and
  // `expert` parameters per rank.
  TimeNs dp_stream_floor(const ParallelSpec& par, int s, double dense, double expert) const;
  // Whether communication is costed at all (not network: flow).
  bool comm_counted() const;
  // The shape of `rank`'s dense (dp, or dp x cp) or expert-dp group, memoised by layout.
  using ShapeKey = std::tuple<int, int, int, int, int, int, int, bool>;
  GroupShape dp_group_shape(const RankLayout& layout, int rank, bool expert) const;

  const Scenario& base_;
  mutable std::mutex mutex_;
  std::map<Key, UnitCost> memo_;
  mutable std::map<ShapeKey, GroupShape> dp_shapes_;
};

// A floor of the activations each pipeline stage of `sc` holds, per stage in bytes, without
// lowering it: when its first backward starts, a stage has allocated the activations of
// every forward its schedule runs before that backward (pipeline_schedule, sim/lower/
// schedule.h: 1F1B's p - s warm-up and steady forwards, the interleaved warm-up of every
// chunk) and freed none of them (the lowering frees a unit's activations in its backward,
// passes.cc), each unit's as the lowering sizes it (layer_activation_bytes under the plan's
// recompute, the loss's saved softmax or logits, head_activation_bytes; the embedding saves none).
// Added to the training state, which is allocated all step, it bounds the simulated peak from
// below. Empty (no floor) for MoE models and fp8-family dtypes, whose saved activations the
// lowering sizes with more inputs (the dispatcher, Transformer Engine's fp8 copies).
std::vector<double> held_activation_floor_bytes(const Scenario& sc);

}  // namespace stepcast
