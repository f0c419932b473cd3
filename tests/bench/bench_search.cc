// Plan search speed (issue #29): `search` of the shipped GPT-3 175B (1,024 A100s), Llama 3
// 405B (16,384 H100s) and Mixtral 8x7B (64 H100s, MoE) scenarios on 2 threads, as `stepcast
// search SCENARIO --threads 2` runs it (run_search, the best 10). Reported per search: the plans
// considered, those lowered (any part) and simulated, the plans per CPU-second (process CPU time,
// both threads) and the bound's tightness (simulated step / closed-form bound over the simulated
// plans: median and worst). Also the enumeration alone (search_candidates: the space and
// each plan's closed-form bound, no lowering). The scenario is loaded outside the timed loop.
#include <string>

#include <benchmark/benchmark.h>

#include "sim/report/explore.h"
#include "sim/scenario/scenario.h"

namespace stepcast {
namespace {

Scenario shipped(const char* name) {
  return load_scenario(std::string(STEPCAST_SOURCE_DIR) + "/scenarios/" + name);
}

void search(benchmark::State& st, const char* name) {
  const Scenario sc = shipped(name);
  SearchOptions opt;
  opt.top = 10;
  opt.threads = 2;
  SearchOutcome out;
  for (auto _ : st) out = run_search(sc, opt);
  const double n = static_cast<double>(out.considered);
  st.counters["plans"] = n;
  st.counters["simulated"] = static_cast<double>(out.fitting_step_times.size());
  st.counters["ruled_out_unlowered"] = static_cast<double>(out.pruned_unlowered);
  st.counters["plans_per_cpu_s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  if (!out.bound_ratios.empty()) {
    st.counters["tightness_median"] = out.bound_ratios[out.bound_ratios.size() / 2];
    st.counters["tightness_worst"] = out.bound_ratios.back();
  }
  st.counters["best_step_s"] = out.best.empty() ? 0.0 : out.best.front().result.step_time_s;
}

void enumerate(benchmark::State& st, const char* name) {
  const Scenario sc = shipped(name);
  size_t n = 0;
  for (auto _ : st) n = search_candidates(sc).size();
  st.counters["plans"] = static_cast<double>(n);
  st.counters["plans_per_s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

// kIsRate divides by the CPU time of the process (MeasureProcessCPUTime), both threads.
BENCHMARK_CAPTURE(search, gpt3_175b_1024_a100, "gpt3-175b-128node-a100.yaml")
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->MeasureProcessCPUTime();
BENCHMARK_CAPTURE(search, llama3_405b_16384_h100, "llama3-405b-2048node-h100.yaml")
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->MeasureProcessCPUTime();
BENCHMARK_CAPTURE(search, mixtral_8x7b_64_h100, "mixtral-8x7b-8node-h100.yaml")
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->MeasureProcessCPUTime();
BENCHMARK_CAPTURE(enumerate, gpt3_175b_1024_a100, "gpt3-175b-128node-a100.yaml")
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime();
BENCHMARK_CAPTURE(enumerate, llama3_405b_16384_h100, "llama3-405b-2048node-h100.yaml")
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime();

}  // namespace
}  // namespace stepcast

BENCHMARK_MAIN();
