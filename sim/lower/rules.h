// Lowering rules: where training stacks run the same plan differently, the lowering follows
// one named rule per difference, Megatron-Core's value (Megatron-LM `megatron/core` with
// Transformer Engine, its default transformer_impl) noted with each; a framework preset may
// switch them (LowerOptions::rules). async_tp_dgrad_reduce and blocking_p2p_1f1b still
// default to the earlier lowering: the validation's Megatron-LM 2021 runs (Narayanan et al.
// 2021) ran neither, and no scenario can yet say which stack it ran.
#pragma once

namespace stepcast {

struct LoweringRules {
  // Each linear's backward computes its weight gradient right after its input gradient,
  // with the input gradient's tensor-parallel reduction (all-reduce; reduce-scatter under
  // sequence parallel) launched asynchronously before the weight-gradient GEMM and waited
  // for only after it: Megatron-Core `tensor_parallel/layers.py
  // (LinearWithGradAccumulationAndAsyncCommunication.backward)`, Transformer Engine
  // `module/linear.py`, `module/layernorm_linear.py` (and Megatron-LM from 2022,
  // `--async-tensor-model-parallel-allreduce`). False: Megatron-LM 2020-21, where the
  // reduction is a synchronous all-reduce in the backward of
  // `copy_to_tensor_model_parallel_region`, exposed. Megatron-Core: true.
  bool async_tp_dgrad_reduce = false;
  // Non-interleaved 1F1B runs each pipeline exchange as one `batch_isend_irecv` followed by
  // `torch.cuda.synchronize()` (Megatron-Core `pipeline_parallel/p2p_communication.py`,
  // batch_p2p_comm = not overlap_p2p_comm and batch_p2p_sync): a pass starts only once the
  // previous pass's send has been received and its own recv has arrived, and a recv is
  // posted only when the rank reaches the call. False: sends and recvs are posted
  // asynchronously and waited just before use (the interleaved schedule's overlap_p2p_comm,
  // torch.distributed.pipelining). Megatron-Core: true.
  bool blocking_p2p_1f1b = false;
  // Under fp8, Transformer Engine saves each linear's input for the backward as an fp8 copy
  // and keeps an fp8 (row-wise + transposed) cache of each linear's weight, refreshed on the
  // step's first microbatch (transformer_engine `pytorch/module/linear.py`,
  // `module/base.py (quantize_weight)`; Megatron-Core `schedules.py set_is_first_microbatch`).
  // False: 16-bit saved inputs and no weight cache (per-GEMM casts). Megatron-Core: true, but
  // off by default like the two rules above until the framework presets set it: on, it puts
  // the NeMo 24.07 Nemotron-4 340B fp8 run, which ran in 80 GB, at 84.5 GiB (the weight
  // cache under fp8_param_gather is yet to be checked against TE's code).
  bool te_fp8_storage = false;
};

}  // namespace stepcast
