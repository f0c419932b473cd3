// `validate --tasks` (sim/report/validate_tasks.h): a measured timeline made from the
// prediction itself, with every GEMM stretched by a known factor, must come back with exactly
// that error for GEMMs and none elsewhere; label groups add a layer's repeats; every bad
// timeline is an InputError at its key and line.
#include <cmath>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/error.h"
#include "sim/cost/coster.h"
#include "sim/lower/lower.h"
#include "sim/report/validate_tasks.h"
#include "sim/scenario/scenario.h"

namespace stepcast {
namespace {

Scenario tiny() {
  return load_scenario(std::string(STEPCAST_SOURCE_DIR) + "/tests/data/exec/tiny_1gpu.yaml");
}

// A stepcast.result/1 document whose timeline runs the tasks back to back, each for its
// predicted duration times `gemm_factor` for GEMMs (1 otherwise).
std::string measured_from_prediction(const Scenario& s, double gemm_factor) {
  LowerOptions lo;
  lo.folded = false;
  const Program p = lower(s, lo);
  const Durations d = task_durations(p, s.profile);
  nlohmann::json tl = nlohmann::json::array();
  for (std::size_t r = 0; r < p.ranks.size(); ++r) {
    nlohmann::json tasks = nlohmann::json::array();
    double t = 0;
    for (std::size_t i = 0; i < p.ranks[r].tasks.size(); ++i) {
      const double f = p.ranks[r].tasks[i].kind == TaskKind::kGemm ? gemm_factor : 1.0;
      const double dur = static_cast<double>(d[r][i]) * 1e-9 * f;
      tasks.push_back({t, t + dur});
      t += dur;
    }
    tl.push_back({{"rank", static_cast<int>(r)}, {"tasks_s", tasks}});
  }
  return nlohmann::json{{"schema", "stepcast.result/1"}, {"step_time_s", 1.0}, {"timeline", tl}}
      .dump(1);
}

const TaskGroupComparison& kind(const TaskComparison& c, const std::string& k) {
  for (const auto& g : c.kinds)
    if (g.kind == k) return g;
  ADD_FAILURE() << "no kind " << k;
  return c.kinds.front();
}

// GEMMs measured 10% slower than predicted: predicted / measured - 1 = 1/1.1 - 1 = -9.09%;
// attention and memory-bound tasks exactly as predicted (the same integer nanoseconds).
TEST(ValidateTasks, RecoversAKnownErrorPerKind) {
  const Scenario s = tiny();
  const TaskComparison c = compare_tasks(s, measured_from_prediction(s, 1.1), "m.json");
  ASSERT_EQ(c.kinds.size(), 3u);
  EXPECT_NEAR(kind(c, "gemm").predicted_s / kind(c, "gemm").measured_s - 1, 1 / 1.1 - 1, 1e-9);
  EXPECT_NEAR(kind(c, "attention").predicted_s, kind(c, "attention").measured_s, 1e-12);
  EXPECT_NEAR(kind(c, "memory_bound").predicted_s, kind(c, "memory_bound").measured_s, 1e-12);
  for (const auto& g : c.groups) {
    if (g.kind == "gemm") {
      EXPECT_NEAR(g.predicted_s / g.measured_s, 1 / 1.1, 1e-9) << g.label;
    }
  }
  // Groups come largest measured first, and the table says how many are left out.
  for (std::size_t i = 1; i < c.groups.size(); ++i)
    EXPECT_GE(c.groups[i - 1].measured_s, c.groups[i].measured_s);
  const std::string text = render_task_comparison(c, 2);
  EXPECT_NE(text.find(std::to_string(c.groups.size() - 2) + " more label groups"),
            std::string::npos);
  EXPECT_EQ(task_comparison_to_json(c)["groups"].size(), c.groups.size());
}

// A layer's repeats add up: fwd.L#.attn.mb# counts layers x microbatches of the scenario.
TEST(ValidateTasks, LabelGroupsAddEveryLayerAndMicrobatch) {
  const Scenario s = tiny();
  const TaskComparison c = compare_tasks(s, measured_from_prediction(s, 1.0), "m.json");
  const auto mbs = s.microbatches();
  bool found = false;
  for (const auto& g : c.groups)
    if (g.label == "fwd.L#.attn.mb#") {
      EXPECT_EQ(g.count, s.model.layers * mbs);
      found = true;
    }
  EXPECT_TRUE(found);
}

InputIssue only_issue(const std::string& text) {
  try {
    compare_tasks(tiny(), text, "m.json");
  } catch (const InputError& e) {
    EXPECT_EQ(e.issues().size(), 1u) << e.what();
    return e.issues().front();
  }
  ADD_FAILURE() << "no InputError";
  return {};
}

TEST(ValidateTasks, BadTimelinesNameTheKeyAndLine) {
  InputIssue i = only_issue(R"({"schema": "stepcast.result/1", "step_time_s": 1})");
  EXPECT_NE(i.message.find("run stepcast-exec with --timeline"), std::string::npos);
  EXPECT_EQ(i.file, "m.json");
  i = only_issue("{\"timeline\": [\n {\"rank\": 0, \"tasks_s\": [[0, 1]]}]}");
  EXPECT_EQ(i.key, "/timeline/0/tasks_s");
  EXPECT_EQ(i.line, 2);
  EXPECT_NE(i.message.find("was the measured Program lowered from this scenario"),
            std::string::npos);
  i = only_issue(R"({"timeline": [{"rank": 7, "tasks_s": []}]})");
  EXPECT_EQ(i.key, "/timeline/0/rank");
  i = only_issue(R"({"timeline": []})");
  EXPECT_EQ(i.key, "/timeline");
  // A malformed interval: end before start.
  const Scenario s = tiny();
  nlohmann::json m = nlohmann::json::parse(measured_from_prediction(s, 1.0));
  m["timeline"][0]["tasks_s"][5] = {2.0, 1.0};
  i = only_issue(m.dump());
  EXPECT_EQ(i.key, "/timeline/0/tasks_s/5");
}

}  // namespace
}  // namespace stepcast
