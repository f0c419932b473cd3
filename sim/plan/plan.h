// The parallel plan and the training settings it runs (docs/model.md, Scenario YAML:
// `training:` and `parallel:`): plain data, read by the scenario loader and consumed by the
// rank layout, the schedules and the lowering.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/memory.h"
#include "model/workload.h"

namespace stepcast {

enum class Schedule { kGpipe, k1F1B, kInterleaved, kZbH1, kDualPipeV };
enum class CpKind { kRing, kAllGather };
enum class Optimizer { kAdam, kSgd };

const char* schedule_name(Schedule s);
const char* recompute_name(Recompute r);

struct TrainingSpec {
  std::int64_t seq_len = 0;
  std::int64_t global_batch = 0;  // sequences per step
  DType dtype = DType::kBf16;
  Optimizer optimizer = Optimizer::kAdam;
  // training.grad_reduce_dtype: the dtype of the gradient buffer the backward accumulates
  // into and the DP collectives reduce (Megatron-Core DistributedDataParallelConfig
  // grad_reduce_in_fp32; Megatron-LM --grad-reduce-in-bf16). Default: fp32 for bf16 and fp8
  // training (Megatron's arguments.py forces --accumulate-allreduce-grads-in-fp32 for
  // --bf16), fp16 for fp16 training; see grad_reduce_dtype().
  std::optional<DType> grad_reduce_dtype;
  // training.fp8_recipe: per-tensor fp8's scaling (model/workload.h Fp8Recipe); only with
  // dtype fp8.
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;
};

// The resolved gradient accumulation and reduction dtype of a training spec.
DType grad_reduce_dtype(const TrainingSpec& t);

struct ParallelSpec {
  int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vpp = 1;
  std::int64_t microbatch = 1;
  std::vector<int> pipeline_layers;  // pp*vpp entries when given; else even split
  Schedule schedule = Schedule::k1F1B;
  int zero = 0;  // 0 | 1 | 2 | 3
  // parallel.expert_tp: expert tensor parallel size, 1 or tp (Megatron-Core
  // --expert-tensor-parallel-size); 0 when not given: tp without ep, 1 with ep
  // (model/workload.h expert_tp_of).
  int expert_tp = 0;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = true;
  // overlap.tp_comm: the all-gather / reduce-scatter of sequence parallelism pipelined with
  // the adjacent GEMM (Transformer Engine userbuffers, Megatron-Core --tp-comm-overlap: the
  // all-gather as TE's ring exchange, the reduce-scatter in tp chunks in forward and beside
  // the weight gradient in backward; sim/lower/lower.cc).
  // Requires sequence_parallel. Default false.
  bool overlap_tp_comm = false;
  // bucket_mb * 1e6 (bytes of fp32 gradients per DP bucket). 0 (bucket_mb not given):
  // Megatron-Core's default, resolved by the lowering (sim/lower/lower.h):
  // max(40M, 1M x dp) parameters per bucket with overlap.grad_reduce, one bucket without.
  double bucket_bytes = 0;
  CpKind cp_kind = CpKind::kRing;  // parallel.cp_kind: ring | allgather
  // parallel.moe_dispatcher: the MoE token dispatcher (model/moe.cc). A plan key: the same
  // model runs under any of them (Megatron-Core --moe-token-dispatcher-type).
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // overlap.moe_shared_experts: the shared experts on their own stream beside the
  // dispatcher's all-to-alls (Megatron-Core --moe-shared-expert-overlap). Default false.
  bool overlap_moe_shared = false;
  // overlap.moe_ep_comm: one microbatch's expert all-to-alls beside another's compute
  // (Megatron-Core --overlap-moe-expert-parallel-comm with --delay-wgrad-compute: the
  // steady state's forward and backward merged layer by layer, sim/lower/moe_overlap.cc).
  // Default false.
  bool overlap_moe_ep = false;
};

// A plan's conflict with its schedule: the parallel key it is reported at, and why.
struct PlanProblem {
  const char* key;
  std::string message;
};
// DualPipeV's conditions (deepseek-ai/DualPipe dualpipe/dualpipev.py): two model chunks per
// rank in a V over pp >= 2 ranks; and what stepcast's lowering of its overlapped
// forward-backward pairs holds (as the all-to-all overlap's, sim/lower/moe_overlap.cc):
// zero 0 or 1, no full recompute. None for other schedules. The scenario rules report each
// at its key; the search leaves such plans out.
std::vector<PlanProblem> dualpipev_problems(const ParallelSpec& pl);
// DualPipeV.step's `num_chunks >= num_ranks * 2`; empty when the microbatches suffice (or for
// other schedules).
std::string dualpipev_microbatch_problem(const ParallelSpec& pl, std::int64_t microbatches);

}  // namespace stepcast
