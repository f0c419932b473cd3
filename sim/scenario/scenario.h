// A scenario: model + cluster + training settings + parallel plan (docs/scenarios.md:
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
#include "sim/plan/framework.h"
#include "sim/plan/plan.h"

namespace stepcast {

enum class NetworkMode { kAnalytical, kFlow };

// cluster.stragglers: one entry per GPU (`gpu`, a global rank) or node (`node`: all its
// GPUs) that runs slower than the profile, with the fraction of nominal speed of its
// kernels (`compute`), NIC (`nic`) and NVLink (`nvlink`) bandwidth (sim/cluster/profile.h
// GpuSpeed). A GPU named by itself and by its node takes the product of the factors.
struct Straggler {
  int gpu = -1;  // exactly one of gpu / node is >= 0
  int node = -1;
  GpuSpeed speed;
};

struct SweepAxis {
  std::string key;  // dotted, e.g. "parallel.tp"
  std::vector<YAML::Node> values;
};

struct Scenario {
  std::string file;  // path it came from ("" for in-memory)
  std::string name;
  ModelArch model;
  HwProfile profile;  // with overrides applied
  int gpus = 0;
  int nodes = 0;
  TrainingSpec training;
  ParallelSpec parallel;
  FrameworkRules framework;  // `framework:` (default: the megatron-core preset)
  NetworkMode network = NetworkMode::kAnalytical;
  std::vector<Straggler> stragglers;  // cluster.stragglers (empty: every GPU nominal)
  std::vector<SweepAxis> sweep;
  YAML::Node source;  // the parsed document (for sweeps and reports)

  std::int64_t microbatches() const {
    return training.global_batch / (parallel.dp * parallel.microbatch);
  }
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
