// Max-min solver speed (sim/network/maxmin.h): random GPU pairs on a 1024-GPU rail-optimised
// H100 topology (128 nodes, pods of 256 GPUs, 1:7 above), routed with PXN.
//  BM_MaxMinSolveFromScratch/F: add F flows and solve once.
//  BM_MaxMinIncremental/F: with F flows live, one flow ends and another starts, re-solve
//  (the engine's per-event cost in flow mode).
#include <random>

#include <benchmark/benchmark.h>

#include "sim/network/maxmin.h"
#include "sim/network/topology.h"

namespace stepcast {
namespace {

HwProfile bench_profile() {
  HwProfile hw;
  hw.name = "bench-h100";
  hw.node.gpus = 8;
  hw.node.nics = 8;
  hw.node.nvlink_bytes_per_s = 450e9;
  hw.node.nic_bytes_per_s = 50e9;
  hw.fabric.pod_gpus = 256;
  hw.fabric.oversubscription = 7;
  return hw;
}

std::vector<std::vector<int>> random_routes(const Topology& t, int flows, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> gpu(0, t.gpus() - 1);
  std::vector<std::vector<int>> routes;
  routes.reserve(static_cast<size_t>(flows));
  while (static_cast<int>(routes.size()) < flows) {
    const int a = gpu(rng), b = gpu(rng);
    if (a != b) routes.push_back(t.route(a, b));
  }
  return routes;
}

void BM_MaxMinSolveFromScratch(benchmark::State& state) {
  const Topology topo(bench_profile(), 1024);
  const auto routes = random_routes(topo, static_cast<int>(state.range(0)), 1);
  for (auto _ : state) {
    MaxMinSolver s(topo.capacities());
    for (const auto& r : routes) s.add_flow(r);
    s.solve();
    benchmark::DoNotOptimize(s.rate(0));
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_MaxMinSolveFromScratch)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

void BM_MaxMinIncremental(benchmark::State& state) {
  const Topology topo(bench_profile(), 1024);
  const int n = static_cast<int>(state.range(0));
  const auto routes = random_routes(topo, n, 2);
  const auto extra = random_routes(topo, 4096, 3);
  MaxMinSolver s(topo.capacities());
  std::vector<int> ids;
  for (const auto& r : routes) ids.push_back(s.add_flow(r));
  s.solve();
  size_t k = 0;
  std::int64_t solved = 0;
  for (auto _ : state) {
    const size_t victim = k % ids.size();
    s.remove_flow(ids[victim]);
    ids[victim] = s.add_flow(extra[k % extra.size()]);
    s.solve();
    solved += s.last_solved_flows();
    ++k;
  }
  state.counters["flows_resolved"] =
      benchmark::Counter(static_cast<double>(solved), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_MaxMinIncremental)->Arg(1000)->Arg(10000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace stepcast

BENCHMARK_MAIN();
