// Plan search (sim/report/explore.h): the schedules, ZeRO stages, TP overlap and cp kinds the
// search tries; GPipe dominated by 1F1B; the same outcome for any thread count; every reported
// plan valid and fitting; the memory state without lowering a lower bound of the peak; plans
// given up stage by stage by memory and by the bound.
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

// A narrow model (2 heads: tp <= 2) with a global batch of one sequence on 8 GPUs: dp = 1,
// so every plan is tp x pp = 8 with pp 4 or 8, one microbatch, no interleaving (1 % pp != 0)
// and no ZeRO. 12 plans: (tp 1, pp 8) and (tp 2, pp 4), each x 2 schedules (1f1b, zb-h1)
// x 3 recompute (TP overlap off: the search: section).
Scenario one_sequence_pipeline() {
  YAML::Node doc = YAML::Load(R"(
name: one-sequence pipeline
model: {layers: 8, hidden: 1024, ffn_hidden: 4096, heads: 2, kv_heads: 2,
        vocab: 32000, activation: swiglu, norm: rmsnorm, tied_embeddings: false}
cluster: {profile: h100-sxm, nodes: 1}
training: {seq_len: 4096, global_batch: 1, dtype: bf16, optimizer: adam}
parallel: {tp: 2, pp: 4, microbatch: 1, schedule: 1f1b, zero: 0, sequence_parallel: true}
search: {tp_overlap: [false]}
)");
  return load_scenario_node(doc, "one-sequence.yaml");
}

std::map<std::string, std::string> settings_map(const ExplorePoint& p) {
  return {p.settings.begin(), p.settings.end()};
}

// With one microbatch, 1F1B runs F on stages 0..p-1, then B (input and weight gradient
// together) back from p-1 to 0: p (T_F + T_B + T_W) with every other stage idle. ZB-H1
// (sim/lower/schedule.cc) runs only the input gradient B on that chain and each stage's W
// after its B, off the chain (stage s > 0 drains it at the end, while stages below run
// their B): p (T_F + T_B) + T_W, (p - 1) T_W less, with the same memory. Every plan here has
// pp >= 4, so each 1F1B plan has a ZB-H1 twin that is faster by about 3 T_W. So the best
// plan of the search is ZB-H1.
TEST(Search, ZbH1WinsWhenThePipelineIsMostlyBubble) {
  const Scenario sc = one_sequence_pipeline();
  EXPECT_EQ(search_candidates(sc).size(), 12u);
  SearchOptions opt;
  opt.top = 100;
  opt.threads = 2;
  const SearchOutcome out = run_search(sc, opt);
  EXPECT_EQ(out.invalid, 0);
  ASSERT_FALSE(out.best.empty());
  EXPECT_EQ(settings_map(out.best.front())["sched"], "zb-h1");
  EXPECT_NE(out.best.front().result.layout.find("zb-h1"), std::string::npos);
  // Each ZB-H1 plan beats its 1F1B twin (same settings but the schedule).
  std::map<std::vector<std::pair<std::string, std::string>>, std::map<std::string, double>> twins;
  for (const auto& p : out.best) {
    auto key = p.settings;
    std::string sched;
    for (auto it = key.begin(); it != key.end(); ++it)
      if (it->first == "sched") {
        sched = it->second;
        key.erase(it);
        break;
      }
    twins[key][sched] = p.result.step_time_s;
  }
  int compared = 0;
  for (const auto& [k, t] : twins) {
    if (!t.count("zb-h1") || !t.count("1f1b")) continue;
    EXPECT_LT(t.at("zb-h1"), t.at("1f1b"));
    ++compared;
  }
  EXPECT_EQ(compared, 6);
}

// The search space covers the schedules (not GPipe: explore.cc), ZeRO stages and (for long
// sequences) the cp kinds, and keeps the scenario's TP overlap on every plan with tp > 1;
// every candidate names its settings, and those are what its scenario says.
TEST(Search, SpaceCoversSchedulesZeroOverlapAndCpKinds) {
  YAML::Node doc = llama3_8b_doc();
  doc["training"]["global_batch"] = 16;
  doc["training"]["seq_len"] = 32768;  // long enough for cp
  doc["parallel"]["overlap"]["tp_comm"] = true;
  const Scenario sc = load_scenario_node(doc, "long.yaml");
  std::map<std::string, std::set<std::string>> seen;
  int invalid = 0;
  for (const auto& c : search_candidates(sc)) {
    const std::map<std::string, std::string> kv(c.settings.begin(), c.settings.end());
    for (const auto& [k, v] : kv) seen[k].insert(v);
    const YAML::Node par = c.document()["parallel"];
    EXPECT_EQ(par["schedule"].as<std::string>(), kv.at("sched"));
    EXPECT_EQ(par["zero"].as<std::string>(), kv.at("zero"));
    EXPECT_EQ(par["cp_kind"].as<std::string>(), kv.at("cp_kind"));
    EXPECT_EQ(par["overlap"]["tp_comm"].as<bool>(), kv.at("tp_overlap") == "1");
    // The scenario's own overlap keys are kept.
    EXPECT_TRUE(par["overlap"]["grad_reduce"].as<bool>());
    EXPECT_TRUE(par["overlap"]["param_gather"].as<bool>());
    if (kv.at("sched") == "zb-h1") {
      EXPECT_NE(kv.at("pp"), "1");
    }
    if (kv.at("tp") == "1") {
      EXPECT_EQ(kv.at("tp_overlap"), "0");
    }
    if (kv.at("cp_kind") == "allgather") {
      EXPECT_NE(kv.at("cp"), "1");
    }
    try {
      load_scenario_node(c.document(), "candidate.yaml");
    } catch (const InputError&) {
      ++invalid;
    }
  }
  EXPECT_EQ(seen["sched"], (std::set<std::string>{"1f1b", "zb-h1", "interleaved"}));
  EXPECT_EQ(seen["zero"], (std::set<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(seen["tp_overlap"], (std::set<std::string>{"0", "1"}));
  EXPECT_EQ(seen["cp_kind"], (std::set<std::string>{"ring", "allgather"}));
  EXPECT_EQ(invalid, 0);
}

// DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3 (framework rule pipeline_max_zero)
// and runs 1F1B only (deepspeed_pipe_engine): under the deepspeed preset the search offers
// zero 2 and 3 only at pp 1, zero 0 and 1 at any pp, pp > 1 with 1F1B alone, and every
// candidate loads; under megatron-core pp > 1 with zero 2-3 and with ZB-H1 is searched.
TEST(Search, DeepSpeedPipelinesRunZero1AtMost) {
  for (const char* fw : {"deepspeed", "megatron-core"}) {
    YAML::Node doc = llama3_8b_doc();
    doc["training"]["global_batch"] = 16;
    doc["framework"] = fw;
    doc["search"]["pp"] = YAML::Load("[1, 2]");
    const Scenario sc = load_scenario_node(doc, "ds.yaml");
    int piped_sharded = 0, piped = 0, sharded = 0;
    std::set<std::string> piped_schedules;
    for (const auto& c : search_candidates(sc)) {
      const std::map<std::string, std::string> kv(c.settings.begin(), c.settings.end());
      const bool pp = kv.at("pp") != "1", z23 = kv.at("zero") == "2" || kv.at("zero") == "3";
      piped_sharded += pp && z23;
      piped += pp;
      sharded += z23;
      if (pp) piped_schedules.insert(kv.at("sched"));
      EXPECT_NO_THROW(load_scenario_node(c.document(), "candidate.yaml")) << fw;
    }
    EXPECT_GT(piped, 0) << fw;
    EXPECT_GT(sharded, 0) << fw;
    if (std::string(fw) == "deepspeed") {
      EXPECT_EQ(piped_sharded, 0);
      EXPECT_EQ(piped_schedules, std::set<std::string>{"1f1b"});
    } else {
      EXPECT_GT(piped_sharded, 0);
      EXPECT_TRUE(piped_schedules.count("zb-h1"));
    }
  }
}

// The zero levels a stack has (framework rule zero_levels): Megatron-LM before Megatron-Core
// replicates or shards the optimizer (0, 1), FSDP2 replicates or shards everything (0, 3);
// the search offers exactly those, Megatron-Core and DeepSpeed all four, and every candidate
// loads. The TP overlap (tp_comm_overlap) only where the stack has it: Megatron-Core and
// FSDP2.
TEST(Search, OffersTheZeroLevelsTheStackHas) {
  const std::map<std::string, std::set<std::string>> want = {
      {"megatron-lm", {"0", "1"}},
      {"fsdp2", {"0", "3"}},
      {"megatron-core", {"0", "1", "2", "3"}},
      {"deepspeed", {"0", "1", "2", "3"}}};
  for (const auto& [fw, levels] : want) {
    YAML::Node doc = llama3_8b_doc();
    doc["training"]["global_batch"] = 16;
    doc["framework"] = fw;
    doc["parallel"]["zero"] = 0;  // every stack has it
    doc["search"]["pp"] = YAML::Load("[1, 2]");
    const Scenario sc = load_scenario_node(doc, "levels.yaml");
    std::set<std::string> seen, overlaps;
    for (const auto& c : search_candidates(sc)) {
      const std::map<std::string, std::string> kv(c.settings.begin(), c.settings.end());
      seen.insert(kv.at("zero"));
      overlaps.insert(kv.at("tp_overlap"));
      EXPECT_NO_THROW(load_scenario_node(c.document(), "candidate.yaml")) << fw;
    }
    EXPECT_EQ(seen, levels) << fw;
    const bool has = fw == "megatron-core" || fw == "fsdp2";
    const std::set<std::string> want_overlaps =
        has ? std::set<std::string>{"0", "1"} : std::set<std::string>{"0"};
    EXPECT_EQ(overlaps, want_overlaps) << fw;
  }
}

// A scenario deferring the output layer's weight gradients (Megatron-Core's
// defer_embedding_wgrad_compute, modelled with zero 0-1 and schedules that keep each weight
// gradient in its backward): the search keeps the rule and offers only the plans it runs
// with, every candidate loading; without the rule zero 2-3 and ZB-H1 are searched.
TEST(Search, DeferredOutputWgradKeepsItsPlans) {
  for (const bool defer : {true, false}) {
    YAML::Node doc = llama3_8b_doc();
    doc["training"]["global_batch"] = 16;
    doc["framework"] = YAML::Load(defer ? "{defer_embedding_wgrad_compute: true}" : "{}");
    doc["search"]["pp"] = YAML::Load("[1, 2]");
    const Scenario sc = load_scenario_node(doc, "defer.yaml");
    std::set<std::string> zeros, schedules;
    for (const auto& c : search_candidates(sc)) {
      const std::map<std::string, std::string> kv(c.settings.begin(), c.settings.end());
      zeros.insert(kv.at("zero"));
      if (kv.at("pp") != "1") schedules.insert(kv.at("sched"));
      const Scenario one = load_scenario_node(c.document(), "candidate.yaml");
      EXPECT_EQ(one.framework.defer_embedding_wgrad_compute, defer);
    }
    const std::set<std::string> want_zeros =
        defer ? std::set<std::string>{"0", "1"} : std::set<std::string>{"0", "1", "2", "3"};
    EXPECT_EQ(zeros, want_zeros);
    EXPECT_EQ(schedules.count("zb-h1"), defer ? 0u : 1u);
    EXPECT_TRUE(schedules.count("1f1b"));
  }
}

// GPipe runs the same tasks with the same dependencies as 1F1B but every forward before
// every backward, so it holds all m microbatches' activations where 1F1B holds at most pp:
// on random plans its peak memory is never below 1F1B's. Its step time is not always above
// (seed below: tp1 pp4 dp2 zero3 recompute=full, 3.07878 s against 3.07886 s), by the
// order of the last passes only; the search leaves it out (explore.cc).
TEST(Search, GpipeMemoryNeverBelow1f1b) {
  const Scenario sc = small_llama3_8b();
  const auto cands = search_candidates(sc);
  std::vector<const PlanCandidate*> pick;
  for (const auto& c : cands) {
    const std::map<std::string, std::string> kv(c.settings.begin(), c.settings.end());
    if (kv.at("sched") == "1f1b" && kv.at("pp") != "1") pick.push_back(&c);
    EXPECT_NE(kv.at("sched"), "gpipe");
  }
  ASSERT_GT(pick.size(), 50u);
  std::mt19937_64 rng(20261203);
  std::shuffle(pick.begin(), pick.end(), rng);
  int compared = 0;
  for (size_t i = 0; i < pick.size() && compared < 40; ++i) {
    YAML::Node gdoc = pick[i]->document();
    gdoc["parallel"]["schedule"] = "gpipe";
    Scenario one, gp;
    try {
      one = load_scenario_node(pick[i]->document(), "1f1b.yaml");
      gp = load_scenario_node(gdoc, "gpipe.yaml");
    } catch (const InputError&) {
      continue;
    }
    const Result a = predict(one).result, b = predict(gp).result;
    EXPECT_GE(b.memory_peak_gib, a.memory_peak_gib) << a.layout;
    ++compared;
  }
  EXPECT_EQ(compared, 40);
}

// The same outcome, in the same order, with 1 and 3 threads, and twice.
TEST(Search, DeterministicForAnyThreadCount) {
  const Scenario sc = one_sequence_pipeline();
  SearchOptions one;
  one.top = 1000;
  one.threads = 1;
  SearchOptions three = one;
  three.threads = 3;
  const SearchOutcome a = run_search(sc, one), b = run_search(sc, three), c = run_search(sc, three);
  for (const SearchOutcome* x : {&b, &c}) {
    EXPECT_EQ(a.considered, x->considered);
    EXPECT_EQ(a.fitting_step_times, x->fitting_step_times);
    ASSERT_EQ(a.best.size(), x->best.size());
    for (size_t i = 0; i < a.best.size(); ++i) {
      EXPECT_EQ(a.best[i].settings, x->best[i].settings) << i;
      EXPECT_EQ(a.best[i].result.step_time_s, x->best[i].result.step_time_s) << i;
    }
    EXPECT_EQ(render_points(a.best), render_points(x->best));
  }
}

// Every plan the search reports is a valid scenario whose layout is the one its settings
// name, and it fits.
TEST(Search, EveryReportedPlanIsValidAndFits) {
  const Scenario sc = small_llama3_8b();
  SearchOptions opt;
  opt.top = 60;
  opt.threads = 2;
  const auto cands = search_candidates(sc);
  const SearchOutcome out = run_search(sc, opt);
  ASSERT_EQ(out.best.size(), 60u);
  for (const auto& p : out.best) {
    EXPECT_TRUE(p.valid);
    EXPECT_TRUE(p.result.fits_memory);
    EXPECT_TRUE(p.result.simulated);
    const auto it = std::find_if(cands.begin(), cands.end(),
                                 [&](const PlanCandidate& c) { return c.settings == p.settings; });
    ASSERT_NE(it, cands.end());
    const Scenario plan = load_scenario_node(it->document(), "reported.yaml");  // throws if invalid
    const auto kv = settings_map(p);
    EXPECT_EQ(plan.parallel.tp, std::stoi(kv.at("tp")));
    EXPECT_EQ(plan.parallel.zero, std::stoi(kv.at("zero")));
    EXPECT_EQ(schedule_name(plan.parallel.schedule), kv.at("sched"));
    EXPECT_EQ(plan.parallel.overlap_tp_comm, kv.at("tp_overlap") == "1");
  }
}

TEST(Search, StateBeyondMemoryIsALowerBoundOfTheSimulatedPeak) {
  // tp 1, pp 1, plain DP: 8.03 B parameters x (2 B weights + 4 B fp32 grads + 12 B master
  // and Adam) = 145 GB of resident state on every GPU, beyond 80 GiB: not simulated, and the
  // simulated peak of the same plan is at least that state.
  YAML::Node doc = llama3_8b_doc();
  doc["training"]["global_batch"] = 16;
  doc["parallel"]["tp"] = 1;
  doc["parallel"]["dp"] = 8;
  doc["parallel"]["zero"] = 0;
  doc["parallel"]["sequence_parallel"] = false;
  const Scenario sc = load_scenario_node(doc, "plain-dp.yaml");
  SearchRunOptions skip;
  skip.skip_when_state_exceeds_memory = true;
  const Result quick = predict_pruned(sc, skip).result;
  EXPECT_FALSE(quick.simulated);
  EXPECT_FALSE(quick.fits_memory);
  EXPECT_NEAR(quick.memory_peak_gib * kGiB, 18.0 * quick.params_total, 1e-6 * quick.params_total);
  const Result sim = predict(sc).result;
  EXPECT_TRUE(sim.simulated);
  EXPECT_FALSE(sim.fits_memory);
  EXPECT_GE(sim.memory_peak_gib, quick.memory_peak_gib);
  // State that fits, activations that do not: tp 8, zero 1, 128k tokens per microbatch
  // without recompute. Lowered, its compute stream's own allocations exceed 80 GiB
  // (memory_floor_bytes): not simulated, and that floor is below the simulated peak.
  YAML::Node act = YAML::Clone(doc);
  act["parallel"]["tp"] = 8;
  act["parallel"]["dp"] = 1;
  act["parallel"]["zero"] = 1;
  act["parallel"]["sequence_parallel"] = true;
  act["training"]["global_batch"] = 16;
  act["parallel"]["microbatch"] = 16;
  const Scenario big = load_scenario_node(act, "activations.yaml");
  const Result floor = predict_pruned(big, skip).result;
  EXPECT_FALSE(floor.simulated);
  EXPECT_FALSE(floor.fits_memory);
  EXPECT_GT(floor.memory_peak_gib, floor.memory_capacity_gib);
  const Result big_sim = predict(big).result;
  EXPECT_FALSE(big_sim.fits_memory);
  EXPECT_GE(big_sim.memory_peak_gib, floor.memory_peak_gib);
  // A plan that fits is simulated as usual.
  doc["parallel"]["zero"] = 3;
  const Scenario z3 = load_scenario_node(doc, "zero3.yaml");
  const Result fits = predict_pruned(z3, skip).result;
  EXPECT_TRUE(fits.simulated);
  EXPECT_EQ(fits.step_time_s, predict(z3).result.step_time_s);
}

TEST(Search, APlanStopsLoweringAtItsFirstStageThatCannotFit) {
  // Llama 3 8B at tp 2, pp 4, 1F1B with microbatches of 4 x 8192 tokens and no recompute:
  // stage 0 holds the activations of 4 microbatches in flight (pp of them) for its 8 layers,
  // beyond 80 GiB, while its state (8.03 B / 8 parameters per GPU, about 16-18 B each) is a
  // few GiB. The search gives up after lowering stage 0 (one simulated rank; the other
  // stages' bounds are their state alone), and each stage's bound stays below the peak the
  // full simulation gives that stage. In fp8 (the activations as in bf16 without
  // Transformer Engine's fp8 storage rule), which the closed-form activation floor leaves
  // out; in bf16 that floor (state plus the 4 warm-up microbatches' activations) rules the
  // plan out before any lowering, each stage's floor again below its simulated peak.
  YAML::Node doc = llama3_8b_doc();
  doc["parallel"]["tp"] = 2;
  doc["parallel"]["pp"] = 4;
  doc["parallel"]["dp"] = 1;
  doc["parallel"]["microbatch"] = 4;
  doc["parallel"]["recompute"] = "none";
  doc["training"]["global_batch"] = 32;
  SearchRunOptions skip;
  skip.skip_when_state_exceeds_memory = true;
  {
    const Scenario bf16 = load_scenario_node(YAML::Clone(doc), "stage0-too-big-bf16.yaml");
    const Result unlowered = predict_pruned(bf16, skip).result;
    EXPECT_FALSE(unlowered.fits_memory);
    EXPECT_EQ(unlowered.simulated_ranks, 0);
    EXPECT_GT(unlowered.memory_peak_gib_per_stage[0], unlowered.memory_capacity_gib);
    const Result full = predict(bf16).result;
    for (size_t s = 0; s < 4; ++s)
      EXPECT_LE(unlowered.memory_peak_gib_per_stage[s], full.memory_peak_gib_per_stage[s]) << s;
  }
  doc["training"]["dtype"] = "fp8";
  const Scenario sc = load_scenario_node(doc, "stage0-too-big.yaml");
  const Result quick = predict_pruned(sc, skip).result;
  EXPECT_FALSE(quick.simulated);
  EXPECT_FALSE(quick.fits_memory);
  EXPECT_EQ(quick.simulated_ranks, 1);
  ASSERT_EQ(quick.memory_peak_gib_per_stage.size(), 4u);
  EXPECT_GT(quick.memory_peak_gib_per_stage[0], quick.memory_capacity_gib);
  const auto state = training_state_bytes(sc);
  for (size_t s = 1; s < 4; ++s)
    EXPECT_DOUBLE_EQ(quick.memory_peak_gib_per_stage[s],
                     (state[s][0] + state[s][1] + state[s][2]) / kGiB)
        << s;
  const Result full = predict(sc).result;
  EXPECT_FALSE(full.fits_memory);
  ASSERT_EQ(full.memory_peak_gib_per_stage.size(), 4u);
  for (size_t s = 0; s < 4; ++s)
    EXPECT_LE(quick.memory_peak_gib_per_stage[s], full.memory_peak_gib_per_stage[s]) << s;
}

TEST(Search, APlanStopsLoweringAtItsFirstStageBeyondTheBound) {
  // The search's bound (SearchRunOptions::skip_when_compute_exceeds_s) is also checked stage by
  // stage while lowering: Llama 3 8B at tp 2, pp 4 with a bound of half its simulated step.
  // Stage 0's own chain of dependent tasks already exceeds it (under 1F1B each stage
  // computes for about m / (m + pp - 1) = 16 / 19 of the step, well above half), so the plan
  // is pruned after one stage, with a bound between the threshold and the simulated step.
  YAML::Node doc = llama3_8b_doc();
  doc["parallel"]["tp"] = 2;
  doc["parallel"]["pp"] = 4;
  doc["parallel"]["dp"] = 1;
  doc["training"]["global_batch"] = 16;
  const Scenario sc = load_scenario_node(doc, "pp4.yaml");
  const Result full = predict(sc).result;
  ASSERT_TRUE(full.simulated);
  SearchRunOptions bound;
  bound.skip_when_state_exceeds_memory = true;
  bound.skip_when_compute_exceeds_s = full.step_time_s / 2;
  const Result quick = predict_pruned(sc, bound).result;
  EXPECT_TRUE(quick.pruned);
  EXPECT_FALSE(quick.simulated);
  EXPECT_EQ(quick.simulated_ranks, 1);
  EXPECT_GT(quick.step_time_s, bound.skip_when_compute_exceeds_s);
  EXPECT_LE(quick.step_time_s, full.step_time_s);
  // With the bound just above the step, it is simulated and gives the same step.
  bound.skip_when_compute_exceeds_s = full.step_time_s * 1.001;
  const Result kept = predict_pruned(sc, bound).result;
  EXPECT_TRUE(kept.simulated);
  EXPECT_EQ(kept.step_time_s, full.step_time_s);
}

}  // namespace
}  // namespace stepcast
