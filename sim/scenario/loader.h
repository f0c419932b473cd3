// The scenario Loader (private to sim/scenario): reads one scenario document section by
// section, collecting every problem, then checks the rules across sections and the sweep.
// Its members are defined by theme: run in scenario.cc, the sections in
// scenario_sections.cc, the cross-key rules in plan_checks.cc, the sweep in sweep.cc.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "model/error.h"
#include "sim/io/yaml_util.h"
#include "sim/scenario/scenario.h"

namespace stepcast::detail {

// The first of `keys` present in `map`, else the map itself: where a cross-key issue points.
inline YAML::Node first_of(const YAML::Node& map, std::initializer_list<const char*> keys) {
  if (map && map.IsMap())
    for (const char* k : keys)
      if (map[k]) return map[k];
  return map;
}

class Loader {
 public:
  // `cross_checks` false: only each key's own value is checked (sweep values).
  Loader(const YAML::Node& root, const std::string& file, bool cross_checks = true)
      : root_(root), file_(file), r_(file, issues_), cross_(cross_checks) {
    r_.set_root(root_);
  }

  Scenario run();

 private:
  // ---- sections (scenario_sections.cc) ------------------------------------------------
  bool parse_model(const YAML::Node& m, ModelArch& out);
  void parse_moe(const YAML::Node& moe, ModelArch& out, std::optional<std::int64_t> layers);
  void check_mla(const YAML::Node& m, const ModelArch& out);
  bool parse_cluster(const YAML::Node& c, Scenario& sc);
  bool parse_stragglers(const YAML::Node& list, Scenario& sc);
  bool parse_training(const YAML::Node& t, Scenario& sc);
  bool parse_parallel(const YAML::Node& par, ParallelSpec& out);
  // `framework:` a preset name, or {name: PRESET, RULE: VALUE, ...} (framework_section.cc).
  void parse_framework(const YAML::Node& f, FrameworkRules& out);
  void parse_zero_levels(const YAML::Node& z, FrameworkRules& out);

  // ---- rules across sections (plan_checks.cc) -----------------------------------------
  // `par` is the document's parallel section (may be absent).
  void cross_checks(Scenario& sc);
  // vpp against the schedule; the interleaved schedule's pp.
  void check_schedule(const YAML::Node& par, const ParallelSpec& pl);
  // tp*pp*dp*cp against the cluster's GPUs; derives dp when omitted. True when dp is valid.
  bool check_plan_size(const YAML::Node& par, Scenario& sc);
  // global_batch against dp*microbatch; the layer passes; interleaved microbatches vs pp.
  void check_batch(const YAML::Node& par, const Scenario& sc);
  // The model's heads, kv_heads, ffn_hidden and moe.ffn_hidden against tp (expert tp `etp`).
  void check_tp_split(const YAML::Node& par, const Scenario& sc, int etp);
  // expert_tp's values; the shared experts and the MoE tokens against tp with ep.
  void check_expert_tp(const YAML::Node& par, const Scenario& sc);
  // The model's layers over pp*vpp stages (or pipeline_layers).
  void check_pipeline_split(const YAML::Node& par, const Scenario& sc);
  // ep against the model's experts and the ranks of a pipeline stage.
  void check_expert_parallel(const YAML::Node& par, const Scenario& sc, int etp, bool dp_ok);
  // overlap.moe_ep_comm against what Megatron-Core's all-to-all overlap runs with.
  void check_moe_ep_overlap(const YAML::Node& par, const Scenario& sc);
  // seq_len against cp (and its kind), sequence parallelism and max_positions.
  void check_sequence(const YAML::Node& par, const Scenario& sc);

  // ---- sweep (sweep.cc) ---------------------------------------------------------------
  void parse_sweep(const YAML::Node& sw, Scenario& sc);

  YAML::Node root_;
  std::string file_;
  IssueList issues_;
  YamlReader r_;
  bool model_ok_ = false, cluster_ok_ = false, training_ok_ = false, parallel_ok_ = false;
  bool profile_ok_ = false;
  bool cross_ = true;
};

}  // namespace stepcast::detail
