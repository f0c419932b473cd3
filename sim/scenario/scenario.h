// A scenario: model + cluster + training settings + parallel plan (DESIGN.md, Scenario
// YAML). Loading validates every key and every cross-key rule; see scenario.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "model/arch.h"
#include "model/memory.h"
#include "model/workload.h"
#include "sim/cluster/profile.h"

namespace stepcast {

enum class Schedule { kGpipe, k1F1B, kInterleaved, kZbH1 };
enum class CpKind { kRing, kAllGather };
enum class NetworkMode { kAnalytical, kFlow };
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
};

// The resolved gradient accumulation and reduction dtype of a training spec.
DType grad_reduce_dtype(const TrainingSpec& t);

struct ParallelSpec {
  int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vpp = 1;
  std::int64_t microbatch = 1;
  std::vector<int> pipeline_layers;  // pp*vpp entries when given; else even split
  Schedule schedule = Schedule::k1F1B;
  int zero = 0;                      // 0 | 1 | 2 | 3
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
  CpKind cp_kind = CpKind::kRing;    // parallel.cp_kind: ring | allgather

};

// cluster.stragglers: one entry per GPU (`gpu`, a global rank) or node (`node`: all its
// GPUs) that runs slower than the profile, with the fraction of nominal speed of its
// kernels (`compute`), NIC (`nic`) and NVLink (`nvlink`) bandwidth (sim/cluster/profile.h
// GpuSpeed). A GPU named by itself and by its node takes the product of the factors.
struct Straggler {
  int gpu = -1;   // exactly one of gpu / node is >= 0
  int node = -1;
  GpuSpeed speed;
};

struct SweepAxis {
  std::string key;                  // dotted, e.g. "parallel.tp"
  std::vector<YAML::Node> values;
};

struct Scenario {
  std::string file;                 // path it came from ("" for in-memory)
  std::string name;
  ModelArch model;
  HwProfile profile;                // with overrides applied
  int gpus = 0;
  int nodes = 0;
  TrainingSpec training;
  ParallelSpec parallel;
  NetworkMode network = NetworkMode::kAnalytical;
  std::vector<Straggler> stragglers;  // cluster.stragglers (empty: every GPU nominal)
  std::vector<SweepAxis> sweep;
  YAML::Node source;                // the parsed document (for sweeps and reports)

  std::int64_t microbatches() const { return training.global_batch / (parallel.dp * parallel.microbatch); }
};

// Per global rank, the speed the stragglers give it (empty when there are none).
GpuSpeeds gpu_speeds(const Scenario& sc);
// "gpu 5: compute x0.8; node 1: nic x0.5" (empty when there are none).
std::string stragglers_text(const Scenario& sc);

// The most layer passes (microbatches x layers) one folded simulation may hold, and the most
// (that x the gpus / pp ranks of a stage) a full-fidelity one may. Measured (Release,
// `stepcast run` with its critical path): a dense 8-layer model folded with 25,000
// microbatches (200,000 passes, 5.9 million tasks) peaks at 3.4 GB in 11 s, about 17 KB a
// pass; full fidelity adds about 1.7-4.1 KB a pass per rank (the ranks of a stage share
// one task list; their timings are their own): Llama 3 405B on 16,384 GPUs, 2,064,384
// rank passes, peaks at 8.5 GB (README, "Speed"; 3.5 GB before ZeRO-2's per-bucket copies and
// reduce-scatters doubled its events, when this bound was 3 x 2^20). So each bound keeps a
// run under about 9 GB; 2^21 folded passes (the limit before) let a plan reach ~35 GB and be
// killed for memory.
// The largest shipped folded scenario holds 65,536 (Korthikanti's 1T: 512 microbatches x
// 128 layers).
inline constexpr std::int64_t kMaxLayerPasses = std::int64_t{1} << 19;
inline constexpr std::int64_t kMaxRankLayerPasses = std::int64_t{1} << 21;
// Folded: microbatches x layers (the loader bounds it). Full fidelity: that for each of the
// gpus / pp ranks of a pipeline stage.
std::int64_t simulated_layer_passes(const Scenario& sc, bool folded);
// InputError (at cluster.stragglers, cluster.nodes or cluster.gpus) when a full-fidelity
// simulation of `sc` would hold more than kMaxRankLayerPasses; nothing for folded ones.
void check_simulation_size(const Scenario& sc, bool folded);

// Loads and validates. Throws InputError with every problem (file:line:col, key path).
Scenario load_scenario(const std::string& path);
// From an already-parsed document (sweeps re-load with one dotted key replaced).
Scenario load_scenario_node(const YAML::Node& root, const std::string& file);

// Returns a deep copy of `root` with the dotted key set to `value` (creating maps as needed).
YAML::Node with_dotted_key(const YAML::Node& root, const std::string& dotted_key,
                           const YAML::Node& value);

}  // namespace stepcast
