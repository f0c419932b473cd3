// The training stack that runs a plan (scenario key `framework:`), as plain data: a preset
// of execution rules per stack, each rule what that stack's code does, with the file and
// function it follows cited in framework.cc and docs/frameworks.md. A scenario names a preset
// and may override any single rule (`framework: {name: deepspeed, zero3_prefetch_elements:
// 1e8}`). The lowering reads the rules; a rule a plan does not exercise (ZeRO-3 rules
// without zero 3) has no effect.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "model/arch.h"
#include "sim/plan/plan.h"

namespace stepcast {

enum class Framework { kMegatronCore, kMegatronLm, kMegatronDeepSpeed, kDeepSpeed, kFsdp2 };

// What one ZeRO-3 / FSDP parameter all-gather covers.
enum class GatherUnit {
  kBlock,      // a whole transformer block (FSDP2 fully_shard per block, Megatron-FSDP units)
  kSubmodule,  // each nn.Module's direct parameters: one fetch per Linear (DeepSpeed stage 3)
};

// The GPU copies a stack makes around its ZeRO-3 / FSDP collectives (FrameworkRules::zero3_copies).
enum class Zero3Copies {
  kNone,       // gathered into and reduced from the buffers the parameters and gradients
               // view (Megatron-FSDP)
  kDeepSpeed,  // DeepSpeed stage 3: rebuild each gathered parameter, bucket/interleave/divide
               // the gradients
  kFsdp2,      // FSDP2: copy-out of the gathered buffer, chunk-cat copy-in of the gradients
};

struct FrameworkRules {
  Framework name = Framework::kMegatronCore;

  // ---- ZeRO-3 / FSDP (parallel.zero: 3) -----------------------------------------------
  // Granularity of a parameter all-gather (and of the gathered copy held).
  GatherUnit zero3_gather = GatherUnit::kBlock;
  // Prefetch (with overlap.param_gather): when a fetch is waited for, the fetches after it
  // in execution order are issued while the elements already prefetched are below this
  // (so at least one when positive). The block presets prefetch one unit ahead.
  double zero3_prefetch_elements = 1;
  // Parameters of at most this many elements are persistent: gathered once, never released,
  // so not gathered per use (DeepSpeed stage3_param_persistence_threshold). 0: none.
  double zero3_persistence_elements = 0;
  // Under full recompute, a fetch made for the recomputed forward is kept for the backward
  // only when the parameters used in between sum to at most this many elements; otherwise
  // it is released and fetched again before its backward (DeepSpeed stage3_max_reuse_distance).
  // Negative: never released in between (a block is gathered once for its recompute and
  // backward, as FSDP's pre-backward unshard does).
  double zero3_reuse_distance_elements = -1;
  // The host blocks on the oldest fetch when more than this many are in flight
  // (DeepSpeed __max_ongoing_fetch_events). 0: never.
  int zero3_max_inflight_fetches = 0;
  // ZeRO-3's all-gathers and reduce-scatters go through torch.distributed's list forms,
  // one tensor per rank, which ProcessGroupNCCL of PyTorch <= 1.10 runs on a flat buffer
  // (torch/lib/c10d/ProcessGroupNCCL.cpp allgather, reduce_scatter: flatten_for_scatter_gather)
  // with one copy kernel per rank on its NCCL stream, each launched by the host: out of the
  // buffer after an all-gather, into it before a reduce-scatter. DeepSpeed <= 0.5 (2021)
  // calls them so (zero/partition_parameters.py _allgather_params_coalesced: a narrow view
  // of the gathered buffer per rank; the gradient reduce-scatter over per-rank chunks).
  // False: the flat forms (all_gather_into_tensor / reduce_scatter_tensor), no copies.
  bool list_collectives = false;
  // Waiting for a ZeRO-3 fetch synchronizes the device: the host waits for the gather, its
  // copies and every kernel queued before them, then issues the next prefetch and the
  // module. DeepSpeed <= 0.5 (2021): PartitionedParameterCoordinator.fetch_sub_module
  // (zero/partitioned_param_coordinator.py) waits in _synchronize_communication, which
  // synchronizes the all-gather stream and calls torch.cuda.synchronize()
  // (zero/partition_parameters.py _allgather_params_coalesced ends the same way); later
  // versions wait on events (zero3_max_inflight_fetches). Submodule fetches only.
  bool zero3_fetch_sync = false;
  // The full-size copies around each gather and reduce-scatter, on the streams the stack
  // runs them (docs/frameworks.md zero3_copies):
  //  - kDeepSpeed (zero/partition_parameters.py AllGatherCoalescedHandle.wait): when a fetch
  //    is waited for, each parameter is rebuilt by a torch.cat of its world_size slices of the
  //    gathered buffer, on the compute stream before the module runs (a full read and write;
  //    the cat runs in batches of 128 inputs, aten/src/ATen/native/cuda/Shape.cu
  //    CAT_ARRAY_BATCH_SIZE). Gradients (zero/stage3.py, runtime/comm/
  //    coalesced_collectives.py reduce_scatter_coalesced) are copied into the flat reduce
  //    bucket, interleaved per rank by a torch.cat and pre-divided before the reduce-scatter,
  //    three passes over them on the reduce stream.
  //  - kFsdp2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): the all-gather's
  //    copy-out into the parameters on the compute stream before the group runs
  //    (split_with_sizes_copy); foreach_reduce's chunk-cat copy-in of the gradients on the
  //    compute stream before the reduce-scatter. The copy-in before the all-gather moves 1/dp
  //    of the bytes and is left out.
  Zero3Copies zero3_copies = Zero3Copies::kNone;
  // How many gradient reduce-scatters may still be running when the next is issued: the
  // kernels after reduce-scatter j wait for j - limit - 1. DeepSpeed 2: its host blocks on
  // the oldest reduce event when more than 2 are outstanding (stage3.py
  // __reduce_and_partition_ipg_grads). FSDP2 0: before a group's reduce the compute stream
  // waits for the previous group's reduce-scatter (_fsdp_param_group.py post_backward,
  // foreach_reduce's wait on the reduce-scatter state's event), so the chunk-cat of j
  // follows j - 1. -1: no limit. With overlap.grad_reduce (DeepSpeed overlap_comm);
  // without it every reduce-scatter is waited for anyway.
  int zero3_max_inflight_reduces = -1;
  // A block gathered for its forward is resharded (freed) after it, and gathered again for
  // its backward (FSDP2 reshard_after_forward True, the default for every module but the
  // root, torch/distributed/fsdp/_fully_shard/_fully_shard.py; Megatron-FSDP likewise).
  // False: it stays unsharded from its forward until after its backward, where it is
  // resharded (reshard_after_backward, default True), and a forward meanwhile uses it
  // without a gather. Block gathers only (zero3_gather: block; DeepSpeed's fetches follow
  // their own release rules).
  bool zero3_reshard_after_forward = true;
  // A block is resharded after each microbatch's backward (FSDP2 reshard_after_backward,
  // default True). False: it stays unsharded until the backward of the step's last
  // microbatch, as torch.distributed.pipelining runs FSDP2 (stage.py
  // backward_maybe_with_nosync: set_reshard_after_backward(False) but for the last
  // microbatch). Block gathers only.
  bool zero3_reshard_after_backward = true;
  // Each microbatch's backward reduce-scatters the block's gradients (FSDP2 and DeepSpeed
  // by default). False: the unsharded gradients accumulate over the microbatches and are
  // reduce-scattered once, in the last microbatch's backward (FSDP2
  // set_requires_gradient_sync(False) but for the last, as torch.distributed.pipelining
  // does). ZeRO-3 only.
  bool zero3_reduce_every_microbatch = true;
  // The shards are the fp32 parameters themselves, updated in place by the optimizer: no
  // 16-bit copy at rest and no separate master. FSDP2 keeps each parameter's shard in the
  // dtype it was built in (TorchTitan builds fp32) and casts to MixedPrecisionPolicy's
  // param_dtype only in the all-gather's copy-in (torch/distributed/fsdp/_fully_shard/
  // _fsdp_param.py FSDPParam, _fsdp_collectives.py foreach_all_gather); the reduce-scatter's
  // output is cast back to that dtype for the sharded gradient (foreach_reduce), so the
  // gradient shard is fp32 whatever the reduce dtype. A shard holds 4 + 4 + 8 (Adam) bytes a
  // parameter where Megatron-FSDP and DeepSpeed keep a 16-bit shard beside the fp32 master
  // (model/memory.h); the step refreshes no 16-bit copy (model/workload.h OptimizerSpec).
  bool zero3_fp32_shards = false;
  // ---- data-parallel gradient reduction (every zero level) ------------------------------
  // The host synchronizes the device at the end of every backward of ZeRO-2 (with
  // overlap.grad_reduce, DeepSpeed's overlap_comm) and ZeRO-3: the next microbatch's
  // forward and the optimizer are launched once every gradient reduction issued is done
  // (DeepSpeed stage_1_and_2.py and stage3.py independent_gradient_partition_epilogue).
  bool sync_reduces_each_backward = false;
  // The gradients of zero 0 and 1 are reduced after the step's last backward, bucket by
  // bucket, never beside it (DeepSpeed engine.py allreduce_gradients after the backward at
  // the accumulation boundary: buffered_allreduce_fallback without ZeRO, stage_1_and_2.py
  // reduce_gradients walking every parameter for ZeRO-1; the pipeline engine's ReduceGrads
  // after the last backward), whatever overlap.grad_reduce says. False: a bucket goes as
  // soon as its last gradient is ready (Megatron-Core's DDP with overlap_grad_reduce).
  bool dp_reduce_after_backward = false;
  // ZeRO-1 and ZeRO-2 reduce each gradient bucket by an all-reduce, each rank keeping its
  // slice (DeepSpeed stage_1_and_2.py average_tensor -> allreduce_and_scatter, with
  // use_multi_rank_bucket_allreduce, the default since 0.12.4): all-reduce traffic, twice a
  // reduce-scatter's. False: a reduce-scatter (Megatron's distributed optimizer,
  // Megatron-FSDP).
  bool zero12_all_reduce = false;
  // ZeRO-1/2's updated parameters are all-gathered right after the optimizer step, one
  // collective over each whole flat group, whatever overlap.param_gather says (DeepSpeed
  // runtime/utils.py all_gather_dp_groups at the end of stage_1_and_2.py step). False:
  // in buckets, overlapped with the next forward under overlap.param_gather (Megatron's
  // distributed optimizer).
  bool zero12_gather_after_step = false;
  // Only the first pipeline stage's first model chunk cuts its gradients (and, under the
  // distributed optimizer, its parameter gathers) into buckets; every other stage and
  // virtual chunk reduces and gathers each chunk as one bucket, its communication being
  // off the critical path (Megatron-Core distributed/distributed_data_parallel.py
  // DistributedDataParallel.__init__: bucket_size None on pipeline ranks > 0 and with
  // disable_bucketing, which training.py get_model sets for model chunks after the first).
  // Zero 0 and 1 (Megatron's DDP and distributed optimizer). False: every chunk cut
  // alike (torch DDP, DeepSpeed's own buckets; Megatron-LM 2020-22 did not bucket at all,
  // its validation files state overlap.grad_reduce false).
  bool buckets_first_chunk_only = true;
  // The stack overlaps tensor-parallel communication with the GEMMs (parallel.overlap.
  // tp_comm): Megatron-Core through Transformer Engine's userbuffers (tp_comm_overlap),
  // FSDP2 / TorchTitan through torch.compile's micro-pipeline TP (async TP,
  // compile.enable_async_tensor_parallel, off by default: the plan's choice). Megatron-LM
  // 2020-22 and Megatron-DeepSpeed (no Transformer Engine) and DeepSpeed have none. A
  // scenario asking for the overlap on a stack without it is an error; the search offers it
  // only where the stack has it.
  bool tp_comm_overlap = true;
  // The zero levels the stack has at all (index = level). Megatron-LM before Megatron-Core:
  // data-parallel replicas and, from 2022, its distributed optimizer
  // (--use-distributed-optimizer, megatron/optimizer/distrib_optimizer.py): 0 and 1. FSDP2
  // shards parameters, gradients and optimizer state together (fully_shard: 3; its
  // SHARD_GRAD_OP is zero 3 with zero3_reshard_after_forward false) or replicates them
  // (DDP: 0). The others: every level (Megatron-Core's 2 and 3 through Megatron-FSDP's
  // optim_grads / optim_grads_params). A scenario asking for another level is an error; the
  // search leaves such plans out.
  std::array<bool, 4> zero_levels{true, true, true, true};
  // The highest zero level the stack runs under pipeline parallelism (pp > 1): DeepSpeed's
  // pipeline engine refuses ZeRO-2 and ZeRO-3 (deepspeed/runtime/pipe/engine.py,
  // PipelineEngine.__init__ asserts zero_optimization_stage() < ZeroStageEnum.gradients).
  // 3: any. A scenario asking for more is an error; the search leaves such plans out.
  int pipeline_max_zero = 3;
  // Gradient bucket size in elements when parallel.bucket_mb is not given, for zero 0-2:
  // DeepSpeed 5e8 (reduce_bucket_size, zero/config.py; MEMORY_OPT_ALLREDUCE_SIZE, engine.py,
  // without ZeRO), at any overlap. 0: Megatron-Core's rule (grad_bucket_bytes in
  // sim/lower/data_parallel.cc: max(4e7, 1e6 x dp), one bucket without overlap).
  double grad_bucket_elements = 0;

  // ---- lowering rules where stacks differ (read by sim/lower) ----------------------------
  // Each linear's backward computes its weight gradient right after its input gradient,
  // with the input gradient's tensor-parallel reduction (all-reduce; reduce-scatter under
  // sequence parallel) launched asynchronously before the weight-gradient GEMM and waited
  // for only after it: Megatron-Core `tensor_parallel/layers.py
  // (LinearWithGradAccumulationAndAsyncCommunication.backward)`, Transformer Engine
  // `module/linear.py`, `module/layernorm_linear.py`. False: the reduction is a synchronous
  // all-reduce in the backward of `copy_to_tensor_model_parallel_region`, exposed
  // (Megatron-LM 2020-21; the async path was opt-in from Sep 2021).
  bool async_tp_dgrad_reduce = true;
  // Non-interleaved 1F1B runs each pipeline exchange as one `batch_isend_irecv` followed by
  // `torch.cuda.synchronize()` (Megatron-Core `pipeline_parallel/p2p_communication.py`,
  // batch_p2p_comm = not overlap_p2p_comm and batch_p2p_sync): a pass starts only once the
  // previous pass's send has been received and its own recv has arrived, and a recv is
  // posted only when the rank reaches the call. False: sends and recvs are posted
  // asynchronously and waited just before use (torch.distributed.pipelining).
  bool blocking_p2p_1f1b = true;
  // The interleaved schedule's p2p as Megatron-LM 2020-22 issues it (megatron/schedules.py
  // forward_backward_pipelining_with_interleaving, megatron/p2p_communication.py
  // _communicate): one batched call after each warm-up forward (send_forward_recv_forward),
  // after each steady-state forward-backward pair (send_forward_backward_recv_forward_backward:
  // the forward's output leaves only after the backward) and after each cool-down backward
  // (send_backward_recv_backward), each ended by torch.cuda.synchronize(). False: sends and
  // recvs posted asynchronously and waited just before use (Megatron-Core's
  // overlap_p2p_comm, on with virtual pipeline stages).
  bool blocking_p2p_interleaved = false;
  // The pipeline runs on DeepSpeed's PipelineEngine (deepspeed/runtime/pipe/engine.py with
  // schedule.py TrainSchedule, p2p.py): its only training schedule is 1F1B, run as
  // 2(m + p - 1) slots per stage; a forward slot sends the previous slot's input gradient
  // (SendGrad) and then receives its own input (RecvActivation), a backward slot receives its
  // output gradient (RecvGrad) and then sends the previous slot's activation
  // (SendActivation). Each is a separate blocking dist.send / dist.recv, one after the other,
  // so a forward's output leaves only after the next backward's gradient has arrived and no
  // exchange runs in both directions at once. Implies blocking p2p; other schedules are
  // refused with pp > 1. False: the schedules and p2p calls of the other rules.
  bool deepspeed_pipe_engine = false;
  // Megatron-LM's scatter_gather_tensors_in_pipeline (megatron/p2p_communication.py, default
  // on, off under sequence parallel): with tensor parallelism each tensor rank sends only its
  // 1/tp slice of a pipeline message (mpu.split_tensor_into_1d_equal_chunks, a view) and the
  // receiver all-gathers the whole over the tensor group before use
  // (mpu.gather_split_1d_tensor). False: every tensor rank sends the whole message
  // (Megatron-Core's p2p_communication.py).
  bool p2p_scatter_gather = false;
  // Under fp8, Transformer Engine saves each linear's input for the backward as an fp8 copy
  // and keeps an fp8 cache of each linear's weight, refreshed on the step's first
  // microbatch (transformer_engine `pytorch/module/linear.py`, `module/base.py
  // (quantize_weight)`; Megatron-Core `schedules.py set_is_first_microbatch`). False: 16-bit
  // saved inputs and no weight cache (per-GEMM casts).
  bool te_fp8_storage = true;
  // FP8 primary weights (Megatron `--fp8-param-gather`, DistributedDataParallelConfig
  // fp8_param_gather; NeMo `fp8_params`): each fp8 linear's weight is held as fp8 data with
  // its transposed fp8 copy (TE Float8Tensor, 1 + 1 bytes a parameter) in place of the
  // 16-bit weight, so TE's weight cache is not held beside it and the step's first
  // microbatch only transposes; the distributed optimizer all-gathers those weights in fp8,
  // 1 byte a parameter. Megatron's default: off.
  bool fp8_param_gather = false;
  // The loss as one fused kernel pair over the 16-bit logits: Transformer Engine's
  // `pytorch/triton/cross_entropy.py` (online_softmax_kernel, then cross_entropy_kernel
  // writing the gradient in place over the logits; backward element_mul_kernel scales it),
  // reached through Megatron-Core `cross_entropy_loss_fusion` with `cross_entropy_fusion_impl
  // 'te'` (fused_cross_entropy / te_parallel_cross_entropy). Megatron-Core's default is off
  // (the unfused fp32 vocab-parallel cross entropy); Megatron-Bridge's benchmark recipes
  // turn it on (perf_recipes/_common.py _benchmark_common). A per-run setting.
  bool fused_cross_entropy = false;
  // The output layer's weight-gradient GEMMs deferred to the pipeline flush: Megatron-Core
  // `defer_embedding_wgrad_compute` (ModelParallelConfig). The output layer's
  // ColumnParallelLinear keeps its input and output gradient of the step's first
  // `wgrad_deferral_limit` calls (0: of every call; a microbatch calls it once, and once
  // more before that for each MTP module) in the model's
  // embedding_activation_buffer and grad_output_buffer and skips their weight gradient
  // (tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication.backward;
  // under sequence parallel also the input's re-gather); after the stage's last backward the
  // schedule computes them all (pipeline_parallel/schedules.py finish_embedding_wgrad_compute
  // -> utils.py drain_embedding_wgrad_compute: each input all-gathered over tp while the
  // previous one's GEMM runs, two buffers). Off by default; NeMo's and Megatron-Bridge's
  // performance recipes turn it on. A per-run setting, modelled with zero 0 and 1 and the
  // schedules that do not split the weight gradient (defer_wgrad_problem).
  bool defer_embedding_wgrad_compute = false;
  int wgrad_deferral_limit = 0;
  // The optimizer update as one fused multi-tensor kernel: Megatron's apex / Transformer
  // Engine FusedAdam (megatron/core/optimizer/__init__.py), DeepSpeed's FusedAdam
  // (runtime/engine.py _configure_basic_optimizer, unless torch_adam), TorchTitan's
  // torch.optim.AdamW(fused=True) (optimizer.implementation "fused"). False: torch.optim's
  // default on GPU, the foreach implementation (optimizer.py _default_to_fused_or_foreach),
  // one pass over the shard per arithmetic step, with sqrt(v) held beside the state
  // (model/workload.h optimizer_op, optimizer_temp_bytes).
  bool fused_optimizer = true;
  // Each linear's weight-gradient GEMM accumulates into the gradient buffer itself:
  // Megatron's gradient-accumulation fusion (tensor_parallel/layers.py
  // LinearWithGradAccumulationAndAsyncCommunication.backward ->
  // fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32 into param.main_grad; Transformer
  // Engine's fuse_wgrad_accumulation), on by default in Megatron-LM since February 2022
  // (--no-gradient-accumulation-fusion) and in Megatron-Core: the GEMM reads and writes the
  // main gradient (ShardSpec::grad_accumulation). False: the GEMM writes a fresh gradient in
  // the parameter dtype and a separate kernel adds it into the buffer, every microbatch:
  // Megatron-LM's DDP hook of 2021 (megatron/model/distributed.py _make_param_hook,
  // param.main_grad.add_(param.grad.data)), PyTorch's AccumulateGrad, DeepSpeed's
  // BF16_Optimizer hooks (runtime/bf16_optimizer.py, hp_grad.add_). Only where the whole
  // gradients accumulate over the microbatches (zero 0 and 1, or zero 3 without
  // zero3_reduce_every_microbatch); ZeRO-2/3 reduce each microbatch's fresh gradients.
  bool grad_accumulation_fusion = true;
  // The sharded optimizer keeps only the low 16 bits of each fp32 master weight, the bf16
  // weight being its high half: 2 bytes of master state a parameter instead of 4. Apex's
  // DistributedFusedAdam `store_param_remainders` (apex/contrib/optimizers/
  // distributed_fused_adam.py), which NeMo turns on whenever the model is bf16 and the
  // optimizer state fp32 (nemo/collections/nlp/models/language_modeling/megatron_base_model.py
  // setup_optimization: store_params False, store_param_remainders True); the step reads and
  // writes the same bytes (the bf16 weight and its remainder make the fp32 value). Needs bf16
  // weights (bf16 or fp8 training); a rule of the sharded optimizer, so nothing at zero 0.
  // Megatron-Core's distributed optimizer and every preset: off (fp32 master weights).
  bool master_weight_remainders = false;

  // ---- the host (docs/model.md, "The host") -------------------------------------------
  // Host time to issue one kernel or collective from eager PyTorch (Python, the
  // dispatcher, cudaLaunchKernel), in microseconds: each task costs the host its launches
  // times this, and a kernel starts no earlier than the host has issued it
  // (EngineOptions::host_launch_ns). Every preset runs eager PyTorch: 10, the middle of the
  // 5-20 us that profiles show per launch (HolisticTraceAnalysis, CUDA kernel launch
  // statistics). 0: the host always ahead (CUDA graphs).
  double host_launch_us = 10;
  // Host time of one PyTorch operator that launches no kernel (a view, a narrow), in
  // microseconds: Task::host_ops costs the host that many times this (EngineOptions::
  // host_op_ns). 2 in every preset: torch's dispatch of an operator on plain tensors,
  // pytorch/pytorch benchmarks/overrides_benchmark/README.md. Only where the lowering
  // states such ops (list_collectives: the per-rank views of a list all-gather).
  double host_op_us = 2;
  // The loss is tested for NaN on the host every microbatch: Megatron-Core's
  // `--check-for-nan-in-loss-and-grad` (default on) evaluates torch.isnan(loss) as a Python
  // bool on the loss stage (megatron/core/rerun_state_machine.py validate_result), so the
  // host waits for the loss before it launches that microbatch's backward. The other
  // stacks read the loss on the host only on logging steps.
  bool loss_nan_check = true;
  // Each data-parallel gradient bucket is tested for NaN/Inf before its collective:
  // Megatron-Core's DistributedDataParallelConfig check_for_nan_in_grad (set by
  // --check-for-nan-in-loss-and-grad, default on) makes start_grad_sync call check_grads
  // (distributed/param_and_grad_buffer.py): the bucket's grad_data.norm(p=2) on the compute
  // stream, its NaN and Inf tested as Python bools (rerun_state_machine.py validate_result),
  // so the host waits for the norm before it launches the collective and what follows.
  // Zero 0 and 1. The other stacks check on the host only on logging steps, or on device.
  bool grad_nan_check = true;
};

// The preset of a stack; `name_of` / `framework_names` spell them as the scenario does.
FrameworkRules framework_preset(Framework f);
const char* framework_name(Framework f);
const std::vector<std::string>& framework_names();
// The name's preset, or false when the name is unknown.
bool framework_from_name(const std::string& name, Framework& out);
const char* gather_unit_name(GatherUnit g);
const char* zero3_copies_name(Zero3Copies z);  // "none", "deepspeed", "fsdp2"

// Why the MoE all-to-all overlap (ParallelSpec::overlap_moe_ep, Megatron-Core
// --overlap-moe-expert-parallel-comm) cannot run on this model, plan and stack, completing
// "the MoE all-to-all overlap ..."; empty when it can. The scenario rules report it at the
// key, the search gives the overlap only to plans where it is empty.
std::string moe_ep_overlap_problem(const ModelArch& m, const ParallelSpec& pl,
                                   const FrameworkRules& fw);

// Whether the stack runs this zero level (FrameworkRules::zero_levels) with this pipeline
// (pipeline_max_zero); zero_problem says why not, completing "<framework> ...", empty when
// it can (the search asks the first, the scenario rules the second).
bool zero_allowed(int pp, int zero, const FrameworkRules& fw);
std::string zero_problem(const ParallelSpec& pl, const FrameworkRules& fw);
// Whether a rank's whole (unsharded) gradients accumulate over the step's microbatches and
// are reduced once: zero 0 and 1, and zero 3 without zero3_reduce_every_microbatch; ZeRO-2
// and ZeRO-3 otherwise reduce each microbatch's fresh gradients.
inline bool accumulates_whole_gradients(int zero, const FrameworkRules& fw) {
  return zero <= 1 || (zero == 3 && !fw.zero3_reduce_every_microbatch);
}
// "0, 1 and 3": the levels of FrameworkRules::zero_levels.
std::string zero_levels_text(const std::array<bool, 4>& levels);

// Whether the stack runs this schedule with this pipeline (FrameworkRules::
// deepspeed_pipe_engine: 1F1B only); pipeline_schedule_problem says why not, completing
// "<framework> ...", empty when it can.
bool pipeline_schedule_allowed(int pp, Schedule s, const FrameworkRules& fw);
std::string pipeline_schedule_problem(const ParallelSpec& pl, const FrameworkRules& fw);
// Whether defer_embedding_wgrad_compute can run with the plan: on Megatron-Core, with zero 0
// or 1 (Megatron's DDP or distributed optimizer) and a schedule that keeps each weight
// gradient in its backward. Why not, completing "<framework> ...", empty when it can (the
// scenario rules and the search ask it).
std::string defer_wgrad_problem(const ParallelSpec& pl, const FrameworkRules& fw);

}  // namespace stepcast
