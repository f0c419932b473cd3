// collective_flows / simulate_flows_s (flows.h).
#include "sim/network/flows.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "model/error.h"

namespace stepcast {
namespace {

void add_flow(std::vector<FlowSpec>& out, int src, int dst, double bytes, const Topology& topo,
              bool pxn) {
  if (src == dst || bytes <= 0) return;
  out.push_back(FlowSpec{src, dst, topo.route(src, dst, pxn), bytes, {}});
}

}  // namespace

std::vector<FlowSpec> collective_flows(CollOp op, const std::vector<int>& ranks, double bytes,
                                       const Topology& topo, bool pxn) {
  std::vector<FlowSpec> out;
  const int n = static_cast<int>(ranks.size());
  if (n <= 1 || bytes <= 0) return out;
  for (int r : ranks) STEPCAST_CHECK(r >= 0 && r < topo.gpus(), "collective rank outside topology");

  if (op == CollOp::kAllToAll) {
    for (int i : ranks)
      for (int j : ranks) add_flow(out, i, j, bytes / n, topo, pxn);
    return out;
  }
  // What each ring edge carries: S x F (model/busbw.h; broadcast: the whole buffer).
  const double per_rank = bytes * busbw_factor(bus_op_of(op), n);

  // Members per node, nodes in order of first appearance.
  std::vector<int> node_order;
  std::map<int, std::vector<int>> members;
  for (int r : ranks) {
    auto& m = members[topo.node_of(r)];
    if (m.empty()) node_order.push_back(topo.node_of(r));
    m.push_back(r);
  }
  int ppn = 0;
  for (const auto& [node, m] : members) ppn = std::max(ppn, static_cast<int>(m.size()));
  const bool channels = node_order.size() > 1 && ppn > 1;
  const int c_count = channels ? std::min(ppn, topo.nics_per_node()) : 1;
  for (int c = 0; c < c_count; ++c) {
    std::vector<int> ring;
    if (!channels) {
      ring = ranks;
    } else {
      for (int node : node_order) {
        const auto& m = members[node];
        const int k = static_cast<int>(m.size());
        for (int i = 0; i < k; ++i) ring.push_back(m[static_cast<size_t>((c + i) % k)]);
      }
    }
    for (int i = 0; i < n; ++i)
      add_flow(out, ring[static_cast<size_t>(i)], ring[static_cast<size_t>((i + 1) % n)],
               per_rank / c_count, topo, pxn);
  }
  return out;
}

std::vector<int> fold_offsets(int rank, const std::vector<int>& stands_for,
                              const std::vector<int>& members) {
  const int n = static_cast<int>(stands_for.size());
  if (n <= 1) return {0};
  // The block [rank, rank + n).
  std::vector<int> block = stands_for;
  std::sort(block.begin(), block.end());
  for (int i = 0; i < n; ++i)
    if (block[static_cast<size_t>(i)] != rank + i) return {0};
  std::vector<int> local;  // the members' local indices, ascending, distinct
  local.reserve(members.size());
  for (int m : members) local.push_back(((m - rank) % n + n) % n);
  std::sort(local.begin(), local.end());
  local.erase(std::unique(local.begin(), local.end()), local.end());
  if (local.empty() || local.front() != 0) return {0};
  std::vector<char> covered(static_cast<size_t>(n), 0);
  std::vector<int> out;
  for (int x = 0; x < n; ++x) {
    if (covered[static_cast<size_t>(x)]) continue;
    for (int l : local) {
      const int y = x + l;
      if (y >= n || covered[static_cast<size_t>(y)]) return {0};
      covered[static_cast<size_t>(y)] = 1;
    }
    out.push_back(x);
  }
  return out;
}

void charge_copies(std::vector<FlowSpec>& flows, const std::vector<int>& offsets,
                   const std::function<std::vector<FlowSpec>(int)>& copy_flows,
                   const std::vector<char>& charged) {
  if (flows.empty()) return;
  for (FlowSpec& f : flows)
    if (f.copies.empty()) f.copies.assign(f.links.size(), 1.0);
  for (const int d : offsets) {
    if (d == 0) continue;
    const std::vector<FlowSpec> copy = copy_flows(d);
    for (size_t i = 0; i < copy.size(); ++i) {
      FlowSpec& f = flows[i % flows.size()];
      for (int l : copy[i].links) {
        const auto it = std::find(f.links.begin(), f.links.end(), l);
        if (it != f.links.end()) {
          f.copies[static_cast<size_t>(it - f.links.begin())] += 1.0;
        } else if (charged[static_cast<size_t>(l)]) {
          f.links.push_back(l);
          f.copies.push_back(1.0);
        }
      }
    }
  }
}

double simulate_flows_s(const std::vector<FlowSpec>& flows, const Topology& topo,
                        std::vector<double>* finish_s) {
  MaxMinSolver solver(topo.capacities());
  return simulate_flows_s(flows, solver, finish_s);
}

double simulate_flows_s(const std::vector<FlowSpec>& flows, MaxMinSolver& solver,
                        std::vector<double>* finish_s) {
  STEPCAST_CHECK(solver.live_flow_count() == 0, "simulate_flows_s: the solver has live flows");
  std::vector<int> id(flows.size());
  std::vector<double> left(flows.size());
  std::vector<size_t> live;
  if (finish_s) finish_s->assign(flows.size(), 0.0);
  for (size_t i = 0; i < flows.size(); ++i) {
    left[i] = flows[i].bytes;
    if (left[i] <= 0) continue;
    id[i] = solver.add_flow(flows[i].links, 1.0, flows[i].copies);
    live.push_back(i);
  }
  double now = 0;
  while (!live.empty()) {
    solver.solve();
    double dt = std::numeric_limits<double>::infinity();
    for (size_t i : live) {
      const double rate = solver.rate(id[i]);
      if (rate > 0) dt = std::min(dt, left[i] / rate);
    }
    // Link-less flows have rate +inf and finish at once (dt = 0).
    STEPCAST_CHECK(std::isfinite(dt), "flows cannot progress (a zero-capacity link)");
    now += dt;
    std::vector<size_t> still;
    for (size_t i : live) {
      const double rate = solver.rate(id[i]);
      left[i] -= std::isfinite(rate) ? rate * dt : left[i];
      // A flow within 1e-9 relative of done finishes now (floating-point slack).
      if (left[i] <= 1e-9 * flows[i].bytes) {
        solver.remove_flow(id[i]);
        if (finish_s) (*finish_s)[i] = now;
      } else {
        still.push_back(i);
      }
    }
    live.swap(still);
  }
  return now;
}

}  // namespace stepcast
