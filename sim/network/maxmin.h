// Max-min fair bandwidth sharing (progressive filling), apart from any engine, in the
// style of SimGrid's LMM solver (Casanova et al., "Versatile, scalable and accurate
// simulation of distributed applications and platforms", JPDC 2014; docs/model.md "Collectives and
// network" "Contention"): every flow crossing a link shares it; each flow gets the largest rate
// such that sum of rates on every link <= its capacity and no flow can grow without shrinking one
// with a smaller (weight-normalised) rate.
//
// A flow may use a link `use` times its rate (default 1): a flow standing for `use` identical
// flows over that link (the symmetric copies of a folded transfer, sim/network/flows.h), as
// SimGrid's LMM weights a variable in a constraint. A link then holds sum of use x rate.
//
// Progressive filling: all unfixed flows grow together at rate share * weight; the link
// whose remaining capacity / unfixed (use x weight) is smallest saturates first, its flows
// are fixed at that share, capacities are reduced, repeat. Shares are non-decreasing over the
// iterations, so a lazy min-heap of link shares gives O((F*Lf + L) log L) per solve, with Lf
// links per flow.
//
// Incremental: add_flow / remove_flow / set_capacity mark the touched links; solve()
// re-solves only the connected components (flows <-> links) that contain a touched link and
// keeps every other rate. This is what an engine needs when one flow starts or ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stepcast {

class MaxMinSolver {
 public:
  using LinkId = int;
  using FlowId = int;

  MaxMinSolver() = default;
  explicit MaxMinSolver(const std::vector<double>& capacities_bytes_per_s);

  LinkId add_link(double capacity_bytes_per_s);
  void set_capacity(LinkId l, double capacity_bytes_per_s);
  // A flow over `links` (duplicates ignored: the first counts) with a share weight (> 0) and,
  // per link, its use (parallel to `links`, each > 0; empty: 1 on every link). A flow with
  // no links is unconstrained: its rate is +infinity. Ids of removed flows are reused.
  FlowId add_flow(const std::vector<LinkId>& links, double weight = 1.0,
                  const std::vector<double>& use = {});
  void remove_flow(FlowId f);

  // Re-solves what changed since the last solve.
  void solve();
  // Rate of a live flow as of the last solve(), bytes/s.
  double rate(FlowId f) const;
  // Sum of use x rate of the flows on a link (after solve()).
  double link_load(LinkId l) const;
  double capacity(LinkId l) const { return links_[static_cast<size_t>(l)].capacity; }
  const std::vector<LinkId>& flow_links(FlowId f) const;

  int link_count() const { return static_cast<int>(links_.size()); }
  int live_flow_count() const { return live_flows_; }
  bool alive(FlowId f) const;
  // Flows re-solved by the last solve() (for tests of incrementality and benchmarks).
  int last_solved_flows() const { return last_solved_; }
  // The flows re-solved by the last solve() (their rates may have changed; every other live
  // flow kept its rate). Lets a caller re-time only those flows (sim/engine/flow_network.cc).
  const std::vector<FlowId>& last_solved_flow_ids() const { return solved_flows_; }

 private:
  struct Link {
    double capacity = 0;
    std::vector<FlowId> flows;
    std::vector<double> use;  // parallel to flows: each flow's use of this link
    bool dirty = false;
  };
  struct Flow {
    std::vector<LinkId> links;  // ascending
    std::vector<double> use;    // parallel to links
    double weight = 1;
    double rate = 0;
    bool alive = false;
  };
  void mark(LinkId l);
  void solve_component(const std::vector<FlowId>& flows, const std::vector<LinkId>& links);

  std::vector<Link> links_;
  std::vector<Flow> flows_;
  std::vector<FlowId> free_ids_;
  std::vector<LinkId> dirty_links_;
  std::vector<FlowId> dirty_free_flows_;
  std::vector<FlowId>
      solved_flows_;  // last_solved_flow_ids()  // link-less flows added since the last solve
  int live_flows_ = 0;
  int last_solved_ = 0;
  // Scratch (sized to links_/flows_, reused between solves).
  std::vector<std::uint32_t> link_mark_, flow_mark_;
  std::uint32_t epoch_ = 0;
  std::vector<double> remaining_, weight_left_;
  std::vector<std::uint32_t> version_;
};

}  // namespace stepcast
