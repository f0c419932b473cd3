// DualPipeV (schedule: dualpipev; sim/lower/schedule.cc dualpipev_order, virtual_stage's V,
// the lowering's pipeline messages): the order against dualpipev.py's eight steps, its
// bubble and in-flight activations against the DualPipe README's table, and its programs.
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
using testing::tiny_gpt;
using testing::tiny_moe;

// Random (p, m) of the tests: p in 2..8, m in 2p..4p (DualPipeV.step needs m >= 2p).
std::vector<std::pair<int, int>> random_shapes(std::mt19937& rng, int count) {
  std::vector<std::pair<int, int>> out;
  for (int i = 0; i < count; ++i) {
    const int p = 2 + static_cast<int>(rng() % 7);
    out.emplace_back(p, 2 * p + static_cast<int>(rng() % static_cast<unsigned>(2 * p + 1)));
  }
  return out;
}

TEST(Schedule, DualPipeVRunsEveryPassOnceInItsSteps) {
  // Every F and B of both chunks once per microbatch, each chunk's in microbatch order; a W
  // for every B that defers it (and none for a full B), after that B, in the order of the
  // deferrals (WeightGradStore is a FIFO); rank r defers p-r-1 (step 3) + r+1 (step 6) +
  // p-r-1 (step 7) backwards and pairs N-2p+r+1 + N-2p+r+1 + p-r-1 forwards with a
  // backward (steps 4, 5), one fewer on the last rank (its first F0, B1 run apart). Its
  // first 2p passes are forwards (steps 1 and 2; 2p + 1 on the last rank, whose step 3 is
  // empty), its last r+1 are W (step 8). The nominal
  // run with random costs never deadlocks.
  std::mt19937 rng(2701);
  for (const auto& [p, m] : random_shapes(rng, 40)) {
    SCOPED_TRACE(::testing::Message() << "p " << p << " m " << m);
    const auto orders = pipeline_schedule(Schedule::kDualPipeV, p, 2, m);
    ASSERT_EQ(orders.size(), static_cast<size_t>(p));
    for (int r = 0; r < p; ++r) {
      const auto& o = orders[static_cast<size_t>(r)];
      std::map<std::tuple<int, int>, int> next;  // (kind, chunk) -> next microbatch
      std::vector<std::pair<int, int>> deferred, weights;
      int pairs = 0;
      for (size_t i = 0; i < o.size(); ++i) {
        const PassOp& op = o[i];
        if (op.kind != PassKind::kW) {
          EXPECT_EQ(op.mb, (next[{static_cast<int>(op.kind), op.chunk}]++)) << "pass " << i;
        } else {
          weights.emplace_back(op.chunk, op.mb);
          ASSERT_LE(weights.size(), deferred.size()) << "a W before its B, pass " << i;
          EXPECT_EQ(weights.back(), deferred[weights.size() - 1]);
        }
        if (op.kind == PassKind::kB && op.defer_w) deferred.emplace_back(op.chunk, op.mb);
        if (op.paired) {
          ++pairs;
          ASSERT_LT(i + 1, o.size());
          EXPECT_EQ(o[i + 1].kind, PassKind::kB);
          EXPECT_FALSE(o[i + 1].defer_w);  // the overlapped backward is a full one
          EXPECT_NE(o[i + 1].chunk, op.chunk);
        }
      }
      for (int c = 0; c < 2; ++c) {
        EXPECT_EQ((next[{static_cast<int>(PassKind::kF), c}]), m);
        EXPECT_EQ((next[{static_cast<int>(PassKind::kB), c}]), m);
      }
      EXPECT_EQ(weights, deferred);
      EXPECT_EQ(deferred.size(), static_cast<size_t>(2 * (p - r - 1) + r + 1));
      EXPECT_EQ(pairs, 2 * (m - 2 * p + r + 1) + (p - r - 1) - (r == p - 1 ? 1 : 0));
      for (int i = 0; i < 2 * p; ++i) EXPECT_EQ(o[static_cast<size_t>(i)].kind, PassKind::kF);
      // Then a B (step 3), on the last rank after its first F0 (step 4, not overlapped).
      const size_t first_b = static_cast<size_t>(2 * p + (r == p - 1 ? 1 : 0));
      EXPECT_EQ(o[first_b].kind, PassKind::kB);
      EXPECT_FALSE(o[first_b - 1].paired);
      for (int i = 1; i <= r + 1; ++i)
        EXPECT_EQ(o[o.size() - static_cast<size_t>(i)].kind, PassKind::kW);
    }
    NominalCosts c;
    for (int i = 0; i < 2 * p; ++i) {
      c.f.push_back(1.0 + static_cast<double>(rng() % 5));
      c.b.push_back(1.0 + static_cast<double>(rng() % 9));
      c.w.push_back(static_cast<double>(rng() % 4));
    }
    EXPECT_NO_THROW(nominal_start_times(Schedule::kDualPipeV, orders, p, 2, m, c));
  }
}

TEST(Schedule, DualPipeVVirtualStagesMakeAV) {
  // Chunk 0 of stage s is virtual stage s, chunk 1 is 2p-1-s: stage 0 holds the first and
  // the last, stage p-1 the two in the middle; stage_of_virtual inverts it. Interleaved:
  // chunk * p + stage.
  for (int p = 2; p <= 8; ++p)
    for (int s = 0; s < p; ++s) {
      EXPECT_EQ(virtual_stage(Schedule::kDualPipeV, 0, s, p), s);
      EXPECT_EQ(virtual_stage(Schedule::kDualPipeV, 1, s, p), 2 * p - 1 - s);
      EXPECT_EQ(virtual_stage(Schedule::kInterleaved, 1, s, p), p + s);
      for (int c = 0; c < 2; ++c) {
        for (Schedule sc : {Schedule::kDualPipeV, Schedule::kInterleaved})
          EXPECT_EQ(stage_of_virtual(sc, virtual_stage(sc, c, s, p), p), s);
      }
    }
}

// Rank 0's idle time in the nominal run of DualPipeV with the same costs on every virtual
// stage: F a forward, bi a backward's input gradients, w its weight gradients (B = bi + w a
// full backward, F&B = F + B a pair, which the nominal run costs as both passes).
double rank0_bubble(int p, int m, double f, double bi, double w) {
  const auto o = pipeline_schedule(Schedule::kDualPipeV, p, 2, m);
  NominalCosts c;
  c.f.assign(static_cast<size_t>(2 * p), f);
  c.b.assign(static_cast<size_t>(2 * p), bi);
  c.w.assign(static_cast<size_t>(2 * p), w);
  const auto start = nominal_start_times(Schedule::kDualPipeV, o, p, 2, m, c);
  double end = 0, busy = 0;
  for (size_t i = 0; i < o[0].size(); ++i) {
    const PassOp& op = o[0][i];
    const double d = op.kind == PassKind::kF   ? f
                     : op.kind == PassKind::kW ? w
                                               : bi + (op.defer_w ? 0.0 : w);
    busy += d;
    end = std::max(end, start[0][i] + d + (op.paired ? bi + w : 0.0));
  }
  return end - busy;
}

TEST(Schedule, DualPipeVBubbleIsThePublishedForm) {
  // The DualPipe README's table: DualPipeV's bubble is (P-1)(F&B + B - 3W) on P = PP/2
  // devices, against 1F1B's (PP-1)(F+B) on PP, for chunks of equal forward and input-gradient
  // time (F = Bi, the schedule figure's assumption) and W <= F. Here P = p, B = F + W and
  // F&B = F + B = 2F + W, so the form is (p-1)(3F - W). Derivation: rank 0 computes from t = 0
  // to its end except in three kinds of wait, each repeated over the p-1 other ranks:
  //  - before its first F1 & B0 pair (step 4 or 5): the gradient of microbatch 0 leaves rank
  //    0's first B1 (step 3), goes up chunk 1 and back down chunk 0; each of the p-1 hops
  //    down chunk 0 is a rank's F1 & B0 pair, which ends F later on rank r than rank r+1's
  //    started it (rank r+1 is one forward ahead in its own F1s) — a wait of (p-1) F;
  //  - in step 5, each B1 then F1 & B0: B0 of the next microbatch comes from rank 1's pair,
  //    which starts after its own B1, F later than rank 0's B1 ends: (p-1) waits of F;
  //  - in step 7, each W then B0 (zero-bubble): rank 1's B0 (input gradients only, Bi = F)
  //    ends F after rank 0's previous one, of which rank 0's W fills W: (p-1)(F - W).
  // Sum: (p-1)(F + F + F - W) = (p-1)(3F - W). With W > F the last wait is gone and the
  // drain is longer (not the published case). The number of microbatches does not matter
  // (the steady state has no idle time).
  std::mt19937 rng(2702);
  for (const auto& [p, m] : random_shapes(rng, 30))
    for (const auto& [f, w] :
         std::vector<std::pair<double, double>>{{1, 0}, {1, 1}, {2, 1}, {4, 1}, {4, 3}, {3, 0.5}}) {
      SCOPED_TRACE(::testing::Message() << "p " << p << " m " << m << " F " << f << " W " << w);
      const double b = f + w, fb = f + b;
      EXPECT_DOUBLE_EQ(rank0_bubble(p, m, f, f, w), (p - 1) * (fb + b - 3 * w));
    }
  // Without the zero-bubble W passes (W = 0) it is 1F1B's form over the p-1 hops with F&B
  // in place of F: (p-1)(F&B + B).
  EXPECT_DOUBLE_EQ(rank0_bubble(4, 8, 1, 1, 0), 3 * (2 + 1));
}

TEST(Schedule, DualPipeVHoldsPpPlusOneChunkActivations) {
  // The DualPipe README's table: DualPipeV holds PP + 1 chunks' activations per device,
  // PP = 2p the stages. Counting a chunk-microbatch from the start of its F to the end of
  // its backward (of its W when the B defers it), and in a pair the F before the B's free:
  // every rank runs 2p forwards (steps 1 and 2) before its first backward and pairs a
  // forward with a backward after that (or runs its first F0 before its B1, the last rank),
  // so its peak is 2p + 1. (Interleaved 1F1B at v = 2 holds up to 2(p-1) + p + 1 on stage 0.)
  std::mt19937 rng(2703);
  for (const auto& [p, m] : random_shapes(rng, 40)) {
    const auto orders = pipeline_schedule(Schedule::kDualPipeV, p, 2, m);
    for (int r = 0; r < p; ++r) {
      int held = 0, peak = 0;
      for (const PassOp& op : orders[static_cast<size_t>(r)]) {
        if (op.kind == PassKind::kF) peak = std::max(peak, ++held);
        if ((op.kind == PassKind::kB && !op.defer_w) || op.kind == PassKind::kW) --held;
      }
      EXPECT_EQ(held, 0);
      EXPECT_EQ(peak, 2 * p + 1) << "p " << p << " m " << m << " rank " << r;
    }
  }
}

Plan dualpipev_plan(int pp, int m) {
  Plan p;
  p.pp = pp;
  p.vpp = 2;
  p.schedule = Schedule::kDualPipeV;
  p.microbatches = m;
  return p;
}

TEST(Lower, DualPipeVMessagesGoBetweenNeighboursInTheV) {
  // pp 4, 8 microbatches, 16 layers (2 per virtual stage), one rank per stage. Activations
  // go down the ranks in chunk 0 and up in chunk 1, gradients the other way; the turn of the
  // V on rank 3 (virtual stages 3 and 4) is local. So every message is between ranks s and
  // s +- 1; rank 0 and rank 3 send 2 x 8 messages (rank 0: chunk 0's activations and chunk
  // 1's gradients, to rank 1; rank 3: chunk 1's activations and chunk 0's gradients, to
  // rank 2), the middle ranks 4 x 8, and receive as many. Interleaved wraps from rank 3 to
  // rank 0 instead.
  const Program prog = lower(make_scenario(tiny_gpt(16), dualpipev_plan(4, 8)));
  ASSERT_EQ(prog.ranks.size(), 4u);
  for (int s = 0; s < 4; ++s) {
    int sends = 0, recvs = 0;
    for (const Task& t : prog.ranks[static_cast<size_t>(s)].tasks) {
      if (t.kind != TaskKind::kSend && t.kind != TaskKind::kRecv) continue;
      EXPECT_EQ(std::abs(t.peer - s), 1) << t.label;
      (t.kind == TaskKind::kSend ? sends : recvs)++;
      if (s == 3 && t.kind == TaskKind::kSend) {
        // Not chunk 0's activation nor chunk 1's gradient: those stay on the rank.
        EXPECT_EQ(t.phase == Phase::kFwd, t.chunk == 1) << t.label;
      }
    }
    const int expected = s == 0 || s == 3 ? 16 : 32;
    EXPECT_EQ(sends, expected) << "rank " << s;
    EXPECT_EQ(recvs, expected) << "rank " << s;
  }
  testing::run(prog);
}

TEST(Lower, DualPipeVPairWaitsForBothMessages) {
  // DualPipeV's _forward_backward_chunk receives the forward's activation and the
  // backward's gradient and waits for both before either pass runs: in the program of a
  // middle rank, the first compute of each pair's forward waits for the backward's gradient
  // recv too (Megatron-Core's pairs, lowered by the same code, wait each for its own). pp 4,
  // 8 microbatches: rank 1 runs 2(8 - 8 + 1 + 1) + 2 = 6 pairs, each with a remote forward
  // input and a remote backward input, so 6 forward kernels wait on a gradient recv.
  const Program prog = lower(make_scenario(tiny_gpt(16), dualpipev_plan(4, 8)));
  const TaskList& tasks = prog.ranks[1].tasks;
  int waits = 0;
  for (const Task& t : tasks) {
    if (!testing::is_compute(t.kind) || t.phase != Phase::kFwd) continue;
    for (int d : t.deps) {
      const Task& dep = tasks[static_cast<size_t>(d)];
      waits += dep.kind == TaskKind::kRecv && dep.phase == Phase::kBwdInput;
    }
  }
  EXPECT_EQ(waits, 6);
}

TEST(Lower, DualPipeVSimulatedBubbleIsThePublishedForm) {
  // The lowered program under durations with the published form's assumption: every layer's
  // forward kernels add up to 60 ns, its input-gradient kernels to 60, its weight-gradient
  // kernels to 30 (the rest, embedding, output layer, optimizer, free; communication
  // free). pp 3, 7 microbatches, 12 layers: 2 a virtual stage, so F = Bi = 120 and W = 60.
  // The engine runs each rank's compute stream in the order of the schedule, a pair's two
  // passes back to back, so rank 0's bubble is DualPipeVBubbleIsThePublishedForm's
  // (p-1)(F&B + B - 3W) = 2 (300 + 180 - 180) = 600 and the step 2 x 7 x (F + Bi + W) + 600
  // = 4800 (rank 0 ends last).
  const Program prog = lower(make_scenario(tiny_gpt(12), dualpipev_plan(3, 7)));
  validate_program(prog);
  Durations d(prog.ranks.size());
  for (size_t r = 0; r < prog.ranks.size(); ++r) {
    const TaskList& tasks = prog.ranks[r].tasks;
    d[r].assign(tasks.size(), 0);
    // Per (layer, microbatch, phase): its compute tasks, the target spread over them.
    std::map<std::tuple<int, int, int>, std::vector<size_t>> groups;
    for (size_t i = 0; i < tasks.size(); ++i)
      if (testing::is_compute(tasks[i].kind) && tasks[i].layer >= 0)
        groups[{tasks[i].layer, tasks[i].microbatch, static_cast<int>(tasks[i].phase)}].push_back(
            i);
    for (const auto& [key, ids] : groups) {
      const Phase ph = static_cast<Phase>(std::get<2>(key));
      ASSERT_TRUE(ph == Phase::kFwd || ph == Phase::kBwdInput || ph == Phase::kBwdWeight);
      const TimeNs target = ph == Phase::kBwdWeight ? 30 : 60;
      const TimeNs each = target / static_cast<TimeNs>(ids.size());
      for (size_t i : ids) d[r][i] = each;
      d[r][ids.front()] += target - each * static_cast<TimeNs>(ids.size());
    }
  }
  const Timeline t = simulate(prog, d);
  EXPECT_EQ(t.step_ns, 4800);
  EXPECT_EQ(t.step_ns - 2 * 7 * (120 + 120 + 60), 2 * ((120 + 180) + 180 - 3 * 60));
}

TEST(Lower, DualPipeVRandomPlansRunToTheEnd) {
  // Random plans (testing::random_plan's tp, cp, dp, ep, sp, ZeRO 0/1, recompute none or
  // selective, buckets) made DualPipeV (pp 2 or 4, m in 2pp..4pp), tied embeddings every
  // other trial, with durations scaled per task at random (compute x 1..4, communication at
  // 0.01 to 1 ns a byte): every program is valid and runs to its end (a deadlock throws),
  // and one rank per stage gives the step and breakdown of every rank. With tied
  // embeddings, the embedding and the output layer are both on rank 0: no all-reduce of
  // their gradient between stages.
  std::mt19937 rng(2704);
  for (int trial = 0; trial < 16; ++trial) {
    Plan p = testing::random_plan(rng);
    p.pp = rng() % 2 ? 2 : 4;
    p.vpp = 2;
    p.schedule = Schedule::kDualPipeV;
    p.microbatches = 2 * p.pp + static_cast<int>(rng() % static_cast<unsigned>(2 * p.pp + 1));
    p.zero = std::min(p.zero, 1);
    if (p.recompute == Recompute::kFull) p.recompute = Recompute::kSelective;
    p.overlap_ep = false;
    ModelArch arch = p.ep > 1 ? tiny_moe(16) : tiny_gpt(16);
    arch.tied_embeddings = trial % 2 == 0;
    const Scenario sc = make_scenario(arch, p);
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << ": tp" << p.tp << " pp" << p.pp << " m" << p.microbatches
                 << " dp" << p.dp << " cp" << p.cp << " ep" << p.ep << " zero" << p.zero);
    const Program folded = lower(sc);
    validate_program(folded);
    for (const RankProgram& rp : folded.ranks)
      for (const Task& t : rp.tasks) EXPECT_NE(t.label, "grad.tied_emb");
    const double per_byte = std::vector<double>{0.01, 0.1, 1}[rng() % 3];
    Durations d = synth_durations(folded, testing::Synth{.comm_ns_per_byte = per_byte});
    for (size_t r = 0; r < d.size(); ++r)
      for (size_t i = 0; i < d[r].size(); ++i)
        if (testing::is_compute(folded.ranks[r].tasks[i].kind))
          d[r][i] *= static_cast<TimeNs>(1 + rng() % 4);
    EXPECT_GT(simulate(folded, d).step_ns, 0);
    if (trial % 4 == 0) {
      const Program full = lower(sc, LowerOptions{false, {}});
      const testing::Synth s{.comm_ns_per_byte = 1};
      const Timeline tf = testing::run(folded, s), tu = testing::run(full, s);
      EXPECT_EQ(tf.step_ns, tu.step_ns);
      EXPECT_EQ(tf.breakdown_ns, tu.breakdown_ns);
    }
  }
}

}  // namespace
}  // namespace stepcast
