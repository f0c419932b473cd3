// Slow GPUs and links (scenario cluster.stragglers) through the whole pipeline, predict():
// the program is simulated unfolded, a slow GPU stretches its kernels and its transfers
// (sim/cost/coster.h task_durations), and the engine's rendezvous carry the delay to every
// rank that waits for it.
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "sim/report/report.h"
#include "tests/sim/cost/test_profiles.h"
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast {
namespace {

using testing::h100_profile;
using testing::make_scenario;
using testing::Plan;
using testing::random_plan;
using testing::tiny_gpt;
using testing::tiny_moe;

Scenario scenario_of(const Plan& p) {
  Scenario sc = make_scenario(p.ep > 1 ? tiny_moe(8) : tiny_gpt(8), p);
  sc.profile = h100_profile();
  sc.nodes = (sc.gpus + sc.profile.node.gpus - 1) / sc.profile.node.gpus;
  return sc;
}

RunOptions full_fidelity() {
  RunOptions o;
  o.folded = false;
  return o;
}

Straggler gpu_at(int gpu, GpuSpeed speed) {
  Straggler s;
  s.gpu = gpu;
  s.speed = speed;
  return s;
}

// A straggler at nominal speed changes nothing: the same step, breakdown and memory as the
// plan simulated at full fidelity without it (which equals folded: lower_test.cc). Any
// difference would be the straggler path costing or simulating differently.
TEST(Stragglers, NominalSpeedEqualsFullFidelityOnRandomPlans) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 12; ++trial) {
    const Plan p = random_plan(rng);
    Scenario sc = scenario_of(p);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << sc.gpus << " GPUs");
    const Result full = predict(sc, full_fidelity()).result;
    sc.stragglers = {gpu_at(static_cast<int>(rng() % static_cast<unsigned>(sc.gpus)), GpuSpeed{})};
    const Result same = predict(sc).result;
    EXPECT_FALSE(same.folded);
    EXPECT_EQ(same.step_time_s, full.step_time_s);
    EXPECT_EQ(same.breakdown_s, full.breakdown_s);
    EXPECT_EQ(same.memory_peak_gib_per_stage, full.memory_peak_gib_per_stage);
  }
}

// One GPU computing at f of its speed: the step is no shorter, and no longer than every
// duration stretched by 1/f (the engine is max-plus in the durations; the SM-interference
// stretch is proportional to the stretched kernel). Random plans, f in {0.5, 0.8}.
TEST(Stragglers, SlowComputeIsBoundedBetweenBaseAndBaseOverF) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 16; ++trial) {
    const Plan p = random_plan(rng);
    Scenario sc = scenario_of(p);
    const double f = trial % 2 ? 0.5 : 0.8;
    const int gpu = static_cast<int>(rng() % static_cast<unsigned>(sc.gpus));
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << ": " << sc.gpus << " GPUs, gpu " << gpu << " at " << f);
    const double base = predict(sc).result.step_time_s;
    sc.stragglers = {gpu_at(gpu, GpuSpeed{f, 1, 1})};
    const Result slow = predict(sc).result;
    EXPECT_GE(slow.step_time_s, base);
    EXPECT_LE(slow.step_time_s, base / f * (1 + 1e-9));
  }
}

// Data parallelism on one node, no overlap: every rank computes its step, then the gradient
// reduce-scatter and the parameter all-gather wait for all of them. One GPU at half speed
// adds exactly its compute time once more: step' - step = sum of its kernel times x (1/0.5 - 1)
// (up to 1 ns of rounding per kernel), and it is the critical rank. The host launches
// kernels in no time here (host_launch_us 0): the test model's kernels are shorter than a
// 10 us launch, so the host would set the pace and hide part of the slowdown
// (docs/model.md, "The host").
TEST(Stragglers, DataParallelWaitsForTheSlowGpu) {
  Plan p;
  p.dp = 8;
  p.zero = 1;
  p.overlap_grad = false;
  p.overlap_param = false;
  Scenario sc = scenario_of(p);
  sc.framework.host_launch_us = 0;
  const Prediction base = predict(sc, full_fidelity());
  sc.stragglers = {gpu_at(5, GpuSpeed{0.5, 1, 1})};
  const Prediction slow = predict(sc);
  double compute_s = 0;
  int kernels = 0;
  for (const auto& [kind, sec] : base.result.busy_by_kind_s)
    if (kind == "gemm" || kind == "attention" || kind == "memory_bound") compute_s += sec;
  for (const Task& t : base.program.ranks[5].tasks) kernels += testing::is_compute(t.kind);
  EXPECT_EQ(slow.result.critical_rank, 5);
  EXPECT_NEAR(slow.result.step_time_s - base.result.step_time_s, compute_s, kernels * 1e-9);
  EXPECT_EQ(slow.result.stragglers, "gpu 5: compute x0.5");
  // Its breakdown is the slow GPU's: all compute, nothing waited for.
  EXPECT_EQ(slow.result.breakdown_s[kCategoryCount], 0.0);
}

// A slow NIC slows what crosses nodes and nothing else: data parallelism over two nodes
// (tp 8 inside each node, dp 2 across) gets a longer exposed dp_comm; the same plan with dp
// inside one node (tp 1, dp 8) does not change at all. Flow mode, where the NIC's links
// themselves carry half the rate, agrees that the step grows.
TEST(Stragglers, SlowNicSlowsOnlyCrossNodeTraffic) {
  Plan across;
  across.tp = 8;
  across.dp = 2;
  across.zero = 1;
  across.overlap_grad = false;
  Scenario sc = scenario_of(across);
  ASSERT_EQ(sc.nodes, 2);
  const GpuSpeed half_nic{1, 0.5, 1};
  for (NetworkMode mode : {NetworkMode::kAnalytical, NetworkMode::kFlow}) {
    sc.network = mode;
    sc.stragglers.clear();
    const Result base = predict(sc, full_fidelity()).result;
    sc.stragglers = {gpu_at(11, half_nic)};
    const Result slow = predict(sc).result;
    const size_t dp = static_cast<size_t>(Category::kDpComm);
    EXPECT_GT(slow.breakdown_s[dp], base.breakdown_s[dp] * 1.3) << static_cast<int>(mode);
    EXPECT_GT(slow.step_time_s, base.step_time_s) << static_cast<int>(mode);
    EXPECT_EQ(slow.breakdown_s[static_cast<size_t>(Category::kCompute)],
              base.breakdown_s[static_cast<size_t>(Category::kCompute)]);
  }
  Plan inside;
  inside.dp = 8;
  inside.zero = 1;
  sc = scenario_of(inside);
  ASSERT_EQ(sc.nodes, 1);
  const Result base = predict(sc, full_fidelity()).result;
  sc.stragglers = {gpu_at(3, half_nic)};
  const Result slow = predict(sc).result;
  EXPECT_EQ(slow.step_time_s, base.step_time_s);
  EXPECT_EQ(slow.breakdown_s, base.breakdown_s);
}

}  // namespace
}  // namespace stepcast
