// Topology (topology.h).
#include "sim/network/topology.h"

#include <algorithm>

#include <fmt/format.h>

#include "model/error.h"

namespace stepcast {

const char* link_kind_name(LinkKind k) {
  switch (k) {
    case LinkKind::kNvlUp: return "nvl_up";
    case LinkKind::kNvlDown: return "nvl_down";
    case LinkKind::kNicUp: return "nic_up";
    case LinkKind::kNicDown: return "nic_down";
    case LinkKind::kLeafUp: return "leaf_up";
    case LinkKind::kLeafDown: return "leaf_down";
    case LinkKind::kPodUp: return "pod_up";
    case LinkKind::kPodDown: return "pod_down";
  }
  return "?";
}

int Topology::add(LinkKind k, int index, double cap, const std::string& name) {
  Link l;
  l.id = static_cast<int>(links_.size());
  l.kind = k;
  l.index = index;
  l.capacity_bytes_per_s = cap;
  l.name = fmt::format("{}[{}]", link_kind_name(k), name);
  links_.push_back(std::move(l));
  return links_.back().id;
}

Topology::Topology(const HwProfile& hw, int gpus)
    : gpus_(gpus), gpus_per_node_(hw.node.gpus), nics_(std::max(1, hw.node.nics)) {
  STEPCAST_CHECK(gpus > 0, "topology needs at least one GPU");
  STEPCAST_CHECK(gpus_per_node_ > 0, "node.gpus must be positive");
  STEPCAST_CHECK(hw.node.nvlink_bytes_per_s > 0 && hw.node.nic_bytes_per_s > 0,
                 "profile '" + hw.name + "' needs NVLink and NIC rates for the flow mode");
  nodes_ = (gpus + gpus_per_node_ - 1) / gpus_per_node_;
  const int pod_gpus = hw.fabric.pod_gpus;
  nodes_per_pod_ = pod_gpus > 0 ? std::max(1, pod_gpus / gpus_per_node_) : nodes_;
  pods_ = (nodes_ + nodes_per_pod_ - 1) / nodes_per_pod_;
  const double nvl = hw.node.nvlink_bytes_per_s, nic = hw.node.nic_bytes_per_s;
  const double oversub = std::max(1.0, hw.fabric.oversubscription);

  nvl_base_ = 0;
  for (int g = 0; g < gpus_; ++g) {
    const std::string n = fmt::format("g{}", g);
    add(LinkKind::kNvlUp, g, nvl, n);
    add(LinkKind::kNvlDown, g, nvl, n);
  }
  nic_base_ = static_cast<int>(links_.size());
  for (int n = 0; n < nodes_; ++n)
    for (int r = 0; r < nics_; ++r) {
      const std::string s = fmt::format("n{}.r{}", n, r);
      add(LinkKind::kNicUp, n * nics_ + r, nic, s);
      add(LinkKind::kNicDown, n * nics_ + r, nic, s);
    }
  leaf_base_ = static_cast<int>(links_.size());
  for (int p = 0; p < pods_; ++p) {
    const int nodes_in_pod = std::min(nodes_per_pod_, nodes_ - p * nodes_per_pod_);
    for (int r = 0; r < nics_; ++r) {
      const std::string s = fmt::format("p{}.r{}", p, r);
      add(LinkKind::kLeafUp, p * nics_ + r, nodes_in_pod * nic, s);
      add(LinkKind::kLeafDown, p * nics_ + r, nodes_in_pod * nic, s);
    }
  }
  pod_base_ = static_cast<int>(links_.size());
  for (int p = 0; p < pods_; ++p) {
    const int nodes_in_pod = std::min(nodes_per_pod_, nodes_ - p * nodes_per_pod_);
    const double cap = nodes_in_pod * nics_ * nic / oversub;
    add(LinkKind::kPodUp, p, cap, fmt::format("p{}", p));
    add(LinkKind::kPodDown, p, cap, fmt::format("p{}", p));
  }
}

std::vector<double> Topology::capacities() const {
  std::vector<double> c;
  c.reserve(links_.size());
  for (const Link& l : links_) c.push_back(l.capacity_bytes_per_s);
  return c;
}

void Topology::scale_capacity(int link, double factor) {
  STEPCAST_CHECK(link >= 0 && link < static_cast<int>(links_.size()),
                 fmt::format("topology: no link {}", link));
  STEPCAST_CHECK(factor > 0 && factor <= 1,
                 fmt::format("topology: link factor {} not in (0, 1]", factor));
  links_[static_cast<size_t>(link)].capacity_bytes_per_s *= factor;
}

std::vector<int> Topology::route(int src, int dst, bool pxn) const {
  STEPCAST_CHECK(src >= 0 && src < gpus_ && dst >= 0 && dst < gpus_, "route: GPU out of range");
  std::vector<int> r;
  if (src == dst) return r;
  const int ns = node_of(src), nd = node_of(dst);
  if (ns == nd) return {nvl_up(src), nvl_down(dst)};
  int rail_s = rail_of(src);
  const int rail_d = rail_of(dst);
  if (pxn && rail_s != rail_d) {
    // Move over NVLink to the GPU of the source node on the destination's rail.
    const int proxy = ns * gpus_per_node_ + (rail_d * gpus_per_node_ + nics_ - 1) / nics_;
    if (proxy != src && proxy < gpus_) {
      r.push_back(nvl_up(src));
      r.push_back(nvl_down(proxy));
    }
    rail_s = rail_d;
  }
  r.push_back(nic_up(ns, rail_s));
  const int ps = ns / nodes_per_pod_, pd = nd / nodes_per_pod_;
  if (ps != pd || rail_s != rail_d) r.push_back(leaf_up(ps, rail_s));
  if (ps != pd) {
    r.push_back(pod_up(ps));
    r.push_back(pod_down(pd));
  }
  if (ps != pd || rail_s != rail_d) r.push_back(leaf_down(pd, rail_d));
  r.push_back(nic_down(nd, rail_d));
  return r;
}

}  // namespace stepcast
