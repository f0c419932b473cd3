// The simulation-size limits: how many layer passes a simulation of a scenario holds, and
// the InputError, placed at the key that makes the workload implausible, when a
// full-fidelity one would hold more than it can (scenario.h, kMaxRankLayerPasses).
#include "sim/scenario/scenario.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

namespace stepcast {

std::int64_t simulated_layer_passes(const Scenario& sc, bool folded) {
  const std::int64_t passes = sc.microbatches() * sc.model.layers;
  if (folded) return passes;
  return passes * std::max(1, sc.gpus / std::max(1, sc.parallel.pp));
}

void check_simulation_size(const Scenario& sc, bool folded) {
  const std::int64_t passes = simulated_layer_passes(sc, folded);
  if (folded || passes <= kMaxRankLayerPasses) return;
  // At the stragglers when they are what unfolds the simulation, else at the cluster.
  // Read-only (const operator[], reset): the document may be read by other threads.
  const YAML::Node& root = sc.source;
  YAML::Mark m = YAML::Mark::null_mark();
  std::string key = "cluster";
  if (root.IsMap() && root["cluster"] && root["cluster"].IsMap()) {
    const YAML::Node c = root["cluster"];
    m = c.Mark();
    for (const char* k : {"stragglers", "nodes", "gpus"})
      if (c[k] && (k != std::string("stragglers") || !sc.stragglers.empty())) {
        m = c[k].Mark();
        key = std::string("cluster.") + k;
        break;
      }
  }
  throw InputError(InputIssue{
      sc.file, m.is_null() ? 1 : m.line + 1, m.is_null() ? 1 : m.column + 1, key,
      fmt::format("simulating every rank (full fidelity{}) holds {} microbatches x {} layers x "
                  "{} GPUs / pp {} = {} layer passes, more than the {} one simulation can hold: "
                  "give a larger microbatch or a smaller global_batch{}",
                  sc.stragglers.empty() ? "" : ", as stragglers need", sc.microbatches(),
                  sc.model.layers, sc.gpus, sc.parallel.pp, passes, kMaxRankLayerPasses,
                  sc.stragglers.empty() ? ", or run folded" : "")});
}

}  // namespace stepcast
