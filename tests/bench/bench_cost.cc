// Cost-model speed: task_durations over a synthetic program shaped like a lowered step
// (per rank: GEMMs, attention, memory-bound ops, TP collectives, PP send/recv, DP
// reduce-scatter), and single collective_time / compute_time_s calls.
#include <benchmark/benchmark.h>

#include "sim/cost/coster.h"

namespace stepcast {
namespace {

HwProfile bench_profile() {
  HwProfile hw;
  hw.name = "bench-h100";
  hw.gpu.hbm_bytes_per_s = 3.35e12;
  hw.gpu.sms = 132;
  hw.gpu.peak_flop_per_s = {{DType::kBf16, 989.4e12}, {DType::kFp8, 1978.9e12}};
  hw.node.nvls = true;
  hw.compute.gemm_max_eff = 0.88;
  hw.compute.gemm_half_m = 107;
  hw.compute.gemm_half_n = 58;
  hw.compute.gemm_half_k = 109;
  hw.compute.gemm_fixed_time_s = 5.8e-6;
  hw.collectives.intra_ring_busbw = 370e9;
  hw.collectives.nvls_busbw = 480e9;
  hw.collectives.nic_busbw = 48e9;
  return hw;
}

// `ranks` simulated ranks (tp 8 inside a node, dp across nodes), `per_rank` tasks each.
Program synthetic_program(int ranks, int per_rank) {
  Program p;
  p.world_size = ranks * 8;
  p.gpus_per_node = 8;
  for (int r = 0; r < ranks; ++r) {
    Group tp{static_cast<int>(p.groups.size()), GroupKind::kTp, {}};
    for (int i = 0; i < 8; ++i) tp.ranks.push_back(r * 8 + i);
    p.groups.push_back(tp);
  }
  Group dp{static_cast<int>(p.groups.size()), GroupKind::kDp, {}};
  for (int r = 0; r < ranks; ++r) dp.ranks.push_back(r * 8);
  p.groups.push_back(dp);
  for (int r = 0; r < ranks; ++r) {
    RankProgram rp;
    rp.rank = r * 8;
    for (int i = 0; i < per_rank; ++i) {
      Task t;
      t.id = i;
      switch (i % 6) {
        case 0:
          t.kind = TaskKind::kGemm;
          t.gemm = GemmShape{8192, 4096 + 128 * (i % 7), 4096, 1, DType::kBf16, GemmLayout::kNN};
          t.flops = 2.0 * t.gemm.m * t.gemm.n * t.gemm.k;
          break;
        case 1:
          t.kind = TaskKind::kAttention;
          t.attn = AttentionShape{1, 8, 8, 4096, 4096, 128, true, (i % 12) == 1, DType::kBf16};
          t.flops = 4.0 * 8 * 4096.0 * 4096 * 128 * 0.5;
          break;
        case 2:
          t.kind = TaskKind::kMemoryBound;
          t.bytes_read = 1e8;
          break;
        case 3:
          t.kind = TaskKind::kCollective;
          t.coll = CollOp::kAllReduce;
          t.group = r;
          t.bytes = 64e6;
          break;
        case 4:
          t.kind = (i % 12 == 4) ? TaskKind::kSend : TaskKind::kRecv;
          t.peer = ((r + 1) % ranks) * 8;
          t.bytes = 32e6;
          break;
        default:
          t.kind = TaskKind::kCollective;
          t.coll = CollOp::kReduceScatter;
          t.group = ranks;
          t.bytes = 1e8 + 1e6 * (i % 50);
          break;
      }
      rp.tasks.push_back(std::move(t));
    }
    p.ranks.push_back(std::move(rp));
  }
  return p;
}

void BM_TaskDurations(benchmark::State& state) {
  const HwProfile hw = bench_profile();
  const int ranks = 16;
  const Program p = synthetic_program(ranks, static_cast<int>(state.range(0)) / ranks);
  for (auto _ : state) {
    Durations d = task_durations(p, hw);
    benchmark::DoNotOptimize(d[0].data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_TaskDurations)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);

void BM_CollectiveTime(benchmark::State& state) {
  const HwProfile hw = bench_profile();
  const GroupShape g{1024, 128, 8, 1};
  double bytes = 1e6;
  for (auto _ : state) {
    benchmark::DoNotOptimize(collective_time(CollOp::kAllReduce, bytes, g, hw));
    bytes += 1;
  }
}
BENCHMARK(BM_CollectiveTime);

}  // namespace
}  // namespace stepcast

BENCHMARK_MAIN();
