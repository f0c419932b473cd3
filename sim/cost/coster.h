// Task durations for the engine: maps every task of a Program to its cost-model time
// (compute.cc for compute kinds, collective.cc for collectives and send/recv, 0 for
// alloc/free). Pure function of (Program, HwProfile); the engine never sees the profile.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "sim/cluster/profile.h"
#include "sim/cost/cost.h"
#include "sim/program/durations.h"
#include "sim/program/program.h"

namespace stepcast {

// Durations indexed like p.ranks[r].tasks. Group shapes are computed once per group
// (node = rank / p.gpus_per_node, pod = rank / hw.fabric.pod_gpus) and collective times are
// cached per (op, group, bytes), so a 1M-task program costs ~ one hash lookup per task.
// Ranks sharing a task list (program.h) whose groups have the same shapes and whose peers
// sit on the same side of node boundaries get a copy of the first such rank's durations.
//
// `speeds` (per global rank, empty: all nominal; sim/cluster/profile.h GpuSpeed): a slow GPU's
// kernels take time / compute; with `slow_links`, the bandwidth part of its transfers is
// divided by its nic factor when they cross nodes (a collective whose group spans nodes, a
// send/recv to another node) and by its nvlink factor inside its node, the latency part
// (collective_latency_s below) unchanged:
//   t' = alpha + (t - alpha) / f.
// A ring or tree is as fast as its slowest link, and the engine runs a rendezvous for the
// longest of its members' durations, so giving the slow GPU's own row the slow time slows
// every collective and transfer it takes part in, and no other. Flow mode passes
// slow_links = false and slows the links themselves (flow_mode.h). Ranks with a speed of
// their own never share a row. Needs an unfolded program when any speed is not nominal.
Durations task_durations(const Program& p, const HwProfile& hw, const GpuSpeeds& speeds = {},
                         bool slow_links = true);

// The latency (alpha) part of a collective's or a send/recv's analytical time, by the local
// alpha-beta decomposition of the chosen cost: alpha = t(S) - S * dt/dS (exact for every piece
// of the model, alpha + S * F / busbw per algorithm and protocol; dt/dS is taken on the
// chosen algorithm/protocol, or by a one-sided difference of relative width 1e-3 for
// calibrated tables and send/recv). Not clamped.
double collective_latency_s(CollOp op, double bytes, const GroupShape& g, const HwProfile& hw,
                            bool nccl = true);
double p2p_latency_s(double bytes, const GroupShape& pair, const HwProfile& hw);
inline double p2p_latency_s(double bytes, bool same_node, const HwProfile& hw) {
  return p2p_latency_s(bytes, pair_shape(same_node), hw);
}

// A task's cost in integer nanoseconds. Throws InputError (bad input: the model, batch or
// profile is implausibly large) when it is not finite or exceeds kMaxTaskSeconds, so no sum
// of durations can overflow the engine's int64 clock.
inline constexpr double kMaxTaskSeconds = 1e6;
TimeNs task_ns(double seconds, const Task& t);

// Per simulated rank, the index of an earlier rank whose tasks cost exactly the same (same
// shared task list; each group the list names, remapped, has the same shape; each peer,
// remapped, is in the same node and the same pod (pods of `pod_gpus`, 0: one) or not alike),
// or its own index. `shapes` per group. Ranks marked in `own_row` (if given, indexed like
// p.ranks) are always their own class.
std::vector<size_t> same_cost_ranks(const Program& p, const std::vector<GroupShape>& shapes,
                                    const std::vector<bool>* own_row = nullptr, int pod_gpus = 0);

// The shape of every group of `p` (node = rank / p.gpus_per_node, pod = rank /
// hw.fabric.pod_gpus), indexed by group id.
std::vector<GroupShape> group_shapes(const Program& p, const HwProfile& hw);

// One row per simulated rank, filled by fill(rank, row) (row sized to the rank's tasks, zeroed)
// for the first rank of each same_cost_ranks class and shared by the others.
Durations rows_per_cost_class(
    const Program& p, const std::vector<GroupShape>& shapes,
    const std::function<void(const RankProgram&, std::vector<TimeNs>&)>& fill,
    const std::vector<bool>* own_row = nullptr, int pod_gpus = 0);

// SM interference: the fraction by which a compute kernel slows while a communication
// kernel of the same GPU runs. NCCL kernels hold whole SMs (docs/model.md, "Pitfalls the model
// accounts for" 1: ~16 on a DGX with 8 NICs); a compute kernel then has sms - comm_sms SMs left, so
// if it was SM-bound it takes sms/(sms - comm_sms) as long:
//   slowdown = comm_sms / (sms - comm_sms)     (H100: 16 / (132 - 16) = 13.8%).
// 0 when sms is unknown. HBM contention (both slow when memory-bound) is
// EngineOptions::comm_hbm_share (comm_hbm_share below).
double comm_compute_slowdown(const HwProfile& hw);

// The SMs DeepEP's dispatch and combine kernels hold: `Buffer.num_sms`, default 20, even
// (DeepEP deep_ep/buffer.py; Megatron-Core's moe_flex_dispatcher_num_sms, None -> DeepEP's
// default; DeepSeek-V3 technical report section 3.2.2: 20 SMs in 10 channels).
inline constexpr int kDeepEpSms = 20;

// The SMs a communication task's kernels hold while it runs (EngineOptions::comm_sms; the
// slowdown beside them is comm_sms / (sms - comm_sms) as above):
//  - NCCL's: compute.comm_sms;
//  - DeepEP's dispatch/combine (Task::ep_kernels): kDeepEpSms, whatever compute.comm_sms;
//  - Transformer Engine's ring exchange (StreamKind::kTpRing): 0, it moves its chunks with
//    copy engines (userbuffers' peer-to-peer copies), which leaves every SM to the GEMM it
//    overlaps.
// 0 when the GPU's SM count is unknown.
int comm_sms(const Task& t, const HwProfile& hw);

// HBM share of a communication task for EngineOptions::comm_hbm_share: its kernels read from
// HBM what they send and write to HBM what they receive, 2 bytes of HBM traffic per byte on
// the link, and a GPU's link bytes per second is the nccl-tests busbw (docs/model.md "Collectives
// and network": busbw = S / t x F(op, n), F = 1 for send/recv), so against the achievable HBM
// bandwidth
//   share = min(1, 2 x busbw / (hbm_bandwidth x memory_bound_efficiency)).
// H100 (3.35 TB/s x 0.85 = 2.85 TB/s): NVLink ring allreduce at 370 GB/s busbw 0.26; one
// NDR NIC at 48 GB/s 0.034. 0 without an HBM bandwidth in the profile, for t <= 0 or one rank.
double comm_hbm_share(const Program& p, const RankProgram& rp, const Task& t, TimeNs duration,
                      const HwProfile& hw);

}  // namespace stepcast
