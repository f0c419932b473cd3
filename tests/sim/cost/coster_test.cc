// task_durations / comm_compute_slowdown (sim/cost/coster.cc).
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "model/error.h"
#include "sim/cost/coster.h"
#include "tests/sim/cost/test_profiles.h"

namespace stepcast {
namespace {

using testing::h100_profile;

Task make(TaskKind k) {
  Task t;
  t.kind = k;
  return t;
}

Task gemm4096() {
  Task g = make(TaskKind::kGemm);
  g.gemm = GemmShape{4096, 4096, 4096, 1, DType::kBf16, GemmLayout::kNN};
  g.flops = 2.0 * 4096 * 4096 * 4096;
  return g;
}

Task coll(CollOp op, int group, double bytes) {
  Task t = make(TaskKind::kCollective);
  t.coll = op;
  t.group = group;
  t.bytes = bytes;
  return t;
}

Task p2p(TaskKind k, int peer, double bytes) {
  Task t = make(k);
  t.peer = peer;
  t.bytes = bytes;
  return t;
}

// 16 GPUs on 2 nodes: group 0 is node 0's 8 GPUs, group 1 = {0, 8} spans both nodes.
Program two_node_program() {
  Program p;
  p.world_size = 16;
  p.gpus_per_node = 8;
  p.groups.push_back(Group{0, GroupKind::kTp, {0, 1, 2, 3, 4, 5, 6, 7}});
  p.groups.push_back(Group{1, GroupKind::kDp, {0, 8}});
  return p;
}

// Costs beyond kMaxTaskSeconds (or not finite) are bad input, reported with the task's
// label; within it, the nanosecond conversion is to_ns's.
TEST(TaskDurations, ImplausiblyLongTasksAreBadInput) {
  Task t = make(TaskKind::kGemm);
  t.label = "fwd.L0.qkv.mb0";
  EXPECT_EQ(task_ns(2.5, t), 2'500'000'000);
  EXPECT_EQ(task_ns(kMaxTaskSeconds, t), to_ns(kMaxTaskSeconds));
  for (double s : {2 * kMaxTaskSeconds, 1e300, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()}) {
    try {
      task_ns(s, t);
      ADD_FAILURE() << s << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("task 'fwd.L0.qkv.mb0' would take"), std::string::npos)
          << e.what();
    }
  }
  // End to end: a 2^50-token sequence makes every GEMM longer than the limit.
  const HwProfile hw = h100_profile();
  Program p;
  p.world_size = 1;
  p.gpus_per_node = 8;
  RankProgram r;
  Task g = make(TaskKind::kGemm);
  g.label = "huge";
  g.gemm = GemmShape{std::int64_t{1} << 50, 4096, 4096, 1, DType::kBf16, GemmLayout::kNN};
  g.flops = 2.0 * static_cast<double>(g.gemm.m) * 4096 * 4096;
  add_task(r, g);
  p.ranks.push_back(r);
  EXPECT_THROW(task_durations(p, hw), InputError);
}

// Two simulated ranks (0 and 8, on nodes 0 and 1) of a 16-GPU program: each task's duration
// equals its cost function converted with to_ns; same-key collectives share one cached value.
TEST(TaskDurations, MapsEveryKindToItsCostModel) {
  const HwProfile hw = h100_profile();
  Program p = two_node_program();
  RankProgram r0;
  r0.rank = 0;
  const Task g = gemm4096();
  r0.tasks.push_back(g);
  r0.tasks.push_back(coll(CollOp::kAllReduce, 0, 64e6));
  r0.tasks.push_back(coll(CollOp::kAllReduce, 0, 64e6));  // same key: cached
  r0.tasks.push_back(coll(CollOp::kReduceScatter, 1, 1e9));
  r0.tasks.push_back(p2p(TaskKind::kSend, 8, 32e6));  // other node
  r0.tasks.push_back(p2p(TaskKind::kRecv, 3, 32e6));  // same node
  Task alloc = make(TaskKind::kAlloc);
  alloc.bytes = 1e9;
  r0.tasks.push_back(alloc);
  r0.tasks.push_back(make(TaskKind::kFree));
  for (size_t i = 0; i < r0.tasks.size(); ++i) r0.tasks.mut(i).id = static_cast<int>(i);
  RankProgram r8 = r0;
  r8.rank = 8;
  r8.tasks.resize(1);
  p.ranks = {r0, r8};

  const Durations d = task_durations(p, hw);
  ASSERT_EQ(d.size(), 2u);
  ASSERT_EQ(d[0].size(), r0.tasks.size());
  ASSERT_EQ(d[1].size(), 1u);
  EXPECT_EQ(d[0][0], to_ns(compute_time_s(g, hw)));
  EXPECT_EQ(d[1][0], d[0][0]);
  const GroupShape tp = group_shape(p.groups[0].ranks, 8, 0);
  EXPECT_EQ(d[0][1], to_ns(collective_time(CollOp::kAllReduce, 64e6, tp, hw).time_s));
  EXPECT_EQ(d[0][2], d[0][1]);
  const GroupShape dps = group_shape({0, 8}, 8, 0);
  EXPECT_EQ(dps.nodes, 2);
  EXPECT_EQ(d[0][3], to_ns(collective_time(CollOp::kReduceScatter, 1e9, dps, hw).time_s));
  EXPECT_EQ(d[0][4], to_ns(p2p_time_s(32e6, false, hw)));
  EXPECT_EQ(d[0][5], to_ns(p2p_time_s(32e6, true, hw)));
  EXPECT_EQ(d[0][6], 0);
  EXPECT_EQ(d[0][7], 0);
  EXPECT_GT(d[0][4], d[0][5]);  // one NIC (48 GB/s) is slower than NVLink (370 GB/s)
}

// Ranks sharing one task list (program.h) reuse durations only when their remapped groups
// have the same shapes and their remapped peers are on the same side of node boundaries.
// Ranks 0, 1 and 2 share a list with an allreduce on group 0 and a send to peer 8:
//   rank 1 -> group 1 (8 GPUs, one node, as group 0), peer 9 (other node, as 8): reused;
//   rank 2 -> group 2 (8 GPUs over 2 nodes), peer 10: recomputed, the allreduce is slower;
//   rank 3 -> group 1, peer 3 (its own node): recomputed, the send is faster.
TEST(TaskDurations, SharedListsReuseDurationsOnlyForEqualShapes) {
  const HwProfile hw = h100_profile();
  Program p;
  p.world_size = 24;
  p.gpus_per_node = 8;
  p.groups.push_back(Group{0, GroupKind::kTp, {0, 1, 2, 3, 4, 5, 6, 7}});
  p.groups.push_back(Group{1, GroupKind::kTp, {0, 1, 2, 3, 4, 5, 6, 7}});
  p.groups.push_back(Group{2, GroupKind::kTp, {4, 5, 6, 7, 8, 9, 10, 11}});
  RankProgram r0;
  r0.rank = 0;
  Task ar = make(TaskKind::kCollective);
  ar.group = 0;
  ar.bytes = 256e6;
  add_task(r0, ar);
  Task send = make(TaskKind::kSend);
  send.peer = 8;
  send.bytes = 64e6;
  add_task(r0, send);
  auto copy = [&](int rank, int group, int peer) {
    RankProgram r = r0;
    r.rank = rank;
    r.group_remap = {{0, group}};
    r.peer_remap = {{8, peer}};
    return r;
  };
  p.ranks = {r0, copy(1, 1, 9), copy(2, 2, 10), copy(3, 1, 3)};
  std::vector<GroupShape> shapes;
  for (const Group& g : p.groups) shapes.push_back(group_shape(g.ranks, 8, 0));
  EXPECT_EQ(same_cost_ranks(p, shapes), (std::vector<size_t>{0, 0, 2, 3}));
  const Durations d = task_durations(p, hw);
  EXPECT_EQ(d[1], d[0]);
  EXPECT_GT(d[2][0], d[0][0]);  // allreduce across 2 nodes: NIC-bound
  EXPECT_EQ(d[2][1], d[0][1]);
  EXPECT_EQ(d[3][0], d[0][0]);
  EXPECT_LT(d[3][1], d[0][1]);  // send within the node: NVLink
}

// Pipeline sends that cross pods pay the oversubscription (collective.cc): pods of 16 GPUs,
// 1:4. Rank 0 sends to 8 (same pod: 48 GB/s), rank 1, sharing its task list, to 17 (next
// pod: 48 / 4 = 12 GB/s), so they are costed apart, each as p2p_time_s of its pair's shape.
TEST(TaskDurations, CrossPodSendsAreCostedWithTheirPods) {
  HwProfile hw = h100_profile();
  hw.fabric.pod_gpus = 16;
  hw.fabric.oversubscription = 4;
  Program p;
  p.world_size = 32;
  p.gpus_per_node = 8;
  RankProgram r0;
  r0.rank = 0;
  add_task(r0, p2p(TaskKind::kSend, 8, 64e6));
  RankProgram r1 = r0;
  r1.rank = 1;
  r1.peer_remap = {{8, 17}};
  p.ranks = {r0, r1};
  EXPECT_EQ(same_cost_ranks(p, {}, nullptr, 16), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(same_cost_ranks(p, {}, nullptr, 0), (std::vector<size_t>{0, 0}));  // one pod
  const Durations d = task_durations(p, hw);
  EXPECT_EQ(d[0][0], to_ns(p2p_time_s(64e6, pair_shape(0, 8, 8, 16), hw)));
  EXPECT_EQ(d[1][0], to_ns(p2p_time_s(64e6, pair_shape(1, 17, 8, 16), hw)));
  EXPECT_NEAR(to_s(d[1][0]), 22.4e-6 + 64e6 / 12e9, 1e-9);  // Simple: 8.4 + 14 us
}

// Slow GPUs (cluster.stragglers): the same 16-GPU program as above with rank 0 slowed.
// Expected values from the cost functions themselves (coster.h):
//   compute:   t / compute;
//   transfers: alpha + (t - alpha) / f, f = nic across nodes, nvlink inside the node.
// nic 0.5 slows the 2-node reduce-scatter and the cross-node send, not the one-node
// allreduce or the same-node recv; nvlink 0.25 the reverse. Rank 8 (nominal) keeps the
// nominal row even though it shares rank 0's task list.
TEST(TaskDurations, SlowGpuStretchesItsKernelsAndItsLinksTransfers) {
  const HwProfile hw = h100_profile();
  Program p = two_node_program();
  RankProgram r0;
  r0.rank = 0;
  const Task g = gemm4096();
  add_task(r0, g);
  add_task(r0, coll(CollOp::kAllReduce, 0, 64e6));
  add_task(r0, coll(CollOp::kReduceScatter, 1, 1e9));
  add_task(r0, p2p(TaskKind::kSend, 8, 32e6));
  add_task(r0, p2p(TaskKind::kRecv, 3, 32e6));
  RankProgram r8 = r0;  // shares r0's list
  r8.rank = 8;
  r8.peer_remap = {{8, 0}, {3, 11}};
  p.ranks = {r0, r8};
  p.folded = false;  // every rank simulated (2 of 16 here: the others have no tasks)
  const Durations nominal = task_durations(p, hw);

  const GroupShape tp = group_shape(p.groups[0].ranks, 8, 0);
  const GroupShape dps = group_shape(p.groups[1].ranks, 8, 0);
  auto slowed = [](double t, double alpha, double f) { return to_ns(alpha + (t - alpha) / f); };
  const double t_rs = collective_time(CollOp::kReduceScatter, 1e9, dps, hw).time_s;
  const double a_rs = collective_latency_s(CollOp::kReduceScatter, 1e9, dps, hw);
  const double t_ar = collective_time(CollOp::kAllReduce, 64e6, tp, hw).time_s;
  const double a_ar = collective_latency_s(CollOp::kAllReduce, 64e6, tp, hw);
  const double t_far = p2p_time_s(32e6, false, hw), a_far = p2p_latency_s(32e6, false, hw);
  const double t_near = p2p_time_s(32e6, true, hw), a_near = p2p_latency_s(32e6, true, hw);
  // The latencies are a real part of each time: 0 < alpha < t.
  for (auto [t, a] : {std::pair{t_rs, a_rs}, std::pair{t_ar, a_ar}, std::pair{t_far, a_far},
                      std::pair{t_near, a_near}}) {
    EXPECT_GT(a, 0);
    EXPECT_LT(a, t);
  }

  GpuSpeeds speeds(16);
  speeds[0] = GpuSpeed{0.8, 0.5, 1.0};
  Durations d = task_durations(p, hw, speeds);
  EXPECT_EQ(d[0][0], to_ns(compute_time_s(g, hw) / 0.8));
  EXPECT_EQ(d[0][1], nominal[0][1]);              // one node: NVLink, nominal
  EXPECT_EQ(d[0][2], slowed(t_rs, a_rs, 0.5));    // two nodes: the NIC
  EXPECT_EQ(d[0][3], slowed(t_far, a_far, 0.5));  // to node 1
  EXPECT_EQ(d[0][4], nominal[0][4]);              // same node
  EXPECT_EQ(d[1], nominal[1]);                    // rank 8 is nominal
  EXPECT_GT(d[0][2], nominal[0][2] * 3 / 2);      // bandwidth-bound: close to 2x

  speeds[0] = GpuSpeed{1.0, 1.0, 0.25};
  d = task_durations(p, hw, speeds);
  EXPECT_EQ(d[0][0], nominal[0][0]);
  EXPECT_EQ(d[0][1], slowed(t_ar, a_ar, 0.25));
  EXPECT_EQ(d[0][2], nominal[0][2]);
  EXPECT_EQ(d[0][3], nominal[0][3]);
  EXPECT_EQ(d[0][4], slowed(t_near, a_near, 0.25));

  // Flow mode slows the links instead: only the kernels change here.
  speeds[0] = GpuSpeed{0.5, 0.5, 0.5};
  d = task_durations(p, hw, speeds, /*slow_links=*/false);
  EXPECT_EQ(d[0][0], to_ns(compute_time_s(g, hw) / 0.5));
  for (size_t i = 1; i < 5; ++i) EXPECT_EQ(d[0][i], nominal[0][i]) << i;

  // All nominal: the same durations as without speeds.
  const Durations same = task_durations(p, hw, GpuSpeeds(16));
  for (size_t r = 0; r < p.ranks.size(); ++r) EXPECT_EQ(same[r], nominal[r]) << r;

  // A folded program stands for ranks it does not simulate: speeds there are refused.
  p.folded = true;
  speeds[0] = GpuSpeed{};
  speeds[9] = GpuSpeed{0.5, 1, 1};
  EXPECT_THROW(task_durations(p, hw, speeds), InvariantError);
}

// comm_hbm_share = min(1, 2 x busbw / (hbm x memory_bound_efficiency)), busbw = S/t x F.
// H100: 3.35e12 x 0.85 = 2.8475e12 B/s. An 8-rank allreduce of 1 GB in 4.73 ms: algbw
// 211.4 GB/s, F = 2 x 7/8, busbw 370 GB/s, share 740 / 2847.5 = 0.2599. A send of 48 MB in
// 1 ms: busbw 48 GB/s, share 0.0337.
TEST(CommHbmShare, TwoBytesOfHbmPerLinkByte) {
  const HwProfile hw = h100_profile();
  Program p;
  p.world_size = 16;
  p.groups.push_back(Group{0, GroupKind::kTp, {0, 1, 2, 3, 4, 5, 6, 7}});
  RankProgram rp;
  Task ar = make(TaskKind::kCollective);
  ar.coll = CollOp::kAllReduce;
  ar.group = 0;
  ar.bytes = 1e9;
  const double t_s = 1e9 * (2.0 * 7 / 8) / 370e9;
  const double hbm = hw.gpu.hbm_bytes_per_s * hw.compute.membound_eff;
  EXPECT_NEAR(comm_hbm_share(p, rp, ar, to_ns(t_s), hw), 2 * 370e9 / hbm, 1e-6);
  EXPECT_NEAR(2 * 370e9 / hbm, 0.2599, 1e-4);
  Task send = make(TaskKind::kSend);
  send.peer = 8;
  send.bytes = 48e6;
  EXPECT_NEAR(comm_hbm_share(p, rp, send, 1'000'000, hw), 2 * 48e9 / hbm, 1e-9);
  EXPECT_EQ(comm_hbm_share(p, rp, send, 10, hw), 1.0);  // capped
  EXPECT_EQ(comm_hbm_share(p, rp, make(TaskKind::kGemm), 1000, hw), 0.0);
  HwProfile no_hbm = hw;
  no_hbm.gpu.hbm_bytes_per_s = 0;
  EXPECT_EQ(comm_hbm_share(p, rp, send, 1'000'000, no_hbm), 0.0);
}

TEST(TaskDurations, MissingGroupIsAnInvariantError) {
  Program p;
  p.world_size = 8;
  RankProgram r;
  Task t = make(TaskKind::kCollective);
  t.group = 3;
  r.tasks.push_back(t);
  p.ranks.push_back(r);
  EXPECT_THROW(task_durations(p, h100_profile()), InvariantError);
}

// slowdown = comm_sms / (sms - comm_sms): H100 16 / (132 - 16) = 0.1379.
TEST(CommComputeSlowdown, SmShareModel) {
  HwProfile hw = h100_profile();
  EXPECT_NEAR(comm_compute_slowdown(hw), 16.0 / 116.0, 1e-15);
  hw.compute.comm_sms = 0;
  EXPECT_EQ(comm_compute_slowdown(hw), 0.0);
  hw.compute.comm_sms = 132;
  EXPECT_THROW(comm_compute_slowdown(hw), InvariantError);
}

// The SMs a communication task holds (coster.h comm_sms): NCCL's compute.comm_sms (16 on
// the H100 profile), DeepEP's dispatch/combine 20 (Buffer.num_sms) whatever comm_sms says,
// the ring exchange's copy engines none; nothing without a known SM count.
TEST(CommSms, NcclDeepEpAndCopyEngines) {
  HwProfile hw = h100_profile();
  Task nccl = make(TaskKind::kCollective);
  nccl.coll = CollOp::kAllToAll;
  nccl.stream = StreamKind::kEp;
  Task deepep = nccl;
  deepep.ep_kernels = true;
  Task ring = make(TaskKind::kCollective);
  ring.stream = StreamKind::kTpRing;
  Task send = make(TaskKind::kSend);
  send.stream = StreamKind::kPpSend;
  EXPECT_EQ(comm_sms(nccl, hw), 16);
  EXPECT_EQ(comm_sms(send, hw), 16);
  EXPECT_EQ(comm_sms(deepep, hw), 20);
  EXPECT_EQ(comm_sms(ring, hw), 0);
  hw.compute.comm_sms = 0;  // NCCL's taken away; DeepEP's kernels are its own
  EXPECT_EQ(comm_sms(nccl, hw), 0);
  EXPECT_EQ(comm_sms(deepep, hw), 20);
  hw.gpu.sms = 0;
  EXPECT_EQ(comm_sms(deepep, hw), 0);
  EXPECT_EQ(comm_sms(nccl, h100_profile()), 16);
}

}  // namespace
}  // namespace stepcast
