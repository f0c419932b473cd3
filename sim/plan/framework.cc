// The presets of sim/plan/framework.h. Each rule's value is what the stack's code does
// (versions: DeepSpeed 0.16, Megatron-LM / Megatron-Core main of 2025, PyTorch FSDP2 with
// TorchTitan); docs/frameworks.md lists every preset and rule with its source.
#include "sim/plan/framework.h"

#include <string>
#include <vector>

#include <fmt/format.h>

namespace stepcast {

namespace {

// How DeepSpeed's engine reduces data-parallel gradients (deepspeed/runtime/engine.py
// allreduce_gradients, zero/stage_1_and_2.py, zero/stage3.py): after the backward without
// ZeRO and with ZeRO-1, in buckets of 5e8 elements, ZeRO-1/2 by bucket all-reduces and
// their parameters gathered whole after the step, and the epilogue of every ZeRO-2/3
// backward synchronizing the device; its pipeline engine takes zero 0 and 1 only.
void set_deepspeed_engine(FrameworkRules& r) {
  r.pipeline_max_zero = 1;  // pipe/engine.py: ZeRO-2/3 are incompatible with pipelining
  r.buckets_first_chunk_only = false;
  r.sync_reduces_each_backward = true;
  r.dp_reduce_after_backward = true;
  r.zero12_all_reduce = true;
  r.zero12_gather_after_step = true;
  r.grad_bucket_elements = 5e8;
  r.deepspeed_pipe_engine = true;  // pipe/schedule.py TrainSchedule, pipe/p2p.py
  r.tp_comm_overlap = false;       // no Transformer Engine userbuffers
  // Gradients accumulate in param.grad or through the optimizer's hooks (bf16_optimizer.py),
  // a separate add of each microbatch's gradient: no fused weight-gradient accumulation.
  r.grad_accumulation_fusion = false;
}

}  // namespace

FrameworkRules framework_preset(Framework f) {
  FrameworkRules r;
  r.name = f;
  switch (f) {
    case Framework::kMegatronCore:
      // Megatron-FSDP (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py): a unit is a
      // TransformerLayer, all-gathered at once; prefetched one unit ahead (stepcast's
      // reading of its prefetch budget, megatron_fsdp.py), gathered once for recompute and
      // backward. The lowering rules are the struct's defaults: async input-gradient
      // reduction (tensor_parallel/layers.py), blocking batched 1F1B p2p
      // (p2p_communication.py, batch_p2p_sync), TE's fp8 storage (module/base.py), the loss
      // checked for NaN on the host every microbatch (--check-for-nan-in-loss-and-grad,
      // default on: rerun_state_machine.py validate_result) and each gradient bucket too
      // (check_for_nan_in_grad, param_and_grad_buffer.py check_grads), DistributedDataParallel's
      // buckets on pipeline rank 0's first model chunk only (distributed_data_parallel.py;
      // training.py get_model, disable_bucketing).
      break;
    case Framework::kMegatronLm:
      // Megatron-LM v1.0-v2.6 (2020-21): the input-gradient all-reduce is synchronous in the
      // backward of copy_to_tensor_model_parallel_region (mpu/mappings.py; the async path,
      // --async-tensor-model-parallel-allreduce, is opt-in from Sep 2021); no Transformer
      // Engine. Its p2p (megatron/p2p_communication.py _communicate) is batch_isend_irecv +
      // torch.cuda.synchronize(), the blocking exchange of Megatron-Core's 1F1B, and so in
      // the interleaved schedule too (megatron/schedules.py
      // forward_backward_pipelining_with_interleaving); a message is sent as 1/tp slices and
      // all-gathered after receipt without sequence parallel
      // (scatter_gather_tensors_in_pipeline, default on). No ZeRO-3 of its own.
      r.zero_levels = {true, true, false, false};  // replicas or the distributed optimizer
      r.tp_comm_overlap = false;                   // no Transformer Engine
      r.async_tp_dgrad_reduce = false;
      r.blocking_p2p_interleaved = true;
      r.p2p_scatter_gather = true;
      r.te_fp8_storage = false;
      r.loss_nan_check = false;
      r.grad_nan_check = false;
      r.buckets_first_chunk_only = false;  // no bucketing before 2022 (overlap off)
      r.grad_accumulation_fusion = false;  // the DDP hook's add (fused from Feb 2022)
      break;
    case Framework::kMegatronDeepSpeed:
      // Megatron-DeepSpeed: Megatron-LM's 2021 model code (synchronous input-gradient
      // all-reduce, no Transformer Engine) on DeepSpeed's engine, whose pipeline sends are
      // blocking dist.send/recv (deepspeed/runtime/pipe/p2p.py) and which reduces the
      // gradients as DeepSpeed does. Its ZeRO-3 rules are the deepspeed preset's when named.
      set_deepspeed_engine(r);
      r.async_tp_dgrad_reduce = false;
      r.te_fp8_storage = false;
      r.loss_nan_check = false;
      r.grad_nan_check = false;
      break;
    case Framework::kDeepSpeed:
      // deepspeed/runtime/zero/partitioned_param_coordinator.py (fetch_sub_module): hooks on
      // every nn.Module fetch its direct parameters; stage3_prefetch_bucket_size 5e7,
      // stage3_param_persistence_threshold 1e5, stage3_max_reuse_distance 1e9
      // (zero/config.py DeepSpeedZeroConfig); __max_ongoing_fetch_events = 2; each fetched
      // parameter rebuilt by a torch.cat when waited for, the gradients bucketed,
      // interleaved and divided before their reduce-scatter (zero3_copies). No tensor
      // parallelism or Transformer Engine of its own; its pipeline engine's p2p is blocking
      // (pipe/p2p.py).
      r.zero3_gather = GatherUnit::kSubmodule;
      r.zero3_prefetch_elements = 5e7;
      r.zero3_persistence_elements = 1e5;
      r.zero3_reuse_distance_elements = 1e9;
      r.zero3_max_inflight_fetches = 2;
      r.zero3_copies = Zero3Copies::kDeepSpeed;
      r.zero3_max_inflight_reduces = 2;  // stage3.py __reduce_and_partition_ipg_grads
      set_deepspeed_engine(r);
      r.async_tp_dgrad_reduce = false;
      r.te_fp8_storage = false;
      r.loss_nan_check = false;
      r.grad_nan_check = false;
      break;
    case Framework::kFsdp2:
      // torch/distributed/fsdp/_fully_shard: one FSDPParamGroup per fully_shard call
      // (TorchTitan: per transformer block), implicit prefetch of the next group. Tensor
      // parallelism through DTensor: the input-gradient reduction is the autograd
      // redistribute's synchronous collective (async TP only under torch.compile,
      // compile.enable_async_tensor_parallel, off by default); torch.distributed.pipelining's
      // 1F1B waits each batched send/recv on the stream just before use (schedules.py
      // Schedule1F1B); fp8 is torchao's, not Transformer Engine's. The all-gather's
      // copy-out and the gradients' chunk-cat run on the compute stream (_fsdp_collectives.py;
      // zero3_copies).
      r.zero3_copies = Zero3Copies::kFsdp2;
      r.zero3_fp32_shards = true;  // TorchTitan: fp32 model, bf16 MixedPrecisionPolicy
      r.zero_levels = {true, false, false, true};  // DDP or fully_shard
      r.zero3_max_inflight_reduces = 0;  // post_backward waits for the previous group's reduce
      r.async_tp_dgrad_reduce = false;
      r.blocking_p2p_1f1b = false;
      r.te_fp8_storage = false;
      r.loss_nan_check = false;
      r.grad_nan_check = false;
      r.buckets_first_chunk_only = false;  // torch DDP buckets every stage
      r.grad_accumulation_fusion = false;  // DDP's no_sync: AccumulateGrad adds into .grad
      break;
  }
  return r;
}

namespace {
struct Named {
  Framework f;
  const char* name;
};
constexpr Named kNames[] = {{Framework::kMegatronCore, "megatron-core"},
                            {Framework::kMegatronLm, "megatron-lm"},
                            {Framework::kMegatronDeepSpeed, "megatron-deepspeed"},
                            {Framework::kDeepSpeed, "deepspeed"},
                            {Framework::kFsdp2, "fsdp2"}};
}  // namespace

const char* framework_name(Framework f) {
  for (const Named& n : kNames)
    if (n.f == f) return n.name;
  return "?";
}

const std::vector<std::string>& framework_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Named& n : kNames) v.emplace_back(n.name);
    return v;
  }();
  return names;
}

bool framework_from_name(const std::string& name, Framework& out) {
  for (const Named& n : kNames)
    if (name == n.name) {
      out = n.f;
      return true;
    }
  return false;
}

const char* zero3_copies_name(Zero3Copies z) {
  return z == Zero3Copies::kDeepSpeed ? "deepspeed" : z == Zero3Copies::kFsdp2 ? "fsdp2" : "none";
}

const char* gather_unit_name(GatherUnit g) {
  return g == GatherUnit::kSubmodule ? "submodule" : "block";
}

// Megatron-Core's conditions for --overlap-moe-expert-parallel-comm (transformer_config.py,
// its __post_init__ checks, and pipeline_parallel/schedules.py): expert parallelism with the
// alltoall or flex (DeepEP) dispatcher, the interleaved schedule when pp > 1, no full
// recompute, not with --moe-shared-expert-overlap. stepcast runs it on Megatron-Core's DDP or
// distributed optimizer (zero 0 or 1) and its asynchronous interleaved p2p.
std::string moe_ep_overlap_problem(const ModelArch& m, const ParallelSpec& pl,
                                   const FrameworkRules& fw) {
  if (!m.moe || pl.ep < 2)
    return fmt::format(
        "overlaps the experts' all-to-alls: it needs a MoE model with ep > 1 "
        "(got ep = {})",
        pl.ep);
  if (pl.moe_dispatcher == MoeDispatcher::kAllGather)
    return "needs the alltoall or deepep dispatcher (Megatron-Core: alltoall or flex)";
  if (pl.schedule == Schedule::kDualPipeV)
    return "is not for the dualpipev schedule, which already runs each forward beside another "
           "microbatch's backward (its overlapped pairs hide the all-to-alls)";
  if (pl.pp > 1 && pl.schedule != Schedule::kInterleaved)
    return fmt::format(
        "with pp = {} needs the interleaved schedule (Megatron-Core requires "
        "virtual pipeline stages), got {}",
        pl.pp, schedule_name(pl.schedule));
  if (pl.schedule != Schedule::kInterleaved && pl.schedule != Schedule::k1F1B)
    return fmt::format("runs with 1F1B on one stage or the interleaved schedule, got {}",
                       schedule_name(pl.schedule));
  if (pl.recompute == Recompute::kFull)
    return "cannot run with full recompute (Megatron-Core refuses it)";
  if (pl.zero > 1)
    return fmt::format(
        "runs with zero 0 or 1 (Megatron-Core DDP or distributed optimizer), "
        "got zero {}",
        pl.zero);
  if (pl.overlap_moe_shared)
    return "excludes overlap.moe_shared_experts (Megatron-Core: one or the other)";
  if (pl.pp > 1 && fw.blocking_p2p_interleaved)
    return "runs with Megatron-Core's asynchronous interleaved p2p, not the framework rule "
           "blocking_p2p_interleaved (Megatron-LM before Megatron-Core has no such overlap)";
  return "";
}

bool zero_allowed(int pp, int zero, const FrameworkRules& fw) {
  return zero >= 0 && zero <= 3 && fw.zero_levels[static_cast<size_t>(zero)] &&
         (pp <= 1 || zero <= fw.pipeline_max_zero);
}

std::string zero_levels_text(const std::array<bool, 4>& levels) {
  std::vector<std::string> on;
  for (int z = 0; z < 4; ++z)
    if (levels[static_cast<size_t>(z)]) on.push_back(std::to_string(z));
  std::string out;
  for (size_t i = 0; i < on.size(); ++i)
    out += (i == 0 ? "" : i + 1 == on.size() ? " or " : ", ") + on[i];
  return out.empty() ? "none" : out;
}

std::string zero_problem(const ParallelSpec& pl, const FrameworkRules& fw) {
  if (zero_allowed(pl.pp, pl.zero, fw)) return "";
  const FrameworkRules preset = framework_preset(fw.name);
  if (pl.zero < 0 || pl.zero > 3 || !fw.zero_levels[static_cast<size_t>(pl.zero)]) {
    // The presets' limits have the stack's reason; a limit the scenario set is its own.
    std::string why = "framework rule zero_levels, as the scenario sets it";
    if (fw.zero_levels == preset.zero_levels && fw.name == Framework::kMegatronLm)
      why =
          "Megatron-LM before Megatron-Core replicates or, from 2022, shards the optimizer "
          "state (--use-distributed-optimizer, megatron/optimizer/distrib_optimizer.py); "
          "framework rule zero_levels";
    else if (fw.zero_levels == preset.zero_levels && fw.name == Framework::kFsdp2)
      why =
          "FSDP2 shards parameters, gradients and optimizer state together (fully_shard; "
          "zero 3 with zero3_reshard_after_forward: false is its SHARD_GRAD_OP) or replicates "
          "them (DDP); framework rule zero_levels";
    return fmt::format("runs zero {} (got zero {}; {})", zero_levels_text(fw.zero_levels), pl.zero,
                       why);
  }
  // The DeepSpeed presets' limit has DeepSpeed's reason; a limit the scenario set is its own.
  const bool deepspeed_limit = fw.pipeline_max_zero == 1 && preset.pipeline_max_zero == 1;
  return fmt::format("runs zero {} at most with pipeline parallelism (got zero {} with pp {}; {})",
                     fw.pipeline_max_zero, pl.zero, pl.pp,
                     deepspeed_limit
                         ? "DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3, "
                           "deepspeed/runtime/pipe/engine.py; framework rule pipeline_max_zero"
                         : "framework rule pipeline_max_zero, as the scenario sets it");
}

bool pipeline_schedule_allowed(int pp, Schedule s, const FrameworkRules& fw) {
  return pp <= 1 || !fw.deepspeed_pipe_engine || s == Schedule::k1F1B;
}

std::string pipeline_schedule_problem(const ParallelSpec& pl, const FrameworkRules& fw) {
  if (pipeline_schedule_allowed(pl.pp, pl.schedule, fw)) return "";
  return fmt::format(
      "runs its pipeline on DeepSpeed's engine, whose only training schedule is 1F1B (got {} "
      "with pp {}; deepspeed/runtime/pipe/schedule.py TrainSchedule; framework rule "
      "deepspeed_pipe_engine)",
      schedule_name(pl.schedule), pl.pp);
}

std::string defer_wgrad_problem(const ParallelSpec& pl, const FrameworkRules& fw) {
  if (!fw.defer_embedding_wgrad_compute) return "";
  if (fw.name != Framework::kMegatronCore)
    return "has no defer_embedding_wgrad_compute (Megatron-Core's ModelParallelConfig option)";
  if (pl.zero >= 2)
    return fmt::format(
        "defers the output layer's weight gradients (defer_embedding_wgrad_compute) only as "
        "modelled with zero 0 or 1 (Megatron's DDP or distributed optimizer), got zero {}",
        pl.zero);
  if (pl.schedule == Schedule::kZbH1 || pl.schedule == Schedule::kDualPipeV)
    return fmt::format(
        "defers the output layer's weight gradients (defer_embedding_wgrad_compute) only as "
        "modelled with schedules that keep each weight gradient in its backward, got {}",
        schedule_name(pl.schedule));
  return "";
}

}  // namespace stepcast
