// `validate --tasks` (sim/report/validate_tasks.h): a measured timeline made from the
// prediction itself, with every GEMM stretched by a known factor, must come back with exactly
// that error for GEMMs and none elsewhere; label groups add a layer's repeats; every bad
// timeline is an InputError at its key and line.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

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

// A stepcast.result/1 document of the scenario's full-fidelity Program whose task i of each
// rank spans place(rank, i, predicted duration in s, ends of tasks 0..i-1) = {start, end}.
template <class Place>
std::string timeline_doc(const Scenario& s, Place place) {
  LowerOptions lo;
  lo.folded = false;
  const Program p = lower(s, lo);
  const Durations d = task_durations(p, s.profile);
  nlohmann::json tl = nlohmann::json::array();
  for (std::size_t r = 0; r < p.ranks.size(); ++r) {
    nlohmann::json tasks = nlohmann::json::array();
    std::vector<double> end(p.ranks[r].tasks.size());
    for (std::size_t i = 0; i < end.size(); ++i) {
      const auto [a, b] = place(p.ranks[r], i, static_cast<double>(d[r][i]) * 1e-9, end);
      end[i] = b;
      tasks.push_back({a, b});
    }
    tl.push_back({{"rank", static_cast<int>(r)}, {"tasks_s", tasks}});
  }
  return nlohmann::json{{"schema", "stepcast.result/1"}, {"step_time_s", 1.0}, {"timeline", tl}}
      .dump(1);
}

// The tasks back to back, each for its predicted duration times `gemm_factor` for GEMMs (1
// otherwise).
std::string measured_from_prediction(const Scenario& s, double gemm_factor) {
  return timeline_doc(
      s, [&](const RankProgram& rp, std::size_t i, double dur, const std::vector<double>& end) {
        const double f = rp.tasks[i].kind == TaskKind::kGemm ? gemm_factor : 1.0;
        const double start = i ? end[i - 1] : 0.0;
        return std::pair{start, start + dur * f};
      });
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

// A timeline as the executor's events would leave it: each task starts `wait` after it is
// ready (its stream's previous task and its deps ended) and lasts its predicted duration
// plus `floor`, a task with no kernel (alloc, free) `floor` alone.
std::string measured_with_events(const Scenario& s, double wait, double floor) {
  return timeline_doc(
      s, [&](const RankProgram& rp, std::size_t i, double dur, const std::vector<double>& end) {
        const Task& t = rp.tasks[i];
        double ready = 0;
        for (std::size_t j = i; j-- > 0;)
          if (rp.tasks[j].stream == t.stream) {
            ready = end[j];
            break;
          }
        for (int dep : t.deps) ready = std::max(ready, end[static_cast<std::size_t>(dep)]);
        const bool kernel = t.kind != TaskKind::kAlloc && t.kind != TaskKind::kFree;
        return std::pair{ready + wait, ready + wait + floor + (kernel ? dur : 0.0)};
      });
}

// The floor comes back as built: every wait 1.3 us (median 1.3 us, sum tasks x 1.3 us), the
// kernel-less spans 1.25 us, so the instrumentation is tasks x 1.3 + kernel tasks x 1.25 us.
// Without events (both 0) it is zero.
TEST(ValidateTasks, RecoversTheTimingEventsFloor) {
  const Scenario s = tiny();
  const TaskComparison c = compare_tasks(s, measured_with_events(s, 1.3e-6, 1.25e-6), "m.json");
  const TimingFloor& f = c.floor;
  ASSERT_GT(f.kernelless, 0);
  ASSERT_GT(f.tasks, f.kernelless);
  EXPECT_NEAR(f.wait_median_s, 1.3e-6, 1e-12);
  EXPECT_NEAR(f.wait_sum_s, f.tasks * 1.3e-6, 1e-9);
  EXPECT_NEAR(f.kernelless_median_s, 1.25e-6, 1e-12);
  EXPECT_NEAR(f.instrumentation_s(), f.tasks * 1.3e-6 + (f.tasks - f.kernelless) * 1.25e-6, 1e-9);
  EXPECT_NE(render_task_comparison(c, 5).find("measurement floor"), std::string::npos);
  EXPECT_NEAR(task_comparison_to_json(c)["floor"]["wait_median_s"].get<double>(), 1.3e-6, 1e-12);
  const TimingFloor none = compare_tasks(s, measured_with_events(s, 0, 0), "m.json").floor;
  EXPECT_EQ(none.wait_sum_s, 0);
  EXPECT_EQ(none.instrumentation_s(), 0);
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
  // A rank given twice (it read past the Program's tasks: a crash), a rank beyond an int
  // (it wrapped to 0), a number beyond a double (the parser's out_of_range: exit 1).
  nlohmann::json twice = nlohmann::json::parse(measured_from_prediction(s, 1.0));
  twice["timeline"].push_back(twice["timeline"][0]);
  i = only_issue(twice.dump());
  EXPECT_EQ(i.key, "/timeline/1/rank");
  EXPECT_NE(i.message.find("given twice"), std::string::npos);
  i = only_issue(R"({"timeline": [{"rank": 4294967296, "tasks_s": []}]})");
  EXPECT_EQ(i.key, "/timeline/0/rank");
  EXPECT_NE(i.message.find("4294967296"), std::string::npos);
  i = only_issue("{\"timeline\": [\n {\"rank\": 0, \"tasks_s\": [[0, 1e400]]}]}");
  EXPECT_EQ(i.line, 2);
  EXPECT_EQ(i.column, 30);  // where "1e400" starts
  EXPECT_NE(i.message.find("number overflow"), std::string::npos);
}

}  // namespace
}  // namespace stepcast
