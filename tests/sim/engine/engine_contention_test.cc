// Engine tests of contention (engine.h): SM interference and HBM contention, by hand and as
// properties over random programs.
#include "sim/engine/engine.h"

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "tests/sim/program/program_builder.h"

namespace stepcast {
namespace {

using testing::Builder;

TEST(Engine, SmInterferenceSlowsComputeWhileCommRuns) {
  // Slowdown 0.5: a kernel progresses at 1/1.5 of its speed while communication of its rank
  // runs, at full speed otherwise.
  // dp allreduce runs [0, 150). Compute a (100) starts at 0 and overlaps it throughout:
  // 100 x 1.5 = 150. Compute b starts at 150, when the allreduce has just ended ([s, e)
  // semantics): 100.
  {
    Builder b;
    const int r = b.rank(0);
    const int g = b.group(GroupKind::kDp, {0});
    b.coll(r, "ar", g, 150, {}, StreamKind::kDp, Category::kDpComm);
    b.compute(r, "a", 100);
    b.compute(r, "b", 100);
    EngineOptions o;
    o.compute_slowdown_when_comm = 0.5;
    const Timeline tl = simulate(b.p, b.d, o);
    EXPECT_EQ(tl.ranks[0].tasks[1].end, 150);
    EXPECT_EQ(tl.ranks[0].tasks[2].start, 150);
    EXPECT_EQ(tl.ranks[0].tasks[2].end, 250);
    EXPECT_EQ(tl.step_ns, 250);
  }
  // Compute c (300) starts at 0; a tp collective x runs [0, 100), then the dp allreduce
  // [100, 200). c is slowed over the whole of both: 200 ns of wall time do 200 / 1.5 =
  // 133.33 ns of work, the other 166.67 run at full speed: ends at 366.67 -> 367.
  // Compute d (100) starts at 0 on another rank whose only collective runs [0, 50): over it
  // d does 33.33 of its work, the other 66.67 after: ends at 50 + 67 = 117. The start-based
  // rule (a kernel slowed over its whole length when communication runs as it starts) gave
  // 450 and 150.
  {
    Builder b;
    const int r0 = b.rank(0);
    const int r1 = b.rank(1);
    const int c = b.compute(r0, "c", 300);
    const int x = b.coll(r0, "x", b.group(GroupKind::kTp, {0}), 100);
    b.coll(r0, "ar", b.group(GroupKind::kDp, {0}), 100, {x}, StreamKind::kDp, Category::kDpComm);
    const int dd = b.compute(r1, "d", 100);
    b.coll(r1, "y", b.group(GroupKind::kTp, {1}), 50);
    EngineOptions o;
    o.compute_slowdown_when_comm = 0.5;
    const Timeline tl = simulate(b.p, b.d, o);
    EXPECT_EQ(tl.ranks[0].tasks[static_cast<size_t>(c)].end, 367);
    EXPECT_EQ(tl.ranks[1].tasks[static_cast<size_t>(dd)].end, 117);
    EXPECT_EQ(tl.step_ns, 367);
    // What interference added to each rank's kernels: 367 - 300 and 117 - 100.
    EXPECT_EQ(tl.ranks[0].interference_ns, 67);
    EXPECT_EQ(tl.ranks[1].interference_ns, 17);
    EXPECT_EQ(simulate(b.p, b.d).ranks[0].interference_ns, 0);  // without interference
  }
  // A kernel that started before the collective is slowed from the collective's start on:
  // compute e (300) starts at 0 on rank 0 with nothing else running; the dp allreduce of
  // ranks 0 and 1 waits for rank 1's compute q (100) and runs [100, 200). e does 100 of its
  // work by 100, 66.67 over the allreduce, the other 133.33 after: ends at 333.33 -> 333.
  // (Start-based: 300, not slowed at all.)
  {
    Builder b;
    const int r0 = b.rank(0);
    const int r1 = b.rank(1);
    const int dp = b.group(GroupKind::kDp, {0, 1});
    const int e = b.compute(r0, "e", 300);
    b.coll(r0, "ar", dp, 100, {}, StreamKind::kDp, Category::kDpComm);
    const int q = b.compute(r1, "q", 100);
    b.coll(r1, "ar", dp, 100, {q}, StreamKind::kDp, Category::kDpComm);
    EngineOptions o;
    o.compute_slowdown_when_comm = 0.5;
    const Timeline tl = simulate(b.p, b.d, o);
    EXPECT_EQ(tl.ranks[0].tasks[1].start, 100);
    EXPECT_EQ(tl.ranks[0].tasks[static_cast<size_t>(e)].end, 333);
    EXPECT_EQ(tl.ranks[1].tasks[static_cast<size_t>(q)].end, 100);
    EXPECT_EQ(tl.step_ns, 333);
    EXPECT_EQ(tl.ranks[0].interference_ns, 33);
    EXPECT_EQ(tl.ranks[1].interference_ns, 0);
  }
}

// A communication task that holds no SMs (EngineOptions::comm_holds_sms false: Transformer
// Engine's ring exchange on copy engines) does not slow the compute beside it; one that
// does, still does, and a kernel overlapping both is slowed only while the SM-holding one
// runs. Slowdown 0.5. Compute a (300) starts at 0; the ring-exchange all-gather x runs
// [0, 100) on tp_ring, then the tp collective y (holds SMs) [100, 200) on tp after it. a
// does 100 of its work over x at full speed, 66.67 over y, the last 133.33 after: ends at
// 333.33 -> 333. With x holding SMs too: 200 / 1.5 = 133.33 over both, then 166.67: 367.
// Memory-bound compute keeps x's HBM share: with a share of 0.5 on every comm task and a
// memory-bound kernel (300) instead of a, both collectives stretch to 150 while it runs (x
// [0, 150), y [150, 300)) and it runs at 1 / 1.5 over both: 200 of its work by 300, ends at
// 400, whether x holds SMs or not.
TEST(Engine, CommThatHoldsNoSmsDoesNotSlowCompute) {
  auto run = [](bool x_holds, TaskKind kind, bool hbm) {
    Builder b;
    const int r = b.rank(0);
    const int c = b.compute(r, "a", 300);
    b.p.ranks[0].tasks.mut(static_cast<size_t>(c)).kind = kind;
    const int x = b.coll(r, "x", b.group(GroupKind::kTp, {0}), 100, {}, StreamKind::kTpRing);
    b.coll(r, "y", b.group(GroupKind::kTp, {0}), 100, {x});
    EngineOptions o;
    o.compute_slowdown_when_comm = 0.5;
    o.comm_holds_sms = [x_holds](const RankProgram&, const Task& t) {
      return x_holds || t.stream != StreamKind::kTpRing;
    };
    if (hbm) o.comm_hbm_share = [](const RankProgram&, const Task&, TimeNs) { return 0.5; };
    return simulate(b.p, b.d, o).ranks[0].tasks[static_cast<size_t>(c)].end;
  };
  EXPECT_EQ(run(false, TaskKind::kGemm, false), 333);
  EXPECT_EQ(run(true, TaskKind::kGemm, false), 367);
  EXPECT_EQ(run(false, TaskKind::kMemoryBound, true), 400);
  EXPECT_EQ(run(true, TaskKind::kMemoryBound, true), 400);
}

// HBM contention (engine.h): every comm task here uses half the HBM bandwidth (share 0.5);
// the SM slowdown is 0.1.
EngineOptions hbm_options() {
  EngineOptions o;
  o.compute_slowdown_when_comm = 0.1;
  o.comm_hbm_share = [](const RankProgram&, const Task&, TimeNs) { return 0.5; };
  return o;
}

int membound(Builder& b, int r, const std::string& label, TimeNs dur, std::vector<int> deps = {}) {
  Task t;
  t.kind = TaskKind::kMemoryBound;
  t.label = label;
  t.deps = std::move(deps);
  t.bytes_read = 1e6;
  return b.add(r, std::move(t), dur);
}

TEST(Engine, HbmContentionStretchesMemoryBoundKernelsByTheCommShare) {
  // dp allreduce (1000) with share 0.5 and memory-bound m (100) start at 0: together they
  // demand 1.5x the HBM bandwidth, so both run at 1/1.5 while they overlap. m: 150. GEMM g
  // (100) starts at 150 during the allreduce: SM slowdown only, 110, ends 260. The
  // allreduce did 150 / 1.5 = 100 of its work over m and the other 900 at full speed: ends
  // 1050 (the start-based rule, deciding at the start from the kernels already running,
  // left it at 1000).
  Builder b;
  const int r = b.rank(0);
  const int grp = b.group(GroupKind::kDp, {0});
  const int ar = b.coll(r, "ar", grp, 1000, {}, StreamKind::kDp, Category::kDpComm);
  const int m = membound(b, r, "m", 100);
  const int g = b.compute(r, "g", 100);
  const Timeline tl = simulate(b.p, b.d, hbm_options());
  EXPECT_EQ(tl.ranks[0].tasks[static_cast<size_t>(m)].end, 150);
  EXPECT_EQ(tl.ranks[0].tasks[static_cast<size_t>(g)].end, 260);
  EXPECT_EQ(tl.ranks[0].tasks[static_cast<size_t>(ar)].end, 1050);
  // Without the HBM share the memory-bound kernel takes the SM slowdown like any kernel.
  EngineOptions sm_only;
  sm_only.compute_slowdown_when_comm = 0.1;
  EXPECT_EQ(simulate(b.p, b.d, sm_only).ranks[0].tasks[static_cast<size_t>(m)].end, 110);
}

TEST(Engine, HbmContentionSlowsCommStartingUnderAMemoryBoundKernel) {
  // Memory-bound m (500) and tp collective x (100, share 0.5) start at 0 and share HBM:
  // both at 1/1.5. x ends at 150, when m has done 100. The dp allreduce (1000) starts then
  // while m runs on at 1/1.5: m's other 400 take 600, so m ends at 750 (500 x 1.5, slowed
  // over its whole length); the allreduce does 600 / 1.5 = 400 over m and 600 after it, so
  // it ends at 1350. (The start-based rule left x at 100, as m started in the same instant,
  // and the allreduce at 100 + 1000 + 0.5 x 650 = 1425.)
  Builder b;
  const int r = b.rank(0);
  const int grp = b.group(GroupKind::kDp, {0});
  const int m = membound(b, r, "m", 500);
  const int x = b.coll(r, "x", b.group(GroupKind::kTp, {0}), 100);
  const int ar = b.coll(r, "ar", grp, 1000, {x}, StreamKind::kDp, Category::kDpComm);
  const Timeline tl = simulate(b.p, b.d, hbm_options());
  EXPECT_EQ(tl.ranks[0].tasks[static_cast<size_t>(x)].end, 150);
  EXPECT_EQ(tl.ranks[0].tasks[static_cast<size_t>(m)].end, 750);
  EXPECT_EQ(tl.ranks[0].tasks[static_cast<size_t>(ar)].start, 150);
  EXPECT_EQ(tl.ranks[0].tasks[static_cast<size_t>(ar)].end, 1350);
}

TEST(Engine, HbmContentionSlowsCommWhileAnyMemberRunsMemoryBoundCompute) {
  // A dp allreduce (1000, share 0.5) over ranks 0 and 1 starts at 0. Rank 1 runs GEMM g
  // (200, SM slowdown 0.1 under the allreduce: 220), then memory-bound m (300) from 220: m
  // and the allreduce share HBM, both at 1/1.5, so m takes 450 and ends at 670. The
  // allreduce did 220 before m, 450 / 1.5 = 300 over it and the other 480 after it: it ends
  // at 220 + 450 + 480 = 1150 on both ranks, rank 0 included, whose own compute is idle (a
  // collective is as slow as its slowest member). The start-based rule left it at 1000: no
  // memory-bound kernel ran when it started.
  Builder b;
  const int r0 = b.rank(0), r1 = b.rank(1);
  const int grp = b.group(GroupKind::kDp, {0, 1});
  const int a0 = b.coll(r0, "ar", grp, 1000, {}, StreamKind::kDp, Category::kDpComm);
  const int a1 = b.coll(r1, "ar", grp, 1000, {}, StreamKind::kDp, Category::kDpComm);
  const int g = b.compute(r1, "g", 200);
  const int m = membound(b, r1, "m", 300, {g});
  const Timeline tl = simulate(b.p, b.d, hbm_options());
  EXPECT_EQ(tl.ranks[1].tasks[static_cast<size_t>(g)].end, 220);
  EXPECT_EQ(tl.ranks[1].tasks[static_cast<size_t>(m)].start, 220);
  EXPECT_EQ(tl.ranks[1].tasks[static_cast<size_t>(m)].end, 670);
  EXPECT_EQ(tl.ranks[0].tasks[static_cast<size_t>(a0)].end, 1150);
  EXPECT_EQ(tl.ranks[1].tasks[static_cast<size_t>(a1)].end, 1150);
}

TEST(Engine, SmInterferenceFollowsTheOverlap) {
  // A dp allreduce runs [0, 150); a tp collective of length x runs first, then compute b
  // (100, at 1/1.5 of its speed while communication runs). Its slowdown is 0.5 x its
  // overlap with communication, counted in its own work: b starts at x and overlaps the
  // allreduce for max(0, 150 - x) ns of wall time, doing (150 - x) / 1.5 of its work then.
  //   x = 100: 33.33 done by 150, ends 150 + 66.67 -> 217;
  //   x = 149: 0.67 done by 150, ends 150 + 99.33 -> 249;
  //   x = 150: no overlap, ends 250.
  // The start-based rule (slowed over its whole length when communication runs at its start)
  // gave 250, 299 and 250: a longer input could make the step shorter.
  auto step = [](TimeNs x) {
    Builder b;
    const int r = b.rank(0);
    const int dp = b.group(GroupKind::kDp, {0});
    const int tp = b.group(GroupKind::kTp, {0});
    b.coll(r, "ar", dp, 150, {}, StreamKind::kDp, Category::kDpComm);
    const int a = b.coll(r, "a", tp, x);
    b.compute(r, "b", 100, {a});
    EngineOptions o;
    o.compute_slowdown_when_comm = 0.5;
    return simulate(b.p, b.d, o).step_ns;
  };
  EXPECT_EQ(step(100), 217);
  EXPECT_EQ(step(149), 249);
  EXPECT_EQ(step(150), 250);
}

// ---- Properties over random programs ----

// |[s0, s1) ∩ union of spans|, by sweeping the cut points.
double covered(TimeNs s0, TimeNs s1, const std::vector<std::pair<TimeNs, TimeNs>>& spans) {
  std::vector<TimeNs> cuts{s0, s1};
  for (const auto& [a, e] : spans) {
    if (a > s0 && a < s1) cuts.push_back(a);
    if (e > s0 && e < s1) cuts.push_back(e);
  }
  std::sort(cuts.begin(), cuts.end());
  double sum = 0;
  for (size_t c = 0; c + 1 < cuts.size(); ++c)
    for (const auto& [a, e] : spans)
      if (a <= cuts[c] && cuts[c] < e) {
        sum += static_cast<double>(cuts[c + 1] - cuts[c]);
        break;
      }
  return sum;
}

// 40 random programs on 4 ranks with per-rank jitter, so that communication starts and ends
// at many different instants inside kernels (and kernels inside communication), each
// simulated with `o` and handed to `check(trial, builder, timeline)`.
template <class Check>
void on_random_jittered_programs(std::uint64_t seed, const EngineOptions& o, Check check) {
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    const auto tt = testing::random_template(rng, 30 + trial);
    const Builder b = testing::build_replicated(tt, 4, false, &rng);
    check(trial, tt, b, simulate(b.p, b.d, o));
  }
}

TEST(EngineProperty, EveryKernelDoesItsWorkAtTheSpeedOfEachMoment) {
  // SM interference over the overlap, checked kernel by kernel on random programs (4 ranks,
  // per-rank jitter, so collectives and sends start and end at many different instants
  // inside kernels): a kernel of duration d that runs [start, end) and overlaps its rank's
  // running communication for O ns of that span does (end - start - O) + O / f of work at
  // f = 1 + slowdown; that must be d. The engine rounds only the end it last decided (to the
  // ns, at least 1 ns after a re-timing), so the two agree within 1 ns; the start-based rule
  // missed this by up to d x 0.25 / 1.25 on a kernel a collective started in the middle of.
  const double f = 1.25;
  int partial = 0;  // kernels overlapped over part of their span (the re-timed ones)
  EngineOptions o;
  o.compute_slowdown_when_comm = f - 1;
  on_random_jittered_programs(
      777, o, [&](int trial, const auto&, const Builder& b, const Timeline& tl) {
        for (size_t r = 0; r < b.p.ranks.size(); ++r) {
          const TaskList& tasks = b.p.ranks[r].tasks;
          const RankTimeline& rt = tl.ranks[r];
          std::vector<std::pair<TimeNs, TimeNs>> comm;  // the rank's communication spans
          for (size_t i = 0; i < tasks.size(); ++i) {
            const TaskKind k = tasks[i].kind;
            const bool is_comm =
                k == TaskKind::kCollective || k == TaskKind::kSend || k == TaskKind::kRecv;
            if (is_comm && rt.tasks[i].end > rt.tasks[i].start)
              comm.emplace_back(rt.tasks[i].start, rt.tasks[i].end);
          }
          TimeNs added = 0;  // what the rank's kernels ran longer than their durations
          for (size_t i = 0; i < tasks.size(); ++i) {
            const TaskKind k = tasks[i].kind;
            const TimeNs d = b.d[r][i];
            if ((k != TaskKind::kGemm && k != TaskKind::kMemoryBound) || d == 0) continue;
            const TimeNs s0 = rt.tasks[i].start, s1 = rt.tasks[i].end;
            added += s1 - s0 - d;
            const double overlap = covered(s0, s1, comm);  // O
            const double wall = static_cast<double>(s1 - s0);
            const double work = (wall - overlap) + overlap / f;
            ASSERT_NEAR(work, static_cast<double>(d), 1.0)
                << "trial " << trial << " rank " << r << " task " << i << ": [" << s0 << ", " << s1
                << "), overlap " << overlap;
            partial += overlap > 0 && overlap < wall;
          }
          EXPECT_EQ(rt.interference_ns, added) << "trial " << trial << " rank " << r;
        }
      });
  EXPECT_GT(partial, 100);  // the property is about re-timed kernels: there must be many
}

TEST(EngineProperty, EveryCollectiveSharesHbmOverItsOverlapOnly) {
  // HBM contention on the communication side, collective by collective on random programs
  // (4 ranks with jitter; the optimizer-category compute of the template is memory-bound):
  // a collective with share s whose members run memory-bound kernels over O ns of its span
  // [start, end) does (end - start - O) + O / (1 + s) of work, which must be its duration,
  // the longest of its members' (within 1 ns: only the last decided end is rounded). The
  // rule decided at the start missed this whenever a kernel began during the collective.
  const double share = 0.5;
  int partial = 0;  // collectives overlapped over part of their span (the re-timed ones)
  EngineOptions o;
  o.compute_slowdown_when_comm = 0.2;
  o.comm_hbm_share = [share](const RankProgram&, const Task&, TimeNs) { return share; };
  on_random_jittered_programs(
      4242, o, [&](int trial, const auto& tt, const Builder& b, const Timeline& tl) {
        const size_t nr = b.p.ranks.size();
        std::vector<std::vector<std::pair<TimeNs, TimeNs>>> mb(nr);  // memory-bound spans
        for (size_t r = 0; r < nr; ++r)
          for (size_t i = 0; i < b.p.ranks[r].tasks.size(); ++i)
            if (b.p.ranks[r].tasks[i].kind == TaskKind::kMemoryBound && b.d[r][i] > 0)
              mb[r].emplace_back(tl.ranks[r].tasks[i].start, tl.ranks[r].tasks[i].end);
        for (size_t i = 0; i < tt.size(); ++i) {
          // Template task i is task i on every rank; world collectives span the 4 ranks, pair
          // collectives {0, 1} and {2, 3}.
          std::vector<std::vector<size_t>> groups;
          if (tt[i].kind == testing::TemplateTask::kCollWorld)
            groups = {{0, 1, 2, 3}};
          else if (tt[i].kind == testing::TemplateTask::kCollPair)
            groups = {{0, 1}, {2, 3}};
          for (const auto& members : groups) {
            TimeNs d0 = 0;
            std::vector<std::pair<TimeNs, TimeNs>> spans;
            for (const size_t r : members) {
              d0 = std::max(d0, b.d[r][i]);
              spans.insert(spans.end(), mb[r].begin(), mb[r].end());
            }
            const TimeNs s0 = tl.ranks[members[0]].tasks[i].start;
            const TimeNs s1 = tl.ranks[members[0]].tasks[i].end;
            for (const size_t r : members) {  // a rendezvous: one span for all its members
              ASSERT_EQ(tl.ranks[r].tasks[i].start, s0);
              ASSERT_EQ(tl.ranks[r].tasks[i].end, s1);
            }
            if (d0 == 0) continue;
            const double overlap = covered(s0, s1, spans);
            const double wall = static_cast<double>(s1 - s0);
            ASSERT_NEAR((wall - overlap) + overlap / (1 + share), static_cast<double>(d0), 1.0)
                << "trial " << trial << " task " << i << ": [" << s0 << ", " << s1 << "), overlap "
                << overlap;
            partial += overlap > 0 && overlap < wall;
          }
        }
      });
  EXPECT_GT(partial, 30);  // the property is about re-timed collectives: there must be many
}

}  // namespace
}  // namespace stepcast
