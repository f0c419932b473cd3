// Lowering tests: what the host does (docs/model.md, "The host") — the kernels each task
// launches (Task::launches), where the host waits (Task::host_sync), and the per-rank copies
// of list collectives (framework list_collectives) with their per-rank host ops.
#include <algorithm>
#include <map>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "sim/engine/engine.h"
#include "sim/lower/lower.h"
#include "tests/sim/lower/lower_test_helpers.h"
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast {
namespace {

using testing::make_scenario;
using testing::Plan;
using testing::tiny_gpt;

// ZeRO-3 under the deepspeed preset on dp 4, one microbatch.
Scenario zero3_scenario() {
  Plan p;
  p.dp = 4;
  p.zero = 3;
  p.microbatches = 1;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.framework = framework_preset(Framework::kDeepSpeed);
  return sc;
}

TEST(LowerHost, ListCollectivesCopyEveryRankSlice) {
  // list_collectives: each ZeRO-3 all-gather is followed on the DP stream by the copy of
  // its gathered bytes out of the flat buffer (read + write), one copy kernel per rank of
  // the dp group (4), and what used the gather now waits for the copy; each reduce-scatter
  // waits for the copy of its bytes into the flat buffer, 4 launches likewise. Without the
  // rule, no copies and the same collectives.
  Scenario sc = zero3_scenario();
  const Program flat = lower(sc);
  sc.framework.list_collectives = true;
  const Program listed = lower(sc);
  auto count = [](const Program& p, TaskKind k, CollOp op) {
    int n = 0;
    for (const Task& t : p.ranks[0].tasks)
      n += t.kind == k && (k != TaskKind::kCollective || t.coll == op);
    return n;
  };
  const int ag = count(listed, TaskKind::kCollective, CollOp::kAllGather);
  const int rs = count(listed, TaskKind::kCollective, CollOp::kReduceScatter);
  EXPECT_GT(ag, 0);
  EXPECT_GT(rs, 0);
  EXPECT_EQ(ag, count(flat, TaskKind::kCollective, CollOp::kAllGather));
  EXPECT_EQ(rs, count(flat, TaskKind::kCollective, CollOp::kReduceScatter));
  const TaskList& tasks = listed.ranks[0].tasks;
  int copies = 0, ag_copied = 0, rs_copied = 0;
  for (const Task& t : tasks) {
    if (t.what != "list_copy") continue;
    ++copies;
    EXPECT_EQ(t.kind, TaskKind::kMemoryBound);
    EXPECT_EQ(t.stream, StreamKind::kDp);
    EXPECT_EQ(t.launches, 4);
    EXPECT_DOUBLE_EQ(t.bytes_read, t.bytes_written);
    for (int d : t.deps) {
      const Task& g = tasks[static_cast<size_t>(d)];
      if (g.kind == TaskKind::kCollective && g.coll == CollOp::kAllGather) {
        EXPECT_DOUBLE_EQ(g.bytes, t.bytes_read) << t.label;
        ++ag_copied;
      }
    }
  }
  for (const Task& t : tasks) {
    if (t.kind == TaskKind::kCollective && t.coll == CollOp::kReduceScatter)
      for (int d : t.deps)
        if (tasks[static_cast<size_t>(d)].what == "list_copy") {
          EXPECT_DOUBLE_EQ(tasks[static_cast<size_t>(d)].bytes_read, t.bytes) << t.label;
          ++rs_copied;
        }
    // No kernel uses a gather directly any more: it waits for the copy.
    if (t.stream == StreamKind::kCompute)
      for (int d : t.deps) {
        const Task& g = tasks[static_cast<size_t>(d)];
        EXPECT_FALSE(g.kind == TaskKind::kCollective && g.coll == CollOp::kAllGather) << t.label;
      }
  }
  EXPECT_EQ(ag_copied, ag);
  EXPECT_EQ(rs_copied, rs);
  EXPECT_EQ(copies, ag + rs);
  for (const Task& t : flat.ranks[0].tasks) EXPECT_NE(t.what, "list_copy");
  // The all-gather's output list is built in Python, a narrow view per rank: 4 host ops on
  // each list all-gather, none on the flat ones nor on anything else.
  for (const Task& t : tasks)
    EXPECT_EQ(t.host_ops, t.kind == TaskKind::kCollective && t.coll == CollOp::kAllGather ? 4 : 0)
        << t.label;
  for (const Task& t : flat.ranks[0].tasks) EXPECT_EQ(t.host_ops, 0) << t.label;
}

TEST(LowerHost, FetchSyncWaitsForEveryGatherOnTheHost) {
  // zero3_fetch_sync (DeepSpeed <= 0.5's torch.cuda.synchronize() when a fetch is waited
  // for): each all-gather (through its list copy) is waited for once, by a compute-stream
  // marker the host waits for: no kernel, no launch, no bytes, depending on the fetch's last
  // task; the gathers issued after a marker depend on it. In the simulated step (host at
  // 10 us a launch) every kernel the host issues after a marker starts after the marker's
  // end, so after its gather and after every kernel issued before it; and the step is longer
  // than without the syncs (the prefetched gathers then ran beside the compute). Without the
  // rule, no markers.
  Scenario sc = zero3_scenario();
  sc.framework.list_collectives = true;
  const Program async_fetch = lower(sc);
  // (The step's end synchronizes once after the persistent parameters' gathers, either way:
  // PersistentParametersAreGatheredAgainAfterTheStep.)
  for (const Task& t : async_fetch.ranks[0].tasks)
    EXPECT_TRUE(t.what != "device_sync" || t.label == "sync.persistent") << t.label;
  sc.framework.zero3_fetch_sync = true;
  const Program prog = lower(sc);
  const TaskList& tasks = prog.ranks[0].tasks;
  int gathers = 0, syncs = 0;
  for (const Task& t : tasks) {
    if (t.label.find("persist") != std::string::npos) continue;
    gathers += t.kind == TaskKind::kCollective && t.coll == CollOp::kAllGather;
    if (t.what != "device_sync") continue;
    ++syncs;
    EXPECT_TRUE(t.host_sync);
    EXPECT_EQ(t.stream, StreamKind::kCompute);
    EXPECT_EQ(t.launches, 0);
    EXPECT_DOUBLE_EQ(t.bytes_read + t.bytes_written, 0.0);
    ASSERT_EQ(t.deps.size(), 1u);
    const Task& f = tasks[static_cast<size_t>(t.deps[0])];
    EXPECT_EQ(f.what, "list_copy") << t.label;
    ASSERT_EQ(f.deps.size(), 1u);
    EXPECT_EQ(tasks[static_cast<size_t>(f.deps[0])].coll, CollOp::kAllGather) << t.label;
  }
  int last_sync = -1;
  for (const Task& t : tasks) {
    if (t.what == "device_sync") last_sync = t.id;
    // On the marker itself, or on a compute task after it (a pass's first gather).
    if (t.kind == TaskKind::kCollective && t.coll == CollOp::kAllGather && last_sync >= 0) {
      EXPECT_TRUE(std::any_of(t.deps.begin(), t.deps.end(), [&](int d) {
        return d == last_sync ||
               (d > last_sync && tasks[static_cast<size_t>(d)].stream == StreamKind::kCompute);
      })) << t.label;
    }
  }
  EXPECT_GT(gathers, 0);
  EXPECT_EQ(syncs, gathers);
  const testing::Synth synth{.aux_free = false, .comm_ns_per_byte = 1.0};
  EngineOptions o;
  o.host_launch_ns = 10000;
  const Durations d = testing::synth_durations(prog, synth);
  const Timeline tl = simulate(prog, d, o);
  const auto& tt = tl.ranks[0].tasks;
  TimeNs resumed = 0;  // the host's last wait ended here
  for (const Task& t : tasks) {
    const auto i = static_cast<size_t>(t.id);
    const bool kernel = t.kind == TaskKind::kGemm || t.kind == TaskKind::kAttention ||
                        t.kind == TaskKind::kMemoryBound;
    if (kernel && t.what != "device_sync") {
      EXPECT_GE(tt[i].start, resumed) << t.label;
    }
    if (t.what == "device_sync") resumed = tt[i].end;
  }
  EXPECT_GT(tl.step_ns,
            simulate(async_fetch, testing::synth_durations(async_fetch, synth), o).step_ns);
}

TEST(LowerHost, MegatronCoreWaitsForEachLossOnTheLossStage) {
  // Megatron-Core checks every microbatch's loss for NaN on the host: on the last stage the
  // forward loss kernel is a host_sync, once per microbatch (4); no other task is, and no
  // task of the first stage. The deepspeed preset does not check.
  Plan p;
  p.pp = 2;
  p.microbatches = 4;
  Scenario sc = make_scenario(tiny_gpt(), p);
  const Program prog = lower(sc);
  ASSERT_EQ(prog.ranks.size(), 2u);
  int syncs_first = 0, syncs_last = 0;
  for (const Task& t : prog.ranks[0].tasks) syncs_first += t.host_sync;
  for (const Task& t : prog.ranks[1].tasks) {
    if (!t.host_sync) continue;
    ++syncs_last;
    EXPECT_EQ(t.what, "softmax_ce");
    EXPECT_EQ(t.phase, Phase::kFwd);
  }
  EXPECT_EQ(syncs_first, 0);
  EXPECT_EQ(syncs_last, 4);
  sc.framework = framework_preset(Framework::kDeepSpeed);
  for (const RankProgram& rp : lower(sc).ranks)
    for (const Task& t : rp.tasks) EXPECT_FALSE(t.host_sync) << t.label;
}

TEST(LowerHost, LaunchCountsFollowTheKernels) {
  // The unfused fp32 loss is 6 PyTorch kernels forward and 3 backward (model/workload.cc
  // logits_loss_ops); Transformer Engine's fused one 2 and 1. A grouped expert GEMM launches
  // one cuBLAS GEMM per local expert (tiny_moe: 8 experts over ep 2: 4).
  Plan p;
  p.dp = 2;
  p.ep = 2;
  p.microbatches = 1;
  Scenario sc = make_scenario(testing::tiny_moe(2), p);
  std::map<std::string, int> ce;
  int grouped = 0;
  const Program prog = lower(sc);
  for (const Task& t : prog.ranks[0].tasks) {
    if (t.what == "softmax_ce") ce[phase_name(t.phase)] = t.launches;
    if (t.kind == TaskKind::kGemm && t.gemm.batch > 1) {
      EXPECT_EQ(t.launches, t.gemm.batch) << t.label;
      EXPECT_EQ(t.gemm.batch, 4) << t.label;
      ++grouped;
    }
  }
  EXPECT_GT(grouped, 0);
  EXPECT_EQ(ce["fwd"], 6);
  EXPECT_EQ(ce["bwd_input"], 3);
  sc.framework.fused_cross_entropy = true;
  const Program fused = lower(sc);
  for (const Task& t : fused.ranks[0].tasks)
    if (t.what == "softmax_ce") {
      EXPECT_EQ(t.launches, t.phase == Phase::kFwd ? 2 : 1);
    }
}

TEST(LowerHost, RandomPlansRunWithACostlyHost) {
  // Every lowered plan (any schedule, ZeRO stage, MoE with its host syncs, list collectives,
  // DeepSpeed 2021's synchronized fetches)
  // runs with the host at 10 us a launch: no deadlock, and never faster than a free host
  // (start times only grow with release times; synthetic durations, no interference).
  std::mt19937 rng(1204);
  for (int trial = 0; trial < 30; ++trial) {
    Plan p = testing::random_plan(rng);
    Scenario sc = make_scenario(p.ep > 1 ? testing::tiny_moe(8) : tiny_gpt(8), p);
    if (trial % 3 == 0) sc.framework = framework_preset(Framework::kDeepSpeed);
    sc.framework.list_collectives = trial % 2 == 0;
    sc.framework.zero3_fetch_sync = trial % 5 < 2;
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << ": pp" << p.pp << " dp" << p.dp << " ep" << p.ep << " zero"
                 << p.zero << " " << schedule_name(p.schedule));
    const Program prog = lower(sc);
    const testing::Synth synth{.aux_free = false, .comm_ns_per_byte = 1.0};
    const Durations d = testing::synth_durations(prog, synth);
    EngineOptions o;
    o.host_launch_ns = 10000;
    const TimeNs with_host = simulate(prog, d, o).step_ns;
    EXPECT_GE(with_host, simulate(prog, d).step_ns);
    // The host keeps symmetric ranks symmetric: one simulated rank per stage gives the step
    // of simulating all (their hosts issue the same tasks in the same order).
    const Program full = lower(sc, LowerOptions{false, {}});
    EXPECT_EQ(simulate(full, testing::synth_durations(full, synth), o).step_ns, with_host);
  }
}

}  // namespace
}  // namespace stepcast
