// Flow network mode (sim/report/flow_mode.h) on the llama3-70b / 256-GPU scenario at full
// fidelity (scenarios/llama3-70b-32node-h100.yaml: tp8 pp4 dp8 vpp5, 5.7 M tasks): the
// engine alone in analytical mode, and in flow mode (setup of durations, latencies and
// topology included), so the difference is the cost of the max-min network. Target (flow
// task): the whole flow-mode prediction under 5 s. Also: the folded program in flow mode.
// The Program is lowered once outside the timed loops (BM_Llama70bFullLower times lowering).
#include <benchmark/benchmark.h>

#include <string>

#include "sim/cost/coster.h"
#include "sim/engine/engine.h"
#include "sim/lower/lower.h"
#include "sim/report/flow_mode.h"
#include "sim/scenario/scenario.h"

namespace stepcast {
namespace {

// The repository root from this file's path (CMake compiles it by absolute path).
std::string repo_root() {
  const std::string here = __FILE__;
  return here.substr(0, here.rfind("/tests/bench/"));
}
const std::string kScenario = repo_root() + "/scenarios/llama3-70b-32node-h100.yaml";

struct Fixture {
  Scenario sc;
  Program program;
  explicit Fixture(bool folded) : sc(load_scenario(kScenario)) {
    LowerOptions lo;
    lo.folded = folded;
    program = lower(sc, lo);
  }
};

const Fixture& full() {
  static const Fixture f(false);
  return f;
}
const Fixture& folded() {
  static const Fixture f(true);
  return f;
}

size_t task_count(const Program& p) {
  size_t n = 0;
  for (const RankProgram& r : p.ranks) n += r.tasks.size();
  return n;
}

void run_analytical(benchmark::State& state, const Fixture& f) {
  const Durations d = task_durations(f.program, f.sc.profile);
  EngineOptions eo;
  eo.compute_slowdown_when_comm = comm_compute_slowdown(f.sc.profile);
  TimeNs step = 0;
  for (auto _ : state) step = simulate(f.program, d, eo).step_ns;
  state.counters["step_s"] = to_s(step);
  state.counters["tasks"] = static_cast<double>(task_count(f.program));
}

void run_flow(benchmark::State& state, const Fixture& f) {
  EngineOptions eo;
  eo.compute_slowdown_when_comm = comm_compute_slowdown(f.sc.profile);
  Timeline tl;
  for (auto _ : state) tl = simulate_flow_mode(f.program, f.sc.profile, eo);
  state.counters["step_s"] = to_s(tl.step_ns);
  state.counters["transfers"] = static_cast<double>(tl.flow_transfers);
  state.counters["tasks"] = static_cast<double>(task_count(f.program));
}

// For scale: lowering the same scenario at full fidelity (sim/lower, not the network).
void BM_Llama70bFullLower(benchmark::State& state) {
  const Scenario sc = load_scenario(kScenario);
  LowerOptions lo;
  lo.folded = false;
  for (auto _ : state) benchmark::DoNotOptimize(lower(sc, lo).ranks.size());
}

void BM_Llama70bFullAnalyticalEngine(benchmark::State& s) { run_analytical(s, full()); }
void BM_Llama70bFullFlowMode(benchmark::State& s) { run_flow(s, full()); }
void BM_Llama70bFoldedFlowMode(benchmark::State& s) { run_flow(s, folded()); }
BENCHMARK(BM_Llama70bFullLower)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Llama70bFullAnalyticalEngine)->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_Llama70bFullFlowMode)->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_Llama70bFoldedFlowMode)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace stepcast

BENCHMARK_MAIN();
