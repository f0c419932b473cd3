// Plan search and sweeps (sim/report/explore.h): skipping plans whose resident training
// state alone exceeds memory changes no outcome; slices rebuilt from CBOR (MPI) equal one
// process; the search space (ep for MoE, uneven pipeline stages) holds only valid plans;
// the line placing the scenario's own plan (the rest of the search's properties:
// explore_space_test.cc).
#include "sim/report/explore.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "model/error.h"
#include "model/units.h"
#include "sim/lower/lower.h"
#include "sim/report/parallel.h"
#include "sim/report/report.h"
#include "sim/report/search_prune.h"
#include "sim/scenario/scenario.h"
#include "tests/sim/report/explore_scenarios.h"

namespace stepcast {
namespace {

using test_search::llama3_8b_doc;
using test_search::small_llama3_8b;

// The shipped Llama 3 405B scenario (126 layers) on 512 GPUs with a global batch of 256.
Scenario llama3_405b_on_512() {
  YAML::Node doc = YAML::LoadFile(std::string(STEPCAST_SOURCE_DIR) +
                                  "/scenarios/llama3-405b-2048node-h100.yaml");
  doc["cluster"]["gpus"] = 512;
  doc["cluster"].remove("nodes");
  doc["parallel"].remove("dp");
  doc["training"]["global_batch"] = 256;
  return load_scenario_node(doc, "405b-512.yaml");
}

// Search candidates hold no document of their own (a clone of the scenario is about 27 KB of
// yaml-cpp nodes: 70 MB for the 70B search's 2,652 plans); document() builds a fresh one per
// call, from several threads at once, equal for the same candidate.
TEST(Search, CandidatesBuildTheirDocumentWhenEvaluated) {
  const Scenario sc = small_llama3_8b();
  const auto cands = search_candidates(sc);
  ASSERT_GT(cands.size(), 8u);
  for (const auto& c : cands) EXPECT_TRUE(c.doc.IsNull());
  auto text = [](const YAML::Node& n) {
    YAML::Emitter e;
    e << n;
    return std::string(e.c_str());
  };
  YAML::Node a = cands[3].document(), b = cands[3].document();
  EXPECT_EQ(text(a), text(b));
  a["parallel"]["tp"] = 3;  // independent documents
  EXPECT_NE(text(a), text(b));
  EXPECT_EQ(text(b), text(cands[3].document()));
  // Built on four threads at once: the same texts as built one at a time.
  std::vector<std::string> serial(cands.size()), threaded(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) serial[i] = text(cands[i].document());
  parallel_for(cands.size(), 4, [&](size_t i) { threaded[i] = text(cands[i].document()); });
  EXPECT_EQ(serial, threaded);
}

TEST(Search, SkippingPlansThatCannotFitChangesNothing) {
  const Scenario sc = small_llama3_8b();
  SearchOptions fast;
  fast.top = 1000;
  fast.threads = 2;
  fast.skip_plans_that_cannot_be_best = false;  // one pass: the memory bounds alone
  SearchOptions full = fast;
  full.skip_plans_that_cannot_fit = false;
  const SearchOutcome a = run_search(sc, fast), b = run_search(sc, full);
  EXPECT_EQ(a.considered, b.considered);
  EXPECT_EQ(a.invalid, b.invalid);
  EXPECT_EQ(a.not_fitting, b.not_fitting);
  EXPECT_GT(a.not_fitting, 0);
  ASSERT_EQ(a.best.size(), b.best.size());
  for (size_t i = 0; i < a.best.size(); ++i) {
    EXPECT_EQ(a.best[i].settings, b.best[i].settings) << i;
    EXPECT_EQ(a.best[i].result.step_time_s, b.best[i].result.step_time_s) << i;
    EXPECT_EQ(a.best[i].result.memory_peak_gib, b.best[i].result.memory_peak_gib) << i;
  }
}

// Skipping the plans whose compute lower bound exceeds the first pass's top-th best step
// time changes neither the best plans nor their order or numbers, on four scenarios (8B on
// 8 GPUs; the same with 16k-token sequences, so cp and its kinds are searched; 8B on 16 GPUs
// with a global batch of 32; a MoE model with DeepEP and the all-to-all overlap, where the
// bound counts the expert-parallel waits), and it does skip plans. Each pruned plan's bound is
// above the threshold, and the threshold is at least the top-th best step time.
TEST(Search, SkippingPlansThatCannotBeBestKeepsTheBest) {
  std::vector<Scenario> scenarios = {small_llama3_8b()};
  YAML::Node doc = llama3_8b_doc();
  doc["training"]["global_batch"] = 16;
  doc["training"]["seq_len"] = 16384;
  scenarios.push_back(load_scenario_node(YAML::Clone(doc), "long.yaml"));  // source kept
  doc["training"]["seq_len"] = 8192;
  doc["training"]["global_batch"] = 32;
  doc["cluster"]["nodes"] = 2;
  scenarios.push_back(load_scenario_node(doc, "two-nodes.yaml"));
  // Qwen3-30B-A3B on one node with DeepEP, with and without the all-to-all overlap (ZeRO 1
  // only, 1k-token sequences: fast enough to simulate every plan).
  YAML::Node moe =
      YAML::LoadFile(std::string(STEPCAST_SOURCE_DIR) + "/scenarios/mixtral-8x7b-8node-h100.yaml");
  moe["model"] = "qwen3-30b-a3b";
  moe["cluster"]["nodes"] = 1;
  moe["parallel"]["dp"] = 4;
  moe["parallel"]["moe_dispatcher"] = "deepep";
  moe["training"]["global_batch"] = 16;
  moe["training"]["seq_len"] = 1024;
  moe["search"]["zero"] = YAML::Load("[1]");
  moe["search"]["moe_ep_comm"] = YAML::Load("[false, true]");
  scenarios.push_back(load_scenario_node(moe, "qwen3-moe-deepep.yaml"));
  for (const Scenario& sc : scenarios) {
    SearchOptions pruned;
    pruned.top = 10;
    pruned.threads = 2;
    SearchOptions all = pruned;
    all.skip_plans_that_cannot_be_best = false;
    const SearchOutcome a = run_search(sc, pruned), b = run_search(sc, all);
    EXPECT_EQ(a.considered, b.considered) << sc.file;
    // Invalid plans whose bound is above the threshold are not lowered, so not found invalid.
    EXPECT_LE(a.invalid, b.invalid) << sc.file;
    EXPECT_GT(a.pruned, 0) << sc.file;
    EXPECT_GT(a.pruned_unlowered, 0) << sc.file;
    EXPECT_EQ(b.pruned, 0) << sc.file;
    ASSERT_EQ(a.best.size(), b.best.size()) << sc.file;
    ASSERT_EQ(a.best.size(), 10u) << sc.file;
    for (size_t i = 0; i < a.best.size(); ++i) {
      EXPECT_EQ(a.best[i].settings, b.best[i].settings) << sc.file << " " << i;
      EXPECT_EQ(a.best[i].result.step_time_s, b.best[i].result.step_time_s) << i;
      EXPECT_EQ(a.best[i].result.memory_peak_gib, b.best[i].result.memory_peak_gib) << i;
    }
    EXPECT_GE(a.prune_threshold_s, b.best.back().result.step_time_s) << sc.file;
    EXPECT_EQ(render_points(a.best), render_points(b.best)) << sc.file;
  }
}

// search_in_chunks with a stand-in evaluator over 300 synthetic plans (120 first-pass
// ones with shuffled order hints 0..119; 180 others with hint 1000, except the last ten with
// hint 0; every plan fits, plan i takes (100 + 37 i mod 300) / 100 s, a permutation of
// 1.00..3.99 s, and a plan is "pruned" when its step is above the threshold it is given, as
// a lower bound equal to the step would prune it). The stand-in checks what a search must do:
//  - chunks of kSearchChunk (128, 128, 44) in ascending order of the hint, the first-pass
//    plan of hint 0 before the ten others of hint 0, ties otherwise in candidate order;
//  - each chunk's threshold is the top-th (5th) smallest fitting step of the chunks before
//    it, infinite before 5 fit; it goes through `share` after every chunk;
//  - progress counts plans over the whole search, up to 300 of 300;
// and the outcome holds the 5 fastest plans of all 300 in candidate order.
TEST(Search, ChunksTightenTheBoundAsTheyGo) {
  const int top = 5;
  std::vector<PlanCandidate> cands(300);
  std::vector<int> hint(120);
  std::iota(hint.begin(), hint.end(), 0);
  std::shuffle(hint.begin(), hint.end(), std::mt19937(7));
  for (int i = 0; i < 300; ++i) {
    cands[static_cast<size_t>(i)].settings = {{"id", std::to_string(i)}};
    cands[static_cast<size_t>(i)].first_pass = i < 120;
    cands[static_cast<size_t>(i)].order_hint =
        i < 120 ? hint[static_cast<size_t>(i)] : (i >= 290 ? 0 : 1000);
  }
  // Expected order: the first-pass plan of hint 0, then 290..299, then the first-pass plans
  // of hints 1..119, then 120..289.
  std::vector<int> expected;
  std::vector<int> by_hint(120);
  for (int i = 0; i < 120; ++i) by_hint[static_cast<size_t>(hint[static_cast<size_t>(i)])] = i;
  expected.push_back(by_hint[0]);
  for (int i = 290; i < 300; ++i) expected.push_back(i);
  for (int h = 1; h < 120; ++h) expected.push_back(by_hint[static_cast<size_t>(h)]);
  for (int i = 120; i < 290; ++i) expected.push_back(i);
  auto step_of_id = [](int i) { return (100 + 37 * i % 300) / 100.0; };
  auto step_of = [&](const PlanCandidate& c) {
    return step_of_id(std::stoi(c.settings[0].second));
  };
  std::vector<int> seen;          // candidate ids in evaluation order
  std::vector<double> fit_times;  // of the plans simulated so far
  std::vector<double> thresholds, shared;
  size_t chunks = 0, last_done = 0, last_total = 0;
  auto evaluate = [&](const std::vector<PlanCandidate>& chunk, const SearchRunOptions& run,
                      const Progress& progress) {
    ++chunks;
    EXPECT_LE(chunk.size(), kSearchChunk);
    // The threshold is the 5th best of what ran before (infinite before 5 did).
    double expect = std::numeric_limits<double>::infinity();
    if (fit_times.size() >= static_cast<size_t>(top)) {
      std::vector<double> t = fit_times;
      std::sort(t.begin(), t.end());
      expect = t[top - 1];
    }
    EXPECT_EQ(run.skip_when_compute_exceeds_s, expect) << "chunk " << chunks;
    thresholds.push_back(run.skip_when_compute_exceeds_s);
    std::vector<ExplorePoint> pts(chunk.size());
    for (size_t k = 0; k < chunk.size(); ++k) {
      seen.push_back(std::stoi(chunk[k].settings[0].second));
      ExplorePoint& p = pts[k];
      p.settings = chunk[k].settings;
      p.valid = true;
      const double step = step_of(chunk[k]);
      p.result.step_time_s = step;
      p.result.fits_memory = true;
      p.result.simulated = step <= run.skip_when_compute_exceeds_s;
      p.result.pruned = !p.result.simulated;
      if (p.result.simulated) fit_times.push_back(step);
      if (progress) progress(k + 1, chunk.size());
    }
    return pts;
  };
  const SearchOutcome out = search_in_chunks(
      cands, SearchRunOptions{}, top, evaluate,
      [&](double t) {
        shared.push_back(t);
        return t;
      },
      [&](size_t done, size_t total) {
        EXPECT_GE(done, last_done);
        last_done = done;
        last_total = total;
      });
  const size_t n_chunks = (300 + kSearchChunk - 1) / kSearchChunk;  // 10 of 32 (the last 12)
  EXPECT_EQ(chunks, n_chunks);
  EXPECT_EQ(shared.size(), n_chunks);
  EXPECT_EQ(last_done, 300u);
  EXPECT_EQ(last_total, 300u);
  EXPECT_EQ(seen, expected);
  // The first chunk runs unbounded; the second is bounded by the 5th best of the first
  // kSearchChunk in that order (computed here), then the bound tightens.
  EXPECT_EQ(thresholds[0], std::numeric_limits<double>::infinity());
  std::vector<double> first;
  for (size_t k = 0; k < kSearchChunk; ++k) first.push_back(step_of_id(expected[k]));
  std::sort(first.begin(), first.end());
  EXPECT_EQ(thresholds[1], first[top - 1]);
  EXPECT_LT(thresholds.back(), thresholds[1]);
  // The 5 fastest of all 300 are 1.00..1.04 s: ids with 37 i = 0..4 mod 300.
  ASSERT_EQ(out.best.size(), 5u);
  for (size_t k = 0; k < 5; ++k)
    EXPECT_EQ(out.best[k].result.step_time_s, static_cast<double>(100 + k) / 100.0);
  EXPECT_EQ(out.prune_threshold_s, 104 / 100.0);
  EXPECT_EQ(out.pruned, 300 - static_cast<int>(fit_times.size()));
  EXPECT_GT(out.pruned, 100);  // measured 168 of the last two chunks' 172
}

// Bitwise equality of doubles (NaN == NaN, -0 != +0): what "the same result" means for
// points sent between MPI ranks.
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_same_point(const ExplorePoint& a, const ExplorePoint& b, size_t i) {
  EXPECT_EQ(a.settings, b.settings) << i;
  EXPECT_EQ(a.valid, b.valid) << i;
  EXPECT_EQ(a.error, b.error) << i;
  const Result &x = a.result, &y = b.result;
  EXPECT_EQ(x.scenario_name, y.scenario_name) << i;
  EXPECT_EQ(x.scenario_file, y.scenario_file) << i;
  EXPECT_EQ(x.model_name, y.model_name) << i;
  EXPECT_EQ(x.profile_name, y.profile_name) << i;
  EXPECT_EQ(x.gpus, y.gpus) << i;
  EXPECT_EQ(x.layout, y.layout) << i;
  for (auto [u, v] : {std::pair{x.step_time_s, y.step_time_s},
                      {x.tokens_per_s, y.tokens_per_s},
                      {x.tflops_per_gpu, y.tflops_per_gpu},
                      {x.mfu, y.mfu},
                      {x.model_flops, y.model_flops},
                      {x.params_total, y.params_total},
                      {x.memory_peak_gib, y.memory_peak_gib},
                      {x.memory_capacity_gib, y.memory_capacity_gib}})
    EXPECT_TRUE(same_bits(u, v)) << i << ": " << u << " vs " << v;
  ASSERT_EQ(x.memory_peak_gib_per_stage.size(), y.memory_peak_gib_per_stage.size()) << i;
  for (size_t k = 0; k < x.memory_peak_gib_per_stage.size(); ++k)
    EXPECT_TRUE(same_bits(x.memory_peak_gib_per_stage[k], y.memory_peak_gib_per_stage[k])) << i;
  for (size_t k = 0; k < x.breakdown_s.size(); ++k)
    EXPECT_TRUE(same_bits(x.breakdown_s[k], y.breakdown_s[k])) << i << " " << k;
  EXPECT_EQ(x.fits_memory, y.fits_memory) << i;
  EXPECT_EQ(x.critical_rank, y.critical_rank) << i;
  EXPECT_EQ(x.events, y.events) << i;
  EXPECT_EQ(x.busy_by_kind_s, y.busy_by_kind_s) << i;
  EXPECT_EQ(x.busy_by_phase_s, y.busy_by_phase_s) << i;
  EXPECT_EQ(x.simulated_ranks, y.simulated_ranks) << i;
  EXPECT_EQ(x.folded, y.folded) << i;
  EXPECT_EQ(x.simulated, y.simulated) << i;
}

// An MPI-split search (tools/distributed.h) evaluates slice r of N on rank r and rebuilds
// the points on rank 0 from their CBOR: for every N the rebuilt points, and the tables,
// CSV and HTML made from them, must be exactly those of one process.
TEST(Search, SlicesSentAsCborRebuildTheSameSearch) {
  const Scenario sc = small_llama3_8b();
  SearchOptions opt;
  opt.top = 1000;
  auto cands = search_candidates(sc);
  // One plan that cannot be laid out (tp 3 divides neither 32 heads nor 8 GPUs).
  PlanCandidate bad = cands.front();
  bad.doc = bad.document();  // its own document, edited below
  bad.doc["parallel"]["tp"] = 3;
  bad.settings.front().second = "3";
  cands.insert(cands.begin() + 5, bad);
  const SearchRunOptions run = search_run_options(opt);
  const auto whole = evaluate_candidates(cands, sc.file, run, 2);
  int invalid = 0, skipped = 0;
  for (const auto& p : whole) {
    invalid += !p.valid;
    skipped += p.valid && !p.result.simulated;
  }
  ASSERT_GT(invalid, 0);  // the round trip covers invalid and not-simulated points too
  ASSERT_GT(skipped, 0);
  for (int n : {2, 3}) {
    std::vector<ExplorePoint> rebuilt(cands.size());
    for (int r = 0; r < n; ++r) {
      const auto mine = evaluate_candidates(cands, sc.file, run, 1, nullptr, r, n);
      std::vector<const ExplorePoint*> sent;
      for (size_t i = static_cast<size_t>(r); i < cands.size(); i += static_cast<size_t>(n))
        sent.push_back(&mine[i]);
      auto got = points_from_cbor(points_to_cbor(sent));
      ASSERT_EQ(got.size(), sent.size());
      for (size_t k = 0; k < got.size(); ++k)
        rebuilt[static_cast<size_t>(r) + k * static_cast<size_t>(n)] = std::move(got[k]);
    }
    for (size_t i = 0; i < whole.size(); ++i) expect_same_point(whole[i], rebuilt[i], i);
    const SearchOutcome a = summarize_search(whole, opt.top),
                        b = summarize_search(rebuilt, opt.top);
    EXPECT_EQ(a.invalid, b.invalid);
    EXPECT_EQ(a.not_fitting, b.not_fitting);
    EXPECT_EQ(render_points(a.best), render_points(b.best)) << n;
    EXPECT_EQ(points_csv(a.best), points_csv(b.best)) << n;
    EXPECT_EQ(points_html(a.best, "t"), points_html(b.best, "t")) << n;
  }
}

// points_csv follows RFC 4180: a field with a comma, a quote or a line break is quoted with
// its quotes doubled (a swept list, an error message), so every row keeps the header's columns.
TEST(Sweep, CsvQuotesFieldsThatNeedIt) {
  ExplorePoint p;
  p.settings = {{"cluster.stragglers", "[{gpu: 3, compute: 0.8}]"}, {"parallel.tp", "2"}};
  p.valid = false;
  p.error = "t.yaml:3:4: training.dtype: unknown value \"fp9\"";
  p.result.layout = "tp2 pp1";
  EXPECT_EQ(points_csv({p}),
            "cluster.stragglers,parallel.tp,layout,valid,step_time_s,tokens_per_s,tflops_per_gpu,"
            "mfu,memory_peak_gib,fits_memory,error\n"
            "\"[{gpu: 3, compute: 0.8}]\",2,\"tp2 pp1\",false,0,0,0,0,0,true,"
            "\"t.yaml:3:4: training.dtype: unknown value \"\"fp9\"\"\"\n");
}

TEST(Search, CborKeepsEveryDoubleBitForBit) {
  ExplorePoint p;
  p.settings = {{"cluster.overrides.node.nic", "200 Gb/s"}, {"k\xc3\xa9y", "v\n"}};
  p.valid = false;
  p.error = "file.yaml:3:4: parallel.tp: \xe2\x80\x94 bad";
  const double inf = std::numeric_limits<double>::infinity();
  p.result.step_time_s = std::numeric_limits<double>::quiet_NaN();
  p.result.tokens_per_s = inf;
  p.result.mfu = -0.0;
  p.result.tflops_per_gpu = 0.1;  // not exact in float: must stay a double
  p.result.memory_peak_gib = std::nextafter(80.0, 0.0);
  p.result.memory_peak_gib_per_stage = {1e-300, -inf, 3.0};
  p.result.breakdown_s[2] = 1.0 / 3.0;
  p.result.events = std::numeric_limits<std::uint64_t>::max();
  p.result.busy_by_kind_s = {{"gemm", 2.5e-7}};
  p.result.busy_by_phase_s = {{"fwd", 1e308}};
  p.result.simulated = false;
  const auto got = points_from_cbor(points_to_cbor({&p, &p}));
  ASSERT_EQ(got.size(), 2u);
  expect_same_point(p, got[0], 0);
  expect_same_point(p, got[1], 1);
  EXPECT_TRUE(std::isnan(got[0].result.step_time_s));
  EXPECT_TRUE(std::signbit(got[0].result.mfu));
}

TEST(Search, EvaluateCandidatesChecksItsSlice) {
  const Scenario sc = small_llama3_8b();
  const auto cands = sweep_candidates(sc);
  ASSERT_EQ(cands.size(), 1u);  // no sweep: block, the scenario itself
  EXPECT_THROW(evaluate_candidates(cands, sc.file, {}, 1, nullptr, 2, 2), InvariantError);
  EXPECT_THROW(evaluate_candidates(cands, sc.file, {}, 1, nullptr, 0, 0), InvariantError);
  // More slices than candidates: the empty slices evaluate nothing.
  const auto pts = evaluate_candidates(cands, sc.file, {}, 1, nullptr, 1, 3);
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_EQ(pts[0].result.step_time_s, 0.0);
}

// search.moe_ep_comm: [false, true] adds the MoE all-to-all overlap to the plans that can
// run it as Megatron-Core does (ep > 1, the interleaved schedule or one stage, zero 0 or 1,
// no full recompute), and only to those: every candidate loads as a valid scenario, its
// document carries the setting, and each runnable plan comes with the overlap on and off.
TEST(Search, MoePlansSearchTheAllToAllOverlapWhereItRuns) {
  YAML::Node doc =
      YAML::LoadFile(std::string(STEPCAST_SOURCE_DIR) + "/scenarios/mixtral-8x7b-8node-h100.yaml");
  doc["search"]["moe_ep_comm"] = YAML::Load("[false, true]");
  doc["search"]["pp"] = YAML::Load("[1, 2]");
  const Scenario moe = load_scenario_node(doc, "mixtral-search.yaml");
  int on = 0, off = 0;
  std::set<std::string> on_plans, off_plans;
  for (const auto& c : search_candidates(moe)) {
    std::map<std::string, std::string> kv(c.settings.begin(), c.settings.end());
    const bool eo = kv.at("ep_overlap") == "1";
    const YAML::Node ov = c.document()["parallel"]["overlap"];
    EXPECT_EQ(ov["moe_ep_comm"] ? ov["moe_ep_comm"].as<bool>() : false, eo);
    const Scenario plan = load_scenario_node(c.document(), "candidate.yaml");  // throws if invalid
    EXPECT_EQ(plan.parallel.overlap_moe_ep, eo);
    std::string key;
    for (const auto& [k, v] : c.settings)
      if (k != "ep_overlap") key += k + "=" + v + " ";
    if (eo) {
      ++on;
      on_plans.insert(key);
      EXPECT_GT(plan.parallel.ep, 1);
      EXPECT_LE(plan.parallel.zero, 1);
      EXPECT_NE(plan.parallel.recompute, Recompute::kFull);
      EXPECT_TRUE(plan.parallel.schedule == Schedule::kInterleaved || plan.parallel.pp == 1);
    } else {
      ++off;
      off_plans.insert(key);
    }
  }
  EXPECT_GT(on, 0);
  EXPECT_GT(off, on);
  // Every plan with the overlap on is also there with it off.
  for (const auto& k : on_plans) EXPECT_TRUE(off_plans.count(k)) << k;
}

// The search space of an MoE model includes expert parallelism: every ep dividing the
// expert count and a stage's tp*cp*dp ranks, shown in the plan; a dense model's plans keep ep 1 and
// do not show it. Every candidate must be a valid scenario (checked by loading each, no
// simulation).
TEST(Search, MoePlansSearchExpertParallelism) {
  const Scenario moe =
      load_scenario(std::string(STEPCAST_SOURCE_DIR) + "/scenarios/mixtral-8x7b-8node-h100.yaml");
  ASSERT_TRUE(moe.model.moe.has_value());
  const int experts = moe.model.moe->experts;  // 8
  std::set<int> eps_seen;
  const auto cands = search_candidates(moe);
  for (const auto& c : cands) {
    std::map<std::string, std::string> kv(c.settings.begin(), c.settings.end());
    ASSERT_TRUE(kv.count("ep")) << "ep missing from an MoE plan";
    const int ep = std::stoi(kv["ep"]), dp = std::stoi(kv["dp"]);
    const int tp = std::stoi(kv["tp"]), cp = std::stoi(kv["cp"]);
    EXPECT_EQ(experts % ep, 0);
    EXPECT_EQ((tp * cp * dp) % ep, 0);  // expert groups are cut from a stage's ranks
    EXPECT_EQ(c.document()["parallel"]["ep"].as<int>(), ep);
    eps_seen.insert(ep);
    const Scenario plan = load_scenario_node(c.document(), "candidate.yaml");  // throws if invalid
    EXPECT_EQ(plan.parallel.ep, ep);
  }
  EXPECT_EQ(eps_seen, (std::set<int>{1, 2, 4, 8}));
  EXPECT_EQ(moe.parallel.overlap_moe_ep, false);
  for (const auto& c : cands) {
    std::map<std::string, std::string> kv(c.settings.begin(), c.settings.end());
    EXPECT_EQ(kv.at("ep_overlap"), "0");  // the scenario's own setting, no search axis
  }
  for (const auto& c : search_candidates(small_llama3_8b())) {
    for (const auto& [k, v] : c.settings) EXPECT_NE(k, "ep");
    EXPECT_EQ(c.document()["parallel"]["ep"].as<int>(), 1);
  }
}

// Uneven pipeline stages: as even as possible, one layer fewer at both ends first.
TEST(Search, BalancedStageLayers) {
  // Llama 3 405B on 16 stages (Llama 3 paper, Sec. 3.3.2): 126 = 7 + 14 x 8 + 7.
  std::vector<int> want(16, 8);
  want.front() = want.back() = 7;
  EXPECT_EQ(balanced_stage_layers(126, 16), want);
  // The shipped 405B scenario's 32 virtual stages: 3, 30 x 4, 3.
  const YAML::Node doc = YAML::LoadFile(std::string(STEPCAST_SOURCE_DIR) +
                                        "/scenarios/llama3-405b-2048node-h100.yaml");
  EXPECT_EQ(balanced_stage_layers(126, 32),
            doc["parallel"]["pipeline_layers"].as<std::vector<int>>());
  EXPECT_EQ(balanced_stage_layers(10, 4), (std::vector<int>{2, 3, 3, 2}));
  EXPECT_EQ(balanced_stage_layers(11, 4), (std::vector<int>{2, 3, 3, 3}));  // one short: first
  EXPECT_EQ(balanced_stage_layers(8, 4), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(balanced_stage_layers(5, 8), std::vector<int>{});  // a stage would be empty
  EXPECT_EQ(balanced_stage_layers(8, 8), std::vector<int>(8, 1));
  // Property over many (layers, stages): sums to the layers, max - min <= 1, and the
  // short stages are the ends first (stage i is short iff it is among the first `fewer`
  // in the order 0, n-1, 1, n-2, ...).
  for (int layers = 1; layers <= 130; ++layers) {
    for (int stages = 1; stages <= 70; ++stages) {
      const auto v = balanced_stage_layers(layers, stages);
      if (v.empty()) {
        EXPECT_LT(layers, stages) << layers << "/" << stages;
        EXPECT_NE(layers % stages, 0);
        continue;
      }
      ASSERT_EQ(static_cast<int>(v.size()), stages);
      int sum = 0, lo = v[0], hi = v[0];
      for (int n : v) {
        sum += n;
        lo = std::min(lo, n);
        hi = std::max(hi, n);
      }
      EXPECT_EQ(sum, layers);
      EXPECT_GE(lo, 1);
      EXPECT_LE(hi - lo, 1);
      const int fewer = hi * stages - layers;
      for (int i = 0; i < stages; ++i) {
        const int rank_from_ends = std::min(2 * i, 2 * (stages - 1 - i) + 1);
        EXPECT_EQ(v[static_cast<size_t>(i)] == hi - 1 && fewer > 0, rank_from_ends < fewer)
            << layers << "/" << stages << " stage " << i;
      }
    }
  }
}

// A model whose layer count has no power-of-two divisor beyond 2 (Llama 3 405B: 126 = 2 x
// 63) gets deep pipelines through uneven splits; every such candidate is a valid scenario.
TEST(Search, UnevenPipelinesAreSearchedAndValid) {
  const Scenario sc = llama3_405b_on_512();
  std::set<int> uneven_pp;
  for (const auto& c : search_candidates(sc)) {
    const Scenario plan = load_scenario_node(c.document(), "candidate.yaml");  // throws if invalid
    if (!plan.parallel.pipeline_layers.empty()) {
      uneven_pp.insert(plan.parallel.pp);
      EXPECT_EQ(plan.parallel.pipeline_layers,
                balanced_stage_layers(126, plan.parallel.pp * plan.parallel.vpp));
      std::map<std::string, std::string> kv(c.settings.begin(), c.settings.end());
      EXPECT_NE(kv["layers"].find('-'), std::string::npos) << kv["layers"];
    }
  }
  EXPECT_TRUE(uneven_pp.count(16));
  EXPECT_TRUE(uneven_pp.count(8));
}

// search decides "cannot fit" from training_state_bytes, before lowering: it must equal,
// bit for bit, the "weights", "grads" and "optimizer" allocations of the lowered program on
// every stage: every plan of a dense model, and every 23rd plan of an MoE model with ep and
// of a 126-layer model with uneven pipeline stages.
TEST(Search, StateWithoutLoweringEqualsTheLoweredAllocations) {
  const std::pair<Scenario, size_t> spaces[] = {
      {small_llama3_8b(), 1},
      {load_scenario(std::string(STEPCAST_SOURCE_DIR) + "/scenarios/mixtral-8x7b-8node-h100.yaml"),
       23},
      {llama3_405b_on_512(), 23}};
  int checked = 0;
  for (const auto& [base, every] : spaces) {
    const auto cands = search_candidates(base);
    for (size_t i = 0; i < cands.size(); i += every) {
      const Scenario sc = load_scenario_node(cands[i].document(), "candidate.yaml");
      const auto state = training_state_bytes(sc);
      const Program prog = lower(sc);
      ASSERT_EQ(state.size(), static_cast<size_t>(sc.parallel.pp));
      for (const RankProgram& rp : prog.ranks) {
        double from_program = 0;
        for (const Task& t : rp.tasks)
          if (is_training_state_alloc(t)) from_program += t.bytes;
        double from_state = 0;
        for (double b : state[static_cast<size_t>(rp.pp_stage)]) from_state += b;
        EXPECT_EQ(from_state, from_program) << i << " stage " << rp.pp_stage;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 400);
}

// The line placing the scenario's own plan: how many fitting plans are strictly faster.
TEST(Search, OwnPlanLineCountsTheFasterPlans) {
  const Scenario sc = small_llama3_8b();
  SearchOptions opt;
  opt.threads = 2;
  const SearchOutcome out = run_search(sc, opt);
  ASSERT_FALSE(out.fitting_step_times.empty());
  ASSERT_TRUE(std::is_sorted(out.fitting_step_times.begin(), out.fitting_step_times.end()));
  EXPECT_EQ(out.fitting_step_times.size() +
                static_cast<size_t>(out.not_fitting + out.invalid + out.pruned),
            static_cast<size_t>(out.considered));
  EXPECT_EQ(out.fitting_step_times.front(), out.best.front().result.step_time_s);
  Result own = predict(sc).result;
  ASSERT_TRUE(own.fits_memory);
  size_t faster = 0;
  for (double t : out.fitting_step_times) faster += t < own.step_time_s;
  std::string line = own_plan_line(out, own);
  EXPECT_NE(line.find(own.layout), std::string::npos) << line;
  // Slower than the threshold (the plans pruned may be faster): "at least".
  const char* at_least =
      out.pruned > 0 && own.step_time_s > out.prune_threshold_s ? "at least " : "";
  EXPECT_NE(line.find(fmt::format("; {}{} of the {} simulated plans that fit are faster", at_least,
                                  faster, out.fitting_step_times.size())),
            std::string::npos)
      << line;
  // The fastest plan itself: none faster, no "best is" clause.
  own.step_time_s = out.fitting_step_times.front();
  line = own_plan_line(out, own);
  EXPECT_NE(line.find("; 0 of the"), std::string::npos) << line;
  EXPECT_EQ(line.find("best is"), std::string::npos) << line;
  own.fits_memory = false;
  own.memory_peak_gib = 90;
  own.memory_capacity_gib = 80;
  EXPECT_NE(own_plan_line(out, own).find("does not fit: peak 90.00 GiB of 80.00 GiB"),
            std::string::npos);
}

}  // namespace
}  // namespace stepcast
