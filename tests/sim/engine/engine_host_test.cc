// The host (EngineOptions::host_launch_ns, Task::launches, Task::host_sync; docs/model.md
// "The host"): one host thread per rank issues its tasks in program order, a kernel starts
// no earlier than its issue, and a host_sync task makes the host wait for its end.
#include <random>

#include <gtest/gtest.h>

#include "sim/engine/engine.h"
#include "tests/sim/program/program_builder.h"

namespace stepcast {
namespace {

using testing::Builder;

constexpr TimeNs kUs = 1000;

EngineOptions host(TimeNs launch_ns) {
  EngineOptions o;
  o.host_launch_ns = launch_ns;
  return o;
}

Task& task(Builder& b, int r, int id) {
  return b.p.ranks[static_cast<size_t>(r)].tasks.mut(static_cast<size_t>(id));
}

TEST(EngineHost, KernelsShorterThanTheirLaunchWaitForTheHost) {
  // Five 2 us kernels, 10 us of host time each: kernel k (1..5) is issued at 10k us and runs
  // [10k, 10k + 2]: step 52 us. Each waits, ready, for its issue: the first 10 us, the
  // others 10k - (10(k-1) + 2) = 8 us: 10 + 4 * 8 = 42 us host-bound.
  Builder b;
  const int r = b.rank(0);
  for (int k = 0; k < 5; ++k) b.compute(r, "k", 2 * kUs);
  const Timeline tl = simulate(b.p, b.d, host(10 * kUs));
  EXPECT_EQ(tl.step_ns, 52 * kUs);
  EXPECT_EQ(tl.ranks[0].tasks[4].start, 50 * kUs);
  EXPECT_EQ(tl.ranks[0].host_bound_ns, 42 * kUs);
  // Without the host: the 10 us of kernels back to back.
  EXPECT_EQ(simulate(b.p, b.d).step_ns, 10 * kUs);
}

TEST(EngineHost, AHostAheadOfTheKernelsCostsOnlyTheFirstLaunch) {
  // Five 50 us kernels, 10 us launches: the host is ahead after the first, step 10 + 250.
  Builder b;
  const int r = b.rank(0);
  for (int k = 0; k < 5; ++k) b.compute(r, "k", 50 * kUs);
  const Timeline tl = simulate(b.p, b.d, host(10 * kUs));
  EXPECT_EQ(tl.step_ns, 260 * kUs);
  EXPECT_EQ(tl.ranks[0].host_bound_ns, 10 * kUs);
}

TEST(EngineHost, ASyncMakesTheNextKernelWaitForItsLaunch) {
  // A (100 us) issued at 10, runs [10, 110]; S (1 us, host_sync) issued at 20, runs
  // [110, 111]; the host waits for S, then issues B at 111 + 10 = 121: B runs [121, 122].
  // Without the sync B is issued at 30 and runs right after S: [111, 112].
  Builder b;
  const int r = b.rank(0);
  b.compute(r, "A", 100 * kUs);
  const int s = b.compute(r, "S", 1 * kUs);
  b.compute(r, "B", 1 * kUs);
  EXPECT_EQ(simulate(b.p, b.d, host(10 * kUs)).step_ns, 112 * kUs);
  task(b, r, s).host_sync = true;
  const Timeline tl = simulate(b.p, b.d, host(10 * kUs));
  EXPECT_EQ(tl.ranks[0].tasks[2].start, 121 * kUs);
  EXPECT_EQ(tl.step_ns, 122 * kUs);
  // A free host still waits, but B's issue is then the sync's end, when stream order lets
  // it start anyway: 100 + 1 + 1 as without a host.
  EXPECT_EQ(simulate(b.p, b.d, host(0)).step_ns, 102 * kUs);
}

TEST(EngineHost, LaunchesAndCommunicationCostHostTime) {
  // A collective (one launch) then a kernel of four launches, 10 us each: the collective
  // does not wait for its issue (it starts at 0 and lasts 5 us); the kernel is issued at
  // 10 + 40 = 50 us and runs [50, 51].
  Builder b;
  const int r = b.rank(0);
  const int g = b.group(GroupKind::kTp, {0});
  b.coll(r, "ar", g, 5 * kUs);
  const int k = b.compute(r, "grouped", 1 * kUs);
  task(b, r, k).launches = 4;
  const Timeline tl = simulate(b.p, b.d, host(10 * kUs));
  EXPECT_EQ(tl.ranks[0].tasks[0].start, 0);
  EXPECT_EQ(tl.ranks[0].tasks[1].start, 50 * kUs);
  EXPECT_EQ(tl.step_ns, 51 * kUs);
  // Alloc and free issue nothing: one before the kernel does not move it.
  Builder c;
  const int rc = c.rank(0);
  c.mem(rc, true, "buf", 100);
  c.compute(rc, "k", 1 * kUs);
  EXPECT_EQ(simulate(c.p, c.d, host(10 * kUs)).step_ns, 11 * kUs);
}

TEST(EngineHost, HostOpsCostHostTimeWithoutALaunch) {
  // A collective with 1,536 host ops of 2 us (the per-rank views of a list all-gather) and
  // one launch of 10 us, then a kernel: the host issues the kernel at 10 + 3,072 + 10 =
  // 3,092 us, so it runs [3092, 3093]. With the ops free (host_op_ns 0) it runs [20, 21];
  // with the launches free and the ops costed, at 3,072 us.
  Builder b;
  const int r = b.rank(0);
  const int g = b.group(GroupKind::kDp, {0});
  const int ag = b.coll(r, "ag", g, 5 * kUs);
  b.compute(r, "k", 1 * kUs);
  task(b, r, ag).host_ops = 1536;
  EngineOptions o = host(10 * kUs);
  o.host_op_ns = 2 * kUs;
  EXPECT_EQ(simulate(b.p, b.d, o).ranks[0].tasks[1].start, 3092 * kUs);
  EXPECT_EQ(simulate(b.p, b.d, host(10 * kUs)).ranks[0].tasks[1].start, 20 * kUs);
  o.host_launch_ns = 0;
  EXPECT_EQ(simulate(b.p, b.d, o).ranks[0].tasks[1].start, 3072 * kUs);
  // Host ops alone turn the host on; with none in the program and no launch time it stays
  // off (the engine without a host, bit for bit): the kernel, independent of the
  // collective, starts at 0.
  task(b, r, ag).host_ops = 0;
  EXPECT_EQ(simulate(b.p, b.d, o).ranks[0].tasks[1].start, 0);
}

// Random programs (compute, collectives, send/recv, alloc/free over 4 replicas), host_sync on
// about one kernel in five:
//  - a free host changes nothing, bit for bit (its waits coincide with stream order: every
//    kernel here is on the compute stream, behind the sync anyway);
//  - a costly host only delays: every task ends no earlier than without it (start times are
//    maxima and sums of the release times, so monotone in them; no interference here);
//  - without syncs the delay is bounded by the host's whole time: each issue is at most
//    c x (launches up to it) <= c x L, and a task's other bounds are its predecessors', so by
//    induction every start moves by at most c x L, L the largest launch total of a rank;
//  - it never deadlocks (a host waits only for a kernel on its own compute stream).
TEST(EngineHostProperty, FreeHostChangesNothingCostlyHostOnlyDelaysBounded) {
  std::mt19937_64 rng(20261204);
  for (int trial = 0; trial < 120; ++trial) {
    const auto tt = testing::random_template(rng, 20 + trial % 50);
    Builder b = testing::build_replicated(tt, 4, trial % 2 == 0);
    const Timeline base = simulate(b.p, b.d);
    const TimeNs c = 1 + static_cast<TimeNs>(rng() % 700);
    const Timeline nosync = simulate(b.p, b.d, host(c));
    TimeNs launches = 0;
    for (const Task& t : b.p.ranks[0].tasks)
      if (t.kind != TaskKind::kAlloc && t.kind != TaskKind::kFree) launches += t.launches;
    EXPECT_GE(nosync.step_ns, base.step_ns) << "trial " << trial;
    EXPECT_LE(nosync.step_ns, base.step_ns + c * launches) << "trial " << trial;
    for (auto& rp : b.p.ranks)
      for (size_t i = 0; i < rp.tasks.size(); ++i)
        if (rp.tasks[i].kind == TaskKind::kGemm && (i * 7 + static_cast<size_t>(trial)) % 5 == 0)
          rp.tasks.mut(i).host_sync = true;
    const Timeline free_host = simulate(b.p, b.d, host(0));
    ASSERT_EQ(free_host.step_ns, base.step_ns) << "trial " << trial;
    for (size_t r = 0; r < base.ranks.size(); ++r)
      for (size_t i = 0; i < base.ranks[r].tasks.size(); ++i) {
        ASSERT_EQ(free_host.ranks[r].tasks[i].start, base.ranks[r].tasks[i].start);
        ASSERT_EQ(free_host.ranks[r].tasks[i].end, base.ranks[r].tasks[i].end);
      }
    const Timeline synced = simulate(b.p, b.d, host(c));
    for (size_t r = 0; r < base.ranks.size(); ++r)
      for (size_t i = 0; i < base.ranks[r].tasks.size(); ++i)
        EXPECT_GE(synced.ranks[r].tasks[i].end, base.ranks[r].tasks[i].end)
            << "trial " << trial << " task " << i;
    EXPECT_GE(synced.step_ns, nosync.step_ns) << "trial " << trial;
  }
}

}  // namespace
}  // namespace stepcast
