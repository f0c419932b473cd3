// Lowering tests: pipeline point-to-point as Megatron-LM 2020-22 issues it (issue #26) — the
// blocking batched calls of its interleaved schedule (FrameworkRules::blocking_p2p_interleaved)
// and the scatter-gather of a message over the tensor group (p2p_scatter_gather). Each test
// fails on the lowering without its rule.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/engine/engine.h"
#include "sim/lower/lower.h"
#include "sim/lower/schedule.h"
#include "sim/plan/framework.h"
#include "tests/sim/lower/lower_test_helpers.h"
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast {
namespace {

using testing::is_compute;
using testing::make_scenario;
using testing::Plan;
using testing::synth_durations;
using testing::tiny_gpt;

constexpr P2pCall N = P2pCall::kNone, B = P2pCall::kBatched, S = P2pCall::kSendThenRecv,
                  R = P2pCall::kRecvThenSend;

// ---- the calls of the schedules ------------------------------------------------------------

// Interleaved, p 2, v 2, m 4 (schedule.cc interleaved_order): stage 0 warms up with
// 2(p-s-1) + (v-1)p = 4 forwards, runs 4 forward-backward pairs, cools down with 4
// backwards; stage 1 warms up with 2. One call after every pass but the forward of a pair.
// With m == p every forward comes first and the turn to the backwards is two calls
// (send_forward_recv_forward, then recv_backward). 1F1B p 2, m 3, stage 0 (F F B F B B):
// two calls for F then F and B then B, one for the turns.
TEST(Schedule, BlockingP2pCallsFollowMegatronsCode) {
  const auto il = pipeline_schedule(Schedule::kInterleaved, 2, 2, 4);
  EXPECT_EQ(blocking_p2p_calls(Schedule::kInterleaved, il[0], 2, 4),
            (std::vector<P2pCall>{B, B, B, B, N, B, N, B, N, B, N, B, B, B, B, B}));
  EXPECT_EQ(blocking_p2p_calls(Schedule::kInterleaved, il[1], 2, 4),
            (std::vector<P2pCall>{B, B, N, B, N, B, N, B, N, B, N, B, N, B, B, B}));
  const auto all_fwd = pipeline_schedule(Schedule::kInterleaved, 2, 2, 2);
  EXPECT_EQ(blocking_p2p_calls(Schedule::kInterleaved, all_fwd[0], 2, 2),
            (std::vector<P2pCall>{B, B, B, S, B, B, B, B}));
  const auto one = pipeline_schedule(Schedule::k1F1B, 2, 1, 3);
  EXPECT_EQ(blocking_p2p_calls(Schedule::k1F1B, one[0], 2, 3),
            (std::vector<P2pCall>{S, B, B, B, S, B}));
}

// DeepSpeed's TrainSchedule (pipe/schedule.py), p 2, m 3: stage s runs F(i) in slot 2i + s
// and B(i) in slot 2i + 2p - s - 1, so stage 0 runs F0 F1 B0 F2 B1 B2 (slots 0 2 3 4 5 7)
// and stage 1 F0 B0 F1 B1 F2 B2 (slots 1 2 3 4 5 6), 1F1B's orders. A forward slot sends
// the previous slot's gradient and then receives; a backward slot receives and then sends
// the previous slot's activation: one message per call, F then B in the next slot
// receiving first. With m 1, p 3, stage 0 runs F0 (slot 0) and B0 (slot 5): F0's output
// leaves in slot 1, before B0 receives: send first.
TEST(Schedule, BlockingP2pCallsFollowDeepSpeedsTrainSchedule) {
  const auto one = pipeline_schedule(Schedule::k1F1B, 2, 1, 3);
  EXPECT_EQ(deepspeed_engine_p2p_calls(one[0], 2, 0), (std::vector<P2pCall>{S, R, S, R, S, B}));
  EXPECT_EQ(deepspeed_engine_p2p_calls(one[1], 2, 1), (std::vector<P2pCall>{R, S, R, S, R, B}));
  const auto single = pipeline_schedule(Schedule::k1F1B, 3, 1, 1);
  EXPECT_EQ(deepspeed_engine_p2p_calls(single[0], 3, 0), (std::vector<P2pCall>{S, B}));
  EXPECT_EQ(deepspeed_engine_p2p_calls(single[1], 3, 1), (std::vector<P2pCall>{S, B}));
  EXPECT_EQ(deepspeed_engine_p2p_calls(single[2], 3, 2), (std::vector<P2pCall>{R, B}));
}

// ---- blocking calls in the timeline ---------------------------------------------------------

// The tasks of one pass of a stage's order on a rank's program, found by microbatch, chunk
// and phase: its first and last compute, its send and its recv (-1: none).
struct PassTasks {
  int first = -1, last = -1, send = -1, recv = -1;
};

std::vector<PassTasks> pass_tasks(const RankProgram& rp, const std::vector<PassOp>& order) {
  std::vector<PassTasks> out(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const PassOp& op = order[i];
    const bool fwd = op.kind == PassKind::kF;
    for (const Task& t : rp.tasks) {
      if (t.microbatch != op.mb || t.chunk != op.chunk) continue;
      const bool fwd_phase = t.phase == Phase::kFwd;
      if (is_compute(t.kind) && fwd_phase == fwd) {
        if (out[i].first < 0) out[i].first = t.id;
        out[i].last = t.id;
      }
      if (t.category != Category::kPpComm || fwd_phase != fwd) continue;
      if (t.kind == TaskKind::kSend) out[i].send = t.id;
      if (t.kind == TaskKind::kRecv) out[i].recv = t.id;
    }
  }
  return out;
}

// The blocking calls of a stack, checked on a simulated timeline (Megatron-LM's interleaved
// schedule by default, or DeepSpeed's 1F1B): after every call (blocking_p2p_calls), the
// next pass's first compute starts no earlier than the end of every send and recv the call
// carries, those start no earlier than the end of the pass before the call, and where the
// call receives first its send starts no earlier than the end of its recv. Returns the
// number of calls that broke it (0 when it holds).
int broken_calls(const Program& prog, const Timeline& tl, int p, int v, int m,
                 Schedule schedule = Schedule::kInterleaved, bool deepspeed = false) {
  const auto orders = pipeline_schedule(schedule, p, v, m);
  int broken = 0;
  for (size_t r = 0; r < prog.ranks.size(); ++r) {
    const RankProgram& rp = prog.ranks[r];
    const auto& order = orders[static_cast<size_t>(rp.pp_stage)];
    const std::vector<P2pCall> calls = deepspeed ? deepspeed_engine_p2p_calls(order, p, rp.pp_stage)
                                                 : blocking_p2p_calls(schedule, order, p, m);
    const std::vector<PassTasks> pt = pass_tasks(rp, order);
    const auto& at = tl.ranks[r].tasks;
    std::vector<int> sends;
    for (size_t i = 0; i + 1 < order.size(); ++i) {
      if (pt[i].send >= 0) sends.push_back(pt[i].send);
      if (calls[i] == P2pCall::kNone) continue;
      std::vector<int> carried = sends;
      for (size_t j = i + 1; j < order.size(); ++j) {
        if (pt[j].recv >= 0) carried.push_back(pt[j].recv);
        if (calls[j] != P2pCall::kNone) break;
      }
      const TimeNs reached = at[static_cast<size_t>(pt[i].last)].end;
      const TimeNs next = at[static_cast<size_t>(pt[i + 1].first)].start;
      bool ok = true;
      for (const int id : carried)
        ok = ok && at[static_cast<size_t>(id)].start >= reached &&
             at[static_cast<size_t>(id)].end <= next;
      // One message after the other: DeepSpeed's recv, then its send.
      const int recv = pt[i + 1].recv;
      if (calls[i] == P2pCall::kRecvThenSend && recv >= 0 && !sends.empty())
        ok = ok && at[static_cast<size_t>(sends.back())].start >= at[static_cast<size_t>(recv)].end;
      broken += !ok;
      sends.clear();
    }
  }
  return broken;
}

// tiny_gpt (8 layers, 2 per virtual stage) on pp 2, vpp 2, m microbatches, under
// Megatron-LM's preset; synthetic durations without the embedding and head, each message
// costing 1 ns a byte (262144 B: about a sixth of a pass).
Scenario megatron_lm_interleaved(int m) {
  Plan p;
  p.pp = 2;
  p.vpp = 2;
  p.microbatches = m;
  p.schedule = Schedule::kInterleaved;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.framework = framework_preset(Framework::kMegatronLm);
  return sc;
}
constexpr testing::Synth synth{.aux_free = true, .comm_ns_per_byte = 1};

// pp 2, vpp 2, m 4 (one pair per stage in the steady state at least): with Megatron-LM's
// rule no call is broken; with Megatron-Core's asynchronous interleaved p2p some are (a
// forward's output leaves right after it, before the backward of its pair, and a pass
// starts while sends of the previous one are in flight).
TEST(LowerP2p, MegatronLmInterleavedBlocksOnEveryCall) {
  Scenario sc = megatron_lm_interleaved(4);
  const Program lm = lower(sc);
  EXPECT_EQ(broken_calls(lm, simulate(lm, synth_durations(lm, synth)), 2, 2, 4), 0);
  sc.framework.blocking_p2p_interleaved = false;
  const Program async = lower(sc);
  EXPECT_GT(broken_calls(async, simulate(async, synth_durations(async, synth)), 2, 2, 4), 0);
}

// pp 2, vpp 2, m 2 = p (every forward first), uniform virtual stages (aux free): each
// forward takes f, each backward b, each message c. Stage s0 holds virtual stages 0 and 2,
// s1 holds 1 and 3; both run F(c0,0) F(c0,1) F(c1,0) F(c1,1) B(c1,0) B(c1,1) B(c0,0)
// B(c0,1). With every call blocking, the passes go in lockstep, one message between two:
//   s0 F(c0,0) [0, f], its send [f, f+c]; s1 F(c0,0) [f+c, 2f+c];
//   s0 F(c0,1) and the exchange of both stages' outputs: [2f+c, 2f+2c];
//   F(c1,0) on both, exchange [3f+2c, 3f+3c]; F(c1,1) on s0 [3f+3c, 4f+3c], its send
//   [.., 4f+4c]; s1 F(c1,1) [4f+4c, 5f+4c], B(c1,0) [.., 5f+4c+b], send [.., 5f+5c+b];
//   then three rounds of (backward on both, exchange): 5f+8c+4b, and s0's last backward:
// step = 5f + 5b + 8c.
TEST(LowerP2p, MegatronLmInterleavedAllForwardFirstClosedForm) {
  const Program prog = lower(megatron_lm_interleaved(2));
  const Durations d = synth_durations(prog, synth);
  TimeNs f = 0, b = 0, c = 0;
  for (size_t i = 0; i < prog.ranks[0].tasks.size(); ++i) {
    const Task& t = prog.ranks[0].tasks[i];
    if (t.microbatch != 0 || t.chunk != 0) continue;
    if (is_compute(t.kind)) (t.phase == Phase::kFwd ? f : b) += d[0][i];
    if (t.kind == TaskKind::kSend) c = d[0][i];
  }
  ASSERT_GT(f, 0);
  ASSERT_GT(c, 0);
  EXPECT_EQ(simulate(prog, d).step_ns, 5 * f + 5 * b + 8 * c);
}

// Deadlock freedom and the blocking calls on random interleaved plans (any tp, cp, dp, ep,
// ZeRO, recompute of testing::random_plan; pp 2 or 4, vpp 2 or 3, m = p, 2p or 3p) with
// Megatron-LM's rules, and durations scaled per task at random (compute x 1..4,
// communication at 0.01 to 1 ns per byte): every program runs to its end and breaks no call.
TEST(LowerP2p, MegatronLmInterleavedRandomPlansRunAndBlock) {
  std::mt19937 rng(2602);
  for (int trial = 0; trial < 24; ++trial) {
    Plan p = testing::random_plan(rng);
    p.schedule = Schedule::kInterleaved;
    p.pp = rng() % 2 ? 2 : 4;
    p.vpp = rng() % 2 ? 2 : 3;
    p.microbatches = p.pp * static_cast<int>(1 + rng() % 3);
    p.expert_tp = 0;
    Scenario sc = make_scenario(p.ep > 1 ? testing::tiny_moe(24) : tiny_gpt(24), p);
    sc.framework = framework_preset(Framework::kMegatronLm);
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << ": tp" << p.tp << " pp" << p.pp << " vpp" << p.vpp << " m"
                 << p.microbatches << " dp" << p.dp << " cp" << p.cp << " ep" << p.ep << " zero"
                 << p.zero << " sp" << p.sp);
    const Program prog = lower(sc);
    validate_program(prog);
    const double per_byte = std::vector<double>{0.01, 0.1, 1}[rng() % 3];
    Durations d = synth_durations(prog, testing::Synth{.comm_ns_per_byte = per_byte});
    for (size_t r = 0; r < d.size(); ++r)
      for (size_t i = 0; i < d[r].size(); ++i)
        if (is_compute(prog.ranks[r].tasks[i].kind)) d[r][i] *= static_cast<TimeNs>(1 + rng() % 4);
    const Timeline tl = simulate(prog, d);
    EXPECT_GT(tl.step_ns, 0);
    EXPECT_EQ(broken_calls(prog, tl, p.pp, p.vpp, p.microbatches), 0);
  }
}

// ---- DeepSpeed's pipeline engine -------------------------------------------------------------

// tiny_gpt (8 layers) on pp 2 with 1F1B and m microbatches under Megatron-DeepSpeed's preset
// (DeepSpeed's engine); `engine` false lowers it with Megatron's batched blocking calls.
Scenario deepspeed_1f1b(int m, bool engine) {
  Plan p;
  p.pp = 2;
  p.microbatches = m;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.framework = framework_preset(Framework::kMegatronDeepSpeed);
  sc.framework.deepspeed_pipe_engine = engine;
  return sc;
}

// pp 2, m 2, uniform stages (aux free): each forward takes f, each backward b, each message
// c. Stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1.
//   s0 F0 [0, f], SendActivation 0 [f, f+c], F1 [f+c, 2f+c];
//   s1 F0 [f+c, 2f+c], B0 [2f+c, 2f+c+b];
//   then the turn both stages meet at: DeepSpeed's s0 receives gradient 0 first
//   [2f+c+b, 2f+2c+b] and only then sends activation 1 [.., 2f+3c+b] (s1 sends, then
//   receives); Megatron's batched calls move both at once [2f+c+b, 2f+2c+b];
//   s1 F1, B1 and its last send of gradient 1: 2f+3c+b + f + b + c; s0 B1 after it: + b.
// DeepSpeed: step = 3f + 3b + 4c; Megatron's calls: 3f + 3b + 3c (one message less).
TEST(LowerP2p, DeepSpeedEngineOneMessageAtATimeClosedForm) {
  for (const bool engine : {true, false}) {
    const Program prog = lower(deepspeed_1f1b(2, engine));
    const Durations d = synth_durations(prog, synth);
    TimeNs f = 0, b = 0, c = 0;
    for (size_t i = 0; i < prog.ranks[0].tasks.size(); ++i) {
      const Task& t = prog.ranks[0].tasks[i];
      if (t.microbatch != 0) continue;
      if (is_compute(t.kind)) (t.phase == Phase::kFwd ? f : b) += d[0][i];
      if (t.kind == TaskKind::kSend) c = d[0][i];
    }
    ASSERT_GT(f, 0);
    ASSERT_GT(c, 0);
    EXPECT_EQ(simulate(prog, d).step_ns, 3 * f + 3 * b + (engine ? 4 : 3) * c) << engine;
  }
}

// A random 1F1B plan DeepSpeed's engine runs (testing::random_plan with zero 0 or 1, which
// it takes with a pipeline; pp 2 or 4; 1 to max_per_stage x pp microbatches), and its
// scenario under Megatron-DeepSpeed's preset (tiny_moe when ep > 1).
Plan random_deepspeed_1f1b(std::mt19937& rng, int max_per_stage) {
  Plan p = testing::random_plan(rng);
  p.schedule = Schedule::k1F1B;
  p.pp = rng() % 2 ? 2 : 4;
  p.vpp = 1;
  p.microbatches = 1 + static_cast<int>(rng() % static_cast<unsigned>(max_per_stage * p.pp));
  p.zero = std::min(p.zero, 1);
  p.expert_tp = 0;
  p.overlap_ep = false;
  return p;
}
Scenario deepspeed_scenario(const Plan& p, int layers) {
  Scenario sc = make_scenario(p.ep > 1 ? testing::tiny_moe(layers) : tiny_gpt(layers), p);
  sc.framework = framework_preset(Framework::kMegatronDeepSpeed);
  return sc;
}

// Deadlock freedom and DeepSpeed's calls on random 1F1B plans (testing::random_plan with
// zero 0 or 1, which its engine takes with a pipeline; pp 2 or 4; 1 to 3p microbatches),
// durations scaled per task at random as above: every program runs to its end and breaks
// no call. Lowered with Megatron's batched calls instead, some plans break DeepSpeed's.
TEST(LowerP2p, DeepSpeedEngineRandomPlansRunAndBlock) {
  std::mt19937 rng(2604);
  int broken_by_batched = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const Plan p = random_deepspeed_1f1b(rng, 3);
    Scenario sc = deepspeed_scenario(p, 24);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": tp" << p.tp << " pp" << p.pp
                                      << " m" << p.microbatches << " dp" << p.dp << " cp" << p.cp
                                      << " ep" << p.ep << " zero" << p.zero << " sp" << p.sp);
    const double per_byte = std::vector<double>{0.01, 0.1, 1}[rng() % 3];
    const unsigned seed = static_cast<unsigned>(rng());
    auto run = [&](const Program& prog) {
      Durations d = synth_durations(prog, testing::Synth{.comm_ns_per_byte = per_byte});
      std::mt19937 scale(seed);
      for (size_t r = 0; r < d.size(); ++r)
        for (size_t i = 0; i < d[r].size(); ++i)
          if (is_compute(prog.ranks[r].tasks[i].kind))
            d[r][i] *= static_cast<TimeNs>(1 + scale() % 4);
      return simulate(prog, d);
    };
    const Program prog = lower(sc);
    validate_program(prog);
    const Timeline tl = run(prog);
    EXPECT_GT(tl.step_ns, 0);
    EXPECT_EQ(broken_calls(prog, tl, p.pp, 1, p.microbatches, Schedule::k1F1B, true), 0);
    sc.framework.deepspeed_pipe_engine = false;
    const Program batched = lower(sc);
    broken_by_batched +=
        broken_calls(batched, run(batched), p.pp, 1, p.microbatches, Schedule::k1F1B, true) > 0;
  }
  EXPECT_GT(broken_by_batched, 0);
}

// DeepSpeed's engine on random 1F1B plans (zero 0 or 1, pp 2 or 4): simulating one rank per
// stage gives the step time and breakdown of simulating every rank, each stage taking the
// calls of its own slots (deepspeed_engine_p2p_calls with its pp coordinate).
TEST(LowerP2p, DeepSpeedEngineFoldedEqualsFullFidelityOnRandomPlans) {
  std::mt19937 rng(2605);
  for (int trial = 0; trial < 16; ++trial) {
    const Plan p = random_deepspeed_1f1b(rng, 2);
    const Scenario sc = deepspeed_scenario(p, 8);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": tp" << p.tp << " pp" << p.pp
                                      << " m" << p.microbatches << " dp" << p.dp);
    const Program folded = lower(sc, LowerOptions{true, {}});
    const Program full = lower(sc, LowerOptions{false, {}});
    validate_program(full);
    const testing::Synth s{.comm_ns_per_byte = 1};
    const Timeline tf = testing::run(folded, s), tu = testing::run(full, s);
    EXPECT_EQ(tf.step_ns, tu.step_ns);
    EXPECT_EQ(tf.breakdown_ns, tu.breakdown_ns);
  }
}

// Megatron-LM's preset on random plans of every schedule (testing::random_plan; its
// scatter-gather adds tensor-group collectives to every pipelined tp > 1 plan without
// sequence parallel): simulating one rank per stage gives the step time and breakdown of
// simulating every rank, as it does for the default preset (lower_test.cc), with
// communication at 1 ns a byte.
TEST(LowerP2p, MegatronLmFoldedEqualsFullFidelityOnRandomPlans) {
  std::mt19937 rng(2603);
  int gathered = 0;
  for (int trial = 0; trial < 30; ++trial) {
    Plan p = testing::random_plan(rng);
    Scenario sc = make_scenario(p.ep > 1 ? testing::tiny_moe(8) : tiny_gpt(8), p);
    sc.framework = framework_preset(Framework::kMegatronLm);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": tp" << p.tp << " pp" << p.pp << " "
                                      << schedule_name(p.schedule) << " sp" << p.sp);
    const Program folded = lower(sc, LowerOptions{true, {}});
    const Program full = lower(sc, LowerOptions{false, {}});
    validate_program(full);
    for (const Task& t : folded.ranks[0].tasks)
      gathered += t.kind == TaskKind::kCollective && t.category == Category::kPpComm;
    const testing::Synth s{.comm_ns_per_byte = 1};
    const Timeline tf = testing::run(folded, s), tu = testing::run(full, s);
    EXPECT_EQ(tf.step_ns, tu.step_ns);
    EXPECT_EQ(tf.breakdown_ns, tu.breakdown_ns);
  }
  EXPECT_GT(gathered, 0);
}

// ---- scatter-gather of pipeline messages -----------------------------------------------------

// tp 2 without sequence parallel, pp 2: a message is microbatch x seq x hidden x 2 bytes =
// 1 x 512 x 256 x 2 = 262144 B. Megatron-LM sends half of it per tensor rank and, after
// each recv, all-gathers the whole (262144 B) over the tensor group; the pass's first
// compute waits for that gather. Megatron-Core sends the whole, gathers nothing; under
// sequence parallel Megatron-LM does not scatter (its messages are already 1/tp).
TEST(LowerP2p, MegatronLmScattersMessagesOverTheTensorGroup) {
  for (const Schedule s : {Schedule::k1F1B, Schedule::kInterleaved}) {
    Plan p;
    p.tp = 2;
    p.pp = 2;
    p.schedule = s;
    p.vpp = s == Schedule::kInterleaved ? 2 : 1;
    Scenario sc = make_scenario(tiny_gpt(), p);
    sc.framework = framework_preset(Framework::kMegatronLm);
    auto count = [](const Program& prog, double send_bytes, bool gathered) {
      int recvs = 0, gathers = 0;
      for (const RankProgram& rp : prog.ranks)
        for (const Task& t : rp.tasks) {
          if (t.kind == TaskKind::kSend && t.category == Category::kPpComm) {
            EXPECT_DOUBLE_EQ(t.bytes, send_bytes) << t.label;
          }
          if (t.kind == TaskKind::kRecv && t.category == Category::kPpComm) ++recvs;
          if (t.kind != TaskKind::kCollective || t.category != Category::kPpComm) continue;
          // A gather: of a recv, the whole message over the tensor group, waited for by
          // the first compute after it.
          ++gathers;
          EXPECT_FALSE(t.deps.empty()) << t.label;  // the recv first (then the host's waits)
          if (t.deps.empty()) continue;
          const Task& recv = rp.tasks[static_cast<size_t>(t.deps[0])];
          EXPECT_EQ(recv.kind, TaskKind::kRecv) << t.label;
          EXPECT_EQ(t.coll, CollOp::kAllGather);
          EXPECT_EQ(prog.groups[static_cast<size_t>(rp.group_of(t))].kind, GroupKind::kTp);
          EXPECT_DOUBLE_EQ(t.bytes, 262144.0);
          const Task* next = nullptr;
          for (const Task& u : rp.tasks)
            if (next == nullptr && u.id > t.id && is_compute(u.kind)) next = &u;
          EXPECT_NE(next, nullptr);
          if (next == nullptr) continue;
          EXPECT_EQ(std::count(next->deps.begin(), next->deps.end(), t.id), 1) << t.label;
        }
      EXPECT_EQ(gathers, gathered ? recvs : 0);
      return recvs;
    };
    const Program lm = lower(sc);
    EXPECT_GT(count(lm, 131072.0, true), 0);
    testing::run(lm);
    sc.framework.p2p_scatter_gather = false;
    EXPECT_GT(count(lower(sc), 262144.0, false), 0);
    sc.framework.p2p_scatter_gather = true;
    sc.parallel.sequence_parallel = true;
    EXPECT_GT(count(lower(sc), 131072.0, false), 0);
  }
}

}  // namespace
}  // namespace stepcast
