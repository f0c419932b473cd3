// Flow mode setup (flow_mode.h).
#include "sim/engine/flow_mode.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "model/error.h"
#include "sim/cost/cost.h"
#include "sim/cost/coster.h"
#include "sim/network/topology.h"

namespace stepcast {
namespace {

constexpr double kRelStep = 1e-3;  // one-sided difference width for dt/dS

// alpha = t(S) - S * dt/dS with dt/dS = (t(S) - t(S(1 - eps))) / (eps S).
template <class F>
double latency_by_difference(double bytes, F time_s) {
  const double t = time_s(bytes);
  if (!(bytes > 0)) return t;
  const double lo = time_s(bytes * (1.0 - kRelStep));
  return t - (t - lo) / kRelStep;
}

double collective_latency_s(CollOp op, double bytes, const GroupShape& g, const HwProfile& hw) {
  const CollectiveChoice c = collective_time(op, bytes, g, hw);
  if (g.ranks <= 1) return 0.0;
  if (c.calibrated || !(bytes > 0))
    return latency_by_difference(bytes, [&](double b) { return collective_time(op, b, g, hw).time_s; });
  // The chosen (algorithm, protocol) is linear in S: its slope from two sizes.
  auto same = [&](double b) {
    for (const CollectiveChoice& k : collective_candidates(op, b, g, hw))
      if (k.algo == c.algo && k.proto == c.proto) return k.time_s;
    return std::nan("");
  };
  const double hi = same(bytes), lo = same(bytes * (1.0 - kRelStep));
  if (!std::isfinite(hi) || !std::isfinite(lo))
    return latency_by_difference(bytes, [&](double b) { return collective_time(op, b, g, hw).time_s; });
  return c.time_s - bytes * (hi - lo) / (kRelStep * bytes);
}

}  // namespace

HwProfile flow_cost_profile(const HwProfile& hw) {
  HwProfile out = hw;
  out.fabric.oversubscription = 1.0;
  return out;
}

Durations task_latencies(const Program& p, const HwProfile& hw) {
  const std::vector<GroupShape> shapes = group_shapes(p, hw);
  std::map<std::tuple<int, int, double>, TimeNs> coll_cache;
  std::map<std::tuple<bool, double>, TimeNs> p2p_cache;
  return rows_per_cost_class(p, shapes, [&](const RankProgram& rp, std::vector<TimeNs>& row) {
    for (size_t i = 0; i < rp.tasks.size(); ++i) {
      const Task& t = rp.tasks[i];
      if (t.kind == TaskKind::kCollective) {
        const int group = rp.group_of(t);
        STEPCAST_CHECK(group >= 0 && group < static_cast<int>(shapes.size()),
                       "collective '" + t.label + "' names a missing group");
        const auto key = std::make_tuple(group, static_cast<int>(t.coll), t.bytes);
        auto it = coll_cache.find(key);
        if (it == coll_cache.end()) {
          const GroupShape& g = shapes[static_cast<size_t>(group)];
          const double total = collective_time(t.coll, t.bytes, g, hw).time_s;
          const TimeNs total_ns = task_ns(total, t);
          const double a = std::clamp(collective_latency_s(t.coll, t.bytes, g, hw), 0.0, total);
          it = coll_cache.emplace(key, std::min(to_ns(a), total_ns)).first;
        }
        row[i] = it->second;
      } else if (t.kind == TaskKind::kSend || t.kind == TaskKind::kRecv) {
        const bool same_node = rp.rank / p.gpus_per_node == rp.peer_of(t) / p.gpus_per_node;
        const auto key = std::make_tuple(same_node, t.bytes);
        auto it = p2p_cache.find(key);
        if (it == p2p_cache.end()) {
          auto time_s = [&](double b) { return p2p_time_s(b, same_node, hw); };
          const double total = time_s(t.bytes);
          const TimeNs total_ns = task_ns(total, t);
          const double a = std::clamp(latency_by_difference(t.bytes, time_s), 0.0, total);
          it = p2p_cache.emplace(key, std::min(to_ns(a), total_ns)).first;
        }
        row[i] = it->second;
      }
    }
  });
}

Timeline simulate_flow_mode(const Program& p, const HwProfile& hw, const EngineOptions& options) {
  STEPCAST_CHECK(p.gpus_per_node == hw.node.gpus,
                 "flow mode: program and profile disagree on GPUs per node");
  const HwProfile cost_hw = flow_cost_profile(hw);
  const Topology topo(hw, std::max(1, p.world_size));
  const Durations durations = task_durations(p, cost_hw);
  const Durations latency = task_latencies(p, cost_hw);
  FlowMode fm;
  fm.topology = &topo;
  fm.latency_ns = &latency;
  EngineOptions eo = options;
  eo.flow = &fm;
  return simulate(p, durations, eo);
}

}  // namespace stepcast
