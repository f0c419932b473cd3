// MaxMinSolver (maxmin.h).
#include "sim/network/maxmin.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <string>

#include "model/error.h"

namespace stepcast {

MaxMinSolver::MaxMinSolver(const std::vector<double>& capacities_bytes_per_s) {
  for (double c : capacities_bytes_per_s) add_link(c);
}

MaxMinSolver::LinkId MaxMinSolver::add_link(double capacity_bytes_per_s) {
  STEPCAST_CHECK(capacity_bytes_per_s >= 0, "link capacity must be >= 0");
  links_.push_back(Link{capacity_bytes_per_s, {}, {}, false});
  return static_cast<LinkId>(links_.size() - 1);
}

void MaxMinSolver::set_capacity(LinkId l, double capacity_bytes_per_s) {
  STEPCAST_CHECK(l >= 0 && l < link_count(), "link id out of range");
  STEPCAST_CHECK(capacity_bytes_per_s >= 0, "link capacity must be >= 0");
  links_[static_cast<size_t>(l)].capacity = capacity_bytes_per_s;
  mark(l);
}

void MaxMinSolver::mark(LinkId l) {
  Link& k = links_[static_cast<size_t>(l)];
  if (!k.dirty) {
    k.dirty = true;
    dirty_links_.push_back(l);
  }
}

MaxMinSolver::FlowId MaxMinSolver::add_flow(const std::vector<LinkId>& links, double weight,
                                            const std::vector<double>& use) {
  STEPCAST_CHECK(weight > 0, "flow weight must be positive");
  STEPCAST_CHECK(use.empty() || use.size() == links.size(), "flow use: one per link");
  for (LinkId l : links) STEPCAST_CHECK(l >= 0 && l < link_count(), "flow uses an unknown link");
  for (double u : use)
    STEPCAST_CHECK(u > 0 && u < std::numeric_limits<double>::infinity(),
                   "flow use of a link must be positive and finite");
  FlowId id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<FlowId>(flows_.size());
    flows_.emplace_back();
  }
  Flow& f = flows_[static_cast<size_t>(id)];
  // Links ascending with their use, the first of duplicates kept: a stable insertion sort
  // (routes have a handful of links) into the flow's reused storage.
  f.links.clear();
  f.use.clear();
  for (size_t i = 0; i < links.size(); ++i) {
    const LinkId l = links[i];
    size_t k = f.links.size();
    while (k > 0 && f.links[k - 1] > l) --k;
    if (k > 0 && f.links[k - 1] == l) continue;  // a duplicate: the first counts
    f.links.insert(f.links.begin() + static_cast<std::ptrdiff_t>(k), l);
    f.use.insert(f.use.begin() + static_cast<std::ptrdiff_t>(k), use.empty() ? 1.0 : use[i]);
  }
  f.weight = weight;
  f.alive = true;
  f.rate = f.links.empty() ? std::numeric_limits<double>::infinity() : 0.0;
  for (size_t i = 0; i < f.links.size(); ++i) {
    Link& k = links_[static_cast<size_t>(f.links[i])];
    k.flows.push_back(id);
    k.use.push_back(f.use[i]);
    mark(f.links[i]);
  }
  ++live_flows_;
  return id;
}

void MaxMinSolver::remove_flow(FlowId id) {
  STEPCAST_CHECK(alive(id), "remove_flow: flow " + std::to_string(id) + " is not live");
  Flow& f = flows_[static_cast<size_t>(id)];
  for (LinkId l : f.links) {
    Link& k = links_[static_cast<size_t>(l)];
    const auto i =
        static_cast<size_t>(std::find(k.flows.begin(), k.flows.end(), id) - k.flows.begin());
    k.flows[i] = k.flows.back();
    k.flows.pop_back();
    k.use[i] = k.use.back();
    k.use.pop_back();
    mark(l);
  }
  f.alive = false;
  f.links.clear();
  f.use.clear();
  f.rate = 0;
  free_ids_.push_back(id);
  --live_flows_;
}

bool MaxMinSolver::alive(FlowId f) const {
  return f >= 0 && f < static_cast<FlowId>(flows_.size()) && flows_[static_cast<size_t>(f)].alive;
}

double MaxMinSolver::rate(FlowId f) const {
  STEPCAST_CHECK(alive(f), "rate: flow " + std::to_string(f) + " is not live");
  return flows_[static_cast<size_t>(f)].rate;
}

const std::vector<MaxMinSolver::LinkId>& MaxMinSolver::flow_links(FlowId f) const {
  STEPCAST_CHECK(alive(f), "flow_links: flow is not live");
  return flows_[static_cast<size_t>(f)].links;
}

double MaxMinSolver::link_load(LinkId l) const {
  STEPCAST_CHECK(l >= 0 && l < link_count(), "link id out of range");
  const Link& k = links_[static_cast<size_t>(l)];
  double s = 0;
  for (size_t i = 0; i < k.flows.size(); ++i)
    s += k.use[i] * flows_[static_cast<size_t>(k.flows[i])].rate;
  return s;
}

void MaxMinSolver::solve() {
  last_solved_ = 0;
  solved_flows_.clear();
  if (dirty_links_.empty()) return;
  link_mark_.resize(links_.size(), 0);
  flow_mark_.resize(flows_.size(), 0);
  ++epoch_;
  // Connected components (flows <-> links) holding a touched link.
  std::vector<LinkId> comp_links;
  std::vector<FlowId>& comp_flows = solved_flows_;
  std::vector<LinkId> stack;
  for (LinkId d : dirty_links_) {
    links_[static_cast<size_t>(d)].dirty = false;
    if (link_mark_[static_cast<size_t>(d)] == epoch_) continue;
    link_mark_[static_cast<size_t>(d)] = epoch_;
    stack.push_back(d);
    while (!stack.empty()) {
      const LinkId l = stack.back();
      stack.pop_back();
      comp_links.push_back(l);
      for (FlowId f : links_[static_cast<size_t>(l)].flows) {
        if (flow_mark_[static_cast<size_t>(f)] == epoch_) continue;
        flow_mark_[static_cast<size_t>(f)] = epoch_;
        comp_flows.push_back(f);
        for (LinkId l2 : flows_[static_cast<size_t>(f)].links) {
          if (link_mark_[static_cast<size_t>(l2)] == epoch_) continue;
          link_mark_[static_cast<size_t>(l2)] = epoch_;
          stack.push_back(l2);
        }
      }
    }
  }
  dirty_links_.clear();
  solve_component(comp_flows, comp_links);
  last_solved_ = static_cast<int>(comp_flows.size());
}

void MaxMinSolver::solve_component(const std::vector<FlowId>& flows,
                                   const std::vector<LinkId>& links) {
  remaining_.resize(links_.size());
  weight_left_.resize(links_.size());
  version_.resize(links_.size(), 0);
  using Entry = std::pair<double, std::pair<LinkId, std::uint32_t>>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (LinkId l : links) {
    const size_t i = static_cast<size_t>(l);
    remaining_[i] = links_[i].capacity;
    double w = 0;
    const Link& k = links_[i];
    for (size_t j = 0; j < k.flows.size(); ++j)
      w += k.use[j] * flows_[static_cast<size_t>(k.flows[j])].weight;
    weight_left_[i] = w;
    ++version_[i];
    if (w > 0) heap.push({remaining_[i] / w, {l, version_[i]}});
  }
  // flow_mark_ == epoch_ means "in this component and not yet fixed".
  for (FlowId f : flows) flows_[static_cast<size_t>(f)].rate = 0;
  while (!heap.empty()) {
    const auto [share, lv] = heap.top();
    heap.pop();
    const size_t li = static_cast<size_t>(lv.first);
    if (lv.second != version_[li] || weight_left_[li] <= 0) continue;
    for (FlowId f : links_[li].flows) {
      const size_t fi = static_cast<size_t>(f);
      if (flow_mark_[fi] != epoch_) continue;
      flow_mark_[fi] = epoch_ - 1;  // fixed
      Flow& fl = flows_[fi];
      fl.rate = share * fl.weight;
      for (size_t j = 0; j < fl.links.size(); ++j) {
        const LinkId l2 = fl.links[j];
        const size_t i2 = static_cast<size_t>(l2);
        remaining_[i2] = std::max(0.0, remaining_[i2] - fl.use[j] * fl.rate);
        weight_left_[i2] -= fl.use[j] * fl.weight;
        if (l2 != lv.first && weight_left_[i2] > 1e-12 * fl.weight) {
          ++version_[i2];
          heap.push({remaining_[i2] / weight_left_[i2], {l2, version_[i2]}});
        }
      }
    }
    weight_left_[li] = 0;
  }
}

}  // namespace stepcast
