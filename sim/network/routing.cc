// The flows of a transfer and the charging of its folded copies (routing.h).
#include "sim/network/routing.h"

#include "model/error.h"

namespace stepcast {

std::vector<FlowSpec> transfer_flows(const Transfer& x, const Topology& topo, bool pxn,
                                     int offset) {
  std::vector<int> moved = x.members;
  for (int& m : moved) m += offset;
  if (x.kind == TaskKind::kCollective) return collective_flows(x.coll, moved, x.bytes, topo, pxn);
  STEPCAST_CHECK(x.kind == TaskKind::kSend && moved.size() == 2,
                 "a transfer is a collective or a send from one rank to another");
  std::vector<FlowSpec> flows;
  if (moved[0] != moved[1] && x.bytes > 0)
    flows.push_back(FlowSpec{moved[0], moved[1], topo.route(moved[0], moved[1], pxn), x.bytes, {}});
  return flows;
}

void charge_folded_copies(const std::vector<std::vector<FlowSpec>*>& flows,
                          const std::vector<TransferCopies>& copies, const Topology& topo,
                          bool pxn) {
  std::vector<char> charged(topo.links().size(), 0);
  for (const std::vector<FlowSpec>* fs : flows)
    for (const FlowSpec& f : *fs)
      for (int l : f.links) charged[static_cast<size_t>(l)] = 1;
  for (size_t k = 0; k < flows.size(); ++k) {
    const TransferCopies& c = copies[k];
    if (c.offsets.size() <= 1) continue;
    charge_copies(
        *flows[k], c.offsets, [&](int d) { return transfer_flows(c.transfer, topo, pxn, d); },
        charged);
  }
}

}  // namespace stepcast
