// Topology and routes (sim/network/topology.cc).
#include <gtest/gtest.h>

#include "sim/network/topology.h"
#include "tests/sim/cost/test_profiles.h"

namespace stepcast {
namespace {

using testing::podded;

// 32 GPUs, 8 per node, 8 NICs, pods of 16 GPUs: 4 nodes, 2 pods.
// Links: 2*32 NVLink + 2*4*8 NIC + 2*2*8 leaf + 2*2 pod = 64 + 64 + 32 + 4 = 164.
TEST(Topology, CountsAndCapacities) {
  const Topology t(podded(16, 7), 32);
  EXPECT_EQ(t.nodes(), 4);
  EXPECT_EQ(t.pods(), 2);
  EXPECT_EQ(t.links().size(), 164u);
  EXPECT_DOUBLE_EQ(t.links()[static_cast<size_t>(t.nvl_up(5))].capacity_bytes_per_s, 450e9);
  EXPECT_DOUBLE_EQ(t.links()[static_cast<size_t>(t.nic_down(3, 7))].capacity_bytes_per_s, 50e9);
  // Leaf uplink: 2 nodes per pod x 50 GB/s (full bisection inside the pod).
  EXPECT_DOUBLE_EQ(t.links()[static_cast<size_t>(t.leaf_up(1, 2))].capacity_bytes_per_s, 100e9);
  // Pod uplink: 2 nodes x 8 NICs x 50 GB/s / 7.
  EXPECT_DOUBLE_EQ(t.links()[static_cast<size_t>(t.pod_up(0))].capacity_bytes_per_s, 800e9 / 7);
  for (size_t i = 0; i < t.links().size(); ++i) EXPECT_EQ(t.links()[i].id, static_cast<int>(i));
  EXPECT_EQ(t.links()[static_cast<size_t>(t.nic_up(1, 3))].name, "nic_up[n1.r3]");
}

TEST(Topology, Routes) {
  const Topology t(podded(16, 7), 32);
  EXPECT_TRUE(t.route(3, 3).empty());
  // Same node: NVLink up and down.
  EXPECT_EQ(t.route(1, 6), (std::vector<int>{t.nvl_up(1), t.nvl_down(6)}));
  // Same rail, same pod: NIC to NIC through the rail leaf.
  EXPECT_EQ(t.route(2, 10), (std::vector<int>{t.nic_up(0, 2), t.nic_down(1, 2)}));
  // Cross rail with PXN: NVLink to GPU 5 (rail 5) first, then rail 5.
  EXPECT_EQ(t.route(2, 13),
            (std::vector<int>{t.nvl_up(2), t.nvl_down(5), t.nic_up(0, 5), t.nic_down(1, 5)}));
  // Cross rail without PXN: through the spine.
  EXPECT_EQ(t.route(2, 13, false), (std::vector<int>{t.nic_up(0, 2), t.leaf_up(0, 2),
                                                     t.leaf_down(0, 5), t.nic_down(1, 5)}));
  // Cross pod, same rail: leaf, pod up/down, leaf.
  EXPECT_EQ(t.route(8, 16), (std::vector<int>{t.nic_up(1, 0), t.leaf_up(0, 0), t.pod_up(0),
                                              t.pod_down(1), t.leaf_down(1, 0), t.nic_down(2, 0)}));
}

}  // namespace
}  // namespace stepcast
