// search skips costing and simulating plans whose resident training state alone exceeds a
// GPU's memory; the outcome must be exactly what simulating every plan gives.
#include "sim/report/explore.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "model/units.h"
#include "sim/report/report.h"
#include "sim/scenario/scenario.h"

namespace stepcast {
namespace {

Scenario small_llama3_8b() {
  // The shipped one-node Llama 3 8B scenario with a global batch of 16 (fast to simulate).
  YAML::Node doc = YAML::LoadFile(std::string(STEPCAST_SOURCE_DIR) +
                                  "/scenarios/llama3-8b-1node-h100.yaml");
  doc["training"]["global_batch"] = 16;
  return load_scenario_node(doc, "llama3-8b-small.yaml");
}

TEST(Search, SkippingPlansThatCannotFitChangesNothing) {
  const Scenario sc = small_llama3_8b();
  SearchOptions fast;
  fast.top = 1000;
  fast.threads = 2;
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

TEST(Search, StateBeyondMemoryIsALowerBoundOfTheSimulatedPeak) {
  // tp 1, pp 1, plain DP: 8.03 B parameters x (2 B weights + 4 B fp32 grads + 12 B master
  // and Adam) = 145 GB of resident state on every GPU, beyond 80 GiB: not simulated, and the
  // simulated peak of the same plan is at least that state.
  YAML::Node doc = YAML::LoadFile(std::string(STEPCAST_SOURCE_DIR) +
                                  "/scenarios/llama3-8b-1node-h100.yaml");
  doc["training"]["global_batch"] = 16;
  doc["parallel"]["tp"] = 1;
  doc["parallel"]["dp"] = 8;
  doc["parallel"]["zero"] = 0;
  doc["parallel"]["sequence_parallel"] = false;
  const Scenario sc = load_scenario_node(doc, "plain-dp.yaml");
  RunOptions skip;
  skip.skip_when_state_exceeds_memory = true;
  const Result quick = predict(sc, skip).result;
  EXPECT_FALSE(quick.simulated);
  EXPECT_FALSE(quick.fits_memory);
  EXPECT_NEAR(quick.memory_peak_gib * kGiB, 18.0 * quick.params_total, 1e-6 * quick.params_total);
  const Result sim = predict(sc).result;
  EXPECT_TRUE(sim.simulated);
  EXPECT_FALSE(sim.fits_memory);
  EXPECT_GE(sim.memory_peak_gib, quick.memory_peak_gib);
  // A plan that fits is simulated as usual.
  doc["parallel"]["zero"] = 3;
  const Scenario z3 = load_scenario_node(doc, "zero3.yaml");
  const Result fits = predict(z3, skip).result;
  EXPECT_TRUE(fits.simulated);
  EXPECT_EQ(fits.step_time_s, predict(z3).result.step_time_s);
}

}  // namespace
}  // namespace stepcast
