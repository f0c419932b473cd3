// The result of one simulated step (DESIGN.md, --json schema "stepcast.result/1") and the
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

inline constexpr const char* kResultSchema = "stepcast.result/1";

struct Result {
  std::string scenario_name;
  std::string scenario_file;
  std::string model_name;
  std::string profile_name;
  int gpus = 0;
  std::string layout;            // "tp8 pp4 dp32 cp1 ep1 vpp1 mb1 1f1b zero1 sp selective"
  double step_time_s = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;     // model FLOPs (no recompute) / step / gpu
  double mfu = 0;                // model FLOPs / (step * gpus * peak of the compute dtype)
  double model_flops = 0;        // per step, whole cluster
  double params_total = 0;
  double memory_peak_gib = 0;    // max over ranks
  std::vector<double> memory_peak_gib_per_stage;
  double memory_capacity_gib = 0;
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
  int simulated_ranks = 0;
  bool folded = true;
  // cluster.stragglers as text ("gpu 5: compute x0.8; node 1: nic x0.5"), "" without; a
  // scenario with stragglers is always simulated unfolded.
  std::string stragglers;
  // false: not simulated because the resident training state alone exceeds memory
  // (RunOptions::skip_when_state_exceeds_memory); only fits_memory and the memory fields hold.
  bool simulated = true;
};

const char* breakdown_name(int index);  // category names, then "bubble"

}  // namespace stepcast
