// The executor's --host backend (calibrate/exec/host_backend.h, schedule.h): the issue loop
// the GPU layer runs — one thread per rank, a Board for rendezvous — run on a virtual clock.
//  - every shipped scenario (scenarios/*.yaml, scenarios/validation/*.yaml; folded, as
//    `stepcast run` predicts them) and every tests/data/exec case (full fidelity): given the
//    durations the engine's prediction ran with (each task's end - start), the host run
//    reproduces every task's start and end exactly. The engine's schedule is a max-plus
//    expression of those durations (a task starts at the latest of its stream predecessor's
//    end, its deps' ends and, for a rendezvous, its members' ready times), so equality task by
//    task shows the executor issues in the order the engine assumes and cannot deadlock on
//    the Program;
//  - random durations (property): engine (no interference) and host agree on tiny_8gpu;
//  - a Program the threads cannot finish: a ProgramError naming the stuck heads.
#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "calibrate/exec/host_backend.h"
#include "calibrate/exec/measured.h"
#include "calibrate/exec/plan.h"
#include "calibrate/exec/program.h"
#include "sim/engine/engine.h"
#include "sim/lower/lower.h"
#include "sim/program/program_json.h"
#include "sim/report/report.h"
#include "sim/scenario/scenario.h"

namespace ex = stepcast::exec;
namespace sc = stepcast;

namespace {

using Ns = std::vector<std::vector<std::int64_t>>;

// Compares the host run of `p` (its simulated ranks) against the engine's timeline `t` of the
// same Program, given the durations the engine realised. Returns the number of tasks.
size_t expect_host_matches(const sc::Program& p, const sc::Timeline& t, const std::string& name,
                           ex::Threading threading = ex::Threading::kOnePerRank) {
  const ex::Program ep = ex::parse_program(sc::write_program_json(p, -1), name);
  const ex::Plan plan = ex::make_plan(ep, ex::PlanMode::kSimulated);
  Ns d(plan.ranks.size());
  for (size_t r = 0; r < plan.ranks.size(); ++r)
    for (const sc::TaskTiming& tt : t.ranks[r].tasks) d[r].push_back(tt.end - tt.start);
  const ex::HostRun run = ex::run_on_host(plan, d, threading);
  size_t tasks = 0, wrong = 0;
  std::int64_t last = 0;
  for (size_t r = 0; r < plan.ranks.size(); ++r)
    for (size_t i = 0; i < run.times[r].size(); ++i, ++tasks) {
      const sc::TaskTiming& want = t.ranks[r].tasks[i];
      const ex::SpanNs& got = run.times[r][i];
      last = std::max(last, got.end);
      if (got.start != want.start || got.end != want.end) {
        if (++wrong <= 3)
          ADD_FAILURE() << name << ": rank " << r << " task " << i << " ('"
                        << p.ranks[r].tasks[i].label << "'): host [" << got.start << ", " << got.end
                        << "], engine [" << want.start << ", " << want.end << "]";
      }
    }
  EXPECT_EQ(wrong, 0u) << name << ": of " << tasks << " tasks";
  EXPECT_EQ(last, t.step_ns) << name;
  return tasks;
}

std::vector<std::string> yaml_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(STEPCAST_SOURCE_DIR) + "/" + dir))
    if (e.path().extension() == ".yaml" && e.path().filename() != "cases.yaml")
      files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// The scenario with the host's launch and op times at 0: with them the engine starts a
// kernel at its launch, which a replay of durations does not model (the executor's own host
// costs what it costs); its syncs then change nothing (docs/model.md, "The host"), so the
// order replayed is the engine's.
sc::Scenario without_launch_time(const std::string& f) {
  sc::Scenario s = sc::load_scenario(f);
  s.framework.host_launch_us = 0;
  s.framework.host_op_us = 0;
  return s;
}

void expect_scenarios_match(const std::vector<std::string>& files) {
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    const sc::Prediction pr = sc::predict(without_launch_time(f));
    EXPECT_GT(expect_host_matches(pr.program, pr.timeline, f, ex::Threading::kOne), 0u);
  }
}

}  // namespace

// Every shipped scenario, folded as `stepcast run` predicts it. The ranks' walks take turns
// on one thread (Threading::kOne: the same decisions, without thread hand-offs); the threads
// run the cases below. Most of the time goes to writing and reading the Program's JSON (the
// validation cases lower to up to 2.8 million tasks, 0.8 GB of JSON).
#ifndef STEPCAST_EXEC_HOST_VALIDATION
TEST(ExecHost, EveryShippedScenarioReproducesThePrediction) {
  const auto files = yaml_files("scenarios");
  ASSERT_GE(files.size(), 8u);
  expect_scenarios_match(files);
}

#else
// The validation cases (scenarios/validation): the same check, minutes rather than seconds
// (their Programs are up to 2.8 million tasks): CTest calibrate_exec_host_validation, label
// slow (`ctest -L slow`).
TEST(ExecHost, EveryValidationScenarioReproducesThePrediction) {
  const auto files = yaml_files("scenarios/validation");
  ASSERT_GE(files.size(), 8u);
  expect_scenarios_match(files);
}
#endif

#ifndef STEPCAST_EXEC_HOST_VALIDATION
// The executor's own cases at full fidelity (what it runs on GPUs); expanded and simulated
// plans are the same there, and the expanded one's issue order passes the same run.
TEST(ExecHost, ExecCasesAtFullFidelity) {
  for (const char* c : {"tiny_1gpu", "tiny_8gpu", "mcore_1.7B_1gpu"}) {
    const std::string f = std::string(STEPCAST_SOURCE_DIR) + "/tests/data/exec/" + c + ".yaml";
    SCOPED_TRACE(f);
    sc::RunOptions opt;
    opt.folded = false;
    const sc::Prediction pr = sc::predict(without_launch_time(f), opt);
    expect_host_matches(pr.program, pr.timeline, c);
    const ex::Program ep = ex::parse_program(sc::write_program_json(pr.program, -1), c);
    const ex::Plan expanded = ex::make_plan(ep);
    const ex::Plan simulated = ex::make_plan(ep, ex::PlanMode::kSimulated);
    ASSERT_EQ(expanded.ranks.size(), simulated.ranks.size());
    EXPECT_EQ(expanded.rendezvous.size(), simulated.rendezvous.size());
    EXPECT_EQ(expanded.pairs.size(), simulated.pairs.size());
  }
}

// Property: for random durations, the engine (no interference: a max-plus schedule) and the
// host run agree task by task. tiny_8gpu at full fidelity: tp 2, pp 2, dp 2, every kind.
TEST(ExecHost, RandomDurationsMatchTheEngine) {
  const std::string f = std::string(STEPCAST_SOURCE_DIR) + "/tests/data/exec/tiny_8gpu.yaml";
  sc::LowerOptions lo;
  lo.folded = false;
  const sc::Program p = sc::lower(sc::load_scenario(f), lo);
  std::mt19937_64 rng(28);
  for (int trial = 0; trial < 5; ++trial) {
    sc::Durations d(p.ranks.size());
    std::uniform_int_distribution<std::int64_t> u(0, 50'000);
    for (size_t r = 0; r < p.ranks.size(); ++r)
      for (size_t i = 0; i < p.ranks[r].tasks.size(); ++i) d[r].push_back(u(rng));
    const sc::Timeline t = sc::simulate(p, d);
    expect_host_matches(p, t, "tiny_8gpu trial " + std::to_string(trial));
  }
}

// A host_sync task (the host waits for its end) holds back the rank's later kernels, as the
// engine's host does. Tasks: 0 compute, 1 dp, 2 compute with host_sync, 3 and 4 dp, 5 an
// alloc, 6 compute. parse_program makes the first later kernel on each other stream depend
// on the sync (3), not the next one there (4 follows 3 on its stream), not an allocation
// (5), not a kernel before it (1) nor one on its own stream (6). With every task 10 ns: 0
// and 1 run 0..10, the sync 10..20, then 3 at 20..30 (not 10..20 behind 1), 4 at 30..40, 6
// at 20..30.
TEST(ExecHost, HostSyncHoldsBackLaterKernels) {
  auto mem = [](int id, const char* stream, bool sync) {
    return std::string(R"({"id":)") + std::to_string(id) + R"(,"kind":"memory_bound","stream":")" +
           stream + R"(","phase":"fwd","category":"compute","label":"m)" + std::to_string(id) +
           R"(","host_sync":)" + (sync ? "true" : "false") +
           R"(,"memory_bound":{"bytes_read":8,"bytes_written":8,"what":"x"}})";
  };
  const std::string prog =
      R"({"schema":"stepcast.program/1","world_size":1,"folded":false,"groups":[],"ranks":[)"
      R"({"rank":0,"tasks":[)" +
      mem(0, "compute", false) + "," + mem(1, "dp", false) + "," + mem(2, "compute", true) + "," +
      mem(3, "dp", false) + "," + mem(4, "dp", false) + "," +
      R"({"id":5,"kind":"alloc","stream":"tp","phase":"fwd","category":"compute","label":"a5",)"
      R"("alloc":{"bytes":8,"what":"y"}},)" +
      mem(6, "compute", false) + "]}]}";
  const ex::Program p = ex::parse_program(prog, "sync");
  const auto& t = p.ranks[0].tasks;
  EXPECT_TRUE(t[1].deps.empty());
  EXPECT_EQ(t[3].deps, std::vector<int>{2});
  EXPECT_TRUE(t[4].deps.empty());
  EXPECT_TRUE(t[5].deps.empty());
  EXPECT_TRUE(t[6].deps.empty());
  const ex::Plan plan = ex::make_plan(p, ex::PlanMode::kSimulated);
  const ex::HostRun run = ex::run_on_host(plan, ex::uniform_durations(plan, 10));
  const auto& at = run.times[0];
  EXPECT_EQ(at[1].start, 0);
  EXPECT_EQ(at[2].start, 10);
  EXPECT_EQ(at[3].start, 20);
  EXPECT_EQ(at[4].start, 30);
  EXPECT_EQ(at[6].start, 20);
}

// Two ranks exchanging in opposite orders: rank 0 sends (tag 1) then receives (tag 2), rank
// 1 receives tag 1 then sends tag 2: fine. The runtime's Board is then given a plan whose
// rank 1 meets the two rendezvous the other way round (instance table swapped): rank 0 waits
// in rendezvous 0 for rank 1, rank 1 in rendezvous 1 for rank 0 — both threads asleep, none
// can post: a ProgramError naming both stuck heads, not a hang.
TEST(ExecHost, DeadlockIsAnErrorNotAHang) {
  const std::string prog = R"({"schema":"stepcast.program/1","world_size":2,"folded":false,
    "groups":[],"ranks":[
    {"rank":0,"tasks":[
      {"id":0,"kind":"send","stream":"compute","phase":"fwd","category":"pp_comm","label":"s1",
       "send":{"peer":1,"bytes":8,"tag":1}},
      {"id":1,"kind":"recv","stream":"compute","phase":"fwd","category":"pp_comm","label":"r2",
       "recv":{"peer":1,"bytes":8,"tag":2}}]},
    {"rank":1,"tasks":[
      {"id":0,"kind":"recv","stream":"compute","phase":"fwd","category":"pp_comm","label":"r1",
       "recv":{"peer":0,"bytes":8,"tag":1}},
      {"id":1,"kind":"send","stream":"compute","phase":"fwd","category":"pp_comm","label":"s2",
       "send":{"peer":0,"bytes":8,"tag":2}}]}]})";
  const ex::Program p = ex::parse_program(prog, "swap");
  ex::Plan plan = ex::make_plan(p);
  const ex::HostRun ok = ex::run_on_host(plan, ex::uniform_durations(plan, 10));
  // s1 meets r1 at 0..10, r2 meets s2 at 10..20.
  EXPECT_EQ(ok.times[0][1].start, 10);
  EXPECT_EQ(ok.times[1][1].end, 20);
  std::swap(plan.instance[1][0], plan.instance[1][1]);
  for (const auto threading : {ex::Threading::kOnePerRank, ex::Threading::kOne}) try {
      ex::run_on_host(plan, ex::uniform_durations(plan, 10), threading);
      FAIL() << "no deadlock reported";
    } catch (const ex::ProgramError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("the Program deadlocks"), std::string::npos) << m;
      EXPECT_NE(
          m.find("rank 0 stream compute: /ranks/0/tasks/0 ('s1', rank 0) waits for the other side"),
          std::string::npos)
          << m;
      EXPECT_NE(
          m.find("rank 1 stream compute: /ranks/1/tasks/0 ('r1', rank 1) waits for the other side"),
          std::string::npos)
          << m;
    }
}
#endif
