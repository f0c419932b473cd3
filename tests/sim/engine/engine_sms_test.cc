// Engine tests of SM interference by the SMs each communication task holds
// (EngineOptions::comm_sms, engine.h): a compute kernel runs slower by S / (sms - S), S the
// most SMs one of its rank's running communication kernels holds.
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "model/error.h"
#include "sim/engine/engine.h"
#include "tests/sim/program/program_builder.h"

namespace stepcast {
namespace {

using testing::Builder;

constexpr int kSms = 132;  // an H100's SMs

// SMs by stream: NCCL-like kernels on tp and dp hold 16, DeepEP-like ones on ep hold 20,
// the pipeline's sends 8, the ring exchange (copy engines) none.
int sms_by_stream(const Task& t) {
  switch (t.stream) {
    case StreamKind::kEp: return 20;
    case StreamKind::kPpSend:
    case StreamKind::kPpRecv: return 8;
    case StreamKind::kTpRing: return 0;
    default: return 16;
  }
}

EngineOptions sm_options() {
  EngineOptions o;
  o.gpu_sms = kSms;
  o.comm_sms = [](const RankProgram&, const Task& t) { return sms_by_stream(t); };
  return o;
}

// Compute a (2000) starts at 0 beside one communication task of 1320 ns [0, 1320) holding S
// SMs: it runs at (132 - S) / 132 of its speed over the overlap, so it does
// W = 1320 x (132 - S) / 132 of its work there and takes W x S / (132 - S) longer than alone:
//   S = 20 (DeepEP, ep stream): W = 1120, + 1120 x 20 / 112 = 200 -> ends at 2200;
//   S = 16 (NCCL, tp stream):   W = 1160, + 1160 x 16 / 116 = 160 -> ends at 2160;
//   S = 0 (ring exchange):      not slowed -> 2000.
TEST(EngineSms, ComputeSlowsBySmsHeldOverTheOverlap) {
  auto end_beside = [](StreamKind s) {
    Builder b;
    const int r = b.rank(0);
    const int a = b.compute(r, "a", 2000);
    b.coll(r, "x", b.group(GroupKind::kEp, {0}), 1320, {}, s, Category::kEpComm);
    const Timeline tl = simulate(b.p, b.d, sm_options());
    EXPECT_EQ(tl.ranks[0].interference_ns, tl.ranks[0].tasks[static_cast<size_t>(a)].end - 2000);
    return tl.ranks[0].tasks[static_cast<size_t>(a)].end;
  };
  EXPECT_EQ(end_beside(StreamKind::kEp), 2200);
  EXPECT_EQ(end_beside(StreamKind::kTp), 2160);
  EXPECT_EQ(end_beside(StreamKind::kTpRing), 2000);
}

// Beside both: the 16-SM x runs [0, 1320) on tp; on ep the 20-SM z runs [660, 1320),
// after a 660-ns collective w that holds none (ring-exchange stream). So S = 16 over
// [0, 660) and max(16, 20) = 20 over [660, 1320): a (2000) does 660 x 116/132 = 580 +
// 660 x 112/132 = 560 = 1140 of its work by 1320 (re-timed at 660, when S goes from 16 to
// 20, both non-zero), the other 860 after: ends at 2180. Were the SMs summed (36 over
// [660, 1320): 660 x 96/132 = 480) it would do 1060 by 1320 and end at 2260; were S only
// "some communication runs" at 16 / 116, at 2160. The other order (z [0, 660) at 20 beside
// x, then x alone at 16) gives 560 + 580 too: 2180.
TEST(EngineSms, ConcurrentKernelsSlowByTheMostSmsOneHolds) {
  for (const bool z_first : {false, true}) {
    Builder b;
    const int r = b.rank(0);
    const int a = b.compute(r, "a", 2000);
    const int ep = b.group(GroupKind::kEp, {0});
    const int tp = b.group(GroupKind::kTp, {0});
    if (z_first) {
      b.coll(r, "z", ep, 660, {}, StreamKind::kEp, Category::kEpComm);
      b.coll(r, "x", tp, 1320);
    } else {
      const int w = b.coll(r, "w", tp, 660, {}, StreamKind::kTpRing);
      b.coll(r, "z", ep, 660, {w}, StreamKind::kEp, Category::kEpComm);
      b.coll(r, "x", tp, 1320);
    }
    const Timeline tl = simulate(b.p, b.d, sm_options());
    EXPECT_EQ(tl.ranks[0].tasks[static_cast<size_t>(a)].end, 2180) << z_first;
    EXPECT_EQ(tl.step_ns, 2180) << z_first;
  }
}

// With every kernel holding one count (16 of 132 SMs, none on the ring exchange), comm_sms
// is the uniform rule: compute_slowdown_when_comm = 16 / 116 with comm_holds_sms false on
// the ring exchange gives the same timeline, bit for bit, on random programs.
TEST(EngineSmsProperty, OneCountForAllIsTheUniformSlowdown) {
  std::mt19937_64 rng(2709);
  EngineOptions per_task = sm_options();
  per_task.comm_sms = [](const RankProgram&, const Task& t) {
    return t.stream == StreamKind::kTpRing ? 0 : 16;
  };
  EngineOptions uniform;
  uniform.compute_slowdown_when_comm = 16.0 / 116.0;
  uniform.comm_holds_sms = [](const RankProgram&, const Task& t) {
    return t.stream != StreamKind::kTpRing;
  };
  for (int trial = 0; trial < 30; ++trial) {
    const auto tt = testing::random_template(rng, 30 + trial);
    const Builder b = testing::build_replicated(tt, 4, false, &rng);
    const Timeline x = simulate(b.p, b.d, per_task), y = simulate(b.p, b.d, uniform);
    ASSERT_EQ(x.step_ns, y.step_ns) << trial;
    for (size_t r = 0; r < b.p.ranks.size(); ++r)
      for (size_t i = 0; i < b.p.ranks[r].tasks.size(); ++i)
        ASSERT_EQ(x.ranks[r].tasks[i].end, y.ranks[r].tasks[i].end) << trial;
  }
}

// Kernel by kernel on random programs (4 ranks, per-rank jitter, communication on several
// streams holding 20, 16, 8 or 0 SMs): a kernel of duration d running [start, end) does, over
// each piece of that span where the most SMs a running communication task of its rank holds
// is S, (piece length) x (132 - S) / 132 of its work; the sum must be d, within 1 ns (only the
// last decided end is rounded). Many kernels must see S change while they run.
TEST(EngineSmsProperty, EveryKernelWorksAtTheSpeedTheHeldSmsLeave) {
  std::mt19937_64 rng(2027);
  int changed = 0;  // kernels that ran under two different non-zero S
  for (int trial = 0; trial < 40; ++trial) {
    const auto tt = testing::random_template(rng, 30 + trial);
    const Builder b = testing::build_replicated(tt, 4, false, &rng);
    const Timeline tl = simulate(b.p, b.d, sm_options());
    for (size_t r = 0; r < b.p.ranks.size(); ++r) {
      const TaskList& tasks = b.p.ranks[r].tasks;
      const RankTimeline& rt = tl.ranks[r];
      struct Span {
        TimeNs s, e;
        int sms;
      };
      std::vector<Span> comm;
      for (size_t i = 0; i < tasks.size(); ++i) {
        const TaskKind k = tasks[i].kind;
        if ((k == TaskKind::kCollective || k == TaskKind::kSend || k == TaskKind::kRecv) &&
            rt.tasks[i].end > rt.tasks[i].start)
          comm.push_back({rt.tasks[i].start, rt.tasks[i].end, sms_by_stream(tasks[i])});
      }
      for (size_t i = 0; i < tasks.size(); ++i) {
        const TaskKind k = tasks[i].kind;
        const TimeNs d = b.d[r][i];
        if ((k != TaskKind::kGemm && k != TaskKind::kMemoryBound) || d == 0) continue;
        const TimeNs s0 = rt.tasks[i].start, s1 = rt.tasks[i].end;
        std::vector<TimeNs> cuts{s0, s1};
        for (const Span& c : comm)
          for (const TimeNs x : {c.s, c.e})
            if (x > s0 && x < s1) cuts.push_back(x);
        std::sort(cuts.begin(), cuts.end());
        double work = 0;
        int first = 0;
        bool two = false;
        for (size_t c = 0; c + 1 < cuts.size(); ++c) {
          int s = 0;
          for (const Span& sp : comm)
            if (sp.s <= cuts[c] && cuts[c] < sp.e) s = std::max(s, sp.sms);
          work += static_cast<double>(cuts[c + 1] - cuts[c]) * (kSms - s) / kSms;
          if (s > 0 && first > 0 && s != first) two = true;
          if (s > 0 && first == 0) first = s;
        }
        ASSERT_NEAR(work, static_cast<double>(d), 1.0)
            << "trial " << trial << " rank " << r << " task " << i;
        changed += two;
      }
    }
  }
  EXPECT_GT(changed, 20);
}

// A task holding gpu_sms or more (nothing left to compute with) is an invariant error.
TEST(EngineSms, HoldingEverySmIsAnInvariantError) {
  Builder b;
  const int r = b.rank(0);
  b.compute(r, "a", 100);
  b.coll(r, "x", b.group(GroupKind::kTp, {0}), 100);
  EngineOptions o = sm_options();
  o.comm_sms = [](const RankProgram&, const Task&) { return kSms; };
  EXPECT_THROW(simulate(b.p, b.d, o), InvariantError);
}

}  // namespace
}  // namespace stepcast
