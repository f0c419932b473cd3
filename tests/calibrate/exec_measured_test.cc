// The executor's measured timeline on CPU (calibrate/exec: measured.h): synthetic recorded
// times through write_measured (the GPU layer's path), read back as `validate PREDICTED
// MEASURED` reads them, with every derived number computed by hand in a comment.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "calibrate/exec/measured.h"
#include "calibrate/exec/plan.h"
#include "calibrate/exec/program.h"
#include "model/error.h"
#include "sim/program/matching.h"
#include "sim/report/report.h"
#include "sim/report/validate.h"
#include "tests/calibrate/exec_test_util.h"

namespace ex = stepcast::exec;
namespace sc = stepcast;
using namespace stepcast::exec_test;  // NOLINT(google-build-using-namespace)

// Synthetic recorded times for the hand Program (microseconds; zero = each rank's start):
//   rank 0: alloc [0,0]  gemm [0,10]  allreduce [10,25]  free [25,25]  send [25,30]
//   rank 1: alloc [0,0]  gemm [0,12]  allreduce [12,25]  free [25,25]  recv [25,31]
// Rank 0's allreduce starts when rank 1 reaches it: [12,25]. The step ends at 31 us on
// rank 1, the critical rank. Its busy time: gemm 12, collective 13, recv 6 (alloc/free
// left out); phase fwd 12 + 13 + 6 = 31. Exposed: compute [0,12] = 12, tp_comm [12,25] =
// 13, pp_comm [25,31] = 6, bubble 0; sum 31 = step.
TEST(ExecMeasured, HandTimelineGivesTheDerivedNumbers) {
  const ex::Program p = ex::parse_program(hand_program(), "hand.json");
  const ex::Plan plan = ex::make_plan(p);
  ex::Recorded rec;
  const double us = 1e-6;
  rec.times = {{{0, 0}, {0, 10 * us}, {10 * us, 25 * us}, {25 * us, 25 * us}, {25 * us, 30 * us}},
               {{0, 0}, {0, 12 * us}, {12 * us, 25 * us}, {25 * us, 25 * us}, {25 * us, 31 * us}}};
  rec.peak_bytes = {1024, 2048};
  const ex::MeasuredSummary s = ex::summarize(plan, rec);
  EXPECT_DOUBLE_EQ(s.step_time_s, 31 * us);
  EXPECT_EQ(s.critical_rank, 1);
  EXPECT_DOUBLE_EQ(s.busy_by_kind_s.at("gemm"), 12 * us);
  EXPECT_NEAR(s.busy_by_kind_s.at("collective"), 13 * us, 1e-15);
  EXPECT_NEAR(s.busy_by_kind_s.at("recv"), 6 * us, 1e-15);
  EXPECT_EQ(s.busy_by_kind_s.count("alloc"), 0u);
  EXPECT_NEAR(s.busy_by_phase_s.at("fwd"), 31 * us, 1e-15);
  EXPECT_NEAR(s.breakdown_s.at("compute"), 12 * us, 1e-15);
  EXPECT_NEAR(s.breakdown_s.at("tp_comm"), 13 * us, 1e-15);
  EXPECT_NEAR(s.breakdown_s.at("pp_comm"), 6 * us, 1e-15);
  EXPECT_NEAR(s.breakdown_s.at("bubble"), 0, 1e-15);

  std::ostringstream out;
  ex::write_measured(plan, rec, {{"gpu", "synthetic"}}, true, out);
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["schema"], "stepcast.result/1");
  EXPECT_DOUBLE_EQ(j["memory_peak_gib"].get<double>(), 2048.0 / (1024.0 * 1024 * 1024));
  EXPECT_EQ(j["timeline"][1]["tasks_s"][4][1].get<double>(), 31 * us);
  // Bad recorded times are refused.
  rec.times[0][1] = {10 * us, 5 * us};
  EXPECT_THROW(ex::summarize(plan, rec), ex::ProgramError);
}

// The 1-GPU Program run back to back in issue order with a fixed time per kind: gemm 10 us,
// attention 40 us, memory_bound 5 us, alloc/free 0 (tasks per kind from the Program:
// 54 gemm, 8 attention, 46 memory_bound, so the step is 54*10 + 8*40 + 46*5 = 1090 us).
// `validate PREDICTED MEASURED` accepts the file and reports these numbers as measured.
TEST(ExecMeasured, SyntheticRunIsAcceptedByValidate) {
  const sc::Scenario s = scenario("tiny_1gpu.yaml");
  const sc::Prediction pred = sc::predict(s);
  const ex::Program p = to_exec(pred.program, "tiny_1gpu");
  const ex::Plan plan = ex::make_plan(p);
  const std::map<ex::Kind, double> us_of = {
      {ex::Kind::kGemm, 10}, {ex::Kind::kAttention, 40}, {ex::Kind::kMemoryBound, 5}};
  ex::Recorded rec;
  rec.times.resize(1);
  rec.times[0].resize(p.ranks[0].tasks.size());
  rec.peak_bytes = {-1};
  double t = 0;
  std::map<std::string, int> per_kind;
  std::map<std::string, double> per_phase_us;
  for (const ex::IssueStep& st : plan.steps) {
    const ex::Task& task = plan.task(st.tasks[0]);
    const auto it = us_of.find(task.kind);
    const double d = it == us_of.end() ? 0.0 : it->second;
    rec.times[0][static_cast<size_t>(task.id)] = {t * 1e-6, (t + d) * 1e-6};
    t += d;
    ++per_kind[ex::kind_name(task.kind)];
    if (d > 0) per_phase_us[ex::kPhases[static_cast<size_t>(task.phase)]] += d;
  }
  ASSERT_EQ(per_kind["gemm"], 54);
  ASSERT_EQ(per_kind["attention"], 8);
  ASSERT_EQ(per_kind["memory_bound"], 46);
  std::ostringstream out;
  ex::write_measured(plan, rec, {}, false, out);
  const nlohmann::json meas = nlohmann::json::parse(out.str());
  nlohmann::json cmp;
  const std::string table = sc::compare_results(sc::result_to_json(pred.result).dump(1),
                                                "predicted.json", out.str(), "measured.json", &cmp);
  std::map<std::string, double> measured;
  for (const auto& row : cmp["rows"])
    measured[row["what"].get<std::string>()] = row["measured_s"].get<double>();
  EXPECT_NEAR(measured.at("step"), 1090e-6, 1e-12) << table;
  EXPECT_NEAR(measured.at("busy_by_kind.gemm"), 540e-6, 1e-12) << table;
  EXPECT_NEAR(measured.at("busy_by_kind.attention"), 320e-6, 1e-12) << table;
  EXPECT_NEAR(measured.at("busy_by_kind.memory_bound"), 230e-6, 1e-12) << table;
  for (const auto& [phase, v] : per_phase_us)
    EXPECT_NEAR(measured.at("busy_by_phase." + phase), v * 1e-6, 1e-12) << phase << "\n" << table;
  // One GPU, one stream: the exposed time is all compute (no recompute, no optimizer
  // category tasks unless the Program has them), nothing is bubble.
  double exposed = 0;
  for (const auto& [k, v] : meas["breakdown_s"].items()) exposed += v.get<double>();
  EXPECT_NEAR(exposed, 1090e-6, 1e-12);
  EXPECT_NEAR(measured.at("breakdown.bubble"), 0, 1e-12) << table;
  // The untimed step (--graph --untimed) is written only when measured, beside the timed
  // one, and the document still compares.
  EXPECT_FALSE(meas.contains("step_time_untimed_s"));
  rec.untimed_step_s = 1050e-6;
  std::ostringstream untimed;
  ex::write_measured(plan, rec, {}, false, untimed);
  const nlohmann::json u = nlohmann::json::parse(untimed.str());
  EXPECT_DOUBLE_EQ(u["step_time_untimed_s"].get<double>(), 1050e-6);
  EXPECT_DOUBLE_EQ(u["step_time_s"].get<double>(), 1090e-6);
  // validate sets the prediction beside it: 1090 us less the events' 40 us in this made-up
  // run, so the untimed row's error is (p - 1050) / 1050 where the timed one's is (p - 1090)
  // / 1090.
  nlohmann::json cmp_u;
  sc::compare_results(sc::result_to_json(pred.result).dump(1), "predicted.json", untimed.str(),
                      "measured.json", &cmp_u);
  const double p_step = pred.result.step_time_s;
  bool found = false;
  for (const auto& row : cmp_u["rows"])
    if (row["what"] == "step, untimed") {
      found = true;
      EXPECT_DOUBLE_EQ(row["measured_s"].get<double>(), 1050e-6);
      EXPECT_NEAR(row["error"].get<double>(), (p_step - 1050e-6) / 1050e-6, 1e-12);
    }
  EXPECT_TRUE(found);
  // A bad value is an input error at its key, like step_time_s.
  nlohmann::json bad = u;
  bad["step_time_untimed_s"] = -1;
  try {
    sc::compare_results(sc::result_to_json(pred.result).dump(1), "predicted.json", bad.dump(1),
                        "measured.json", nullptr);
    ADD_FAILURE() << "no InputError";
  } catch (const stepcast::InputError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].key, "step_time_untimed_s");
    EXPECT_GT(e.issues()[0].line, 0);
  }
}

// Property over plan shapes (schedules, DualPipeV too, ZeRO stages, recompute, cp) of the
// 8-GPU scenario at full fidelity: the plan builds without deadlock, its issue order is
// valid, it finds the simulator's rendezvous; and "recording" the engine's own schedule
// (sc::simulate with a fixed duration per kind) through summarize gives the engine's step
// time, critical rank and exposed-time breakdown. Earliest-start times are the same in any
// topological order, so the executor's list schedule below, in its issue order, must
// reproduce the engine's.
TEST(ExecMeasured, EngineScheduleRecordedGivesTheEngineNumbers) {
  const std::map<ex::Kind, std::int64_t> ns_of = {
      {ex::Kind::kGemm, 10000},      {ex::Kind::kAttention, 40000}, {ex::Kind::kMemoryBound, 5000},
      {ex::Kind::kCollective, 7000}, {ex::Kind::kSend, 3000},       {ex::Kind::kRecv, 3000}};
  std::vector<std::map<std::string, std::string>> variants;
  for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zb-h1"})
    for (const char* zero : {"0", "1", "3"})
      for (const char* recompute : {"none", "full"}) {
        std::map<std::string, std::string> e = {
            {"  schedule: 1f1b", std::string("  schedule: ") + schedule},
            {"  zero: 1", std::string("  zero: ") + zero},
            {"  recompute: none", std::string("  recompute: ") + recompute}};
        if (std::string(schedule) == "interleaved") e["  pp: 2"] = "  pp: 2\n  vpp: 2";
        variants.push_back(e);
      }
  for (const char* zero : {"0", "1"})  // DualPipeV: ZeRO 0/1, no full recompute
    variants.push_back({{"  schedule: 1f1b", "  schedule: dualpipev"},
                        {"  pp: 2", "  pp: 2\n  vpp: 2"},
                        {"  zero: 1", std::string("  zero: ") + zero}});
  variants.push_back({{"  cp: 1", "  cp: 2"}});  // tp 2 x cp 2 x pp 2, dp 1
  for (const auto& edits : variants) {
    std::string name;
    for (const auto& [k, v] : edits) name += v + ";";
    SCOPED_TRACE(name);
    const sc::Program sp = lowered(scenario("tiny_8gpu.yaml", edits), false);
    const ex::Program p = to_exec(sp, "variant");
    const ex::Plan plan = ex::make_plan(p);
    expect_valid_order(plan);
    EXPECT_EQ(static_cast<int>(plan.rendezvous.size()), sc::match_rendezvous(sp).instance_count());

    sc::Durations dur(sp.ranks.size());
    for (size_t r = 0; r < sp.ranks.size(); ++r) {
      auto& row = dur[r];
      for (const ex::Task& t : p.ranks[r].tasks) {
        const auto it = ns_of.find(t.kind);
        row.push_back(it == ns_of.end() ? 0 : it->second);
      }
    }
    const sc::Timeline tl = sc::simulate(sp, dur);

    // The executor's list schedule in issue order (integer ns, then seconds).
    ex::Recorded rec;
    rec.times.resize(8);
    std::vector<std::vector<std::int64_t>> start(8), end(8);
    std::vector<std::vector<std::int64_t>> stream_free(
        8, std::vector<std::int64_t>(ex::kStreams.size(), 0));
    for (int r = 0; r < 8; ++r) {
      start[static_cast<size_t>(r)].assign(plan.tasks_of(r).size(), 0);
      end[static_cast<size_t>(r)].assign(plan.tasks_of(r).size(), 0);
    }
    for (const ex::IssueStep& st : plan.steps) {
      std::int64_t t0 = 0, d = 0;
      for (const ex::RankTask& rt : st.tasks) {
        const ex::Task& t = plan.task(rt);
        t0 = std::max(t0, stream_free[static_cast<size_t>(rt.rank)][static_cast<size_t>(t.stream)]);
        for (int dep : t.deps)
          t0 = std::max(t0, end[static_cast<size_t>(rt.rank)][static_cast<size_t>(dep)]);
        d = std::max(d, dur[static_cast<size_t>(rt.rank)][static_cast<size_t>(t.id)]);
      }
      for (const ex::RankTask& rt : st.tasks) {
        const ex::Task& t = plan.task(rt);
        start[static_cast<size_t>(rt.rank)][static_cast<size_t>(t.id)] = t0;
        end[static_cast<size_t>(rt.rank)][static_cast<size_t>(t.id)] = t0 + d;
        stream_free[static_cast<size_t>(rt.rank)][static_cast<size_t>(t.stream)] = t0 + d;
      }
    }
    for (int r = 0; r < 8; ++r)
      for (size_t i = 0; i < start[static_cast<size_t>(r)].size(); ++i) {
        EXPECT_EQ(start[static_cast<size_t>(r)][i], tl.ranks[static_cast<size_t>(r)].tasks[i].start)
            << "rank " << r << " task " << i;
        rec.times[static_cast<size_t>(r)].push_back(
            {start[static_cast<size_t>(r)][i] * 1e-9, end[static_cast<size_t>(r)][i] * 1e-9});
      }
    rec.peak_bytes.assign(8, -1);
    const ex::MeasuredSummary s = ex::summarize(plan, rec);
    EXPECT_NEAR(s.step_time_s, tl.step_ns * 1e-9, 1e-12);
    EXPECT_EQ(s.critical_rank, sp.ranks[static_cast<size_t>(tl.critical_rank)].rank);
    for (int c = 0; c <= sc::kCategoryCount; ++c)
      EXPECT_NEAR(s.breakdown_s.at(sc::breakdown_name(c)),
                  tl.breakdown_ns[static_cast<size_t>(c)] * 1e-9, 1e-12)
          << sc::breakdown_name(c);
  }
}
