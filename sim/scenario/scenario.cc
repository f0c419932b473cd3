// Scenario loading and validation (docs/scenarios.md). Every key is checked
// (unknown keys get the closest known key suggested), every value's type and range, every
// name (model, profile, schedule, recompute) and every cross-key rule of the parallel plan.
// Problems are collected, not thrown one by one: a file with three mistakes reports three
// issues in one InputError, each with file:line:column and the key path.
//
// Rules not obvious from the key names (the Megatron-LM rule each follows is named):
//  - cluster: exactly one of `nodes` / `gpus`. `gpus` must be a multiple of the profile's
//    node.gpus, except that fewer GPUs than one node holds are accepted as a partial node
//    (nodes = 1), so one-node experiments with 1, 2 or 4 GPUs can be described.
//  - parallel.dp may be omitted: dp = gpus / (tp*pp*cp), which must divide exactly.
//  - tp must divide heads and kv_heads (Megatron: num_attention_heads % tp == 0 and
//    num_query_groups % tp == 0; it does not replicate KV heads when kv_heads < tp).
//  - vpp > 1 if and only if schedule is interleaved or dualpipev; interleaved needs pp > 1
//    and the number of microbatches to be a multiple of pp (Megatron's interleaved 1F1B
//    schedule); dualpipev needs vpp = 2, pp > 1, at least 2*pp microbatches (DualPipeV.step),
//    zero 0 or 1 and no full recompute (its overlapped pairs), and not overlap.moe_ep_comm.
//  - cp: seq_len % cp == 0; with cp_kind ring also % (2*cp), Megatron's causal load
//    balancing splits the sequence into 2*cp chunks.
//  - sequence parallel with tp > 1 needs each cp rank's sequence (seq_len/cp) divisible by tp;
//    with tp == 1 it is a no-op and accepted.
//  - tp must divide ffn_hidden (when the model has a dense layer) and, without ep,
//    moe.ffn_hidden; with ep > 1, microbatch*seq_len/cp tokens must divide by tp, and so
//    must the shared experts' width shared_experts x moe.ffn_hidden (split like a dense MLP).
//  - ep > 1 needs a MoE model, experts % ep == 0 and (tp*cp*dp) % (etp*ep) == 0 (Megatron-
//    Core cuts the expert groups from a stage's tp*cp*dp ranks; sim/plan/layout.h).
//  - parallel.expert_tp (etp): 1 or tp, MoE models only; etp = tp with ep > 1 needs sequence
//    parallelism. Default: tp without ep, 1 with ep (model/workload.h expert_tp_of).
//  - microbatches x layers (the layer passes of one step, each simulated) is at most 2^21.
//  - ZeRO-3 with pp > 1 is allowed.
//  - fp8, mxfp8 and nvfp4 training need a GPU whose profile lists a peak for that dtype.
//  - cluster.stragglers: a list; each entry names exactly one of `gpu` (0 .. gpus-1) or
//    `node` (0 .. nodes-1) and at least one of `compute`, `nic`, `nvlink`, each in [0.01, 1];
//    a GPU or node named twice is an error (its node and itself once each is allowed).
//
// This file: the load entry points and the Loader's run (sim/scenario/loader.h); the
// sections are read in scenario_sections.cc, the cross-key rules checked in plan_checks.cc,
// the sweep block in sweep.cc, the simulation-size limits in limits.cc.
#include "sim/scenario/scenario.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "sim/io/yaml_util.h"
#include "sim/scenario/loader.h"
#include "sim/scenario/search_space.h"

namespace stepcast {

GpuSpeeds gpu_speeds(const Scenario& sc) {
  if (sc.stragglers.empty()) return {};
  GpuSpeeds out(static_cast<size_t>(sc.gpus));
  const int per_node = std::max(1, sc.profile.node.gpus);
  for (const Straggler& s : sc.stragglers) {
    const int first = s.gpu >= 0 ? s.gpu : s.node * per_node;
    const int last = s.gpu >= 0 ? s.gpu : std::min(sc.gpus, (s.node + 1) * per_node) - 1;
    for (int g = first; g <= last; ++g) {
      GpuSpeed& v = out[static_cast<size_t>(g)];
      v.compute *= s.speed.compute;
      v.nic *= s.speed.nic;
      v.nvlink *= s.speed.nvlink;
    }
  }
  return out;
}

std::string stragglers_text(const Scenario& sc) {
  std::string out;
  for (const Straggler& s : sc.stragglers) {
    std::string parts;
    for (auto [name, v] : {std::pair{"compute", s.speed.compute}, std::pair{"nic", s.speed.nic},
                           std::pair{"nvlink", s.speed.nvlink}})
      if (v != 1) parts += fmt::format("{}{} x{:g}", parts.empty() ? "" : ", ", name, v);
    out += fmt::format("{}{} {}: {}", out.empty() ? "" : "; ", s.gpu >= 0 ? "gpu" : "node",
                       s.gpu >= 0 ? s.gpu : s.node, parts.empty() ? "nominal" : parts);
  }
  return out;
}

namespace detail {

namespace {

const std::vector<std::string> kTopKeys = {"name",    "model", "cluster",   "training", "parallel",
                                           "network", "sweep", "framework", "search"};

}  // namespace

Scenario Loader::run() {
  Scenario sc;
  sc.file = file_;
  sc.source = root_;
  if (!r_.expect_map(root_, "", kTopKeys)) {
    issues_.throw_if_any();
    return sc;
  }
  for (const char* key : {"model", "cluster", "training"}) r_.require(root_, "", key);
  if (auto v = r_.get_string(root_, "", "name")) {
    sc.name = *v;
  } else if (!file_.empty()) {
    sc.name = std::filesystem::path(file_).stem().string();
  }
  model_ok_ = root_["model"] && parse_model(root_["model"], sc.model);
  cluster_ok_ = root_["cluster"] && parse_cluster(root_["cluster"], sc);
  training_ok_ = root_["training"] && parse_training(root_["training"], sc);
  parallel_ok_ = parse_parallel(root_["parallel"], sc.parallel);
  if (root_["framework"]) parse_framework(root_["framework"], sc.framework);
  if (auto v = r_.get_enum(root_, "", "network", {"analytical", "flow"}))
    sc.network = *v == "flow" ? NetworkMode::kFlow : NetworkMode::kAnalytical;
  if (cross_) cross_checks(sc);
  if (root_["sweep"]) parse_sweep(root_["sweep"], sc);
  if (root_["search"]) parse_search_space(root_["search"], r_);  // checked; read by search
  if (!issues_.empty()) {
    // In file order: this file's issues by position, then those of other files (a
    // profile broken by an override).
    std::vector<InputIssue> v = issues_.issues();
    std::stable_sort(v.begin(), v.end(), [&](const InputIssue& a, const InputIssue& b) {
      const bool ao = a.file != file_, bo = b.file != file_;
      if (ao != bo) return bo;
      if (a.line != b.line) return a.line < b.line;
      return a.column < b.column;
    });
    throw InputError(std::move(v));
  }
  return sc;
}

}  // namespace detail

Scenario load_scenario(const std::string& path) {
  return load_scenario_node(load_yaml_file(path), path);
}

Scenario load_scenario_node(const YAML::Node& root, const std::string& file) {
  return detail::Loader(root, file).run();
}

}  // namespace stepcast
