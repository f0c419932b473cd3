// Lowering: Scenario -> Program (docs/model.md, "Parallel techniques" and "The
// Program"). Turns the model's per-layer ops and the plan into per-rank tasks with real
// shapes on streams, with same-rank dependencies, pipeline send/recv with matched tags,
// collectives over the plan's groups and memory as alloc/free events.
//
// What each technique lowers to (see the files lowering.h lists for the details and sources):
//  - TP: the model's CommPoints -> allreduce on the tp stream (sequence parallel:
//    reduce-scatter for kTpReduce, allgather for kTpGather); the next compute waits for it.
//  - PP: GPipe / 1F1B / interleaved / ZB-H1 orders (schedule.h); activations and input
//    gradients as send/recv on pp_send / pp_recv, b*(s/cp)*h*2 bytes (/tp with sequence
//    parallel).
//  - DP: gradient buckets of bucket_bytes (fp32 grads reduced in fp32 as Megatron does for
//    bf16, fp16 grads under fp16 training; bucket_mb not given: Megatron-Core's default, max(40M,
//    1M x dp) parameters with overlap.grad_reduce, a single bucket without) on the dp stream during
//    the last microbatch's backward (or after the whole backward without overlap); ZeRO-1/2
//    reduce-scatter + parameter allgather; ZeRO-3 per-layer allgather before forward and backward
//    and reduce-scatter after backward.
//  - CP: ring attention (KV blocks passed around the cp group, overlapped with attention
//    chunks) or all-gather CP (K,V gathered before attention, dK,dV reduce-scattered after).
//  - EP: all-to-all on the ep stream at the model's dispatch/combine points.
//  - Recompute: selective (attention core) or full (whole layer) re-run before backward.
//  - Optimizer: one memory-bound update of the local (ZeRO-sharded) parameters at the end.
#pragma once

#include <array>
#include <functional>
#include <vector>

#include "sim/program/program.h"
#include "sim/scenario/scenario.h"

namespace stepcast {

struct LowerOptions {
  // Simulate one rank per pipeline stage standing for every rank of the stage (ranks that
  // differ only in tp / cp / dp / ep coordinates run the same program under uniform
  // routing); false simulates every rank (full fidelity).
  bool folded = true;
  // Folded only: called with the Program so far as soon as a stage is lowered (its last
  // rank; stage 0 first, the groups its tasks name already listed); when it returns true the
  // lowering stops there and the Program holds only the stages lowered so far. The search
  // uses it to give up on a plan as soon as one stage cannot fit (memory_floor_bytes) or
  // cannot be among the best (step_floor_ns), without lowering the others.
  std::function<bool(const Program&)> stop_after_stage;
  // Task labels ("fwd.L3.fc1.mb0"): for traces, the critical path, the Program JSON and
  // error messages. Sweeps and the search, which show none, lower without them (a fifth of
  // their CPU time went to building them). Allocation names (Task::what), which pair frees
  // with allocations, are kept either way.
  bool labels = true;
  // How the training stack runs the plan where stacks differ is the scenario's
  // (Scenario::framework, sim/plan/framework.h).
};

// Throws InputError (check_simulation_size) before lowering a full-fidelity plan too large
// to hold, and InputError / InvariantError on a plan it cannot lay out.
Program lower(const Scenario& sc, const LowerOptions& opt = {});

// Per pipeline stage, the bytes of weights, gradients and optimizer state every rank of the
// stage holds from t = 0: exactly the "weights", "grads" and "optimizer" allocations
// (kTrainingStateWhat) lower() emits, without lowering the step (search uses it to skip
// plans that cannot fit). Throws as lower() does on a plan it cannot lay out.
std::vector<std::array<double, 3>> training_state_bytes(const Scenario& sc);

// The shard of the model one rank's layers see under `par` (ShardSpec, model/workload.h) with
// sc's sequence, dtype and attention kernel and the plan's MoE dispatcher (its kind, the
// shared experts' overlap, the nodes an ep group spans): lower() builds its units with it, and
// the step bound (sim/report/search_bound.cc) costs layers with it.
ShardSpec shard_spec(const Scenario& sc, const ParallelSpec& par);

// Transformer layers per virtual stage (index chunk * pp + stage): parallel.pipeline_layers
// when given, else an even split. Throws InvariantError when they do not add up.
std::vector<int> virtual_stage_layers(const Scenario& sc);

}  // namespace stepcast
