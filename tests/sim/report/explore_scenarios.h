// Scenarios shared by the search tests (explore_test.cc, explore_space_test.cc).
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "sim/scenario/scenario.h"

namespace stepcast::test_search {

// The shipped one-node Llama 3 8B scenario's document.
inline YAML::Node llama3_8b_doc() {
  return YAML::LoadFile(std::string(STEPCAST_SOURCE_DIR) + "/scenarios/llama3-8b-1node-h100.yaml");
}

inline Scenario small_llama3_8b() {
  // The shipped one-node Llama 3 8B scenario with a global batch of 16 (fast to simulate).
  YAML::Node doc = llama3_8b_doc();
  doc["training"]["global_batch"] = 16;
  return load_scenario_node(doc, "llama3-8b-small.yaml");
}

}  // namespace stepcast::test_search
