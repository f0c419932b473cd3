// Collectives as sets of flows over a Topology, and a fluid (flow-level) simulation of a set
// of flows sharing links by max-min fairness (maxmin.h). The engine's flow mode can use
// collective_flows + MaxMinSolver directly; simulate_flows_s is the standalone reference.
#pragma once

#include <functional>
#include <vector>

#include "sim/network/maxmin.h"
#include "sim/network/topology.h"
#include "sim/program/program.h"

namespace stepcast {

struct FlowSpec {
  int src = 0, dst = 0;    // global GPU ids
  std::vector<int> links;  // Topology link ids (route(src, dst)), then links only copies cross
  double bytes = 0;        // bytes this flow moves
  // Per link (parallel to `links`; empty: 1 on each): how many identical flows — this one and
  // the symmetric copies it stands for, moving `bytes` each at the same time — cross it. The
  // flow is simulated once at the rate of one copy, using copies[i] x that rate of links[i]
  // (MaxMinSolver use), which is the copies' summed load on every link. A folded transfer
  // sets it (charge_copies below; engine.h).
  std::vector<double> copies = {};
};

// The steady-state flows of a ring collective (allreduce, reduce-scatter, allgather,
// broadcast) or of a uniform all-to-all over `ranks` (global GPU ids, ring order), with S =
// `bytes` as nccl-tests counts it (docs/model.md "Collectives and network"):
//  - ring: every rank sends S * F_ring to its successor, F_ring = 2(n-1)/n (allreduce),
//    (n-1)/n (RS/AG), 1 (broadcast, pipelined chain). A group over several nodes with
//    ppn > 1 ranks per node is split into C = min(ppn, NICs) channels as NCCL does: channel c
//    visits every node's members rotated to start at member c, so it enters each node on
//    member c's rail and leaves through it by PXN; each channel moves 1/C of the data.
//  - all-to-all: every ordered pair (i, j), i != j, moves S / n.
// Bandwidth only: latency terms stay with the analytical model (collective.cc).
std::vector<FlowSpec> collective_flows(CollOp op, const std::vector<int>& ranks, double bytes,
                                       const Topology& topo, bool pxn = true);

// Symmetric copies of a folded transfer (engine.h). A folded rank `rank` stands for the
// ranks `stands_for` (a pipeline stage: a contiguous block of R ranks starting at `rank`,
// sim/plan/layout.h); a transfer over `members` (a group containing `rank`, or a sender and
// its peer) stands for its translates by the offsets returned: the copy at offset d has
// member m + d. A member's local index is its distance from the start of its stage,
// (m - rank) mod R, every stage being R ranks; the translates of the members' local indices
// that tile [0, R) are forced (the smallest index not yet covered starts the next one), and
// for Megatron's rank order they are exactly the groups of the same kind (tp, cp, dp, ep,
// edp: arithmetic progressions from the stage start) or the same pairs of the other
// (tp, cp, dp) coordinates (pipeline sends, the embedding group). Ascending, 0 first; {0}
// when `stands_for` is just `rank`, or when the members do not tile the block (no symmetric
// copies derivable: the transfer is charged alone).
std::vector<int> fold_offsets(int rank, const std::vector<int>& stands_for,
                              const std::vector<int>& members);

// Charges a transfer's symmetric copies on its `flows`: for each offset d != 0,
// copy_flows(d) gives the copy's flows in the same order (copy flow i stands with flow i, or
// i mod flows.size() if the counts differ). Each link a copy flow crosses on which
// `charged[link]` is set (some simulated flow of the program crosses it) adds one to the
// matching flow's copies there, appending the link when the flow does not cross it itself
// (another simulated flow does: the copies' PXN hop onto the GPU that owns a shared NIC, a
// copy's pipeline send through a NIC a simulated dp ring uses). Every charged link then
// carries what it carries in full fidelity; links no simulated flow crosses carry only
// copies and, by symmetry, what a charged link carries.
void charge_copies(std::vector<FlowSpec>& flows, const std::vector<int>& offsets,
                   const std::function<std::vector<FlowSpec>(int)>& copy_flows,
                   const std::vector<char>& charged);

// Fluid simulation: all flows start at t = 0; rates are max-min fair shares of the link
// capacities, re-solved each time a flow finishes. Returns the time the last flow ends (s);
// `finish_s`, when given, receives each flow's end time.
double simulate_flows_s(const std::vector<FlowSpec>& flows, const Topology& topo,
                        std::vector<double>* finish_s = nullptr);
// The same on a caller's solver over the topology's links (no live flows; left with none), so
// that many small flow sets on a large topology do not rebuild the solver each time.
double simulate_flows_s(const std::vector<FlowSpec>& flows, MaxMinSolver& solver,
                        std::vector<double>* finish_s = nullptr);

}  // namespace stepcast
