// Collectives as flows and the fluid simulation (sim/network/flows.cc).
#include <gtest/gtest.h>

#include "sim/network/flows.h"
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

// All-to-all flows: n(n-1) pairs of S/n.
TEST(Flows, AllToAllPairs) {
  const Topology t(podded(0, 1), 16);
  const auto f = collective_flows(CollOp::kAllToAll, {0, 1, 8, 9}, 4e6, t);
  ASSERT_EQ(f.size(), 12u);
  for (const auto& x : f) EXPECT_DOUBLE_EQ(x.bytes, 1e6);
}

}  // namespace
}  // namespace stepcast
