// Scenarios and random plans of their search spaces shared by the tests of the search's
// closed-form bound (explore_bound_test.cc, search_bound_comm_test.cc).
#pragma once

#include <random>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "model/error.h"
#include "sim/report/explore.h"
#include "sim/scenario/scenario.h"

namespace stepcast::test_plans {

inline YAML::Node shipped(const std::string& name) {
  return YAML::LoadFile(std::string(STEPCAST_SOURCE_DIR) + "/scenarios/" + name);
}

// Small scenarios whose search spaces cover every axis the bound depends on: Llama 3 8B on
// one node (tp, pp with 1F1B / ZB-H1 / interleaved, microbatch, recompute, ZeRO, TP overlap),
// with 16k-token sequences (cp, ring and all-gather), on two nodes (uneven stages), and
// Mixtral 8x7B on one node (MoE layers, ep) with the all-to-all dispatcher, with DeepEP and
// with the all-to-all overlap, and on two nodes (ep groups across them); and data-parallel
// groups across nodes whose
// collectives no calibrated entry covers: Llama 3 8B on four A100 nodes, and with FSDP
// (ZeRO-3 per unit) on four H200 nodes; and the framework rules below.
inline std::vector<Scenario> scenarios() {
  std::vector<Scenario> out;
  YAML::Node doc = shipped("llama3-8b-1node-h100.yaml");
  doc["training"]["global_batch"] = 16;
  out.push_back(load_scenario_node(YAML::Clone(doc), "llama3-8b-small.yaml"));
  doc["training"]["seq_len"] = 16384;
  out.push_back(load_scenario_node(YAML::Clone(doc), "long.yaml"));
  doc["training"]["seq_len"] = 8192;
  doc["training"]["global_batch"] = 32;
  doc["cluster"]["nodes"] = 2;
  out.push_back(load_scenario_node(YAML::Clone(doc), "two-nodes.yaml"));
  YAML::Node moe = shipped("mixtral-8x7b-8node-h100.yaml");
  moe["cluster"]["nodes"] = 1;
  moe["parallel"]["dp"] = 4;  // tp 2 x dp 4 = 8 GPUs, ep 8 cut from them
  moe["training"]["global_batch"] = 16;
  out.push_back(load_scenario_node(YAML::Clone(moe), "mixtral-1node.yaml"));
  moe["parallel"]["moe_dispatcher"] = "deepep";
  out.push_back(load_scenario_node(YAML::Clone(moe), "mixtral-1node-deepep.yaml"));
  moe["parallel"]["moe_dispatcher"] = "alltoall";
  moe["parallel"]["overlap"]["moe_ep_comm"] = true;
  moe["parallel"]["recompute"] = "none";
  out.push_back(load_scenario_node(YAML::Clone(moe), "mixtral-1node-a2a-overlap.yaml"));
  moe["cluster"]["nodes"] = 2;  // tp 2 x ep 8 (etp 1): ep groups across both nodes
  moe["parallel"]["dp"] = 8;
  moe["parallel"]["overlap"]["moe_ep_comm"] = false;
  moe["training"]["global_batch"] = 32;
  out.push_back(load_scenario_node(moe, "mixtral-2node.yaml"));
  doc["cluster"]["profile"] = "a100-80g-sxm";
  doc["cluster"]["nodes"] = 4;
  doc["training"]["seq_len"] = 4096;
  out.push_back(load_scenario_node(doc, "a100-four-nodes.yaml"));
  YAML::Node fsdp = shipped("llama3-8b-fsdp-4node-h200.yaml");
  fsdp["training"]["seq_len"] = 4096;
  out.push_back(load_scenario_node(YAML::Clone(fsdp), "fsdp-four-nodes.yaml"));
  // Framework rules the bounds read: Megatron-Core's deferred output-layer weight gradients
  // with TE's fused cross entropy, and its FP8 primary weights gathered at 1 byte (two H100
  // nodes, so pipelines drain and data-parallel groups cross nodes); FSDP2 keeping units
  // gathered between passes and reducing once a step (TorchTitan's settings under pp).
  YAML::Node rules = shipped("llama3-8b-1node-h100.yaml");
  rules["training"]["global_batch"] = 32;
  rules["cluster"]["nodes"] = 2;
  rules["framework"] = YAML::Load(
      "{name: megatron-core, defer_embedding_wgrad_compute: true, "
      "fused_cross_entropy: true}");
  out.push_back(load_scenario_node(YAML::Clone(rules), "defer-fused-ce.yaml"));
  rules["framework"] = YAML::Load("{name: megatron-core, fp8_param_gather: true}");
  rules["training"]["dtype"] = "fp8";
  out.push_back(load_scenario_node(rules, "fp8-param-gather.yaml"));
  fsdp["framework"] = YAML::Load(
      "{name: fsdp2, zero3_reshard_after_forward: false, "
      "zero3_reshard_after_backward: false, zero3_reduce_every_microbatch: false}");
  out.push_back(load_scenario_node(fsdp, "fsdp2-kept.yaml"));
  return out;
}

// `count` valid plans drawn at random (fixed seed) from the scenario's search space.
inline std::vector<Scenario> random_plans(const Scenario& base, size_t count, std::mt19937& rng) {
  const auto cands = search_candidates(base);
  std::vector<Scenario> out;
  std::uniform_int_distribution<size_t> pick(0, cands.size() - 1);
  for (int tries = 0; out.size() < count && tries < 1000; ++tries) {
    try {
      out.push_back(load_scenario_node(cands[pick(rng)].document(), base.file));
    } catch (const InputError&) {}
  }
  return out;
}

}  // namespace stepcast::test_plans
