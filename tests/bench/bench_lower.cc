// Lowering speed (brief targets): Llama-3-405B on 16,384 H100s (tp8 pp16 dp128, interleaved
// vpp 2, as scenarios/llama3-405b-2048node-h100.yaml) folded must lower + cost + simulate in
// < 0.2 s; Llama-3-70B on 256 GPUs (tp8 pp4 dp8, as scenarios/llama3-70b-32node-h100.yaml)
// at full fidelity in < 1 s. Scenarios are built in code from the built-in models and the
// shipped h100-sxm profile (outside the timed loop).
#include <string>

#include <benchmark/benchmark.h>

#include "model/error.h"
#include "sim/cost/coster.h"
#include "sim/engine/engine.h"
#include "sim/lower/lower.h"
#include "sim/scenario/scenario.h"

namespace stepcast {
namespace {

Scenario make(const char* model, int nodes, std::int64_t global_batch, int tp, int pp, int vpp,
              std::vector<int> pipeline_layers) {
  Scenario sc;
  sc.name = model;
  const ModelArch* arch = find_builtin_model(model);
  STEPCAST_CHECK(arch != nullptr, std::string("no built-in model ") + model);
  sc.model = *arch;
  sc.profile = load_profile("h100-sxm", default_profiles_dir());
  sc.nodes = nodes;
  sc.gpus = nodes * sc.profile.node.gpus;
  sc.training.seq_len = 8192;
  sc.training.global_batch = global_batch;
  ParallelSpec& p = sc.parallel;
  p.tp = tp;
  p.pp = pp;
  p.dp = sc.gpus / (tp * pp);
  p.vpp = vpp;
  p.schedule = vpp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  p.pipeline_layers = std::move(pipeline_layers);
  p.zero = 1;
  p.sequence_parallel = true;
  p.recompute = Recompute::kSelective;
  return sc;
}

// 126 layers over 32 virtual stages: 3 on the first and last, 4 elsewhere.
Scenario llama3_405b_16k() {
  std::vector<int> layers(32, 4);
  layers.front() = 3;
  layers.back() = 3;
  return make("llama3-405b", 2048, 2048, 8, 16, 2, layers);
}
Scenario llama3_70b_256() { return make("llama3-70b", 32, 256, 8, 4, 5, {}); }
// The same plan with global batch 32 (4 microbatches per dp rank): 1/8 of the tasks.
Scenario llama3_70b_256_gbs32() { return make("llama3-70b", 32, 32, 8, 4, 5, {}); }

void lower_only(benchmark::State& st, Scenario (*build)(), bool folded) {
  const Scenario sc = build();
  std::size_t tasks = 0;
  for (auto _ : st) {
    Program p = lower(sc, LowerOptions{folded, {}});
    tasks = 0;
    for (const auto& r : p.ranks) tasks += r.tasks.size();
    benchmark::DoNotOptimize(p.ranks.data());
  }
  st.counters["tasks"] = static_cast<double>(tasks);
}

void lower_and_simulate(benchmark::State& st, Scenario (*build)(), bool folded) {
  const Scenario sc = build();
  EngineOptions eo;
  eo.record_memory_curve = false;
  for (auto _ : st) {
    Program p = lower(sc, LowerOptions{folded, {}});
    Durations d = task_durations(p, sc.profile);
    Timeline t = simulate(p, d, eo);
    benchmark::DoNotOptimize(t.step_ns);
    st.counters["step_s"] = to_s(t.step_ns);
  }
}

BENCHMARK_CAPTURE(lower_only, llama3_405b_16k_folded, llama3_405b_16k, true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(lower_and_simulate, llama3_405b_16k_folded, llama3_405b_16k, true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(lower_only, llama3_70b_256_full, llama3_70b_256, false)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(lower_and_simulate, llama3_70b_256_full, llama3_70b_256, false)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(lower_and_simulate, llama3_70b_256_gbs32_full, llama3_70b_256_gbs32, false)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

}  // namespace
}  // namespace stepcast

BENCHMARK_MAIN();
