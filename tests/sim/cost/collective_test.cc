// Collective model (sim/cost/collective.cc) against docs/model.md "Collectives and network"'s
// latency table and measured busbw, the nccl-tests CSVs in tests/data/measured/, and properties.
#include <cmath>
#include <iterator>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "sim/cluster/profile.h"
#include "sim/cost/cost.h"
#include "tests/sim/cost/csv.h"
#include "tests/sim/cost/test_profiles.h"

namespace stepcast {
namespace {

using testing::a100_profile;
using testing::h100_profile;
using testing::read_measured_csv;

GroupShape shape(int ranks, int nodes, int ppn, int pods = 1) {
  return GroupShape{ranks, nodes, ppn, pods};
}

double busbw(CollOp op, double bytes, const GroupShape& g, const HwProfile& hw) {
  return bytes * bus_factor_of(op, g.ranks) / collective_time(op, bytes, g, hw).time_s;
}

double candidate_us(CollOp op, const GroupShape& g, const HwProfile& hw, CollAlgo a, CollProto p) {
  for (const auto& c : collective_candidates(op, 0, g, hw))
    if (c.algo == a && c.proto == p) return c.time_s * 1e6;
  return -1;
}

// docs/model.md "Collectives and network" "Computed allreduce alpha": 8 ranks/1 node: Ring LL 15
// (6.6 + 14*0.6), Ring Simple 56 (8.4 + 14*3.4), Tree Simple 64 (8.4 + 2*7*4.0), NVLS 25.
TEST(CollectiveLatency, MatchesNcclTableOneNode) {
  const HwProfile hw = h100_profile();
  const GroupShape g = shape(8, 1, 8);
  EXPECT_NEAR(candidate_us(CollOp::kAllReduce, g, hw, CollAlgo::kRing, CollProto::kLL), 15.0, 1e-9);
  EXPECT_NEAR(candidate_us(CollOp::kAllReduce, g, hw, CollAlgo::kRing, CollProto::kSimple), 56.0,
              1e-9);
  EXPECT_NEAR(candidate_us(CollOp::kAllReduce, g, hw, CollAlgo::kTree, CollProto::kSimple), 64.4,
              1e-9);
  EXPECT_NEAR(candidate_us(CollOp::kAllReduce, g, hw, CollAlgo::kNvls, CollProto::kSimple), 25.0,
              1e-9);
  // Small messages are latency-bound: at 8 bytes the cheapest is Ring LL at ~15 us.
  const CollectiveChoice c = collective_time(CollOp::kAllReduce, 8, g, hw);
  EXPECT_EQ(c.algo, CollAlgo::kRing);
  EXPECT_EQ(c.proto, CollProto::kLL);
  EXPECT_NEAR(c.time_s * 1e6, 15.0, 0.01);
}

// 1024 ranks / 128 nodes: Ring Simple 8.4 + 1792*3.4 + 254*14 = 9657, Tree LL
// 6.8 + 2(7*0.6 + 7*5.0) = 85.2, Tree Simple 8.4 + 2(7*4 + 7*14) = 260.4, NVLS-Tree
// 25 + 2*7*20.9 = 317.6. (docs/model.md "Collectives and network"'s Ring LL 2484 does not follow
// from its own table: 6.6 + 1792*0.6 + 254*2.7 = 1767.6, which is what this model uses.)
TEST(CollectiveLatency, MatchesNcclTableAtScale) {
  const HwProfile hw = h100_profile();
  const GroupShape g = shape(1024, 128, 8);
  EXPECT_NEAR(candidate_us(CollOp::kAllReduce, g, hw, CollAlgo::kRing, CollProto::kSimple), 9657.2,
              1e-6);
  EXPECT_NEAR(candidate_us(CollOp::kAllReduce, g, hw, CollAlgo::kTree, CollProto::kLL), 85.2, 1e-9);
  EXPECT_NEAR(candidate_us(CollOp::kAllReduce, g, hw, CollAlgo::kTree, CollProto::kSimple), 260.4,
              1e-9);
  EXPECT_NEAR(candidate_us(CollOp::kAllReduce, g, hw, CollAlgo::kNvlsTree, CollProto::kSimple),
              317.6, 1e-9);
  const CollectiveChoice c = collective_time(CollOp::kAllReduce, 8, g, hw);
  EXPECT_EQ(c.algo, CollAlgo::kTree);  // logarithmic latency wins at scale
}

// PAT (NCCL >= 2.23) for RS/AG with one rank per node: 64 nodes, tiny message:
// PAT 8.4 + log2(64)*14 = 92.4 us beats Ring LL 6.6 + 63*2.7 = 176.7 us; absent on 2.21.
TEST(CollectiveLatency, PatOnlyFromNccl223WithOneRankPerNode) {
  HwProfile hw = h100_profile();
  const GroupShape g = shape(64, 64, 1);
  EXPECT_EQ(collective_time(CollOp::kReduceScatter, 64, g, hw).algo, CollAlgo::kRing);
  EXPECT_NEAR(collective_time(CollOp::kReduceScatter, 64, g, hw).time_s * 1e6,
              176.7 + 64 * 63.0 / 64 / 24e9 * 1e6, 1e-6);  // + S(n-1)/n / (0.5 * 48 GB/s)
  hw.collectives.nccl_version = "2.23.4";
  const CollectiveChoice c = collective_time(CollOp::kAllGather, 64, g, hw);
  EXPECT_EQ(c.algo, CollAlgo::kPat);
  EXPECT_NEAR(c.time_s * 1e6, 92.4 + 64 * 63.0 / 64 / 48e9 * 1e6, 1e-6);
  EXPECT_NE(collective_time(CollOp::kReduceScatter, 64, shape(64, 8, 8), hw).algo, CollAlgo::kPat);
}

// docs/model.md "Collectives and network" measured large-message busbw.
TEST(CollectiveBandwidth, MatchesNetworkMdFigures) {
  const HwProfile a100 = a100_profile();
  const HwProfile h100 = h100_profile();
  HwProfile h100_ring = h100;
  h100_ring.node.nvls = false;
  const double big = 8e9;
  // 8x A100 allreduce 230-232 GB/s.
  EXPECT_NEAR(busbw(CollOp::kAllReduce, big, shape(8, 1, 8), a100) / 1e9, 231, 2);
  // 8x H100 NVLS allreduce ~480; ring RS/AG 365-370.
  EXPECT_NEAR(busbw(CollOp::kAllReduce, big, shape(8, 1, 8), h100) / 1e9, 480, 2);
  EXPECT_EQ(collective_time(CollOp::kAllReduce, big, shape(8, 1, 8), h100).algo, CollAlgo::kNvls);
  EXPECT_NEAR(busbw(CollOp::kReduceScatter, big, shape(8, 1, 8), h100) / 1e9, 368, 3);
  EXPECT_NEAR(busbw(CollOp::kAllGather, big, shape(8, 1, 8), h100) / 1e9, 368, 3);
  EXPECT_NEAR(busbw(CollOp::kAllReduce, big, shape(8, 1, 8), h100_ring) / 1e9, 368, 3);
  // NVLS vs GPUs in node: 2-4 no gain (~370), 5/6/7/8: 420/440/460/480.
  EXPECT_EQ(collective_time(CollOp::kAllReduce, big, shape(4, 1, 4), h100).algo, CollAlgo::kRing);
  const double nvls_expected[] = {420, 440, 460, 480};
  for (int n = 5; n <= 8; ++n)
    EXPECT_NEAR(busbw(CollOp::kAllReduce, big, shape(n, 1, n), h100) / 1e9, nvls_expected[n - 5],
                2);
  // A100 multi-node, 8x HDR: ~192 (24 per NIC, 8 NICs aggregated by a full-node ring).
  EXPECT_NEAR(busbw(CollOp::kAllReduce, big, shape(16, 2, 8), a100) / 1e9, 192, 2);
  // NDR 400G per NIC 46-49: a one-GPU-per-node group uses one NIC.
  const double ndr = busbw(CollOp::kAllReduce, big, shape(2, 2, 1), h100) / 1e9;
  EXPECT_GE(ndr, 46);
  EXPECT_LE(ndr, 49);
  // All-to-all never aggregates NICs: 2 nodes x 8, S(n-g)/n of the data over one NIC.
  // At the ring's 24 GB/s a NIC: t ~ S/2 / 24 GB/s -> busbw = (15/16) S / t = 45 GB/s, far
  // below the 192 of a ring. NCCL's all-to-all reaches 0.84 of that NIC rate (measured
  // 37.8, NDmv4); DeepEP's own kernels (nccl false) the whole of it.
  EXPECT_NEAR(busbw(CollOp::kAllToAll, big, shape(16, 2, 8), a100) / 1e9, 37.8, 0.5);
  const double deepep =
      collective_time(CollOp::kAllToAll, big, shape(16, 2, 8), a100, false).time_s;
  EXPECT_NEAR(big * (15.0 / 16) / deepep / 1e9, 45, 1);
}

// Half-bandwidth size S_1/2 (busbw = half its large-message value): docs/model.md "Collectives and
// network" ~12 MB for a one-node H100 ring, 16-33 MB for A100; the H100 ring CSV crosses half (184
// GB/s) at 8 MiB. Located by bisection on the model: H100 must land in 8-30 MB. A100 lands at ~5 MB
// (the LL protocol's 15 us alpha wins up to a few MB); the stas00 A100 sweep has a ~100 us
// floor at 1-4 MB (single process driving 8 GPUs) and crosses half only at 32 MB, so the
// model is optimistic there: A100 is only required in 4-30 MB (known gap, see report).
TEST(CollectiveBandwidth, HalfBandwidthSizeIn10To30MB) {
  for (const HwProfile& base : {h100_profile(), a100_profile()}) {
    HwProfile hw = base;
    hw.node.nvls = false;
    const GroupShape g = shape(8, 1, 8);
    const double peak = busbw(CollOp::kAllReduce, 1e12, g, hw);
    double lo = 1e3, hi = 1e10;
    for (int i = 0; i < 100; ++i) {
      const double mid = std::sqrt(lo * hi);
      (busbw(CollOp::kAllReduce, mid, g, hw) < 0.5 * peak ? lo : hi) = mid;
    }
    EXPECT_GE(lo, hw.name == "test-a100" ? 4e6 : 8e6) << hw.name;
    EXPECT_LE(lo, 30e6) << hw.name;
  }
}

// nccl-tests sweeps (tests/data/measured/): modelled busbw within 4% for S >= 2 GiB (at
// 1 GiB the H100 RS/AG sweeps are still 5.5% below their plateau; the model reaches it
// sooner).
// Ring-only runs (NCCL_ALGO=RING, NVLS off) use the profile with nvls = false.
struct SweepCase {
  const char* file;
  CollOp op;
  bool a100;
  bool nvls;
  const char* busbw_column;
};

// The single-node H100 sweeps (NVLS on and off, ring reduce-scatter and all-gather).
const SweepCase kH100Sweeps[] = {
    {"nccl_allreduce_8xH100_1node_NVLSon_together.csv", CollOp::kAllReduce, false, true,
     "ip_busbw_GBps"},
    {"nccl_allreduce_8xH100_1node_NVLSoff_ring_together.csv", CollOp::kAllReduce, false, false,
     "ip_busbw_GBps"},
    {"nccl_reducescatter_8xH100_1node_ring_together.csv", CollOp::kReduceScatter, false, false,
     "ip_busbw_GBps"},
    {"nccl_allgather_8xH100_1node_ring_together.csv", CollOp::kAllGather, false, false,
     "ip_busbw_GBps"},
};

TEST(CollectiveBandwidth, MatchesNcclTestsSweepsAtLargeSizes) {
  std::vector<SweepCase> cases(std::begin(kH100Sweeps), std::end(kH100Sweeps));
  cases.push_back(
      {"nccl_allreduce_8xA100_1node_stas00.csv", CollOp::kAllReduce, true, false, "busbw_GBps"});
  for (const SweepCase& c : cases) {
    HwProfile hw = c.a100 ? a100_profile() : h100_profile();
    hw.node.nvls = c.nvls;
    int checked = 0;
    for (const auto& r : read_measured_csv(c.file)) {
      const double bytes = std::stod(r.at("size_bytes"));
      if (bytes < 2.0 * kGiB) continue;
      const double measured = std::stod(r.at(c.busbw_column));
      EXPECT_NEAR(busbw(c.op, bytes, shape(8, 1, 8), hw) / 1e9 / measured, 1.0, 0.04)
          << c.file << " @" << bytes;
      ++checked;
    }
    EXPECT_GE(checked, 3) << c.file;
  }
}

// Whole H100 sweeps (1 MiB - 8 GiB) with collectives.launch_overhead = 20 us, the launch
// floor of nccl-tests without CUDA graphs (reduce_scatter_perf at 128 B - 64 KiB: 34-36 us
// vs the table's Ring LL 6.6 + 7*0.6 = 10.8 us): every size within 35% (max seen 33%, at
// 1-16 MiB, where NCCL's protocol switch points differ from the cheapest-estimate choice);
// the small-message floor itself within 15%.
TEST(CollectiveBandwidth, H100SweepsWithLaunchOverheadWholeRange) {
  for (const SweepCase& c : kH100Sweeps) {
    HwProfile hw = h100_profile();
    hw.node.nvls = c.nvls;
    hw.collectives.launch_overhead_s = 20e-6;
    for (const auto& r : read_measured_csv(c.file)) {
      const double bytes = std::stod(r.at("size_bytes"));
      if (bytes < 1024.0 * 1024) continue;
      EXPECT_NEAR(busbw(c.op, bytes, shape(8, 1, 8), hw) / 1e9 / std::stod(r.at(c.busbw_column)),
                  1.0, 0.35)
          << c.file << " @" << bytes;
    }
  }
  HwProfile hw = h100_profile();
  hw.collectives.launch_overhead_s = 20e-6;
  for (const auto& r : read_measured_csv("nccl_reducescatter_8xH100_1node_ring_together.csv")) {
    const double bytes = std::stod(r.at("size_bytes"));
    if (bytes < 128 || bytes > 65536) continue;
    EXPECT_NEAR(collective_time(CollOp::kReduceScatter, bytes, shape(8, 1, 8), hw).time_s * 1e6 /
                    std::stod(r.at("ip_time_us")),
                1.0, 0.15)
        << bytes;
  }
}

// The shipped H100 profile carries `stepcast fit` entries for one node of 8 GPUs (NVLS
// allreduce, ring allgather and reduce_scatter): it reproduces every point of the measured
// sweeps it was fitted on from 1 MiB up (in-place and out-of-place times) within 6%, the
// fit's own worst range error being 5.3% (allgather below 8 MiB: within 15%, a
// latency-bound range). The model alone is 14-70% optimistic for NVLS between 1 and
// 256 MiB, which is why the entries are shipped.
TEST(CollectiveBandwidth, ShippedH100ProfileReproducesTheMeasuredSweeps) {
  const HwProfile hw = load_profile("h100-sxm", std::string(STEPCAST_SOURCE_DIR) + "/hw_profiles");
  const SweepCase cases[] = {
      {"nccl_allreduce_8xH100_1node_NVLSon_together.csv", CollOp::kAllReduce, false, true, ""},
      {"nccl_reducescatter_8xH100_1node_ring_together.csv", CollOp::kReduceScatter, false, false,
       ""},
      {"nccl_allgather_8xH100_1node_ring_together.csv", CollOp::kAllGather, false, false, ""},
  };
  for (const SweepCase& c : cases) {
    int checked = 0;
    for (const auto& r : read_measured_csv(c.file)) {
      const double bytes = std::stod(r.at("size_bytes"));
      if (bytes < 1024.0 * 1024) continue;
      const CollectiveChoice ch = collective_time(c.op, bytes, shape(8, 1, 8), hw);
      EXPECT_TRUE(ch.calibrated) << c.file << " @" << bytes;
      const double tol = c.op == CollOp::kAllGather && bytes < 8.0 * 1024 * 1024 ? 0.15 : 0.06;
      for (const char* col : {"ip_time_us", "oop_time_us"}) {
        EXPECT_NEAR(ch.time_s * 1e6 / std::stod(r.at(col)), 1.0, tol) << c.file << " @" << bytes;
      }
      ++checked;
    }
    EXPECT_GE(checked, 13) << c.file;
  }
}

// All-to-all over one H100 node (the MoE dispatch of an ep-8 group): the shipped profile's
// calibrated entry reproduces XLA's sm_90 table from 32 MiB up within 4% (7 sizes; at 256
// MiB 0.76 ms measured), where the model alone at intra_ring_busbw is 12% fast.
TEST(CollectiveBandwidth, ShippedH100ProfileReproducesXlaAllToAll) {
  const HwProfile hw = load_profile("h100-sxm", std::string(STEPCAST_SOURCE_DIR) + "/hw_profiles");
  int checked = 0;
  for (const auto& r : read_measured_csv("xla_collectives_perf_table_sm90_8gpu.csv")) {
    if (r.at("op") != "all-to-all" || r.at("devices_per_group") != "8") continue;
    const double bytes = std::stod(r.at("tensor_size_bytes_derived"));
    if (bytes < 32.0 * 1024 * 1024) continue;
    const CollectiveChoice ch = collective_time(CollOp::kAllToAll, bytes, shape(8, 1, 8), hw);
    EXPECT_TRUE(ch.calibrated) << bytes;
    EXPECT_NEAR(ch.time_s * 1e6 / std::stod(r.at("runtime_us_derived")), 1.0, 0.04) << bytes;
    ++checked;
  }
  EXPECT_EQ(checked, 7);
  // DeepEP's kernels are not NCCL's: no NCCL calibration applies to them.
  EXPECT_FALSE(collective_time(CollOp::kAllToAll, 256e6, shape(8, 1, 8), hw, false).calibrated);
}

// Two ranks in a node: each ring step is a send/recv between the same two GPUs, so the
// busbw is bounded by the measured send/recv rate (A100 sendrecv_perf 195 GB/s against 230
// for 8 GPUs). XLA's sm_90 table (an independent measurement, H100) has 2-GPU groups well
// below 8-GPU ones at 2 GiB: allgather 275, reduce_scatter 205, allreduce 250 GB/s against
// 352 / 329 / 402; the shipped H100 profile's p2p rate (314) stays an upper bound of those.
TEST(CollectiveBandwidth, TwoRankGroupsAreBoundedBySendRecv) {
  const HwProfile a100 = a100_profile();  // p2p 195, ring 232
  for (CollOp op : {CollOp::kAllReduce, CollOp::kAllGather, CollOp::kReduceScatter}) {
    EXPECT_NEAR(busbw(op, 8e9, shape(2, 1, 2), a100) / 1e9, 195, 1) << coll_op_name(op);
    EXPECT_NEAR(busbw(op, 8e9, shape(4, 1, 4), a100) / 1e9, 232, 1) << coll_op_name(op);
  }
  // Two ranks on two nodes: the NIC, not the NVLink bound, sets the rate.
  EXPECT_NEAR(busbw(CollOp::kAllReduce, 8e9, shape(2, 2, 1), a100) / 1e9, 24, 0.5);
  const HwProfile h100 =
      load_profile("h100-sxm", std::string(STEPCAST_SOURCE_DIR) + "/hw_profiles");
  const double xla_2gpu[3] = {250, 275, 205};  // allreduce, allgather, reduce_scatter at 2 GiB
  int i = 0;
  for (CollOp op : {CollOp::kAllReduce, CollOp::kAllGather, CollOp::kReduceScatter}) {
    const double b = busbw(op, 2 * kGiB, shape(2, 1, 2), h100) / 1e9;
    // (latency and launch floor take ~1% at 2 GiB)
    EXPECT_NEAR(b / (h100.collectives.p2p_intra_bw / 1e9), 1.0, 0.015) << coll_op_name(op);
    EXPECT_GE(b, xla_2gpu[i++]) << coll_op_name(op);
    EXPECT_LT(b, busbw(op, 2 * kGiB, shape(4, 1, 4), h100) / 1e9) << coll_op_name(op);
  }
}

// The shipped A100 profile carries `stepcast fit` entries for 8-GPU allreduce from 16 MiB
// to 1 GB (stas00's all_reduce_perf sweep): it reproduces that sweep there within 4% (the
// fit's range errors are 1.8% and 3.6%) and the independent Azure ND A100 v4 sweep within
// 7% (in-place busbw; Azure reads 6% above stas00 at 256 MiB). The model alone is 14-20%
// optimistic in this range, which is why the entries are shipped.
TEST(CollectiveBandwidth, ShippedA100ProfileReproducesTheMeasuredSweeps) {
  const HwProfile hw =
      load_profile("a100-80g-sxm", std::string(STEPCAST_SOURCE_DIR) + "/hw_profiles");
  struct Sweep {
    const char* file;
    const char* size_column;
    const char* busbw_column;
    double tol;
  };
  for (const Sweep& w :
       {Sweep{"nccl_allreduce_8xA100_1node_stas00.csv", "size_bytes", "busbw_GBps", 0.04},
        Sweep{"nccl_allreduce_busbw_inplace_8gpu_azure_ND_A100v4_H100v5_H200v5.csv",
              "size_bytes_interpreted", "busbw_GBps_ND_A100_v4", 0.07}}) {
    int checked = 0;
    for (const auto& r : read_measured_csv(w.file)) {
      const double bytes = std::stod(r.at(w.size_column));
      if (bytes < 16.0 * 1024 * 1024 || bytes >= 1e9) continue;
      const CollectiveChoice ch = collective_time(CollOp::kAllReduce, bytes, shape(8, 1, 8), hw);
      EXPECT_TRUE(ch.calibrated) << w.file << " @" << bytes;
      // nccl-tests busbw of an allreduce: 2 (n - 1) / n * S / t.
      const double modelled = 2.0 * 7 / 8 * bytes / ch.time_s / 1e9;
      EXPECT_NEAR(modelled / std::stod(r.at(w.busbw_column)), 1.0, w.tol)
          << w.file << " @" << bytes;
      ++checked;
    }
    EXPECT_EQ(checked, 6) << w.file;  // 16, 32, 64, 128, 256, 512 MiB
  }
}

// H200 NVLS by GPU count (stas00): 4 GPUs Ring 363, 5..8 NVLS 414/436/460/473 at 8 GiB; within 3%.
TEST(CollectiveBandwidth, MatchesNvlsByGpuCountTable) {
  const HwProfile hw = h100_profile();  // H200 shares H100's NVLink 4 / NVSwitch
  int checked = 0;
  for (const auto& r :
       read_measured_csv("nccltests_busbw_points_8xH200_NVLS_on_off_by_gpucount_stas00.csv")) {
    if (r.at("gpu") != "H200" || r.at("payload") != "8GiB" ||
        r.at("nvls_setting") != "default(NVLS allowed)")
      continue;
    const int n = std::stoi(r.at("num_gpus"));
    const CollectiveChoice ch = collective_time(CollOp::kAllReduce, 8 * kGiB, shape(n, 1, n), hw);
    EXPECT_EQ(std::string(algo_name(ch.algo)), r.at("algo_reported") == "NVLS" ? "nvls" : "ring");
    EXPECT_NEAR(busbw(CollOp::kAllReduce, 8 * kGiB, shape(n, 1, n), hw) / 1e9 /
                    std::stod(r.at("busbw_GBps")),
                1.0, 0.03)
        << n;
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

// NDmv4 (A100 + 8x HDR) points, NCCL 2.17: 1 node and 2x8 AG/AR at 1G/4G within 10%
// (A100 allgather reaches 254 GB/s on one node vs 232 for allreduce: one intra busbw for
// every op costs ~9%);
// 2x8 all-to-all (37.8 GB/s measured) within 3% (the all-to-all NIC share is taken from
// it; at the ring's per-NIC rate the model gave 45, 19% high); 1x8 within 10% (the model,
// at the allreduce ring's 230 GB/s, is 9% below the 254.7 measured). 2x1 (one GPU per node, one
// NIC): measured 15.5-18.7 GB/s against one HDR NIC's 24 GB/s, i.e. 2-rank runs reach only
// 65-78% of a NIC; the model is an upper bound there (measured <= model <= 1.6 measured).
TEST(CollectiveBandwidth, MatchesNdmv4Points) {
  const HwProfile hw = a100_profile();
  int checked = 0;
  for (const auto& r : read_measured_csv("nccl_collectives_points_NDmv4_A100_mscclpp.csv")) {
    if (r.at("metric") != "busbw_GBps") continue;
    const int nodes = std::stoi(r.at("nodes")), ppn = std::stoi(r.at("gpus_per_node"));
    const std::string coll = r.at("collective");
    const CollOp op = coll == "AllGather"   ? CollOp::kAllGather
                      : coll == "AllReduce" ? CollOp::kAllReduce
                                            : CollOp::kAllToAll;
    const double bytes = (r.at("message_size_label") == "4G" ? 4.0 : 1.0) * kGiB;
    const double ratio =
        busbw(op, bytes, shape(nodes * ppn, nodes, ppn), hw) / 1e9 / std::stod(r.at("value"));
    if (ppn == 1) {
      EXPECT_GE(ratio, 1.0) << coll;
      EXPECT_LE(ratio, 1.6) << coll;
    } else {
      EXPECT_NEAR(ratio, 1.0, op == CollOp::kAllToAll && nodes > 1 ? 0.03 : 0.10)
          << coll << " " << nodes << "x" << ppn;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}

// Send/recv over NVLink, 8xA100 (li-plus): 512 MiB and 1 GiB at ~193-195 GB/s; within 3%.
TEST(P2p, MatchesA100SendRecv) {
  const HwProfile hw = a100_profile();
  for (const auto& r : read_measured_csv("nccl_sendrecv_8xA100_1node_liplus.csv")) {
    const double bytes = std::stod(r.at("size_bytes"));
    if (bytes < 512.0 * 1024 * 1024) continue;
    EXPECT_NEAR(bytes / p2p_time_s(bytes, true, hw) / 1e9 / std::stod(r.at("oop_busbw_GBps")), 1.0,
                0.03);
  }
  // Across nodes one NIC: 1 GB at 24 GB/s + Simple latency 8.4 + 14 us.
  EXPECT_NEAR(p2p_time_s(1e9, false, hw), 22.4e-6 + 1e9 / 24e9, 1e-12);
}

TEST(GroupShapeTest, CountsNodesPpnAndPods) {
  // DP group, one GPU per node, pods of 16 GPUs: ranks 0,8 in pod 0; 16,24 in pod 1.
  const GroupShape g = group_shape({0, 8, 16, 24}, 8, 16);
  EXPECT_EQ(g.ranks, 4);
  EXPECT_EQ(g.nodes, 4);
  EXPECT_EQ(g.ranks_per_node, 1);
  EXPECT_EQ(g.pods, 2);
  const GroupShape t = group_shape({8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, 8, 0);
  EXPECT_EQ(t.nodes, 2);
  EXPECT_EQ(t.ranks_per_node, 8);
  EXPECT_EQ(t.pods, 1);
}

// Above a pod the oversubscription divides inter-node bandwidth: 1:7 -> a ppn=1 ring's
// busbw drops from 48 to 48/7 GB/s at large sizes.
TEST(CollectiveBandwidth, OversubscriptionAbovePodDividesInterNodeBandwidth) {
  HwProfile hw = h100_profile();
  hw.fabric.oversubscription = 7;
  const double in_pod = busbw(CollOp::kAllReduce, 1e11, shape(4, 4, 1, 1), hw);
  const double cross = busbw(CollOp::kAllReduce, 1e11, shape(4, 4, 1, 2), hw);
  EXPECT_NEAR(in_pod / 1e9, 48, 0.1);
  EXPECT_NEAR(cross / 1e9, 48.0 / 7, 0.05);
}

TEST(CollectiveCalibration, OverridesMatchingEntriesOnly) {
  HwProfile hw = h100_profile();
  hw.collectives.calibrated = {
      {"allreduce", CollAlgo::kNvls, 8, 1, 1e6, 1e9, 20e-6, 300e9, "test"}};
  const GroupShape g = shape(8, 1, 8);
  const CollectiveChoice c = collective_time(CollOp::kAllReduce, 1e8, g, hw);
  EXPECT_TRUE(c.calibrated);
  EXPECT_DOUBLE_EQ(c.time_s, 20e-6 + 1e8 * 1.75 / 300e9);
  EXPECT_FALSE(collective_time(CollOp::kAllReduce, 2e9, g, hw).calibrated);               // size
  EXPECT_FALSE(collective_time(CollOp::kAllGather, 1e8, g, hw).calibrated);               // op
  EXPECT_FALSE(collective_time(CollOp::kAllReduce, 1e8, shape(4, 1, 4), hw).calibrated);  // ranks
}

// An entry applies only where the model runs its algorithm (bandwidth_algorithm: highest
// busbw, ties to the lowest latency). 8 H100s, one node: NVLS 480 GB/s > Ring 370 > Tree
// 370 x 0.92, so NVLS; without NVLS, or with NVLS at 100 GB/s, Ring, and the NVLS entry gives
// way to the next matching one (Ring) or to the model.
TEST(CollectiveCalibration, EntriesApplyOnlyToTheAlgorithmTheModelRuns) {
  HwProfile hw = h100_profile();
  const GroupShape g = shape(8, 1, 8);
  EXPECT_EQ(bandwidth_algorithm(CollOp::kAllReduce, g, hw), CollAlgo::kNvls);
  EXPECT_EQ(bandwidth_algorithm(CollOp::kAllGather, g, hw), CollAlgo::kRing);
  EXPECT_EQ(bandwidth_algorithm(CollOp::kAllReduce, shape(4, 4, 1), hw), CollAlgo::kRing);
  // RS over one rank per node, NCCL >= 2.23: PAT and Ring share busbw, PAT has less latency.
  HwProfile pat = hw;
  pat.collectives.nccl_version = "2.23";
  EXPECT_EQ(bandwidth_algorithm(CollOp::kReduceScatter, shape(4, 4, 1), pat), CollAlgo::kPat);
  EXPECT_EQ(bandwidth_algorithm(CollOp::kAllToAll, shape(16, 2, 8), hw), CollAlgo::kDirect);

  const CollectiveCalib nvls{"allreduce", CollAlgo::kNvls, 8, 1, 0, 1e12, 30e-6, 400e9, "nvls"};
  const CollectiveCalib ring{"allreduce", CollAlgo::kRing, 8, 1, 0, 1e12, 40e-6, 300e9, "ring"};
  hw.collectives.calibrated = {nvls, ring};
  const double s = 1e8, f = 1.75;  // 2(n-1)/n, n = 8
  CollectiveChoice c = collective_time(CollOp::kAllReduce, s, g, hw);
  EXPECT_TRUE(c.calibrated);
  EXPECT_EQ(c.algo, CollAlgo::kNvls);
  EXPECT_DOUBLE_EQ(c.time_s, 30e-6 + s * f / 400e9);
  HwProfile off = hw;
  off.node.nvls = false;  // NVLS entry skipped, the Ring one answers
  c = collective_time(CollOp::kAllReduce, s, g, off);
  EXPECT_TRUE(c.calibrated);
  EXPECT_EQ(c.algo, CollAlgo::kRing);
  EXPECT_DOUBLE_EQ(c.time_s, 40e-6 + s * f / 300e9);
  HwProfile slow = hw;
  slow.collectives.nvls_busbw = 100e9;  // NVLS now slower than Ring: the model runs Ring
  EXPECT_EQ(collective_time(CollOp::kAllReduce, s, g, slow).algo, CollAlgo::kRing);
  EXPECT_TRUE(collective_time(CollOp::kAllReduce, s, g, slow).calibrated);
  off.collectives.calibrated = {nvls};  // nothing for Ring: the model (Ring Simple, 370 GB/s)
  c = collective_time(CollOp::kAllReduce, s, g, off);
  EXPECT_FALSE(c.calibrated);
  EXPECT_EQ(c.algo, CollAlgo::kRing);
  EXPECT_NEAR(c.time_s, 56e-6 + s * f / 370e9, 1e-12);  // 8.4 + 14 x 3.4 us
}

// NICs shared by GPUs (node.nics < node.gpus): every GPU of a node runs its collective at
// once in a symmetric plan, so a group gets ppn x nics/gpus NICs (at most all of them), and a
// GPU's own cross-node traffic (all-to-all, send/recv) nics/gpus of one. H100: 48 GB/s busbw
// per NIC; a one-rank-per-node ring at large sizes has busbw = NIC share:
//   8 NICs: 48; 2 NICs: 48 x 2/8 = 12; 1 NIC: 6. A full-node group (ppn 8) with 1 NIC: 48 x
//   min(1, 8/8) = 48; 16 NICs: ppn 1 gets 2 NICs, 96.
TEST(CollectiveBandwidth, SharedNicsDivideAmongTheGpusOfANode) {
  const GroupShape dp = shape(4, 4, 1);
  for (const auto& [nics, expect] : {std::pair{8, 48.0}, {2, 12.0}, {1, 6.0}, {16, 96.0}}) {
    HwProfile hw = h100_profile();
    hw.node.nics = nics;
    EXPECT_NEAR(busbw(CollOp::kAllReduce, 1e12, dp, hw) / 1e9, expect, 1e-3 * expect) << nics;
  }
  HwProfile one = h100_profile();
  one.node.nics = 1;
  EXPECT_NEAR(busbw(CollOp::kAllReduce, 1e12, shape(16, 2, 8), one) / 1e9, 48, 0.05);
  // Send/recv across nodes, 1 GB: Simple 8.4 + 14 us + S / (48 GB/s x 2/8 = 12 GB/s).
  HwProfile two = h100_profile();
  two.node.nics = 2;
  EXPECT_NEAR(p2p_time_s(1e9, false, two), 22.4e-6 + 1e9 / 12e9, 1e-12);
  // All-to-all, 2 nodes x 8: t = lat + S (n - g)/n / (48 GB/s x 37.8/45 / 8) at large S
  // (the NVLink part, S 7/16 / 370 GB/s, is smaller).
  const double s = 1e10;
  const double a2a = collective_time(CollOp::kAllToAll, s, shape(16, 2, 8), one).time_s;
  EXPECT_NEAR(a2a, (8.4 + 14) * 1e-6 + s * 0.5 / (6e9 * 37.8 / 45), 1e-9);
  // Flow mode costs a transfer alone (its flows share the NIC): a whole NIC per GPU.
  one.lone_transfers = true;
  EXPECT_NEAR(busbw(CollOp::kAllReduce, 1e12, dp, one) / 1e9, 48, 0.05);
  EXPECT_NEAR(p2p_time_s(1e9, false, one), 22.4e-6 + 1e9 / 48e9, 1e-12);
}

// Pipeline sends across pods pay the oversubscription as collectives do: ranks 0 and 64 with
// pods of 64 GPUs, 1:4 -> 48 / 4 = 12 GB/s; inside a pod (0 -> 8) 48 GB/s.
TEST(P2p, CrossPodSendsPayTheOversubscription) {
  HwProfile hw = h100_profile();
  hw.fabric.pod_gpus = 64;
  hw.fabric.oversubscription = 4;
  const GroupShape far = pair_shape(0, 64, 8, 64), near = pair_shape(0, 8, 8, 64);
  EXPECT_EQ(far.pods, 2);
  EXPECT_EQ(near.pods, 1);
  EXPECT_NEAR(p2p_time_s(1e9, far, hw), 22.4e-6 + 1e9 / 12e9, 1e-12);
  EXPECT_NEAR(p2p_time_s(1e9, near, hw), 22.4e-6 + 1e9 / 48e9, 1e-12);
  EXPECT_EQ(pair_shape(0, 3, 8, 64), pair_shape(true));
}

// fabric.latency per switch: an inter-node step crosses 1 (the rail's leaf) inside a pod, 5
// across pods (leaf, spine, core, spine, leaf). 4 nodes, ppn 1, L = 10 us: ring allreduce
// adds interSteps 2(N-1) = 6 steps x L; tree 2 log2(4) = 4 x L; across pods 5x that;
// send/recv 1 x L (5 across pods); nothing inside a node.
TEST(CollectiveLatency, FabricLatencyPerSwitchHop) {
  HwProfile base = h100_profile();
  HwProfile hw = base;
  hw.fabric.latency_s = 10e-6;
  auto delta_us = [&](CollAlgo a, const GroupShape& g) {
    return candidate_us(CollOp::kAllReduce, g, hw, a, CollProto::kSimple) -
           candidate_us(CollOp::kAllReduce, g, base, a, CollProto::kSimple);
  };
  EXPECT_NEAR(delta_us(CollAlgo::kRing, shape(4, 4, 1)), 60, 1e-6);
  EXPECT_NEAR(delta_us(CollAlgo::kTree, shape(4, 4, 1)), 40, 1e-6);
  EXPECT_NEAR(delta_us(CollAlgo::kRing, shape(4, 4, 1, 2)), 300, 1e-6);
  EXPECT_NEAR(delta_us(CollAlgo::kRing, shape(8, 1, 8)), 0, 1e-9);
  EXPECT_NEAR(delta_us(CollAlgo::kNvls, shape(8, 1, 8)), 0, 1e-9);
  EXPECT_NEAR(delta_us(CollAlgo::kNvlsTree, shape(16, 2, 8)), 20, 1e-6);  // 2 log2(2) x L
  EXPECT_NEAR((p2p_time_s(0, false, hw) - p2p_time_s(0, false, base)) * 1e6, 10, 1e-6);
  EXPECT_NEAR((p2p_time_s(0, pair_shape(0, 64, 8, 64), hw) -
               p2p_time_s(0, pair_shape(0, 64, 8, 64), base)) *
                  1e6,
              50, 1e-6);
  EXPECT_EQ(p2p_time_s(0, true, hw), p2p_time_s(0, true, base));
}

TEST(Collective, OneRankCostsNothing) {
  EXPECT_EQ(collective_time(CollOp::kAllReduce, 1e9, shape(1, 1, 1), h100_profile()).time_s, 0.0);
}

// Properties over random shapes and sizes: time monotone in bytes; more bandwidth (all of
// intra, NVLS, NIC x1.5) never slower; the cheapest never worse than any ring candidate.
TEST(CollectiveProperties, MonotoneBandwidthAndCheapest) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> node_count(1, 64), ppn_pick(0, 3), op_pick(0, 4);
  std::uniform_real_distribution<double> log_bytes(0, 11);
  const int ppns[] = {1, 2, 4, 8};
  for (int i = 0; i < 3000; ++i) {
    HwProfile hw = (i % 2) ? h100_profile() : a100_profile();
    const int nodes = node_count(rng), ppn = nodes == 1 ? 8 : ppns[ppn_pick(rng)];
    const GroupShape g = shape(nodes * ppn, nodes, ppn, nodes > 16 ? 2 : 1);
    hw.fabric.oversubscription = 3;
    const CollOp op = static_cast<CollOp>(op_pick(rng));
    const double s = std::pow(10.0, log_bytes(rng));
    const double t = collective_time(op, s, g, hw).time_s;
    EXPECT_GE(collective_time(op, s * 1.7, g, hw).time_s, t);
    HwProfile fast = hw;
    fast.collectives.intra_ring_busbw *= 1.5;
    fast.collectives.nvls_busbw *= 1.5;
    fast.collectives.nic_busbw *= 1.5;
    EXPECT_LE(collective_time(op, s, g, fast).time_s, t * (1 + 1e-12));
    for (const auto& c : collective_candidates(op, s, g, hw))
      if (c.algo == CollAlgo::kRing) {
        EXPECT_LE(t, c.time_s * (1 + 1e-12));
      }
  }
}

}  // namespace
}  // namespace stepcast
