// Helpers of the scenario loading tests (scenario_test.cc, scenario_plan_test.cc): inline
// documents built from numbered lines (Doc), a valid base scenario, and expect_issue, which
// asserts the message, key path and line of one problem.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/io/yaml_util.h"
#include "sim/scenario/scenario.h"

namespace stepcast::scenario_test {

inline const std::string kData = std::string(STEPCAST_SOURCE_DIR) + "/tests/data/";

// A YAML document as numbered lines: line(n) is YAML line n (1-based).
struct Doc {
  std::vector<std::string> lines;
  Doc& set(int n, const std::string& s) {
    lines.at(static_cast<std::size_t>(n - 1)) = s;
    return *this;
  }
  // Inserts `s` so that it becomes line n (later lines move down by one).
  Doc& insert(int n, const std::string& s) {
    lines.insert(lines.begin() + (n - 1), s);
    return *this;
  }
  std::string text() const {
    std::string t;
    for (const auto& l : lines) t += l + "\n";
    return t;
  }
};

// A valid base scenario. gpus = 2 nodes * 8 = 16; dp derived = 16 / (tp*pp*cp) = 4;
// microbatches = 64 / (dp*microbatch) = 16.
inline Doc base() {
  return Doc{{
      "name: t",              // 1
      "model:",               // 2
      "  layers: 8",          // 3
      "  hidden: 1024",       // 4
      "  ffn_hidden: 4096",   // 5
      "  heads: 16",          // 6
      "  kv_heads: 8",        // 7
      "  vocab: 32000",       // 8
      "cluster:",             // 9
      "  profile: h100-sxm",  // 10
      "  nodes: 2",           // 11
      "training:",            // 12
      "  seq_len: 4096",      // 13
      "  global_batch: 64",   // 14
      "parallel:",            // 15
      "  tp: 2",              // 16
      "  pp: 2",              // 17
      "  microbatch: 1",      // 18
  }};
}

inline Scenario load(const Doc& d) {
  return load_scenario_node(load_yaml_text(d.text(), "t.yaml"), "t.yaml");
}

inline std::vector<InputIssue> issues_of(const Doc& d) {
  try {
    load(d);
  } catch (const InputError& e) {
    return e.issues();
  }
  return {};
}

// Asserts that exactly one issue has `key` and that it is on `line` with `text` in its message.
inline void expect_issue(const std::vector<InputIssue>& issues, const std::string& key, int line,
                         const std::string& text) {
  std::string all;
  int found = 0;
  for (const auto& i : issues) {
    all += i.str() + "\n";
    if (i.key != key) continue;
    ++found;
    EXPECT_EQ(i.file, "t.yaml") << i.str();
    EXPECT_EQ(i.line, line) << i.str();
    EXPECT_GT(i.column, 0) << i.str();
    EXPECT_NE(i.message.find(text), std::string::npos)
        << "message: " << i.message << "\nexpected to contain: " << text;
  }
  EXPECT_EQ(found, 1) << "issues for key " << key << ":\n" << all;
}

inline void expect_issue(const Doc& d, const std::string& key, int line, const std::string& text) {
  expect_issue(issues_of(d), key, line, text);
}

}  // namespace stepcast::scenario_test
