// Lowering tests: one GPU, pipeline bubbles, stopping after a stage and the step floor, the
// streams an executor uses, folded == full fidelity, and the pipeline schedules.
#include "sim/lower/lower.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "model/error.h"
#include "model/memory.h"
#include "model/params.h"
#include "sim/cluster/profile.h"
#include "sim/cost/coster.h"
#include "sim/engine/engine.h"
#include "sim/lower/schedule.h"
#include "sim/program/matching.h"
#include "sim/program/program_json.h"
#include "tests/sim/lower/lower_test_helpers.h"
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast {
namespace {

using testing::alloc_bytes;
using testing::make_scenario;
using testing::Plan;
using testing::run;
using testing::state_bytes;
using testing::Synth;
using testing::synth_durations;
using testing::tiny_gpt;
using testing::tiny_moe;

TimeNs bubble(const Timeline& t) { return t.breakdown_ns[kCategoryCount]; }

// Sum of the durations of the layer compute tasks of rank r (one stage's F+B+W work).
TimeNs layer_compute_ns(const Program& prog, const Durations& d, size_t r) {
  TimeNs sum = 0;
  for (size_t i = 0; i < prog.ranks[r].tasks.size(); ++i)
    if (testing::is_compute(prog.ranks[r].tasks[i].kind) && prog.ranks[r].tasks[i].layer >= 0)
      sum += d[r][i];
  return sum;
}

// ---- single GPU --------------------------------------------------------------------------

TEST(Lower, OneGpuStepIsTheSumOfItsTaskCosts) {
  // One rank, no communication: every task runs on the compute stream back to back, so
  // the step is exactly the sum of all task durations.
  Plan p;
  p.microbatches = 3;
  const Program prog = lower(make_scenario(tiny_gpt(), p));
  ASSERT_EQ(prog.ranks.size(), 1u);
  const Durations d = synth_durations(prog);
  const Timeline t = simulate(prog, d);
  const TimeNs sum = std::accumulate(d[0].begin(), d[0].end(), TimeNs{0});
  EXPECT_EQ(t.step_ns, sum);
  EXPECT_EQ(bubble(t), 0);
  EXPECT_EQ(prog.world_size, 1);
  EXPECT_EQ(prog.gpus_per_node, 8);
}

// ---- pipeline bubbles --------------------------------------------------------------------

class BubbleTest : public ::testing::TestWithParam<Schedule> {};

TEST_P(BubbleTest, GpipeAnd1F1BBubbleIsPMinus1OverMPlusPMinus1) {
  // p = 4, m = 8, uniform stages (2 layers each; embedding/head/optimizer take no time), free
  // communication: step = (m + p - 1)(F + B) and bubble = (p - 1)(F + B) on the critical
  // rank, i.e. the bubble is (p - 1)/(m + p - 1) = 3/11 of the step.
  Plan p;
  p.pp = 4;
  p.microbatches = 8;
  p.schedule = GetParam();
  const Program prog = lower(make_scenario(tiny_gpt(8), p));
  ASSERT_EQ(prog.ranks.size(), 4u);
  const Durations d = synth_durations(prog, {.aux_free = true});
  const Timeline t = simulate(prog, d);
  const TimeNs work = layer_compute_ns(prog, d, 1);  // m (F + B) on a middle stage
  ASSERT_EQ(work % 8, 0);
  const TimeNs fb = work / 8;
  EXPECT_EQ(t.step_ns, (8 + 4 - 1) * fb);
  EXPECT_EQ(bubble(t) * (8 + 4 - 1), t.step_ns * (4 - 1));
}

INSTANTIATE_TEST_SUITE_P(Schedules, BubbleTest,
                         ::testing::Values(Schedule::kGpipe, Schedule::k1F1B));

TEST(Lower, InterleavedBubbleShrinksByV) {
  // p = 4, v = 2, m = 8, 16 layers (2 per virtual stage), free communication. Narayanan et
  // al. 2021 section 2.2: bubble time = (p - 1)(F + B)/v with F, B the per-microbatch times of
  // a whole stage, i.e. (p - 1)/(v m) of the ideal time m (F + B) = 3/16.
  Plan p;
  p.pp = 4;
  p.vpp = 2;
  p.microbatches = 8;
  p.schedule = Schedule::kInterleaved;
  const Program prog = lower(make_scenario(tiny_gpt(16), p));
  const Durations d = synth_durations(prog, {.aux_free = true});
  const Timeline t = simulate(prog, d);
  const TimeNs ideal = layer_compute_ns(prog, d, 0);
  EXPECT_EQ(bubble(t) * 2 * 8, ideal * (4 - 1));
  EXPECT_EQ(t.step_ns, ideal + bubble(t));
}

TEST(Lower, InterleavedNeedsMicrobatchesDivisibleByPp) {
  Plan p;
  p.pp = 4;
  p.vpp = 2;
  p.microbatches = 6;
  p.schedule = Schedule::kInterleaved;
  try {
    lower(make_scenario(tiny_gpt(16), p));
    FAIL() << "expected InvariantError";
  } catch (const InvariantError& e) {
    EXPECT_NE(std::string(e.what()).find("microbatches (6) divisible by pp (4)"), std::string::npos)
        << e.what();
  }
}

TEST(Lower, ZbH1BubbleIsPMinus1TimesFPlusBMinusW) {
  // ZB-H1 (Qi et al. 2023, section 3.1): with uniform stages and free communication the
  // bubble is (p-1)(T_F + T_B - T_W), against 1F1B's (p-1)(T_F + T_B + T_W) where B and W
  // run as one backward; stage 0 holds p microbatches in flight, as in 1F1B, so its peak
  // memory is 1F1B's plus the output gradients its 2 layers hold from B to W (one
  // microbatch's: stage 0 runs each W right after its B), 512 x 2304 x 2 bytes a layer.
  // p = 4, m = 8; T_F, T_B, T_W per microbatch from a middle stage.
  Plan p;
  p.pp = 4;
  p.microbatches = 8;
  const Program one = lower(make_scenario(tiny_gpt(8), p));
  p.schedule = Schedule::kZbH1;
  const Program zb = lower(make_scenario(tiny_gpt(8), p));
  const Durations d = synth_durations(zb, {.aux_free = true});
  const Timeline tz = simulate(zb, d);
  const Timeline t1 = run(one, {.aux_free = true});
  validate_program(zb);
  TimeNs f = 0, b = 0, w = 0;
  for (size_t i = 0; i < zb.ranks[1].tasks.size(); ++i) {
    const Task& t = zb.ranks[1].tasks[i];
    if (!testing::is_compute(t.kind) || t.layer < 0) continue;
    (t.phase == Phase::kFwd ? f : t.phase == Phase::kBwdInput ? b : w) += d[1][i];
  }
  ASSERT_EQ(f % 8 + b % 8 + w % 8, 0);
  f /= 8, b /= 8, w /= 8;
  EXPECT_EQ(bubble(tz), 3 * (f + b - w));
  EXPECT_EQ(tz.step_ns, 8 * (f + b + w) + 3 * (f + b - w));
  EXPECT_EQ(bubble(t1), 3 * (f + b + w));
  EXPECT_EQ(tz.ranks[0].peak_bytes, t1.ranks[0].peak_bytes + 2 * 512.0 * 2304 * 2);
}

TEST(Lower, StoppingAfterAStageKeepsTheStagesLoweredSoFar) {
  // LowerOptions::stop_after_stage: on random pipelined plans, stopping after stage k gives
  // the first k + 1 stages' programs exactly as the whole lowering does (same tasks, labels,
  // dependencies), and the hook sees the stages in order.
  std::mt19937 rng(5);
  int checked = 0;
  for (int trial = 0; trial < 20; ++trial) {
    Plan p = testing::random_plan(rng);
    if (p.pp == 1) continue;
    const Scenario sc = make_scenario(p.ep > 1 ? tiny_moe(8) : tiny_gpt(8), p);
    const Program whole = lower(sc);
    const int stop = static_cast<int>(rng() % static_cast<unsigned>(p.pp));
    LowerOptions lo;
    int seen = 0;
    lo.stop_after_stage = [&](const Program& so_far) {
      EXPECT_EQ(so_far.ranks.size(), static_cast<size_t>(seen + 1));
      EXPECT_EQ(so_far.ranks.back().pp_stage, seen);
      return seen++ == stop;
    };
    const Program part = lower(sc, lo);
    ASSERT_EQ(part.ranks.size(), static_cast<size_t>(stop + 1)) << "trial " << trial;
    for (size_t r = 0; r < part.ranks.size(); ++r) {
      const TaskList& a = part.ranks[r].tasks;
      const TaskList& b = whole.ranks[r].tasks;
      ASSERT_EQ(a.size(), b.size()) << "trial " << trial << " rank " << r;
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].label, b[i].label);
        EXPECT_EQ(a[i].deps, b[i].deps);
      }
      EXPECT_EQ(memory_floor_bytes(part.ranks[r]), memory_floor_bytes(whole.ranks[r]));
    }
    ++checked;
  }
  EXPECT_GT(checked, 8);
}

TEST(Lower, StepFloorBoundsTheSimulatedStep) {
  // step_floor_ns (engine.h): the longest chain of a rank's dependent tasks bounds the step
  // from below, and is at least every rank's compute-stream total. On random plans with
  // communication at 0.05 ns per byte (so tensor-parallel collectives the compute stream
  // waits for count), with the engine's SM slowdown on: floor <= simulated step, floor >=
  // the busiest compute stream, and strictly above it on some plans.
  std::mt19937 rng(909);
  int above = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Plan p = testing::random_plan(rng);
    const Program prog = lower(make_scenario(p.ep > 1 ? tiny_moe(8) : tiny_gpt(8), p));
    const Durations d = synth_durations(prog, Synth{.aux_free = false, .comm_ns_per_byte = 0.05});
    EngineOptions eo;
    eo.compute_slowdown_when_comm = 0.2;
    const TimeNs step = simulate(prog, d, eo).step_ns;
    const TimeNs floor = step_floor_ns(prog, d);
    TimeNs busiest = 0;
    for (size_t r = 0; r < prog.ranks.size(); ++r) {
      TimeNs sum = 0;
      for (size_t i = 0; i < prog.ranks[r].tasks.size(); ++i)
        if (prog.ranks[r].tasks[i].stream == StreamKind::kCompute) sum += d[r][i];
      busiest = std::max(busiest, sum);
    }
    EXPECT_LE(floor, step) << "trial " << trial;
    EXPECT_GE(floor, busiest) << "trial " << trial;
    above += floor > busiest;
  }
  EXPECT_GT(above, 10);
}

TEST(Lower, StreamsAndKernelNamesAnExecutorCanUse) {
  // docs/model.md, the Program: one stream per communication kind, and memory-bound kernels that
  // say what they are. tiny_gpt at cp 2 (ring attention), tp 2 with sp, 2 microbatches:
  // every ring-attention receive is on cp_recv (its sends on cp; nothing of cp on tp), and
  // every memory-bound kernel names itself.
  Plan p;
  p.cp = 2;
  p.tp = 2;
  p.sp = true;
  p.microbatches = 2;
  const Program prog = lower(make_scenario(tiny_gpt(), p));
  int recvs = 0, sends = 0;
  for (const Task& t : prog.ranks[0].tasks) {
    if (t.category == Category::kCpComm) {
      if (t.kind == TaskKind::kRecv) {
        ++recvs;
        EXPECT_EQ(t.stream, StreamKind::kCpRecv) << t.label;
      } else {
        ++sends;
        EXPECT_EQ(t.stream, StreamKind::kCp) << t.label;
      }
    }
    if (t.kind == TaskKind::kMemoryBound) {
      EXPECT_FALSE(t.what.empty()) << t.label;
    }
    if (t.stream == StreamKind::kTp) {
      EXPECT_EQ(t.category, Category::kTpComm) << t.label;
    }
  }
  // cp - 1 = 1 KV block received per attention pass: forward and backward of 8 layers x 2
  // microbatches = 32 receives, as many sends.
  EXPECT_EQ(recvs, 32);
  EXPECT_EQ(sends, 32);
  run(prog);
}

// ---- folded == full fidelity -------------------------------------------------------------

// A random plan (testing::random_plan) of tiny_gpt, tiny_moe when it has ep > 1, with tied
// embeddings every third trial.
Scenario random_tiny_scenario(std::mt19937& rng, int trial, Plan& p) {
  p = testing::random_plan(rng);
  ModelArch arch = p.ep > 1 ? tiny_moe(8) : tiny_gpt(8);
  arch.tied_embeddings = trial % 3 == 0;
  return make_scenario(arch, p);
}

TEST(Lower, LabelsChangeNothingButLabels) {
  // Sweeps and the search lower without the per-microbatch task labels
  // (LowerOptions::labels; a few fixed ones such as "opt.step" stay): over random plans,
  // folded and full, the labels must be the only difference — same tasks, streams,
  // dependencies, sizes, groups, peers, tags and allocation names (the `what` that pairs
  // frees with allocations stays) — so every prediction is the same.
  std::mt19937 rng(4321);
  for (int trial = 0; trial < 20; ++trial) {
    Plan p;
    const Scenario sc = random_tiny_scenario(rng, trial, p);
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    for (const bool folded : {true, false}) {
      Program with = lower(sc, LowerOptions{folded, {}, true});
      Program without = lower(sc, LowerOptions{folded, {}, false});
      auto unlabel = [](Program& prog) {
        size_t labelled = 0;
        for (RankProgram& rp : prog.ranks)
          for (size_t i = 0; i < rp.tasks.size(); ++i) {
            labelled += !rp.tasks[i].label.empty();
            rp.tasks.mut(i).label.clear();
          }
        return labelled;
      };
      const size_t labelled = unlabel(with), left = unlabel(without);
      EXPECT_LT(left, labelled) << "the per-microbatch labels are gone";
      const std::string a = write_program_json(with), b = write_program_json(without);
      // Compared as a whole; on a difference, show where (not both documents).
      const auto diff = std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin();
      EXPECT_EQ(static_cast<size_t>(diff), a.size())
          << "folded " << folded << ": first difference at byte " << diff << ": ..."
          << a.substr(static_cast<size_t>(std::max<std::ptrdiff_t>(0, diff - 200)), 300)
          << "... vs ..."
          << b.substr(static_cast<size_t>(std::max<std::ptrdiff_t>(0, diff - 200)), 300);
      EXPECT_EQ(a.size(), b.size());
    }
  }
}

TEST(Lower, FoldedEqualsFullFidelityOnRandomPlans) {
  // Ranks of a stage run the same program (uniform routing), so simulating one per stage
  // must give the same step time, breakdown and per-stage peak memory as simulating all.
  // Communication costs bytes / 1 GB/s so that it matters for the comparison.
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 40; ++trial) {
    Plan p;
    const Scenario sc = random_tiny_scenario(rng, trial, p);
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << ": tp" << p.tp << " pp" << p.pp << " dp" << p.dp << " cp"
                 << p.cp << " ep" << p.ep << " vpp" << p.vpp << " m" << p.microbatches << " "
                 << schedule_name(p.schedule) << " zero" << p.zero << " sp" << p.sp << " rc"
                 << static_cast<int>(p.recompute) << " og" << p.overlap_grad << " opg"
                 << p.overlap_param << " cp_kind" << static_cast<int>(p.cp_kind) << " otp"
                 << p.overlap_tp << " etp" << p.expert_tp);
    const Program folded = lower(sc, LowerOptions{true, {}});
    const Program full = lower(sc, LowerOptions{false, {}});
    ASSERT_EQ(static_cast<int>(folded.ranks.size()), p.pp);
    ASSERT_EQ(static_cast<int>(full.ranks.size()), p.tp * p.pp * p.dp * p.cp);
    // Full fidelity shares one task list per (stage, cp index) (program.h); through the
    // remap tables every collective still names a group holding the rank itself.
    std::set<const Task*> lists;
    for (const RankProgram& rp : full.ranks) {
      if (!rp.tasks.empty()) lists.insert(&rp.tasks[0]);
      for (const Task& t : rp.tasks) {
        if (t.kind != TaskKind::kCollective) continue;
        const auto& members = full.groups[static_cast<size_t>(rp.group_of(t))].ranks;
        ASSERT_NE(std::find(members.begin(), members.end(), rp.rank), members.end())
            << task_ref(rp, t.id);
      }
    }
    EXPECT_EQ(static_cast<int>(lists.size()), p.pp * p.cp);
    EXPECT_NO_THROW(validate_program(full));
    const Synth s{.aux_free = false, .comm_ns_per_byte = 1.0};
    const Timeline tf = run(folded, s);
    const Timeline tu = run(full, s);
    EXPECT_EQ(tf.step_ns, tu.step_ns);
    EXPECT_EQ(tf.breakdown_ns, tu.breakdown_ns);
    for (const RankProgram& rp : full.ranks) {
      const size_t r = static_cast<size_t>(&rp - full.ranks.data());
      EXPECT_DOUBLE_EQ(tu.ranks[r].peak_bytes,
                       tf.ranks[static_cast<size_t>(rp.pp_stage)].peak_bytes)
          << "rank " << rp.rank;
    }
  }
}

TEST(Lower, MemoryFloorIsALowerBoundOfTheSimulatedPeak) {
  // memory_floor_bytes (program.h) reads the program alone; on random plans (with ZeRO-3,
  // recompute, pipelines, MoE) it never exceeds any rank's simulated peak, is at least the
  // training state, and is more than the state somewhere (it counts activations).
  std::mt19937 rng(99);
  bool above_state = false;
  for (int trial = 0; trial < 40; ++trial) {
    const Plan p = testing::random_plan(rng);
    const Program prog =
        lower(make_scenario(p.ep > 1 ? tiny_moe(8) : tiny_gpt(8), p), LowerOptions{false, {}});
    const std::vector<double> floor = memory_floor_bytes(prog);
    const Timeline tl = run(prog, Synth{.aux_free = false, .comm_ns_per_byte = 1.0});
    ASSERT_EQ(floor.size(), prog.ranks.size());
    for (size_t r = 0; r < prog.ranks.size(); ++r) {
      EXPECT_LE(floor[r], tl.ranks[r].peak_bytes) << "trial " << trial << " rank " << r;
      EXPECT_GE(floor[r], state_bytes(prog.ranks[r]) * (1 - 1e-12)) << "trial " << trial;
      above_state = above_state || floor[r] > state_bytes(prog.ranks[r]) * 1.01;
    }
  }
  EXPECT_TRUE(above_state);
}

TEST(Lower, FoldedProgramStandsForEveryRankOfItsStage) {
  Plan p;
  p.tp = 2;
  p.pp = 2;
  p.dp = 2;
  const Program prog = lower(make_scenario(tiny_gpt(), p));
  ASSERT_EQ(prog.ranks.size(), 2u);
  EXPECT_EQ(prog.ranks[1].rank, 4);
  EXPECT_EQ(prog.ranks[1].pp_stage, 1);
  EXPECT_EQ(prog.ranks[1].stands_for, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(prog.world_size, 8);
  // Groups list their full membership: the dp group of rank 0 is {0, 2}.
  bool saw_dp = false;
  for (const Group& g : prog.groups)
    if (g.kind == GroupKind::kDp && g.ranks.front() == 0) {
      saw_dp = true;
      EXPECT_EQ(g.ranks, (std::vector<int>{0, 2}));
    }
  EXPECT_TRUE(saw_dp);
}

// ---- schedules ---------------------------------------------------------------------------

TEST(Schedule, EveryStageRunsEveryPassOnce) {
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1}) {
    const int p = 4, v = s == Schedule::kInterleaved ? 3 : 1, m = 8;
    NominalCosts c;
    c.f.assign(static_cast<size_t>(p * v), 1.0);
    c.b.assign(static_cast<size_t>(p * v), 1.0);
    c.w.assign(static_cast<size_t>(p * v), 1.0);
    const auto orders = pipeline_schedule(s, p, v, m);
    for (const auto& o : orders) {
      std::map<std::tuple<int, int, int>, int> seen;
      for (const PassOp& op : o) ++seen[{static_cast<int>(op.kind), op.chunk, op.mb}];
      const int kinds = s == Schedule::kZbH1 ? 3 : 2;
      EXPECT_EQ(seen.size(), static_cast<size_t>(kinds * v * m));
      for (const auto& [k, n] : seen) EXPECT_EQ(n, 1);
    }
    if (s != Schedule::kZbH1) c.w.clear();
    EXPECT_NO_THROW(nominal_start_times(s, orders, p, v, m, c));
  }
}

TEST(Schedule, OneFOneBWarmupIsPMinusStageMinusOne) {
  // Stage s of 1F1B runs p - s - 1 forwards before its first backward... then alternates.
  const auto o = pipeline_schedule(Schedule::k1F1B, 4, 1, 8);
  for (int s = 0; s < 4; ++s) {
    int warm = 0;
    while (o[static_cast<size_t>(s)][static_cast<size_t>(warm)].kind == PassKind::kF) ++warm;
    EXPECT_EQ(warm, 4 - s) << "stage " << s;  // p - s - 1 warm-up + the first steady forward
  }
}

}  // namespace
}  // namespace stepcast
