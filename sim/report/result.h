// The result of one simulated step (docs/usage.md, --json schema "stepcast.result/1") and the
// functions that render it. Built from a Scenario, its Program and the Timeline.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sim/engine/engine.h"
#include "sim/program/program.h"

namespace stepcast {

struct Scenario;

// One task on the critical path: when it ran and what it was.
struct CriticalPathSegment {
  std::string label;     // the task's label, "bwd.L12.mlp.fc1.mb3"
  std::string kind;      // task_kind_name: "gemm", "collective", ...
  std::string category;  // category_name: "compute", "tp_comm", ...
  int rank = 0;          // global rank it ran on
  double start_s = 0;
  double duration_s = 0;
};

// The critical path of the step (sim/engine/critical_path.h) summarised: the chain of tasks,
// possibly across ranks, whose durations set the step time. It covers [0, step] without
// gaps, so each of the maps below sums to total_s == step_time_s; a communication task's
// time on it includes waiting for its slowest peer (rendezvous start).
struct CriticalPathSummary {
  double total_s = 0;
  int tasks = 0;  // tasks on the path with a duration
  // "compute", "tp_comm", ... (no bubble), and "host": kernels waiting for their launch
  std::map<std::string, double> by_category_s;
  std::map<std::string, double> by_kind_s;   // "gemm", "attention", "collective", ...
  std::map<std::string, double> by_phase_s;  // "fwd", "bwd_input", ...
  std::vector<int> ranks;                    // global ranks it crosses, ascending
  int rank_changes = 0;                      // hops from one rank to another along it
  std::vector<CriticalPathSegment> longest;  // the longest few, longest first
};

inline constexpr const char* kResultSchema = "stepcast.result/1";

struct Result {
  std::string scenario_name;
  std::string scenario_file;
  std::string model_name;
  std::string profile_name;
  int gpus = 0;
  std::string layout;  // "tp8 pp4 dp32 cp1 ep1 vpp1 mb1 1f1b zero1 sp selective"
  double step_time_s = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;  // model FLOPs (no recompute) / step / gpu
  double mfu = 0;             // model FLOPs / (step * gpus * peak of the compute dtype)
  double model_flops = 0;     // per step, whole cluster
  double params_total = 0;
  double memory_peak_gib = 0;  // max over ranks
  std::vector<double> memory_peak_gib_per_stage;
  double memory_capacity_gib = 0;  // what the training tensors may use: the GPU's memory
                                   // less gpu.memory_reserved
  double memory_reserved_gib = 0;  // gpu.memory_reserved (JSON only when > 0)
  bool fits_memory = true;
  // exposed seconds on the critical rank: compute, recompute, tp_comm, cp_comm, ep_comm,
  // pp_comm, dp_comm, optimizer, bubble (sum == step_time_s)
  std::array<double, kCategoryCount + 1> breakdown_s{};
  int critical_rank = 0;
  std::uint64_t events = 0;
  // Busy time on the critical rank summed per task kind ("gemm", "attention", ...) and per
  // phase ("fwd", "bwd_input", ...): what `validate PREDICTED MEASURED` compares.
  std::map<std::string, double> busy_by_kind_s;
  std::map<std::string, double> busy_by_phase_s;
  // How much longer the critical rank's kernels ran because communication ran beside them
  // (SM interference, HBM contention): part of their busy time and of the breakdown.
  double interference_s = 0;
  // How long the critical rank's kernels, their predecessors done, waited for the host to
  // launch them (the host, docs/model.md): idle GPU time inside the breakdown's terms.
  double host_bound_s = 0;
  int simulated_ranks = 0;
  bool folded = true;
  // cluster.stragglers as text ("gpu 5: compute x0.8; node 1: nic x0.5"), "" without; a
  // scenario with stragglers is always simulated unfolded.
  std::string stragglers;
  // false: not simulated because the resident training state alone exceeds memory
  // (SearchRunOptions::skip_when_state_exceeds_memory); only fits_memory and the memory fields
  // hold.
  bool simulated = true;
  // true: not simulated because its compute lower bound (step_time_s holds it) exceeds
  // SearchRunOptions::skip_when_compute_exceeds_s; fits_memory is then unknown.
  bool pruned = false;
  // The critical path, when asked for (RunOptions::critical_path; `run` asks).
  bool has_critical_path = false;
  CriticalPathSummary critical_path;
};

const char* breakdown_name(int index);  // category names, then "bubble"

}  // namespace stepcast
