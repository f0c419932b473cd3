#include "sim/engine/engine.h"

#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "model/error.h"
#include "sim/engine/critical_path.h"
#include "tests/sim/program/program_builder.h"

namespace stepcast {
namespace {

using testing::Builder;

constexpr size_t kBubble = kCategoryCount;
size_t cat(Category c) { return static_cast<size_t>(c); }

TimeNs sum_breakdown(const Timeline& tl) {
  return std::accumulate(tl.breakdown_ns.begin(), tl.breakdown_ns.end(), TimeNs{0});
}

TEST(Engine, ChainOnOneStreamSumsDurations) {
  // Three tasks in issue order on one stream: step = 100 + 250 + 50 = 400, all compute.
  Builder b;
  const int r = b.rank(0);
  b.compute(r, "a", 100);
  b.compute(r, "b", 250);
  b.compute(r, "c", 50);
  const Timeline tl = simulate(b.p, b.d);
  EXPECT_EQ(tl.step_ns, 400);
  EXPECT_EQ(tl.ranks[0].tasks[1].start, 100);
  EXPECT_EQ(tl.ranks[0].tasks[2].end, 400);
  EXPECT_EQ(tl.breakdown_ns[cat(Category::kCompute)], 400);
  EXPECT_EQ(tl.breakdown_ns[kBubble], 0);
  EXPECT_EQ(tl.events, 6u);  // 3 starts + 3 ends
}

// Durations whose sum could overflow the int64 nanosecond clock (more than 2^60 ns of work
// in the step) are refused as bad input instead of wrapping around.
TEST(Engine, StepsBeyondTheClockAreBadInput) {
  Builder b;
  const int r = b.rank(0);
  b.compute(r, "a", TimeNs{1} << 59);
  b.compute(r, "b", TimeNs{1} << 59);
  EXPECT_EQ(simulate(b.p, b.d).step_ns, TimeNs{1} << 60);  // exactly at the limit: simulated
  b.compute(r, "c", TimeNs{1} << 40);                      // 2^60 + 2^40 ns
  try {
    simulate(b.p, b.d);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("years of GPU time"), std::string::npos) << e.what();
  }
}

TEST(Engine, TwoStreamsOverlap) {
  // Independent tasks on compute (100) and dp (70) run together: step = max = 100; the
  // compute stream hides the dp task entirely, so exposed dp comm is 0.
  Builder b;
  const int r = b.rank(0);
  const int g = b.group(GroupKind::kDp, {0});
  b.compute(r, "fwd", 100);
  b.coll(r, "dp.ar", g, 70, {}, StreamKind::kDp, Category::kDpComm);
  const Timeline tl = simulate(b.p, b.d);
  EXPECT_EQ(tl.step_ns, 100);
  EXPECT_EQ(tl.ranks[0].tasks[1].start, 0);
  EXPECT_EQ(tl.breakdown_ns[cat(Category::kCompute)], 100);
  EXPECT_EQ(tl.breakdown_ns[cat(Category::kDpComm)], 0);
}

TEST(Engine, DepsAcrossStreams) {
  // a (compute, 100) -> ar (tp stream, 50, waits for a) -> c (compute, 30, waits for ar):
  // step = 100 + 50 + 30 = 180; exposed tp comm = 50, compute = 130.
  Builder b;
  const int r = b.rank(0);
  const int g = b.group(GroupKind::kTp, {0});
  const int a = b.compute(r, "a", 100);
  const int ar = b.coll(r, "tp.ar", g, 50, {a});
  b.compute(r, "c", 30, {ar});
  const Timeline tl = simulate(b.p, b.d);
  EXPECT_EQ(tl.step_ns, 180);
  EXPECT_EQ(tl.ranks[0].tasks[2].start, 150);
  EXPECT_EQ(tl.breakdown_ns[cat(Category::kCompute)], 130);
  EXPECT_EQ(tl.breakdown_ns[cat(Category::kTpComm)], 50);
  EXPECT_EQ(sum_breakdown(tl), tl.step_ns);
}

TEST(Engine, CollectiveWaitsForSlowestMember) {
  // Rank 0 reaches the allreduce at 100, rank 1 at 300: both start at 300 and, with the
  // longest member duration (60), end at 360. Both end at 360: the critical rank is the one
  // whose compute stream was busiest, 1 (the one rank 0 waited for), whose breakdown is
  // compute 300, tp 60, no bubble.
  Builder b;
  const int r0 = b.rank(0), r1 = b.rank(1);
  const int g = b.group(GroupKind::kTp, {0, 1});
  b.coll(r0, "ar", g, 40, {b.compute(r0, "fwd", 100)});
  b.coll(r1, "ar", g, 60, {b.compute(r1, "fwd", 300)});
  const Timeline tl = simulate(b.p, b.d);
  for (int r : {0, 1}) {
    EXPECT_EQ(tl.ranks[static_cast<size_t>(r)].tasks[1].start, 300);
    EXPECT_EQ(tl.ranks[static_cast<size_t>(r)].tasks[1].end, 360);
  }
  EXPECT_EQ(tl.step_ns, 360);
  EXPECT_EQ(tl.critical_rank, 1);
  EXPECT_EQ(tl.breakdown_ns[cat(Category::kCompute)], 300);
  EXPECT_EQ(tl.breakdown_ns[kBubble], 0);
  EXPECT_EQ(tl.breakdown_ns[cat(Category::kTpComm)], 60);
}

TEST(Engine, SendRecvStartTogether) {
  // The recv is posted at 0 but its send only at 100 (after compute): both run [100, 120)
  // (the longer of 20 and 10), then rank 1 computes 50: step = 170.
  Builder b;
  const int r0 = b.rank(0), r1 = b.rank(1);
  b.p2p(r0, true, "send.act", 1, 7, 20, {b.compute(r0, "fwd0", 100)});
  const int rv = b.p2p(r1, false, "recv.act", 0, 7, 10);
  b.compute(r1, "fwd1", 50, {rv});
  const Timeline tl = simulate(b.p, b.d);
  EXPECT_EQ(tl.ranks[1].tasks[0].start, 100);
  EXPECT_EQ(tl.ranks[1].tasks[0].end, 120);
  EXPECT_EQ(tl.ranks[0].tasks[1].end, 120);
  EXPECT_EQ(tl.step_ns, 170);
  EXPECT_EQ(tl.critical_rank, 1);
  // Rank 1: idle (bubble) until 100, pp comm 20, compute 50.
  EXPECT_EQ(tl.breakdown_ns[kBubble], 100);
  EXPECT_EQ(tl.breakdown_ns[cat(Category::kPpComm)], 20);
  EXPECT_EQ(tl.breakdown_ns[cat(Category::kCompute)], 50);
}

TEST(Engine, SendRecvOnTheSameSimulatedRank) {
  // Folded ring exchange: one simulated rank stands for globals 0 and 1; it sends to 1 and
  // receives from 0 — both map to itself — on the pp_send / pp_recv streams.
  // compute 80 -> send (30) meets recv (posted at 0) at 80; the consumer runs [110, 150).
  Builder b;
  const int r = b.rank(0, {0, 1});
  const int c = b.compute(r, "attn.0", 80);
  b.p2p(r, true, "kv.send", 1, 3, 30, {c});
  const int rv = b.p2p(r, false, "kv.recv", 0, 3, 30);
  b.compute(r, "attn.1", 40, {rv});
  const Timeline tl = simulate(b.p, b.d);
  EXPECT_EQ(tl.ranks[0].tasks[2].start, 80);
  EXPECT_EQ(tl.ranks[0].tasks[3].start, 110);
  EXPECT_EQ(tl.step_ns, 150);
}

TEST(Engine, FoldedCollectiveWithAllMembersOnOneRank) {
  // Every member of the group maps to the one simulated rank: the rendezvous has one
  // participant and starts as soon as it is ready: step = 10 + 25.
  Builder b;
  const int r = b.rank(0, {0, 1, 2, 3});
  const int g = b.group(GroupKind::kDp, {0, 1, 2, 3});
  b.coll(r, "ar", g, 25, {b.compute(r, "x", 10)}, StreamKind::kDp, Category::kDpComm);
  EXPECT_EQ(simulate(b.p, b.d).step_ns, 35);
}

TEST(Engine, DeadlockNamesStuckTasks) {
  // Rank 0 issues groups A then B on one stream, rank 1 B then A: each waits for the other.
  Builder b;
  const int r0 = b.rank(0), r1 = b.rank(1);
  const int ga = b.group(GroupKind::kTp, {0, 1});
  const int gb = b.group(GroupKind::kDp, {0, 1});
  b.coll(r0, "coll.A", ga, 10);
  b.coll(r0, "coll.B", gb, 10);
  b.coll(r1, "coll.B", gb, 10);
  b.coll(r1, "coll.A", ga, 10);
  try {
    simulate(b.p, b.d);
    FAIL() << "expected a deadlock";
  } catch (const InvariantError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("deadlock: 4 of 4 tasks never ran"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'coll.A' (rank 0 task 0) on stream tp waits for group member "
                       "'coll.A' (rank 1 task 1)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("'coll.B' (rank 1 task 0) on stream tp waits for group member "
                       "'coll.B' (rank 0 task 1)"),
              std::string::npos)
        << msg;
  }
}

TEST(Engine, DeadlockFromDependencyCycleNamesDeps) {
  // a waits for b and b for a (validate_program would reject this; the engine still says why).
  Builder b;
  const int r = b.rank(0);
  b.compute(r, "a", 10, {1});
  b.compute(r, "b", 10, {0}, Category::kCompute, StreamKind::kTp);
  try {
    simulate(b.p, b.d);
    FAIL();
  } catch (const InvariantError& e) {
    EXPECT_NE(std::string(e.what()).find("'a' (rank 0 task 0) on stream compute waits for dep "
                                         "'b' (rank 0 task 1)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Engine, ReusableAfterAFailedRun) {
  // The engine keeps its buffers per thread; a run that throws must not leak state into the
  // next one. Deadlocked program, then the 3-task chain (100 + 250 + 50 = 400).
  Builder bad;
  const int r0 = bad.rank(0), r1 = bad.rank(1);
  const int ga = bad.group(GroupKind::kTp, {0, 1}), gb = bad.group(GroupKind::kDp, {0, 1});
  bad.coll(r0, "A", ga, 10);
  bad.coll(r0, "B", gb, 10);
  bad.coll(r1, "B", gb, 10);
  bad.coll(r1, "A", ga, 10);
  EXPECT_THROW(simulate(bad.p, bad.d), InvariantError);
  Builder b;
  const int r = b.rank(0);
  b.compute(r, "a", 100);
  b.compute(r, "b", 250);
  b.compute(r, "c", 50);
  const Timeline tl = simulate(b.p, b.d);
  EXPECT_EQ(tl.step_ns, 400);
  EXPECT_EQ(tl.events, 6u);
}

TEST(Engine, UnmatchedSendIsRejected) {
  Builder b;
  const int r0 = b.rank(0);
  b.rank(1);
  b.p2p(r0, true, "lonely", 1, 5, 10);
  try {
    simulate(b.p, b.d);
    FAIL();
  } catch (const InvariantError& e) {
    EXPECT_NE(std::string(e.what()).find("send 'lonely' (rank 0 task 0) (tag 5, to rank 1) has "
                                         "no matching recv"),
              std::string::npos)
        << e.what();
  }
}

TEST(Engine, MemoryPeakOnAllocFree) {
  // weights 1000 resident; act.mb0 500 alloc'd at 0, freed after its consumer (ends 100);
  // act.mb1 300 alloc'd after that free. Peak = 1000 + 500 = 1500 (not 1800: mb1's alloc
  // depends on mb0's free). Curve: t=0 -> 1500 (two allocs coalesced), t=100 -> 1000 then
  // 1300 coalesced to 1300, t=150 -> 1000.
  Builder b;
  const int r = b.rank(0);
  b.mem(r, true, "weights", 1000);
  const int a0 = b.mem(r, true, "act.mb0", 500);
  const int c0 = b.compute(r, "fwd.mb0", 100, {a0});
  const int f0 = b.mem(r, false, "act.mb0", 500, {c0});
  const int a1 = b.mem(r, true, "act.mb1", 300, {f0});
  const int c1 = b.compute(r, "fwd.mb1", 50, {a1});
  b.mem(r, false, "act.mb1", 300, {c1});
  const Timeline tl = simulate(b.p, b.d);
  EXPECT_EQ(tl.step_ns, 150);
  EXPECT_DOUBLE_EQ(tl.ranks[0].peak_bytes, 1500);
  const auto& m = tl.ranks[0].memory;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].t, 0);
  EXPECT_DOUBLE_EQ(m[0].bytes, 1500);
  EXPECT_EQ(m[1].t, 100);
  EXPECT_DOUBLE_EQ(m[1].bytes, 1300);
  EXPECT_EQ(m[2].t, 150);
  EXPECT_DOUBLE_EQ(m[2].bytes, 1000);

  EngineOptions no_curve;
  no_curve.record_memory_curve = false;
  const Timeline t2 = simulate(b.p, b.d, no_curve);
  EXPECT_TRUE(t2.ranks[0].memory.empty());
  EXPECT_DOUBLE_EQ(t2.ranks[0].peak_bytes, 1500);
}

// GPipe by hand: p stages, m microbatches, forward f, backward 2f, communication free
// (zero-duration send/recv carry the cross-stage order). Forward of microbatch j on stage s
// ends at (s + j + 1) f; the last stage finishes its forwards at (m + p - 1) f, then the
// backwards flow back: B(s, j) ends at (m + p - 1) f + 2f (j + 1) + 2f (p - 1 - s). Stage 0
// ends last, at (m + p - 1) f + 2f m + 2f (p - 1) = 3f (m + p - 1). It is busy 3f m, so the
// bubble is 3f (p - 1): fraction (p - 1) / (m + p - 1) (GPipe, Huang et al. 2019, sec. 2.2).
TEST(Engine, GpipeStepAndBubble) {
  const TimeNs f = 1000;
  for (auto [p, m] : std::vector<std::pair<int, int>>{{4, 8}, {2, 1}, {8, 4}, {3, 16}}) {
    Builder b;
    for (int s = 0; s < p; ++s) b.rank(s, {}, s);
    for (int s = 0; s < p; ++s) {
      std::vector<int> fwd(static_cast<size_t>(m));
      for (int j = 0; j < m; ++j) {
        std::vector<int> deps;
        if (s > 0) deps.push_back(b.p2p(s, false, "recv.act", s - 1, j, 0));
        fwd[static_cast<size_t>(j)] = b.compute(s, "fwd.mb" + std::to_string(j), f, deps);
        if (s < p - 1) b.p2p(s, true, "send.act", s + 1, j, 0, {fwd[static_cast<size_t>(j)]});
      }
      for (int j = 0; j < m; ++j) {
        std::vector<int> deps{fwd[static_cast<size_t>(j)]};
        if (s < p - 1) deps.push_back(b.p2p(s, false, "recv.grad", s + 1, 1000 + j, 0));
        const int bw = b.compute(s, "bwd.mb" + std::to_string(j), 2 * f, deps);
        if (s > 0) b.p2p(s, true, "send.grad", s - 1, 1000 + j, 0, {bw});
      }
    }
    validate_program(b.p);
    const Timeline tl = simulate(b.p, b.d);
    EXPECT_EQ(tl.step_ns, 3 * f * (m + p - 1)) << p << "x" << m;
    EXPECT_EQ(tl.critical_rank, 0);
    EXPECT_EQ(tl.breakdown_ns[kBubble], 3 * f * (p - 1));
    EXPECT_EQ(tl.breakdown_ns[cat(Category::kCompute)], 3 * f * m);
    EXPECT_DOUBLE_EQ(
        static_cast<double>(tl.breakdown_ns[kBubble]) / static_cast<double>(tl.step_ns),
        static_cast<double>(p - 1) / (m + p - 1));
  }
}

// ---- Properties over random programs ----

bool same_timing(const RankTimeline& a, const RankTimeline& b) {
  if (a.tasks.size() != b.tasks.size()) return false;
  for (size_t i = 0; i < a.tasks.size(); ++i)
    if (a.tasks[i].start != b.tasks[i].start || a.tasks[i].end != b.tasks[i].end) return false;
  return true;
}

TEST(EngineProperty, FoldedEqualsFullOnSymmetricPrograms) {
  // N identical replicas simulated in full and folded onto one simulated rank: every replica
  // of the full run behaves like the folded rank, so step, breakdown and peak agree — with
  // and without interference (decided per rank from what runs on it: symmetric too).
  std::mt19937_64 rng(12345);
  int hbm_changed = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int replicas = 2 * (1 + trial % 4);
    const auto tt = testing::random_template(rng, 20 + trial % 40);
    const Builder full = testing::build_replicated(tt, replicas, false);
    const Builder folded = testing::build_replicated(tt, replicas, true);
    validate_program(full.p);
    validate_program(folded.p);
    // Odd trials with SM interference and HBM contention (shares 0.05..0.95 by bytes).
    EngineOptions o;
    if (trial % 2) {
      o.compute_slowdown_when_comm = 0.2;
      o.comm_hbm_share = [](const RankProgram&, const Task& t, TimeNs) {
        return 0.05 + 0.1 * static_cast<double>(static_cast<long long>(t.bytes) % 10);
      };
    }
    const Timeline a = simulate(full.p, full.d, o);
    const Timeline b = simulate(folded.p, folded.d, o);
    if (trial % 2) {  // the HBM rule must actually act on some of these programs
      EngineOptions sm_only;
      sm_only.compute_slowdown_when_comm = 0.2;
      hbm_changed += simulate(full.p, full.d, sm_only).step_ns != a.step_ns;
    }
    ASSERT_EQ(a.step_ns, b.step_ns) << "trial " << trial;
    EXPECT_EQ(a.breakdown_ns, b.breakdown_ns) << "trial " << trial;
    for (const RankTimeline& rt : a.ranks) {
      EXPECT_TRUE(same_timing(rt, b.ranks[0])) << "trial " << trial;
      EXPECT_DOUBLE_EQ(rt.peak_bytes, b.ranks[0].peak_bytes);
    }
  }
  EXPECT_GT(hbm_changed, 5);
}

TEST(EngineProperty, BreakdownSumsToStepAndCriticalPathIsTight) {
  std::mt19937_64 rng(777);
  for (int trial = 0; trial < 80; ++trial) {
    const auto tt = testing::random_template(rng, 10 + trial);
    const Builder b = testing::build_replicated(tt, 2 + 2 * (trial % 3), false, &rng);
    EngineOptions o;
    o.compute_slowdown_when_comm = (trial % 2) ? 0.25 : 0.0;
    const Timeline tl = simulate(b.p, b.d, o);
    EXPECT_EQ(sum_breakdown(tl), tl.step_ns) << "trial " << trial;
    for (TimeNs x : tl.breakdown_ns) EXPECT_GE(x, 0);
    // The critical path covers [0, step] without gaps.
    const auto path = critical_path(b.p, tl);
    if (tl.step_ns == 0) continue;
    ASSERT_FALSE(path.empty());
    auto timing = [&](std::pair<int, int> x) {
      return tl.ranks[static_cast<size_t>(x.first)].tasks[static_cast<size_t>(x.second)];
    };
    EXPECT_EQ(timing(path.front()).start, 0) << "trial " << trial;
    EXPECT_EQ(timing(path.back()).end, tl.step_ns);
    for (size_t i = 1; i < path.size(); ++i)
      EXPECT_EQ(timing(path[i]).start, timing(path[i - 1]).end) << "trial " << trial;
  }
}

TEST(EngineProperty, LongerTaskNeverShortensStep) {
  // Without SM interference every start is a max over predecessor ends and every end a start
  // plus a duration (rendezvous: max of member durations); streams keep a fixed order. So
  // times are max-plus expressions of the durations, monotone in each: lengthening any one
  // task can never make the step shorter. (With interference it can; see the test above.)
  std::mt19937_64 rng(4242);
  for (int trial = 0; trial < 40; ++trial) {
    const auto tt = testing::random_template(rng, 30);
    Builder b = testing::build_replicated(tt, 4, false, &rng);
    const TimeNs base = simulate(b.p, b.d).step_ns;
    for (int k = 0; k < 10; ++k) {
      Builder c = b;
      const size_t r = std::uniform_int_distribution<size_t>(0, c.d.size() - 1)(rng);
      const size_t i = std::uniform_int_distribution<size_t>(0, c.d[r].size() - 1)(rng);
      c.d[r][i] += std::uniform_int_distribution<TimeNs>(1, 5000)(rng);
      EXPECT_GE(simulate(c.p, c.d).step_ns, base) << "trial " << trial;
    }
  }
}

TEST(EngineProperty, Deterministic) {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 10; ++trial) {
    const auto tt = testing::random_template(rng, 50);
    const Builder b = testing::build_replicated(tt, 6, false, &rng);
    EngineOptions o;
    o.compute_slowdown_when_comm = 0.1;
    const Timeline x = simulate(b.p, b.d, o), y = simulate(b.p, b.d, o);
    EXPECT_EQ(x.step_ns, y.step_ns);
    EXPECT_EQ(x.breakdown_ns, y.breakdown_ns);
    EXPECT_EQ(x.events, y.events);
    for (size_t r = 0; r < x.ranks.size(); ++r) {
      EXPECT_TRUE(same_timing(x.ranks[r], y.ranks[r]));
      ASSERT_EQ(x.ranks[r].memory.size(), y.ranks[r].memory.size());
      for (size_t k = 0; k < x.ranks[r].memory.size(); ++k) {
        EXPECT_EQ(x.ranks[r].memory[k].t, y.ranks[r].memory[k].t);
        EXPECT_EQ(x.ranks[r].memory[k].bytes, y.ranks[r].memory[k].bytes);
      }
    }
  }
}

TEST(CriticalPath, ChainThroughCollective) {
  // Rank 1's long compute (300) gates the allreduce; rank 0 then computes 20 after it.
  // Path: rank1.fwd [0,300) -> ar [300,360) -> rank0.after [360,380): 300+60+20 = 380.
  Builder b;
  const int r0 = b.rank(0), r1 = b.rank(1);
  const int g = b.group(GroupKind::kTp, {0, 1});
  const int ar0 = b.coll(r0, "ar", g, 60, {b.compute(r0, "fwd", 100)});
  b.compute(r0, "after", 20, {ar0});
  b.coll(r1, "ar", g, 60, {b.compute(r1, "fwd", 300)});
  const Timeline tl = simulate(b.p, b.d);
  ASSERT_EQ(tl.step_ns, 380);
  const auto path = critical_path(b.p, tl);
  const std::vector<std::pair<int, int>> expect{{1, 0}, {0, 1}, {0, 2}};
  EXPECT_EQ(path, expect);
}

}  // namespace
}  // namespace stepcast
