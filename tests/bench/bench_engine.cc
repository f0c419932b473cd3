// Engine throughput: events (task starts + ends) per second of simulate() on a synthetic
// Program of ~0.9 M tasks — pp 8 x tp 8 ranks, 16 microbatches x 64 layers of forward and
// backward (GEMMs, attention, two tp allreduces per layer and pass, pp send/recv between
// stages, alloc/free of activations) and a dp allreduce per layer at the end. Target
// (engine task): >= 10 M events/s on one core. The rate includes setup (matching, CSR build).
#include <benchmark/benchmark.h>

#include <string>
#include <string_view>

#include "sim/engine/engine.h"
#include "sim/program/program.h"

namespace stepcast {
namespace {

struct Synthetic {
  Program p;
  Durations d;
};

Synthetic make_synthetic(int pp, int tp, int microbatches, int layers) {
  Synthetic s;
  Program& p = s.p;
  p.world_size = pp * tp;
  p.folded = false;
  auto rank_of = [&](int stage, int t) { return stage * tp + t; };
  for (int st = 0; st < pp; ++st) {  // tp groups, then dp (one member: dp = 1 here) groups
    Group g;
    g.id = static_cast<int>(p.groups.size());
    g.kind = GroupKind::kTp;
    for (int t = 0; t < tp; ++t) g.ranks.push_back(rank_of(st, t));
    p.groups.push_back(g);
  }
  const int dp_group0 = static_cast<int>(p.groups.size());
  for (int r = 0; r < pp * tp; ++r) {
    Group g;
    g.id = static_cast<int>(p.groups.size());
    g.kind = GroupKind::kDp;
    g.ranks = {r};
    p.groups.push_back(g);
  }
  for (int st = 0; st < pp; ++st) {
    for (int t = 0; t < tp; ++t) {
      RankProgram rp;
      rp.rank = rank_of(st, t);
      rp.pp_stage = st;
      rp.stands_for = {rp.rank};
      std::vector<TimeNs> dur;
      auto add = [&](Task task, TimeNs ns) {
        dur.push_back(ns);
        return add_task(rp, std::move(task));
      };
      auto compute = [&](const char* what, TimeNs ns, std::vector<int> deps, Phase ph) {
        Task k;
        // "attn" memory-bound (HBM contention, Arg 2); the rest GEMMs.
        k.kind =
            std::string_view(what).starts_with("attn") ? TaskKind::kMemoryBound : TaskKind::kGemm;
        k.phase = ph;
        k.label = what;
        k.deps = std::move(deps);
        return add(std::move(k), ns);
      };
      auto allreduce = [&](int dep) {
        Task k;
        k.kind = TaskKind::kCollective;
        k.stream = StreamKind::kTp;
        k.category = Category::kTpComm;
        k.group = st;
        k.bytes = 1 << 24;
        k.deps = {dep};
        return add(std::move(k), 40'000);
      };
      auto p2p = [&](bool send, int peer_stage, std::int64_t tag, std::vector<int> deps) {
        Task k;
        k.kind = send ? TaskKind::kSend : TaskKind::kRecv;
        k.stream = send ? StreamKind::kPpSend : StreamKind::kPpRecv;
        k.category = Category::kPpComm;
        k.peer = rank_of(peer_stage, t);
        k.tag = tag;
        k.bytes = 1 << 22;
        k.deps = std::move(deps);
        return add(std::move(k), 15'000);
      };
      auto mem = [&](bool alloc, std::vector<int> deps) {
        Task k;
        k.kind = alloc ? TaskKind::kAlloc : TaskKind::kFree;
        k.bytes = 1 << 26;
        k.what = "act";
        k.deps = std::move(deps);
        return add(std::move(k), 0);
      };
      // Forward of every microbatch, then backward in reverse (GPipe order).
      for (int mb = 0; mb < microbatches; ++mb) {
        int last = st > 0 ? p2p(false, st - 1, mb, {}) : -1;
        for (int l = 0; l < layers; ++l) {
          std::vector<int> in = last >= 0 ? std::vector<int>{last} : std::vector<int>{};
          const int a = mem(true, in);
          const int qkv = compute("qkv", 50'000 + 100 * t, {a}, Phase::kFwd);
          const int att = compute("attn", 80'000, {qkv}, Phase::kFwd);
          const int ar1 = allreduce(compute("proj", 30'000, {att}, Phase::kFwd));
          const int fc = compute("fc", 120'000, {ar1}, Phase::kFwd);
          last = allreduce(fc);
        }
        if (st < pp - 1) p2p(true, st + 1, mb, {last});
      }
      int last = -1;
      for (int mb = microbatches - 1; mb >= 0; --mb) {
        if (st < pp - 1) last = p2p(false, st + 1, 100'000 + mb, {});
        for (int l = layers - 1; l >= 0; --l) {
          std::vector<int> in = last >= 0 ? std::vector<int>{last} : std::vector<int>{};
          const int fc = compute("fc.bwd", 240'000, in, Phase::kBwdInput);
          const int ar1 = allreduce(fc);
          const int att = compute("attn.bwd", 200'000, {ar1}, Phase::kBwdInput);
          const int qkv = compute("qkv.bwd", 100'000, {att}, Phase::kBwdInput);
          last = allreduce(qkv);
          mem(false, {last});
        }
        if (st > 0) p2p(true, st - 1, 100'000 + mb, {last});
      }
      for (int l = 0; l < layers; ++l) {
        Task k;
        k.kind = TaskKind::kCollective;
        k.stream = StreamKind::kDp;
        k.category = Category::kDpComm;
        k.group = dp_group0 + rp.rank;
        k.deps = {last};
        add(std::move(k), 300'000);
      }
      p.ranks.push_back(std::move(rp));
      s.d.push_back(std::move(dur));
    }
  }
  return s;
}

const Synthetic& synthetic() {
  static const Synthetic s = make_synthetic(8, 8, 16, 64);
  return s;
}

void BM_Simulate(benchmark::State& state) {
  const Synthetic& s = synthetic();
  EngineOptions o;
  // 0: no interference; 1: SM slowdown 0.1 while communication runs; 2: also HBM contention,
  // every collective and send/recv using 25% of HBM (memory-bound kernels and communication
  // re-timed over their overlaps); 3: SM slowdown and the host (10 us a launch and 2 us a
  // host op as every preset, docs/model.md "The host": an issue pass over every task, kernels
  // released at their launch).
  o.compute_slowdown_when_comm = state.range(0) ? 0.1 : 0.0;
  if (state.range(0) == 3) {
    o.host_launch_ns = 10'000;
    o.host_op_ns = 2'000;
  }
  if (state.range(0) == 2)
    o.comm_hbm_share = [](const RankProgram&, const Task&, TimeNs) { return 0.25; };
  std::uint64_t events = 0;
  size_t tasks = 0;
  for (const auto& rp : s.p.ranks) tasks += rp.tasks.size();
  for (auto _ : state) {
    Timeline tl = simulate(s.p, s.d, o);
    events += tl.events;
    benchmark::DoNotOptimize(tl.step_ns);
  }
  state.counters["tasks"] = static_cast<double>(tasks);
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Simulate)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Arg(3)
    ->Unit(benchmark::kMillisecond);  // rates per CPU second: the build machine is shared

}  // namespace
}  // namespace stepcast

BENCHMARK_MAIN();
