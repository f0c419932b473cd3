// The MoE all-to-all overlap with another microbatch (parallel.overlap.moe_ep_comm;
// sim/lower/moe_overlap.cc, schedule.h): the paired schedule, the interleaved emission, what
// it hides and what it costs in memory.
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "sim/lower/schedule.h"
#include "tests/sim/lower/lower_test_helpers.h"

namespace stepcast {
namespace {

using testing::make_scenario;
using testing::Plan;
using testing::Synth;
using testing::tiny_moe;

int warmup_of(const std::vector<PassOp>& o) {
  int w = 0;
  while (w < static_cast<int>(o.size()) && o[static_cast<size_t>(w)].kind == PassKind::kF) ++w;
  return w;
}

TEST(Schedule, EpOverlapPairsTheSteadyState) {
  // Megatron-Core's combined 1F1B: one more warm-up forward than the plain schedule, then
  // every steady-state forward paired with the backward after it; the same passes, once
  // each; the nominal run (a pair as one pass of both costs) never deadlocks.
  std::mt19937 rng(17);
  struct Case {
    Schedule s;
    int p, v, m;
  };
  std::vector<Case> cases;
  for (int m = 1; m <= 6; ++m) cases.push_back({Schedule::k1F1B, 1, 1, m});
  for (int p : {2, 4})
    for (int v : {2, 3})
      for (int k : {1, 2, 3}) cases.push_back({Schedule::kInterleaved, p, v, k * p});
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "p " << c.p << " v " << c.v << " m " << c.m);
    const auto paired = pipeline_schedule(c.s, c.p, c.v, c.m, true);
    const int total = c.v * c.m;
    for (int s = 0; s < c.p; ++s) {
      const auto& o = paired[static_cast<size_t>(s)];
      std::map<std::tuple<int, int, int>, int> seen;
      int pairs = 0;
      for (size_t i = 0; i < o.size(); ++i) {
        ++seen[{static_cast<int>(o[i].kind), o[i].chunk, o[i].mb}];
        if (!o[i].paired) continue;
        ++pairs;
        ASSERT_EQ(o[i].kind, PassKind::kF);
        ASSERT_LT(i + 1, o.size());
        EXPECT_EQ(o[i + 1].kind, PassKind::kB);
        EXPECT_FALSE(o[i + 1].paired);
      }
      EXPECT_EQ(seen.size(), static_cast<size_t>(2 * total));
      // Scheduled warm-up: the plain one (schedule.cc) plus one, capped at all passes.
      const int plain_warm = c.s == Schedule::k1F1B ? 0
                             : c.m == c.p           ? total
                                                    : (c.p - s - 1) * 2 + (c.v - 1) * c.p;
      const int warm = std::min(plain_warm + 1, total);
      EXPECT_EQ(pairs, total - warm);
      // Forwards before the first B: the warm-up and, with pairs, the first pair's.
      EXPECT_EQ(warmup_of(o), warm + (pairs > 0 ? 1 : 0));
    }
    NominalCosts nc;
    for (int i = 0; i < c.p * c.v; ++i) {
      nc.f.push_back(1.0 + static_cast<double>(rng() % 5));
      nc.b.push_back(1.0 + static_cast<double>(rng() % 9));
    }
    EXPECT_NO_THROW(nominal_start_times(c.s, paired, c.p, c.v, c.m, nc));
  }
}

Plan overlap_plan() {
  Plan p;
  p.dp = 4;
  p.ep = 4;
  p.microbatches = 4;
  return p;
}

size_t index_of(const TaskList& tasks, const std::string& label) {
  for (size_t i = 0; i < tasks.size(); ++i)
    if (tasks[i].label == label) return i;
  ADD_FAILURE() << "no task " << label;
  return 0;
}

TEST(Lower, EpOverlapInterleavesAForwardWithABackward) {
  // pp 1, 4 microbatches, 4 MoE layers: F0, then (F1 B0), (F2 B1), (F3 B2), B3. In the
  // pair (F1, B0), the forward's layer 0 runs with the backward's layer 3 in the order of
  // Megatron-Core's TransformerLayerSchedulePlan.run: F1's attention, B0's expert input
  // gradients, then F1's experts, then B0's attention input gradients.
  Plan p = overlap_plan();
  p.overlap_ep = true;
  const Program prog = lower(make_scenario(tiny_moe(), p));
  const TaskList& t = prog.ranks[0].tasks;
  const size_t f_attn = index_of(t, "fwd.L0.qkv.mb1");
  const size_t b_experts = index_of(t, "bwd.L3.moe.fc1.mb0");
  const size_t f_experts = index_of(t, "fwd.L0.moe.fc1.mb1");
  const size_t b_attn = index_of(t, "bwd.L3.qkv.mb0");
  EXPECT_LT(f_attn, b_experts);
  EXPECT_LT(b_experts, f_experts);
  EXPECT_LT(f_experts, b_attn);
  // The experts' weight gradients right after their input gradients (delayed wgrad).
  EXPECT_LT(index_of(t, "wgt.L3.moe.fc1.mb0"), f_experts);
  EXPECT_GT(index_of(t, "wgt.L3.qkv.mb0"), b_attn);
  // Without the overlap, F1 runs whole after B0.
  p.overlap_ep = false;
  const Program plain = lower(make_scenario(tiny_moe(), p));
  EXPECT_GT(index_of(plain.ranks[0].tasks, "fwd.L0.qkv.mb1"),
            index_of(plain.ranks[0].tasks, "bwd.L0.qkv.mb0"));
}

TEST(Lower, EpOverlapComputeWaitsOnlyForItsOwnAllToAll) {
  // On random plans with the overlap, no compute task waits directly for another
  // microbatch's all-to-all: each pass has its own dependency state. Without the
  // mechanism (one state for the pair) the forward's expert GEMMs would wait for the
  // backward's dispatch, issued between them.
  std::mt19937 rng(31);
  int checked = 0;
  for (int trial = 0; checked < 12; ++trial) {
    ASSERT_LT(trial, 400);
    Plan p = testing::random_plan(rng);
    if (p.ep == 1) continue;
    // Made runnable with the overlap where random_plan did not pick it (scenario rules).
    if (p.pp > 1 && p.schedule != Schedule::kInterleaved) {
      p.schedule = Schedule::kInterleaved;
      p.vpp = 2;
      p.microbatches = p.pp;
    }
    if (p.pp == 1) {
      p.schedule = Schedule::k1F1B;
      p.vpp = 1;
    }
    if (p.recompute == Recompute::kFull) p.recompute = Recompute::kSelective;
    p.zero = std::min(p.zero, 1);
    p.overlap_ep = true;
    ++checked;
    const Program prog = lower(make_scenario(tiny_moe(8), p));
    for (const RankProgram& rp : prog.ranks)
      for (const Task& task : rp.tasks) {
        if (!testing::is_compute(task.kind)) continue;
        for (int d : task.deps) {
          const Task& dep = rp.tasks[static_cast<size_t>(d)];
          if (dep.kind == TaskKind::kCollective && dep.coll == CollOp::kAllToAll) {
            EXPECT_EQ(dep.microbatch, task.microbatch) << task.label << " <- " << dep.label;
          }
        }
      }
    testing::run(prog);  // valid and deadlock-free
  }
  EXPECT_GE(checked, 8);
}

TEST(Lower, EpOverlapHidesTheAllToAllAndHoldsOneMoreMicrobatch) {
  // Communication at 0.2 ns per byte: the all-to-alls of one microbatch run beside the
  // other's compute, so the step is shorter. Memory, pp 1: the plain 1F1B peaks as B0
  // starts, with microbatch 0's four layers and output layer alive. With the overlap the
  // output layer's backward runs first (post_process), then F1's layer 0 is allocated
  // before B0's layer 3 is freed: the peak is four layers of mb 0 and one of mb 1, i.e.
  // one layer's activations more and the output layer's less.
  Plan p = overlap_plan();
  const Synth comm{.aux_free = false, .comm_ns_per_byte = 0.2};
  const Program plain = lower(make_scenario(tiny_moe(), p));
  p.overlap_ep = true;
  const Program over = lower(make_scenario(tiny_moe(), p));
  const Timeline tp = testing::run(plain, comm), to = testing::run(over, comm);
  EXPECT_LT(to.step_ns, tp.step_ns);
  const double layer = testing::alloc_bytes(over.ranks[0], "act.L0.mb0");
  const double head = testing::alloc_bytes(over.ranks[0], "act.head.mb0");
  ASSERT_GT(layer, head);
  ASSERT_GT(head, 0);
  EXPECT_DOUBLE_EQ(to.ranks[0].peak_bytes, tp.ranks[0].peak_bytes + layer - head);
}

}  // namespace
}  // namespace stepcast
