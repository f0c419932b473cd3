// The scenario's `search:` section (docs/scenarios.md, "Search space"): lists that replace
// the default values of the axes `stepcast search` enumerates (sim/report/explore.h,
// search_candidates), to narrow the space or widen it. Every key is optional; an absent one
// keeps the search's default. The loader checks the section (every problem with its
// file:line:column and key path); the search reads it from the scenario's document.
#pragma once

#include <vector>

#include <yaml-cpp/yaml.h>

#include "model/memory.h"
#include "sim/io/yaml_util.h"
#include "sim/plan/plan.h"
#include "sim/scenario/scenario.h"

namespace stepcast {

struct SearchSpace {
  std::vector<int> tp, pp, cp, microbatch, vpp, zero;
  std::vector<Recompute> recompute;
  std::vector<Schedule> schedule;  // 1f1b, zb-h1, interleaved (gpipe too, when asked)
  std::vector<CpKind> cp_kind;
  std::vector<bool> tp_overlap;   // parallel.overlap.tp_comm (plans with tp > 1)
  std::vector<double> bucket_mb;  // parallel.bucket_mb; empty: the scenario's
  // parallel.overlap.moe_ep_comm (MoE plans that can run it); empty: the scenario's
  std::vector<bool> moe_ep_comm;
  bool empty() const {
    return tp.empty() && pp.empty() && cp.empty() && microbatch.empty() && vpp.empty() &&
           zero.empty() && recompute.empty() && schedule.empty() && cp_kind.empty() &&
           tp_overlap.empty() && bucket_mb.empty() && moe_ep_comm.empty();
  }
};

// Reads the section `s` (the document's "search" node), reporting each problem to `r`.
SearchSpace parse_search_space(const YAML::Node& s, YamlReader& r);

// The scenario's search: section (empty without one). Throws InputError when it is invalid
// (a scenario loaded with load_scenario has been checked already).
SearchSpace search_space_of(const Scenario& sc);

}  // namespace stepcast
