// The communication terms of the search's closed-form step bound (sim/report/search_bound.h):
// the tensor-parallel waits of the forwards are exactly the lowered ones without TP overlap,
// the data-parallel floor is never above the lowered stream's work, the optimizer term is
// the lowered optimizer step, and the collective model they rely on is subadditive.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/cluster/profile.h"
#include "sim/cost/coster.h"
#include "sim/lower/lower.h"
#include "sim/report/report.h"
#include "sim/report/search_bound.h"
#include "tests/sim/report/search_plans.h"

namespace stepcast {
namespace {

// Per lowered rank: the TP collectives of its forwards (all, and those of microbatch 0,
// chunk 0), the work of its data-parallel stream and its optimizer step, from the durations
// the coster gives them.
struct Lowered {
  TimeNs tp_fwd = 0, tp_first = 0, ep = 0, dp = 0, optimizer = 0;
};

Lowered lowered_terms(const RankProgram& rp, const Durations::Row& d) {
  Lowered out;
  for (size_t i = 0; i < rp.tasks.size(); ++i) {
    const Task& t = rp.tasks[i];
    if (t.kind == TaskKind::kCollective && t.stream == StreamKind::kTp && t.phase == Phase::kFwd) {
      out.tp_fwd += d[i];
      if (t.microbatch == 0 && t.chunk == 0) out.tp_first += d[i];
    }
    // The expert-parallel collectives of the forwards and input-gradient passes (not those
    // a full recomputation repeats).
    if (t.kind == TaskKind::kCollective && t.stream == StreamKind::kEp &&
        (t.phase == Phase::kFwd || t.phase == Phase::kBwdInput))
      out.ep += d[i];
    if (t.stream == StreamKind::kDp) out.dp += d[i];
    if (t.what == "optimizer_step") out.optimizer += d[i];
  }
  return out;
}

// Over random plans of the test spaces (search_plans.h): without TP overlap, fwd_comm and
// first_forward_comm are the sums of the lowered forwards' TP collectives (each waited for by
// the next kernel: emit_comm_point); with it, at most those (the ring all-gathers run under their
// GEMMs); under the MoE all-to-all overlap, at most those (a MoE layer's are not counted). ep_comm
// is the sum of the lowered forward and input-gradient passes' expert-parallel collectives
// when no run of collectives mixes them with TP ones (experts whole on each rank: every ep
// collective sits between two kernels) and no pass is paired; at most that otherwise, and
// 0 under the all-to-all overlap.
// dp_comm is at most the lowered DP stream's work (the buckets' times add up to at least the
// time of all their bytes at once) and positive for some plans whose DP groups span nodes
// (else the term would be untested). The optimizer term is the lowered step's.
TEST(StepBoundComm, TermsAgainstTheLoweredStreams) {
  std::mt19937 rng(1729);
  int checked = 0, with_dp_floor = 0, with_tp_waits = 0, with_ep_waits = 0;
  for (const Scenario& base : test_plans::scenarios()) {
    for (const Scenario& sc : test_plans::random_plans(base, 10, rng)) {
      StepBound bound(sc);
      const StepBound::StageFloors f = bound.stage_floors(sc.parallel);
      ASSERT_EQ(f.dp_comm.size(), static_cast<size_t>(sc.parallel.pp)) << sc.file;
      const Program prog = lower(sc);
      const Durations d = task_durations(prog, sc.profile);
      for (size_t r = 0; r < prog.ranks.size(); ++r) {
        const Lowered low = lowered_terms(prog.ranks[r], d[r]);
        const size_t s = static_cast<size_t>(prog.ranks[r].pp_stage);
        const std::string what = sc.file + " stage " + std::to_string(s);
        const bool paired = sc.parallel.overlap_moe_ep && sc.parallel.ep > 1;
        if (sc.parallel.overlap_tp_comm || paired) {
          EXPECT_LE(f.fwd_comm[s], low.tp_fwd) << what;
          EXPECT_LE(f.first_forward_comm[s], low.tp_first) << what;
        } else {
          EXPECT_EQ(f.fwd_comm[s], low.tp_fwd) << what;
          EXPECT_EQ(f.first_forward_comm[s], low.tp_first) << what;
        }
        const bool whole_experts =
            expert_tp_of(sc.parallel.tp, sc.parallel.ep, sc.parallel.expert_tp) == 1;
        if (paired || sc.parallel.schedule == Schedule::kDualPipeV)
          EXPECT_EQ(f.ep_comm[s], 0) << what;
        else if (whole_experts)
          EXPECT_EQ(f.ep_comm[s], low.ep) << what;
        else
          EXPECT_LE(f.ep_comm[s], low.ep) << what;
        with_ep_waits += f.ep_comm[s] > 0;
        EXPECT_LE(f.dp_comm[s], low.dp) << what;
        EXPECT_EQ(f.optimizer[s], low.optimizer) << what;
        with_dp_floor += f.dp_comm[s] > 0;
        with_tp_waits += f.fwd_comm[s] > 0;
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 50);
  EXPECT_GE(with_dp_floor, 10);
  EXPECT_GE(with_tp_waits, 10);
  EXPECT_GE(with_ep_waits, 5);
}

// What the data-parallel floor rests on: the modelled time f of a collective (no calibrated
// entry) is concave in the bytes with f(0) > 0, so f(a) + f(b) >= f(a + b): cutting bytes
// into buckets never makes them cheaper in total. Checked over random sizes (1 B to 100 GB),
// ops and group shapes on every GPU profile's figures.
TEST(StepBoundComm, CollectiveTimeIsSubadditive) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> log_bytes(0.0, 11.0);
  const std::vector<GroupShape> shapes = {{2, 1, 2, 1},      {8, 1, 8, 1},    {16, 2, 8, 1},
                                          {64, 64, 1, 1},    {256, 32, 8, 2}, {72, 1, 72, 1},
                                          {1024, 1024, 1, 4}};
  int checked = 0;
  for (const char* name : {"h100-sxm", "a100-80g-sxm", "h200-sxm", "b200-sxm", "gb200-nvl72"}) {
    HwProfile hw = load_profile(name, std::string(STEPCAST_SOURCE_DIR) + "/hw_profiles");
    hw.collectives.calibrated.clear();  // the model itself
    for (const GroupShape& g : shapes) {
      for (CollOp op : {CollOp::kAllReduce, CollOp::kReduceScatter, CollOp::kAllGather}) {
        for (int k = 0; k < 20; ++k) {
          const double a = std::pow(10.0, log_bytes(rng)), b = std::pow(10.0, log_bytes(rng));
          const double apart =
              collective_time(op, a, g, hw).time_s + collective_time(op, b, g, hw).time_s;
          EXPECT_GE(apart, collective_time(op, a + b, g, hw).time_s)
              << name << " " << a << " " << b;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 5 * 7 * 3 * 20);
}

// The floor changes the bound where communication dominates: FSDP (ZeRO-3) over four H200
// nodes gathers the parameters in every forward and backward and reduce-scatters the
// gradients every microbatch over 32 ranks on four nodes; with 512-token sequences the
// compute is an eighth of the shipped 4k ones' and the traffic the same, so the DP floor
// (plus the optimizer step) is the bound, above the compute chain, and still below the
// simulated step.
TEST(StepBoundComm, DataParallelFloorBoundsFsdp) {
  YAML::Node doc = test_plans::shipped("llama3-8b-fsdp-4node-h200.yaml");
  doc["training"]["seq_len"] = 512;
  const Scenario sc = load_scenario_node(doc, "fsdp-short.yaml");
  ASSERT_EQ(sc.parallel.zero, 3);
  StepBound bound(sc);
  const StepBound::StageFloors f = bound.stage_floors(sc.parallel);
  ASSERT_EQ(f.compute.size(), 1u);
  const TimeNs compute_only = f.compute[0] + f.fwd_comm[0] + f.optimizer[0];
  const TimeNs floor = bound.step_floor_ns(sc.parallel);
  EXPECT_EQ(floor, std::max(compute_only, f.dp_comm[0] + f.optimizer[0]));
  EXPECT_GT(f.dp_comm[0], 0);
  EXPECT_GT(f.dp_comm[0] + f.optimizer[0], compute_only);
  EXPECT_LE(to_s(floor), predict(sc).result.step_time_s);
}

// The activation floor (held_activation_floor_bytes): over random plans of the test spaces,
// the training state plus the activations a stage holds at its first backward is never
// above the lowered rank's own peak of compute-stream allocations (memory_floor_bytes,
// itself below the simulated peak), and is above the state alone whenever the stage runs
// a forward before its first backward (always): without the schedule's warm-up forwards,
// or with the activations freed too early, it would not be. Empty for the MoE and fp8
// spaces.
TEST(StepBoundComm, HeldActivationsBoundTheLoweredAllocations) {
  std::mt19937 rng(4242);
  int checked = 0;
  for (const Scenario& base : test_plans::scenarios()) {
    for (const Scenario& sc : test_plans::random_plans(base, 10, rng)) {
      const std::vector<double> held = held_activation_floor_bytes(sc);
      if (sc.model.moe || sc.training.dtype == DType::kFp8) {
        EXPECT_TRUE(held.empty());
        continue;
      }
      ASSERT_EQ(held.size(), static_cast<size_t>(sc.parallel.pp)) << sc.file;
      const auto state = training_state_bytes(sc);
      const Program prog = lower(sc);
      for (const RankProgram& rp : prog.ranks) {
        const size_t s = static_cast<size_t>(rp.pp_stage);
        const double floor = state[s][0] + state[s][1] + state[s][2] + held[s];
        EXPECT_GT(held[s], 0) << sc.file;
        EXPECT_LE(floor, memory_floor_bytes(rp) * (1 + 1e-12)) << sc.file << " stage " << s;
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 40);
}

}  // namespace
}  // namespace stepcast
