// Task durations for the engine: maps every task of a Program to its cost-model time
// (compute.cc for compute kinds, collective.cc for collectives and send/recv, 0 for
// alloc/free). Pure function of (Program, HwProfile); the engine never sees the profile.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "sim/cluster/profile.h"
#include "sim/cost/cost.h"
#include "sim/engine/engine.h"
#include "sim/program/program.h"

namespace stepcast {

// Durations indexed like p.ranks[r].tasks. Group shapes are computed once per group
// (node = rank / p.gpus_per_node, pod = rank / hw.fabric.pod_gpus) and collective times are
// cached per (op, group, bytes), so a 1M-task program costs ~ one hash lookup per task.
// Ranks sharing a task list (program.h) whose groups have the same shapes and whose peers
// sit on the same side of node boundaries get a copy of the first such rank's durations.
Durations task_durations(const Program& p, const HwProfile& hw);

// A task's cost in integer nanoseconds. Throws InputError (bad input: the model, batch or
// profile is implausibly large) when it is not finite or exceeds kMaxTaskSeconds, so no sum
// of durations can overflow the engine's int64 clock.
inline constexpr double kMaxTaskSeconds = 1e6;
TimeNs task_ns(double seconds, const Task& t);

// Per simulated rank, the index of an earlier rank whose tasks cost exactly the same (same
// shared task list; each group the list names, remapped, has the same shape; each peer,
// remapped, is in the same node or not alike), or its own index. `shapes` per group.
std::vector<size_t> same_cost_ranks(const Program& p, const std::vector<GroupShape>& shapes);

// The shape of every group of `p` (node = rank / p.gpus_per_node, pod = rank /
// hw.fabric.pod_gpus), indexed by group id.
std::vector<GroupShape> group_shapes(const Program& p, const HwProfile& hw);

// One row per simulated rank, filled by fill(rank, row) (row sized to the rank's tasks, zeroed)
// for the first rank of each same_cost_ranks class and shared by the others.
Durations rows_per_cost_class(const Program& p, const std::vector<GroupShape>& shapes,
                              const std::function<void(const RankProgram&, std::vector<TimeNs>&)>& fill);

// SM interference: the fraction by which a compute kernel slows while a communication
// kernel of the same GPU runs. NCCL kernels hold whole SMs (NETWORK.md pitfall 1: ~16 on a
// DGX with 8 NICs); a compute kernel then has sms - comm_sms SMs left, so if it was
// SM-bound it takes sms/(sms - comm_sms) as long:
//   slowdown = comm_sms / (sms - comm_sms)     (H100: 16 / (132 - 16) = 13.8%).
// 0 when sms is unknown. HBM contention (both slow when memory-bound) is
// EngineOptions::comm_hbm_share (comm_hbm_share below).
double comm_compute_slowdown(const HwProfile& hw);

// HBM share of a communication task for EngineOptions::comm_hbm_share: its kernels read from
// HBM what they send and write to HBM what they receive, 2 bytes of HBM traffic per byte on
// the link, and a GPU's link bytes per second is the nccl-tests busbw (NETWORK.md: busbw =
// S / t x F(op, n), F = 1 for send/recv), so against the achievable HBM bandwidth
//   share = min(1, 2 x busbw / (hbm_bandwidth x memory_bound_efficiency)).
// H100 (3.35 TB/s x 0.85 = 2.85 TB/s): NVLink ring allreduce at 370 GB/s busbw 0.26; one
// NDR NIC at 48 GB/s 0.034. 0 without an HBM bandwidth in the profile, for t <= 0 or one rank.
double comm_hbm_share(const Program& p, const RankProgram& rp, const Task& t, TimeNs duration,
                      const HwProfile& hw);

}  // namespace stepcast
