// Routing of a transfer (the engine's flow mode, engine.h): the flows a collective over its
// group's global membership or a send from one GPU to another moves over a Topology, and the
// charging of the symmetric copies a folded transfer stands for. The engine describes each
// transfer and calls these; it routes nothing itself.
#pragma once

#include <vector>

#include "sim/network/flows.h"
#include "sim/network/topology.h"
#include "sim/program/program.h"

namespace stepcast {

// A rendezvous run as flows: a collective (kind kCollective) or a send (kSend).
struct Transfer {
  TaskKind kind = TaskKind::kCollective;
  CollOp coll = CollOp::kAllReduce;  // a collective's op
  std::vector<int> members;          // collective: its group's global ranks, ring order;
                                     // send: {src, dst}
  double bytes = 0;                  // the task's bytes (collective: the buffer S)
};

// The flows of `x`'s copy at fold offset `offset` (every member + offset; 0: `x` itself): a
// collective's collective_flows over its members, a send's one flow over route(src, dst) —
// none for a send to itself or of no bytes. `pxn`: NCCL PXN routing (Topology::route).
std::vector<FlowSpec> transfer_flows(const Transfer& x, const Topology& topo, bool pxn,
                                     int offset = 0);

// What a simulated transfer's folded copies need: the transfer and its fold offsets
// (fold_offsets of its members: 0 first, then one per copy).
struct TransferCopies {
  Transfer transfer;
  std::vector<int> offsets;
};

// Folded copies (engine.h): flows[k], the flows of copies[k].transfer, stand for its
// translates by copies[k].offsets; each copy's flows are charged (charge_copies) on every
// link some flow of `flows` crosses.
void charge_folded_copies(const std::vector<std::vector<FlowSpec>*>& flows,
                          const std::vector<TransferCopies>& copies, const Topology& topo,
                          bool pxn);

}  // namespace stepcast
