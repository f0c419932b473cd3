// Task durations for the engine: maps every task of a Program to its cost-model time
// (compute.cc for compute kinds, collective.cc for collectives and send/recv, 0 for
// alloc/free). Pure function of (Program, HwProfile); the engine never sees the profile.
#pragma once

#include <cstddef>
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

// Per simulated rank, the index of an earlier rank whose tasks cost exactly the same (same
// shared task list; each group the list names, remapped, has the same shape; each peer,
// remapped, is in the same node or not alike), or its own index. `shapes` per group.
std::vector<size_t> same_cost_ranks(const Program& p, const std::vector<GroupShape>& shapes);

// SM interference: the fraction by which a compute kernel slows while a communication
// kernel of the same GPU runs. NCCL kernels hold whole SMs (NETWORK.md pitfall 1: ~16 on a
// DGX with 8 NICs); a compute kernel then has sms - comm_sms SMs left, so if it was
// SM-bound it takes sms/(sms - comm_sms) as long:
//   slowdown = comm_sms / (sms - comm_sms)     (H100: 16 / (132 - 16) = 13.8%).
// HBM contention (both slow when memory-bound) is not included. 0 when sms is unknown.
double comm_compute_slowdown(const HwProfile& hw);

}  // namespace stepcast
