// Flow mode setup (flow_mode.h).
#include "sim/report/flow_mode.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "model/error.h"
#include "sim/cost/cost.h"
#include "sim/cost/coster.h"
#include "sim/network/topology.h"

namespace stepcast {

HwProfile flow_cost_profile(const HwProfile& hw) {
  HwProfile out = hw;
  out.fabric.oversubscription = 1.0;
  out.lone_transfers = true;
  return out;
}

Durations task_latencies(const Program& p, const HwProfile& hw) {
  const std::vector<GroupShape> shapes = group_shapes(p, hw);
  std::map<std::tuple<int, int, double, bool>, TimeNs> coll_cache;
  std::map<std::tuple<int, int, double>, TimeNs> p2p_cache;  // (nodes, pods, bytes)
  return rows_per_cost_class(
      p, shapes,
      [&](const RankProgram& rp, std::vector<TimeNs>& row) {
        for (size_t i = 0; i < rp.tasks.size(); ++i) {
          const Task& t = rp.tasks[i];
          if (t.kind == TaskKind::kCollective) {
            const int group = rp.group_of(t);
            STEPCAST_CHECK(group >= 0 && group < static_cast<int>(shapes.size()),
                           "collective '" + t.label + "' names a missing group");
            const auto key =
                std::make_tuple(group, static_cast<int>(t.coll), t.bytes, t.ep_kernels);
            auto it = coll_cache.find(key);
            if (it == coll_cache.end()) {
              const GroupShape& g = shapes[static_cast<size_t>(group)];
              const double total = collective_time(t.coll, t.bytes, g, hw, !t.ep_kernels).time_s;
              const TimeNs total_ns = task_ns(total, t);
              const double a = std::clamp(
                  collective_latency_s(t.coll, t.bytes, g, hw, !t.ep_kernels), 0.0, total);
              it = coll_cache.emplace(key, std::min(to_ns(a), total_ns)).first;
            }
            row[i] = it->second;
          } else if (t.kind == TaskKind::kSend || t.kind == TaskKind::kRecv) {
            const GroupShape pair =
                pair_shape(rp.rank, rp.peer_of(t), p.gpus_per_node, hw.fabric.pod_gpus);
            const auto key = std::make_tuple(pair.nodes, pair.pods, t.bytes);
            auto it = p2p_cache.find(key);
            if (it == p2p_cache.end()) {
              const double total = p2p_time_s(t.bytes, pair, hw);
              const TimeNs total_ns = task_ns(total, t);
              const double a = std::clamp(p2p_latency_s(t.bytes, pair, hw), 0.0, total);
              it = p2p_cache.emplace(key, std::min(to_ns(a), total_ns)).first;
            }
            row[i] = it->second;
          }
        }
      },
      nullptr, hw.fabric.pod_gpus);
}

Topology slowed_topology(const Topology& nominal, const GpuSpeeds& speeds) {
  Topology topo = nominal;
  // A NIC shared by several GPUs runs at the smallest factor among them (a node-wide factor
  // applies once).
  std::map<int, double> nic_factor;  // nic_up link -> factor
  for (size_t g = 0; g < speeds.size() && static_cast<int>(g) < topo.gpus(); ++g) {
    const GpuSpeed& v = speeds[g];
    const int gpu = static_cast<int>(g);
    if (v.nvlink != 1) {
      topo.scale_capacity(topo.nvl_up(gpu), v.nvlink);
      topo.scale_capacity(topo.nvl_down(gpu), v.nvlink);
    }
    if (v.nic != 1 && topo.nics_per_node() > 0) {
      const int up = topo.nic_up(topo.node_of(gpu), topo.rail_of(gpu));
      auto [it, fresh] = nic_factor.try_emplace(up, v.nic);
      if (!fresh) it->second = std::min(it->second, v.nic);
    }
  }
  for (const auto& [up, f] : nic_factor) {
    topo.scale_capacity(up, f);
    topo.scale_capacity(up + 1, f);  // nic_down follows nic_up (topology.h)
  }
  return topo;
}

Timeline simulate_flow_mode(const Program& p, const HwProfile& hw, const EngineOptions& options,
                            const GpuSpeeds& speeds) {
  STEPCAST_CHECK(p.gpus_per_node == hw.node.gpus,
                 "flow mode: program and profile disagree on GPUs per node");
  const HwProfile cost_hw = flow_cost_profile(hw);
  const Topology nominal(hw, std::max(1, p.world_size));
  std::optional<Topology> slow;  // only with stragglers (no copy otherwise)
  if (!speeds.empty()) slow = slowed_topology(nominal, speeds);
  const Durations durations = task_durations(p, cost_hw, speeds, /*slow_links=*/false);
  const Durations latency = task_latencies(p, cost_hw);
  FlowMode fm;
  fm.topology = slow ? &*slow : &nominal;
  fm.nominal = slow ? &nominal : nullptr;
  fm.latency_ns = &latency;
  EngineOptions eo = options;
  eo.flow = &fm;
  return simulate(p, durations, eo);
}

}  // namespace stepcast
