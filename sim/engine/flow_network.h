// The network model the engine's flow mode talks to (docs/model.md "Engine", "Collectives and
// network" "Contention"): a communication task becomes a *transfer* — a set of flows over links —
// that starts moving bytes at a given instant; concurrent flows share every link by max-min
// fairness (sim/network/maxmin.h), re-solved whenever a flow starts or ends; a transfer is
// done when its last flow is. The engine only calls start / next_completion / advance, so the
// solver stays apart from it (and another model — packet level, say — could replace it).
//
// Integer time: a flow with `left` bytes at rate r (bytes/s) as of instant t0 is due at
// t0 + ceil(left / r * 1e9) ns (at most 1 ns late, never early). Flows' progress is brought up
// to date only when their rate changes (lazily, per re-solved component), and due times sit
// in a min-heap keyed (time, flow id) with a version per flow to drop stale entries, so an
// event costs O(flows re-solved * log heap). Deterministic: same calls, same results.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "model/units.h"
#include "sim/engine/link_util.h"
#include "sim/network/flows.h"
#include "sim/network/maxmin.h"
#include "sim/network/topology.h"

namespace stepcast {

inline constexpr TimeNs kNoEvent = std::numeric_limits<TimeNs>::max();

class NetworkModel {
 public:
  virtual ~NetworkModel() = default;
  // A transfer whose flows begin moving bytes at instant t (>= every earlier call's t). Each
  // flow moves spec.bytes * bytes_scale bytes over spec.links, with spec.copies identical
  // flows on each link (flows.h). `flows` must outlive the transfer. Returns the transfer's id
  // (0, 1, 2, ... in call order since reset). A transfer without flows or bytes is done at t
  // (reported by the next advance(t)).
  virtual int start(TimeNs t, const std::vector<FlowSpec>& flows, double bytes_scale) = 0;
  // Earliest instant a live transfer may complete (kNoEvent when none is live).
  virtual TimeNs next_completion() = 0;
  // Moves time to t (== next_completion()) and appends the transfers completed at t.
  virtual void advance(TimeNs t, std::vector<int>& completed) = 0;
};

// Max-min fair sharing over a Topology's links (flow level, as SimGrid's LMM model).
class MaxMinNetwork final : public NetworkModel {
 public:
  // Forgets every flow and transfer; links and capacities from `topo`.
  void reset(const Topology& topo);
  int start(TimeNs t, const std::vector<FlowSpec>& flows, double bytes_scale) override;
  TimeNs next_completion() override;
  void advance(TimeNs t, std::vector<int>& completed) override;

  std::uint64_t solves() const { return solves_; }  // re-solves done (benchmarks)
  // Utilisation per link class (kLinkClassNames: NVLink, NIC, leaf uplink, pod uplink) =
  // bytes/s in use over the class's total capacity, sampled whenever rates change (one sample
  // per instant: the state after it). For trace counters.
  const std::vector<LinkUtilSample>& utilization() const { return util_; }
  int live_flows() const { return live_; }

 private:
  struct FlowState {
    const FlowSpec* spec = nullptr;  // links and copies (for utilisation); the caller's
    double left = 0;                 // bytes still to move as of `since`
    double rate = 0;                 // bytes/s since `since`
    TimeNs since = 0;
    int transfer = -1;
    std::uint32_t version = 0;
  };
  struct Due {
    TimeNs t;
    int flow;
    std::uint32_t version;
  };
  struct Later {
    bool operator()(const Due& a, const Due& b) const {
      return a.t != b.t ? a.t > b.t : a.flow > b.flow;
    }
  };
  void resolve();  // re-solve what changed at now_ and re-time those flows

  MaxMinSolver solver_;
  std::vector<FlowState> flows_;    // by solver flow id (ids are reused)
  std::vector<int> transfer_left_;  // flows not done, per transfer
  std::vector<int> done_now_;       // transfers with no flows, done at now_
  std::vector<Due> heap_;
  void add_rate(const FlowState& s, double delta);
  void sample();
  std::vector<int> link_class_;  // per link id: 0 NVLink, 1 NIC, 2 leaf, 3 pod
  std::array<double, kLinkClasses> class_capacity_{};
  std::array<double, kLinkClasses> class_rate_{};
  std::vector<LinkUtilSample> util_;
  TimeNs now_ = 0;
  bool dirty_ = false;
  std::uint64_t solves_ = 0;
  int live_ = 0;
};

}  // namespace stepcast
