// The search's closed-form step bound (sim/report/search_bound.h): its terms are exactly the
// lowered program's compute-stream work, and it is never above the simulated step, over
// random plans of the search space.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "sim/cost/coster.h"
#include "sim/lower/lower.h"
#include "sim/report/explore.h"
#include "sim/report/report.h"
#include "sim/report/search_bound.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/search_space.h"
#include "tests/sim/report/search_plans.h"

namespace stepcast {
namespace {

using test_plans::random_plans;
using test_plans::scenarios;
using test_plans::shipped;

bool left_out_of_the_bound(const Task& t) {
  // Zeroing the gradients, ZeRO-2's copies into its buckets, ZeRO-3's copies out of its
  // gathers and into its reduce-scatters (FSDP2, DeepSpeed), Transformer Engine's fp8 weight
  // casts, Megatron-Core's NaN check of each gradient bucket and the optimizer step
  // (search_bound.h: left out, they only add).
  for (const char* w :
       {"zero_grad", "optimizer_step", "grad_copy", "grad_copy_x", "grad_norm_check", "z3_copy_out",
        "z3_cat", "z3_chunk_cat", "fp8_weight_cast"})
    if (t.what == w) return true;
  return false;
}

// C(s) is the sum of the lowered stage's compute-stream kernels (the three left out aside),
// first_forward(s) that of its forward of microbatch 0, chunk 0, and last_backward(s) that
// of its backward of the last microbatch, chunk 0 (not ZB-H1): the memoised unit costs
// reproduce the lowering's ops and shapes exactly (ring attention's blocks, recomputation,
// MoE layers, uneven stages). Without the cp split, or with recomputation left out, the sums
// differ.
TEST(StepBound, StageTermsAreTheLoweredComputeStream) {
  std::mt19937 rng(29);
  int checked = 0;
  for (const Scenario& base : scenarios()) {
    for (const Scenario& sc : random_plans(base, 8, rng)) {
      StepBound bound(sc);
      const StepBound::StageFloors f = bound.stage_floors(sc.parallel);
      ASSERT_EQ(f.compute.size(), static_cast<size_t>(sc.parallel.pp)) << sc.file;
      const Program prog = lower(sc);
      const Durations d = task_durations(prog, sc.profile);
      for (size_t r = 0; r < prog.ranks.size(); ++r) {
        const RankProgram& rp = prog.ranks[r];
        TimeNs work = 0, first = 0, last = 0;
        const int last_mb = static_cast<int>(sc.microbatches()) - 1;
        for (size_t i = 0; i < rp.tasks.size(); ++i) {
          const Task& t = rp.tasks[i];
          const bool compute = t.kind == TaskKind::kGemm || t.kind == TaskKind::kAttention ||
                               t.kind == TaskKind::kMemoryBound;
          if (!compute || t.stream != StreamKind::kCompute || left_out_of_the_bound(t)) continue;
          work += d[r][i];
          if (t.phase == Phase::kFwd && t.microbatch == 0 && t.chunk == 0) first += d[r][i];
          if (t.phase != Phase::kFwd && t.microbatch == last_mb && t.chunk == 0) last += d[r][i];
        }
        const size_t s = static_cast<size_t>(rp.pp_stage);
        EXPECT_EQ(work, f.compute[s]) << sc.file << " stage " << s << " " << sc.parallel.tp;
        EXPECT_EQ(first, f.first_forward[s]) << sc.file << " stage " << s;
        if (sc.parallel.schedule == Schedule::kZbH1) {
          EXPECT_TRUE(f.last_backward.empty());
        } else {
          ASSERT_EQ(f.last_backward.size(), f.compute.size());
          EXPECT_EQ(last, f.last_backward[s]) << sc.file << " stage " << s;
        }
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 24);
}

// The property: over random plans of the test spaces (search_plans.h), the bound is positive
// and never above the simulated step (all schedules, ZeRO stages, recompute, overlap and cp
// kinds drawn).
// The simulated step over the bound is printed: how tight it is on these plans.
TEST(StepBound, NeverAboveTheSimulatedStep) {
  std::mt19937 rng(2029);
  std::vector<double> ratio;
  for (const Scenario& base : scenarios()) {
    for (const Scenario& sc : random_plans(base, 25, rng)) {
      StepBound bound(sc);
      const TimeNs floor = bound.step_floor_ns(sc.parallel);
      const Result r = predict(sc).result;
      EXPECT_GT(floor, 0) << sc.file;
      EXPECT_LE(to_s(floor), r.step_time_s) << sc.file << " " << r.layout;
      ratio.push_back(r.step_time_s / to_s(floor));
    }
  }
  ASSERT_GE(ratio.size(), 90u);
  std::sort(ratio.begin(), ratio.end());
  std::cout << "simulated / bound over " << ratio.size() << " plans: median "
            << ratio[ratio.size() / 2] << ", worst " << ratio.back() << "\n";
}

// Plans that lower alike share their units' costs: the 8B space costs a few dozen unit
// shapes for its hundreds of plans (the memo is keyed by unit kind and shard, not by plan).
TEST(StepBound, CostsAreMemoisedByShape) {
  const Scenario base = scenarios().front();
  const auto cands = search_candidates(base);
  StepBound bound(base);
  size_t with_bound = 0;
  for (const auto& c : cands) {
    const Scenario sc = load_scenario_node(c.document(), base.file);
    with_bound += bound.step_floor_ns(sc.parallel) > 0;
  }
  EXPECT_EQ(with_bound, cands.size());
  // Shards: tp 1, or tp 2/4/8 with TP overlap on and off (its forward waits differ), x
  // microbatch 1/2/4/8 at most, 3 unit kinds each (dense, embed, head).
  EXPECT_LE(bound.shapes_costed(), (1u + 3u * 2u) * 4u * 3u);
  EXPECT_GT(cands.size(), 10 * bound.shapes_costed());
}

// search_in_chunks with closed-form bounds, over 400 synthetic plans: plan i takes
// (100 + 37 i mod 400) / 100 s (a permutation of 1.00..4.99 s), every plan fits, and its bound
// is 0.8 of its step. A plan must never be handed to the evaluator when its bound is above
// the threshold of its chunk; once one is, the search ends (every later bound is higher),
// those plans are counted pruned and unlowered with their bound as step time, and the best 5
// are those of all 400: 1.00..1.04 s. Without the bound order or the early end, plans with a
// bound above the threshold would be evaluated.
TEST(SearchBound, PlansAboveTheThresholdAreNeverLowered) {
  const int top = 5, n = 400;
  auto step_of_id = [](int i) { return (100 + 37 * i % 400) / 100.0; };
  std::vector<PlanCandidate> cands(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    cands[static_cast<size_t>(i)].settings = {{"id", std::to_string(i)}};
    cands[static_cast<size_t>(i)].bound_s = 0.8 * step_of_id(i);
  }
  size_t evaluated = 0;
  auto evaluate = [&](const std::vector<PlanCandidate>& chunk, const SearchRunOptions& run,
                      const Progress&) {
    std::vector<ExplorePoint> pts(chunk.size());
    for (size_t k = 0; k < chunk.size(); ++k) {
      EXPECT_LE(chunk[k].bound_s, run.skip_when_compute_exceeds_s);
      ++evaluated;
      pts[k].settings = chunk[k].settings;
      pts[k].result.step_time_s = step_of_id(std::stoi(chunk[k].settings[0].second));
      pts[k].result.fits_memory = true;
      pts[k].result.simulated = true;
    }
    return pts;
  };
  const SearchOutcome out = search_in_chunks(cands, SearchRunOptions{}, top, evaluate);
  ASSERT_EQ(out.best.size(), 5u);
  for (size_t k = 0; k < 5; ++k)
    EXPECT_EQ(out.best[k].result.step_time_s, static_cast<double>(100 + k) / 100.0);
  EXPECT_EQ(out.pruned, out.pruned_unlowered);
  EXPECT_EQ(static_cast<size_t>(out.pruned) + evaluated, static_cast<size_t>(n));
  // In bound order the first chunk holds the plans of 1.00..1.31 s, so the threshold is
  // 1.04 s from the second chunk on, whose plans (1.32 s on) have bounds from 1.056 s: none
  // is evaluated and the search ends there, 32 plans evaluated and 368 never lowered.
  EXPECT_EQ(out.prune_threshold_s, 1.04);
  EXPECT_EQ(evaluated, 32u);
  // The bound ratios: every simulated plan's step over its bound, 1 / 0.8.
  ASSERT_EQ(out.bound_ratios.size(), 32u);
  EXPECT_DOUBLE_EQ(out.bound_ratios.front(), 1.25);
  EXPECT_DOUBLE_EQ(out.bound_ratios.back(), 1.25);
}

// The search: section replaces an axis's values: tp 2 only, ZeRO 1 only and both TP overlap
// settings give every candidate those; cp 2 given for 4k-token sequences (which the default
// space searches with cp 1 only) is searched, with its kind a column, so that no two
// candidates print alike (the ring and the all-gather plans did).
TEST(SearchBound, SearchSectionShapesTheSpace) {
  YAML::Node doc = shipped("llama3-8b-1node-h100.yaml");
  doc["training"]["global_batch"] = 16;
  doc["training"]["seq_len"] = 4096;
  doc["search"]["tp"] = YAML::Load("[2]");
  doc["search"]["zero"] = YAML::Load("[1]");
  doc["search"]["cp"] = YAML::Load("[1, 2]");
  doc["search"]["bucket_mb"] = YAML::Load("[10, 40]");
  const Scenario sc = load_scenario_node(doc, "narrow.yaml");
  std::set<std::string> cps, buckets, cp_kinds;
  std::set<std::vector<std::pair<std::string, std::string>>> distinct;
  const auto cands = search_candidates(sc);
  ASSERT_FALSE(cands.empty());
  for (const auto& c : cands) {
    distinct.insert(c.settings);
    const std::map<std::string, std::string> kv(c.settings.begin(), c.settings.end());
    ASSERT_EQ(kv.count("cp_kind"), 1u);
    if (kv.at("cp") == "2") cp_kinds.insert(kv.at("cp_kind"));
    EXPECT_EQ(kv.at("tp"), "2");
    EXPECT_EQ(kv.at("zero"), kv.at("dp") == "1" ? "0" : "1");
    cps.insert(kv.at("cp"));
    buckets.insert(kv.at("bucket_mb"));
    const Scenario plan = load_scenario_node(c.document(), "candidate.yaml");
    EXPECT_EQ(plan.parallel.bucket_bytes, std::stod(kv.at("bucket_mb")) * 1e6);
    EXPECT_TRUE(search_space_of(plan).empty());  // the plan's document holds no search: section
  }
  EXPECT_EQ(cps, (std::set<std::string>{"1", "2"}));
  EXPECT_EQ(buckets, (std::set<std::string>{"10", "40"}));
  EXPECT_EQ(cp_kinds, (std::set<std::string>{"allgather", "ring"}));
  EXPECT_EQ(distinct.size(), cands.size());
}

// DualPipeV, searched when the search: section names it (vpp 2, at least 2 pp microbatches,
// ZeRO 0/1, no full recompute): on random plans of the dense and the MoE space, the bound's
// compute terms are the lowered stage's (rank r holds virtual stages r and 2p-1-r: with
// interleaved's chunk * p + r, the output layer's work would be on the last rank instead of
// rank 0), there is no tail term (its ranks end on W passes), the bound is never above the
// simulated step, and the dense plans' activation floor never above the lowered
// allocations.
TEST(StepBound, DualPipeVPlansAreBoundedAsLowered) {
  YAML::Node dense = shipped("llama3-8b-1node-h100.yaml");
  dense["training"]["global_batch"] = 16;
  YAML::Node moe = shipped("mixtral-8x7b-8node-h100.yaml");
  moe["cluster"]["nodes"] = 1;
  moe["parallel"]["dp"] = 4;
  moe["training"]["global_batch"] = 16;
  std::mt19937 rng(2705);
  int checked = 0;
  for (YAML::Node doc : {dense, moe}) {
    doc["search"]["schedule"] = YAML::Load("[dualpipev]");
    doc["search"]["vpp"] = YAML::Load("[2]");
    const Scenario base = load_scenario_node(doc, "dualpipev.yaml");
    for (const Scenario& sc : random_plans(base, 5, rng)) {
      ASSERT_EQ(sc.parallel.schedule, Schedule::kDualPipeV);
      StepBound bound(sc);
      const StepBound::StageFloors f = bound.stage_floors(sc.parallel);
      EXPECT_TRUE(f.last_backward.empty());
      const Program prog = lower(sc);
      const Durations d = task_durations(prog, sc.profile);
      const std::vector<double> held = held_activation_floor_bytes(sc);
      const auto state = training_state_bytes(sc);
      for (size_t r = 0; r < prog.ranks.size(); ++r) {
        const RankProgram& rp = prog.ranks[r];
        TimeNs work = 0;
        for (size_t i = 0; i < rp.tasks.size(); ++i) {
          const Task& t = rp.tasks[i];
          const bool compute = t.kind == TaskKind::kGemm || t.kind == TaskKind::kAttention ||
                               t.kind == TaskKind::kMemoryBound;
          if (compute && t.stream == StreamKind::kCompute && !left_out_of_the_bound(t))
            work += d[r][i];
        }
        const size_t s = static_cast<size_t>(rp.pp_stage);
        EXPECT_EQ(work, f.compute[s]) << sc.file << " stage " << s;
        if (held.empty()) continue;
        const double floor = state[s][0] + state[s][1] + state[s][2] + held[s];
        EXPECT_LE(floor, memory_floor_bytes(rp) * (1 + 1e-12)) << " stage " << s;
      }
      EXPECT_LE(to_s(bound.step_floor_ns(sc.parallel)), predict(sc).result.step_time_s);
      ++checked;
    }
  }
  EXPECT_GE(checked, 8);
}

}  // namespace
}  // namespace stepcast
