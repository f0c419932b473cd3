// Collectives as sets of flows over a Topology, and a fluid (flow-level) simulation of a set
// of flows sharing links by max-min fairness (maxmin.h). The engine's flow mode can use
// collective_flows + MaxMinSolver directly; simulate_flows_s is the standalone reference.
#pragma once

#include <vector>

#include "sim/network/maxmin.h"
#include "sim/network/topology.h"
#include "sim/program/program.h"

namespace stepcast {

struct FlowSpec {
  int src = 0, dst = 0;    // global GPU ids
  std::vector<int> links;  // Topology link ids (route(src, dst))
  double bytes = 0;        // bytes this flow moves
  // Identical flows it stands for (>= 1), moving `bytes` each over the same links at the
  // same time: simulated as one flow of copies x bytes with max-min weight `copies`, which
  // gets exactly the copies' summed share of every link they share. The engine sets it for
  // the symmetric copies of a folded rank that share its NIC (engine.h); 1 otherwise.
  double copies = 1;
};

// The steady-state flows of a ring collective (allreduce, reduce-scatter, allgather,
// broadcast) or of a uniform all-to-all over `ranks` (global GPU ids, ring order), with S =
// `bytes` as nccl-tests counts it (NETWORK.md):
//  - ring: every rank sends S * F_ring to its successor, F_ring = 2(n-1)/n (allreduce),
//    (n-1)/n (RS/AG), 1 (broadcast, pipelined chain). A group over several nodes with
//    ppn > 1 ranks per node is split into C = min(ppn, NICs) channels as NCCL does: channel c
//    visits every node's members rotated to start at member c, so it enters each node on
//    member c's rail and leaves through it by PXN; each channel moves 1/C of the data.
//  - all-to-all: every ordered pair (i, j), i != j, moves S / n.
// Bandwidth only: latency terms stay with the analytical model (collective.cc).
std::vector<FlowSpec> collective_flows(CollOp op, const std::vector<int>& ranks, double bytes,
                                       const Topology& topo, bool pxn = true);

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
