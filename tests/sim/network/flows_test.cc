// Collectives as flows and the fluid simulation (sim/network/flows.cc).
#include <algorithm>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "sim/network/flows.h"
#include "sim/plan/layout.h"
#include "tests/sim/cost/test_profiles.h"

namespace stepcast {
namespace {

using testing::podded;

// A flow alone runs at its bottleneck: GPU 0 -> GPU 8 (rail 0, next node) over one 50 GB/s
// NIC: 1 GB takes 1e9 / 50e9 = 20 ms.
TEST(Flows, SingleFlowMatchesAnalyticalTime) {
  const Topology t(podded(0, 1), 16);
  const std::vector<FlowSpec> f = {{0, 8, t.route(0, 8), 1e9}};
  EXPECT_NEAR(simulate_flows_s(f, t), 0.02, 1e-12);
}

// Two flows 0 -> 8 of 1 GB each share nic_up(0, 0): 25 GB/s each, both end at 40 ms.
TEST(Flows, TwoFlowsOnOneNicShareIt) {
  const Topology t(podded(0, 1), 16);
  const std::vector<FlowSpec> f = {{0, 8, t.route(0, 8), 1e9}, {0, 8, t.route(0, 8), 1e9}};
  std::vector<double> end;
  EXPECT_NEAR(simulate_flows_s(f, t, &end), 0.04, 1e-12);
  EXPECT_NEAR(end[0], 0.04, 1e-12);
  // Unequal sizes: 0.5 GB and 1 GB: both at 25 GB/s until 20 ms, then the second alone at
  // 50 GB/s for its last 0.5 GB: 20 + 10 = 30 ms.
  const std::vector<FlowSpec> g = {{0, 8, t.route(0, 8), 0.5e9}, {0, 8, t.route(0, 8), 1e9}};
  EXPECT_NEAR(simulate_flows_s(g, t, &end), 0.03, 1e-12);
  EXPECT_NEAR(end[0], 0.02, 1e-12);
}

// One-node ring allreduce of S over 8 GPUs: each GPU sends 2(n-1)/n S = 1.75 S to its
// successor over its own NVLink up / the successor's NVLink down: t = 1.75 S / 450 GB/s, so
// busbw = nccl-tests' S * 1.75 / t = the NVLink line rate.
TEST(Flows, OneNodeRingAllreduceRunsAtLinkRate) {
  const Topology t(podded(0, 1), 8);
  const auto f = collective_flows(CollOp::kAllReduce, {0, 1, 2, 3, 4, 5, 6, 7}, 1e9, t);
  ASSERT_EQ(f.size(), 8u);
  EXPECT_NEAR(simulate_flows_s(f, t), 1.75e9 / 450e9, 1e-12);
}

// Two nodes x 8 GPUs, full-node ring: 8 channels, each entering and leaving every node on
// its own rail, so all 8 NICs carry 1/8 of the 1.875 S each rank sends:
// t = 1.875 S / 8 / 50 GB/s (NICs are the bottleneck; NVLink carries less per link).
TEST(Flows, MultiNodeRingAggregatesAllNics) {
  const Topology t(podded(0, 1), 16);
  std::vector<int> ranks;
  for (int i = 0; i < 16; ++i) ranks.push_back(i);
  const auto f = collective_flows(CollOp::kAllReduce, ranks, 1e9, t);
  EXPECT_EQ(f.size(), 8u * 16u);
  EXPECT_NEAR(simulate_flows_s(f, t), 1.875e9 / 8 / 50e9, 1e-9);
}

// Oversubscription 1:7 above pods of 16 GPUs (2 nodes): 4 nodes, 8 concurrent DP groups
// (rail r: {r, 8+r, 16+r, 24+r}), allreduce of S each: every flow moves 2*3/4 S = 1.5 S.
// Full bisection: each flow is limited by its 50 GB/s NIC: t = 1.5 S / 50 GB/s = 30 ms.
// 1:7: pod_up(0) carries the 8 flows 8+r -> 16+r and has 2*8*50/7 = 800/7 GB/s: 100/7 GB/s
// each (below the NIC's 50), t = 1.5 S / (100/7 GB/s) = 105 ms (3.5x slower).
TEST(Flows, OversubscriptionSlowsCrossPodDpAllreduce) {
  for (double oversub : {1.0, 7.0}) {
    const Topology t(podded(16, oversub), 32);
    std::vector<FlowSpec> all;
    for (int r = 0; r < 8; ++r) {
      auto f = collective_flows(CollOp::kAllReduce, {r, 8 + r, 16 + r, 24 + r}, 1e9, t);
      all.insert(all.end(), f.begin(), f.end());
    }
    EXPECT_NEAR(simulate_flows_s(all, t), oversub == 1.0 ? 0.03 : 0.105, 1e-9) << oversub;
  }
}

// Folded copies: the translates fold_offsets gives tile a stage of R ranks. Stage 1 of
// tp 2 x dp 4 (ranks 8-15, folded rank 8): the tp group {8, 9} stands for {10, 11}, {12, 13},
// {14, 15} (offsets 0, 2, 4, 6); the dp group {8, 10, 12, 14} for {9, 11, 13, 15} (0, 1); a
// send 8 -> 16 for 9 -> 17 ... 15 -> 23 (0-7); the world group only for itself (0).
TEST(Flows, FoldOffsetsTileTheStage) {
  const std::vector<int> stage = {8, 9, 10, 11, 12, 13, 14, 15};
  EXPECT_EQ(fold_offsets(8, stage, {8, 9}), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(fold_offsets(8, stage, {8, 10, 12, 14}), (std::vector<int>{0, 1}));
  EXPECT_EQ(fold_offsets(8, stage, {8, 16}), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  std::vector<int> world(24);
  for (int i = 0; i < 24; ++i) world[static_cast<size_t>(i)] = i;
  EXPECT_EQ(fold_offsets(8, stage, world), (std::vector<int>{0}));
  // No symmetric copies derivable: {0, 1, 3} does not tile 0-7 (the translate at 2 would
  // cover 3 again); a stage that is not a block starting at the rank; full fidelity.
  EXPECT_EQ(fold_offsets(8, stage, {8, 9, 11}), (std::vector<int>{0}));
  EXPECT_EQ(fold_offsets(9, stage, {9, 10}), (std::vector<int>{0}));
  EXPECT_EQ(fold_offsets(8, {8, 9, 11, 12}, {8, 9}), (std::vector<int>{0}));
  EXPECT_EQ(fold_offsets(8, {8}, {8, 9}), (std::vector<int>{0}));
}

// For Megatron's rank order (sim/plan/layout.h) the translates of the folded rank's group are
// exactly the groups of that kind over its stage, on random layouts.
TEST(Flows, FoldOffsetsGiveTheLayoutsGroups) {
  std::mt19937 rng(11);
  auto pick = [&](std::initializer_list<int> v) {
    return *(v.begin() + static_cast<long>(rng() % v.size()));
  };
  for (int trial = 0; trial < 200; ++trial) {
    const int tp = pick({1, 2, 4, 8}), cp = pick({1, 2, 3}), dp = pick({1, 2, 4, 6}),
              pp = pick({1, 2, 3});
    const int ep = pick({1, 2, 4}), etp = pick({1, tp});
    if ((tp * cp * dp) % (etp * ep) != 0) continue;
    const RankLayout lay(tp, cp, dp, pp, ep, etp);
    const int s = static_cast<int>(rng() % static_cast<unsigned>(pp));
    const int r0 = lay.rank(0, 0, 0, s);
    const std::vector<int> stage = lay.stage_ranks(s);
    using GroupOf = std::vector<int> (RankLayout::*)(int) const;
    for (const GroupOf g : {&RankLayout::tp_group, &RankLayout::cp_group, &RankLayout::dp_group,
                            &RankLayout::dp_cp_group, &RankLayout::ep_group, &RankLayout::edp_group,
                            &RankLayout::pp_group}) {
      const std::vector<int> members = (lay.*g)(r0);
      std::set<std::vector<int>> want, got;
      for (int r : stage) {
        std::vector<int> m = (lay.*g)(r);
        std::sort(m.begin(), m.end());
        want.insert(m);
      }
      for (int d : fold_offsets(r0, stage, members)) {
        std::vector<int> m = members;
        for (int& x : m) x += d;
        std::sort(m.begin(), m.end());
        got.insert(m);
      }
      EXPECT_EQ(got, want) << "tp " << tp << " cp " << cp << " dp " << dp << " pp " << pp << " ep "
                           << ep << " etp " << etp << " stage " << s;
    }
  }
}

// The oversubscription example below, folded: the rail-0 group {0, 8, 16, 24} stands for the
// other seven (offsets 1-7 of a stage of 32 ranks with tp 8, dp 4). Charged on the links its
// own flows cross, its flow 8 -> 16 carries 8 copies on pod_up(0) and pod_down(1) and 1 on
// its NICs: alone at 1:7 it takes the 105 ms of the eight groups together, not the 30 ms of
// one; at full bisection 30 ms either way.
TEST(Flows, ChargedCopiesLoadThePodUplink) {
  std::vector<int> stage(32);
  for (int i = 0; i < 32; ++i) stage[static_cast<size_t>(i)] = i;
  for (double oversub : {1.0, 7.0}) {
    const Topology t(podded(16, oversub), 32);
    const std::vector<int> group = {0, 8, 16, 24};
    std::vector<FlowSpec> f = collective_flows(CollOp::kAllReduce, group, 1e9, t);
    std::vector<char> charged(t.links().size(), 0);
    for (const FlowSpec& x : f)
      for (int l : x.links) charged[static_cast<size_t>(l)] = 1;
    const std::vector<int> offsets = fold_offsets(0, stage, group);
    ASSERT_EQ(offsets.size(), 8u);
    charge_copies(
        f, offsets,
        [&](int d) {
          std::vector<int> moved = group;
          for (int& m : moved) m += d;
          return collective_flows(CollOp::kAllReduce, moved, 1e9, t);
        },
        charged);
    const FlowSpec& up = f[1];  // 8 -> 16: node 1 (pod 0) -> node 2 (pod 1)
    ASSERT_EQ(up.links.size(), up.copies.size());
    for (size_t i = 0; i < up.links.size(); ++i) {
      const int l = up.links[i];
      const bool pod = l == t.pod_up(0) || l == t.pod_down(1);
      EXPECT_EQ(up.copies[i], pod ? 8.0 : 1.0) << t.links()[static_cast<size_t>(l)].name;
    }
    EXPECT_NEAR(simulate_flows_s(f, t), oversub == 1.0 ? 0.03 : 0.105, 1e-9) << oversub;
  }
}

// All-to-all flows: n(n-1) pairs of S/n.
TEST(Flows, AllToAllPairs) {
  const Topology t(podded(0, 1), 16);
  const auto f = collective_flows(CollOp::kAllToAll, {0, 1, 8, 9}, 4e6, t);
  ASSERT_EQ(f.size(), 12u);
  for (const auto& x : f) EXPECT_DOUBLE_EQ(x.bytes, 1e6);
}

}  // namespace
}  // namespace stepcast
