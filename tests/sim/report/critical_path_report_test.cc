// The critical path as the user sees it (Result::critical_path, summarize_critical_path):
// derived by hand on a one-GPU plan and a two-stage pipeline; over random plans it covers
// [0, step] in time order without gaps or overlap, its per-category, per-kind and per-phase
// sums equal the step time, and it is the same when computed twice; it reaches the JSON.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "sim/engine/critical_path.h"
#include "sim/report/explore.h"
#include "sim/report/report.h"
#include "sim/report/search_prune.h"
#include "sim/scenario/scenario.h"

namespace stepcast {
namespace {

// A small Llama-like model (8 layers, h 1024) on `gpus` GPUs with the given plan.
Scenario narrow(int gpus, int pp, int global_batch) {
  YAML::Node doc = YAML::Load(R"(
name: narrow
model: {layers: 8, hidden: 1024, ffn_hidden: 4096, heads: 8, kv_heads: 8, vocab: 32000,
        activation: swiglu, norm: rmsnorm, tied_embeddings: false}
cluster: {profile: h100-sxm}
training: {seq_len: 2048, dtype: bf16, optimizer: adam}
parallel: {tp: 1, cp: 1, microbatch: 1, schedule: 1f1b, zero: 0, sequence_parallel: false}
)");
  doc["cluster"]["gpus"] = gpus;
  doc["training"]["global_batch"] = global_batch;
  doc["parallel"]["pp"] = pp;
  return load_scenario_node(doc, "narrow.yaml");
}

double sum(const std::map<std::string, double>& m) {
  double s = 0;
  for (const auto& [k, v] : m) s += v;
  return s;
}

Prediction with_path(const Scenario& sc, bool folded = true) {
  RunOptions o;
  o.critical_path = true;
  o.folded = folded;
  return predict(sc, o);
}

// One GPU, no parallelism: every task runs on the compute stream (no group has a second
// member, so there is no collective or send), back to back from 0 to the step time. So the
// critical path is the compute stream itself: all its tasks that take time, on rank 0, never
// changing rank; per kind and phase it equals the busy time of the (only) rank, and the
// longest task on it is the longest task of the step.
TEST(CriticalPathReport, OneGpuIsTheComputeStream) {
  const Prediction p = with_path(narrow(1, 1, 2));
  const Result& r = p.result;
  ASSERT_TRUE(r.has_critical_path);
  const CriticalPathSummary& cp = r.critical_path;
  int busy_tasks = 0;
  double longest = 0;
  const RankTimeline& tl = p.timeline.ranks.front();
  for (const Task& t : p.program.ranks.front().tasks) {
    const TaskTiming& tt = tl.tasks[static_cast<size_t>(t.id)];
    if (tt.end == tt.start) continue;
    EXPECT_EQ(t.stream, StreamKind::kCompute) << t.label;
    ++busy_tasks;
    longest = std::max(longest, to_s(tt.end - tt.start));
  }
  EXPECT_EQ(cp.tasks, busy_tasks);
  EXPECT_EQ(cp.ranks, std::vector<int>{0});
  EXPECT_EQ(cp.rank_changes, 0);
  EXPECT_NEAR(cp.total_s, r.step_time_s, 1e-12);
  EXPECT_GT(r.host_bound_s, 0);
  // The busy kinds, and "host" (the kernels' waits for their launch).
  ASSERT_EQ(cp.by_kind_s.size(), r.busy_by_kind_s.size() + 1);
  EXPECT_NEAR(cp.by_kind_s.at("host"), r.host_bound_s, 1e-12);
  for (const auto& [k, v] : r.busy_by_kind_s) EXPECT_NEAR(cp.by_kind_s.at(k), v, 1e-12) << k;
  for (const auto& [k, v] : r.busy_by_phase_s) EXPECT_NEAR(cp.by_phase_s.at(k), v, 1e-12) << k;
  // "host": the tiny model's kernels are shorter than their 10 us launches (docs/model.md,
  // "The host"): the time they wait for the host is on the path too, beside the kernels.
  for (const auto& [k, v] : cp.by_category_s)
    EXPECT_TRUE(k == "compute" || k == "optimizer" || k == "host") << k;
  EXPECT_NEAR(cp.by_category_s.at("host"), r.host_bound_s, 1e-12);
  ASSERT_EQ(cp.longest.size(), 5u);
  EXPECT_EQ(cp.longest.front().duration_s, longest);
  for (size_t i = 1; i < cp.longest.size(); ++i)
    EXPECT_GE(cp.longest[i - 1].duration_s, cp.longest[i].duration_s);
}

// Two pipeline stages, one microbatch: the step is F on stage 0, the activation send to
// stage 1, F and B there, the gradient send back, B on stage 0 (then each stage's optimizer,
// in parallel). Nothing else can overlap that chain, so the path starts on rank 0, crosses
// to rank 1 and back (2 hops at least) and holds pipeline communication.
TEST(CriticalPathReport, TwoStagesCrossBothRanks) {
  const Prediction p = with_path(narrow(2, 2, 1));
  const CriticalPathSummary& cp = p.result.critical_path;
  EXPECT_EQ(cp.ranks, (std::vector<int>{0, 1}));
  EXPECT_GE(cp.rank_changes, 2);
  EXPECT_GT(cp.by_category_s.at("pp_comm"), 0);
  EXPECT_GT(cp.by_phase_s.at("fwd"), 0);
  EXPECT_GT(cp.by_phase_s.at("bwd_input"), 0);
  EXPECT_NEAR(cp.total_s, p.result.step_time_s, 1e-12);
}

// Over random plans of the search space (folded and full fidelity): the path covers
// [0, step] in time order, each task starting where the previous one ended (no overlap) or,
// for a kernel that waited for its launch, later (the host's gap), so its durations (compute
// and communication, a collective's including the wait for its slowest member) and the
// host's gaps add up to the step time, and so do the categories, the kinds and the phases,
// each with "host" (the kinds and phases left it out: the report's tables fell short of the
// step by the host's time). The summary is
// the same when computed again, and survives the JSON round trip.
TEST(CriticalPathReport, CoversTheStepOnRandomPlans) {
  YAML::Node doc =
      YAML::LoadFile(std::string(STEPCAST_SOURCE_DIR) + "/scenarios/llama3-8b-1node-h100.yaml");
  doc["training"]["global_batch"] = 16;
  doc["training"]["seq_len"] = 4096;
  const Scenario base = load_scenario_node(doc, "small.yaml");
  auto cands = search_candidates(base);
  std::mt19937_64 rng(4711);
  std::shuffle(cands.begin(), cands.end(), rng);
  int checked = 0;
  for (size_t i = 0; i < cands.size() && checked < 24; ++i) {
    Scenario sc;
    try {
      sc = load_scenario_node(cands[i].document(), "plan.yaml");
    } catch (const InputError&) {
      continue;
    }
    const bool folded = checked % 3 != 0;
    const Prediction p = with_path(sc, folded);
    const Result& r = p.result;
    const auto path = critical_path(p.program, p.timeline);
    ASSERT_FALSE(path.empty()) << r.layout;
    auto timing = [&](std::pair<int, int> x) {
      return p.timeline.ranks[static_cast<size_t>(x.first)].tasks[static_cast<size_t>(x.second)];
    };
    EXPECT_EQ(timing(path.back()).end, p.timeline.step_ns) << r.layout;
    TimeNs covered = 0, host = 0, prev_end = 0;
    for (size_t k = 0; k < path.size(); ++k) {
      const TaskTiming t = timing(path[k]);
      const Task& task = p.program.ranks[static_cast<size_t>(path[k].first)]
                             .tasks[static_cast<size_t>(path[k].second)];
      EXPECT_LE(t.start, t.end);
      EXPECT_GE(t.start, prev_end) << r.layout << " at " << k;
      if (t.start > prev_end) {  // only a kernel waits for its launch
        EXPECT_TRUE(task.kind == TaskKind::kGemm || task.kind == TaskKind::kAttention ||
                    task.kind == TaskKind::kMemoryBound)
            << r.layout << " at " << k;
        host += t.start - prev_end;
      }
      prev_end = t.end;
      covered += t.end - t.start;
    }
    EXPECT_EQ(covered + host, p.timeline.step_ns) << r.layout;
    const CriticalPathSummary& cp = r.critical_path;
    const double tol = 1e-9 * r.step_time_s;
    const double host_s = cp.by_category_s.count("host") ? cp.by_category_s.at("host") : 0.0;
    EXPECT_NEAR(host_s, to_s(host), tol) << r.layout;
    EXPECT_NEAR(cp.total_s, r.step_time_s, tol) << r.layout;
    EXPECT_NEAR(sum(cp.by_category_s), r.step_time_s, tol) << r.layout;
    EXPECT_NEAR(sum(cp.by_kind_s), r.step_time_s, tol) << r.layout;
    EXPECT_NEAR(sum(cp.by_phase_s), r.step_time_s, tol) << r.layout;
    if (host_s > 0) {
      EXPECT_EQ(cp.by_kind_s.at("host"), host_s);
      EXPECT_EQ(cp.by_phase_s.at("host"), host_s);
    }
    for (size_t k = 1; k < cp.longest.size(); ++k)
      EXPECT_GE(cp.longest[k - 1].duration_s, cp.longest[k].duration_s);
    const CriticalPathSummary again = summarize_critical_path(p.program, p.timeline);
    EXPECT_EQ(again.by_category_s, cp.by_category_s);
    EXPECT_EQ(again.ranks, cp.ranks);
    const Result back = result_from_json(result_to_json(r));
    EXPECT_TRUE(back.has_critical_path);
    EXPECT_EQ(back.critical_path.by_kind_s, cp.by_kind_s);
    EXPECT_EQ(back.critical_path.longest.size(), cp.longest.size());
    EXPECT_EQ(back.critical_path.rank_changes, cp.rank_changes);
    EXPECT_EQ(back.interference_s, r.interference_s);
    ++checked;
  }
  EXPECT_EQ(checked, 24);
}

// Without RunOptions::critical_path (search, sweeps, regress) nothing is computed and the
// JSON has no critical_path key (stepcast.result/1 only gains it when present).
TEST(CriticalPathReport, OnlyWhenAskedFor) {
  const Result r = predict(narrow(1, 1, 1)).result;
  EXPECT_FALSE(r.has_critical_path);
  EXPECT_FALSE(result_to_json(r).contains("critical_path"));
  const Result with = with_path(narrow(1, 1, 1)).result;
  EXPECT_TRUE(result_to_json(with).contains("critical_path"));
  EXPECT_NE(render_text(with).find("Critical path: "), std::string::npos);
  EXPECT_EQ(render_text(r).find("Critical path"), std::string::npos);
}

// The time communication added to the critical rank's kernels (Result::interference_s)
// reaches the text and the JSON. A one-GPU plan runs no communication: 0 and no line. Eight
// data-parallel GPUs (global batch 8, one microbatch each) overlap the gradient allreduce
// with the backward: its kernels are slowed, and by less than half their busy time (a kernel
// runs at least at half speed: the SM slowdown is 0.138 on H100, an HBM share at most 1).
// Exact amounts: engine_test (closed forms and the per-kernel property).
TEST(Report, InterferenceOnTheCriticalRank) {
  const Result one = predict(narrow(1, 1, 1)).result;
  EXPECT_EQ(one.interference_s, 0);
  EXPECT_EQ(render_text(one).find("slowed by communication"), std::string::npos);
  const Result dp = predict(narrow(8, 1, 8)).result;
  double busy = 0;
  for (const char* k : {"gemm", "attention", "memory_bound"})
    if (dp.busy_by_kind_s.count(k)) busy += dp.busy_by_kind_s.at(k);
  EXPECT_GT(dp.interference_s, 0);
  EXPECT_LT(dp.interference_s, busy / 2);
  EXPECT_NE(render_text(dp).find("kernels slowed by communication beside them: +"),
            std::string::npos);
  EXPECT_EQ(result_to_json(dp).at("interference_s").get<double>(), dp.interference_s);
}

// gpu.memory_reserved takes memory from the plans: a one-GPU plan of peak P fits in the
// H100's 79.65 GiB, still fits with all but 1.1 P reserved, and does not with all but 0.9 P;
// the capacity reported is what is left, the reserve is said in the text and the JSON.
TEST(Report, MemoryReservedTakesMemoryFromThePlan) {
  Scenario sc = narrow(1, 1, 1);
  const Result plain = predict(sc).result;
  ASSERT_TRUE(plain.fits_memory);
  // The key is always there (docs/usage.md lists it), 0 when nothing is reserved.
  EXPECT_EQ(result_to_json(plain).at("memory_reserved_gib").get<double>(), 0.0);
  const double total = sc.profile.gpu.memory_bytes, peak = plain.memory_peak_gib * kGiB;
  sc.profile.gpu.memory_reserved_bytes = total - 1.1 * peak;
  const Result roomy = predict(sc).result;
  EXPECT_TRUE(roomy.fits_memory);
  EXPECT_EQ(roomy.memory_peak_gib, plain.memory_peak_gib);
  EXPECT_NEAR(roomy.memory_capacity_gib, 1.1 * plain.memory_peak_gib, 1e-9);
  sc.profile.gpu.memory_reserved_bytes = total - 0.9 * peak;
  const Result tight = predict(sc).result;
  EXPECT_FALSE(tight.fits_memory);
  EXPECT_NEAR(tight.memory_reserved_gib, (total - 0.9 * peak) / kGiB, 1e-9);
  EXPECT_NE(render_text(tight).find("(does not fit; "), std::string::npos);
  EXPECT_NE(render_text(tight).find("GiB more kept in reserve)"), std::string::npos);
  const Result back = result_from_json(result_to_json(tight));
  EXPECT_EQ(back.memory_reserved_gib, tight.memory_reserved_gib);
  EXPECT_EQ(back.memory_capacity_gib, tight.memory_capacity_gib);
  // Search's shortcut (the training state alone against the capacity) uses what is left too.
  sc.profile.gpu.memory_reserved_bytes = total - 0.01 * peak;
  SearchRunOptions skip;
  skip.skip_when_state_exceeds_memory = true;
  const Result state = predict_pruned(sc, skip).result;
  EXPECT_FALSE(state.fits_memory);
  EXPECT_FALSE(state.simulated);
}

}  // namespace
}  // namespace stepcast
