// MaxMinNetwork (flow_network.h).
#include "sim/engine/flow_network.h"

#include <algorithm>
#include <cmath>

#include "model/error.h"

namespace stepcast {

void MaxMinNetwork::reset(const Topology& topo) {
  solver_ = MaxMinSolver(topo.capacities());
  flows_.clear();
  transfer_left_.clear();
  done_now_.clear();
  heap_.clear();
  now_ = 0;
  dirty_ = false;
  solves_ = 0;
  live_ = 0;
  link_class_.clear();
  class_capacity_ = {};
  class_rate_ = {};
  util_.clear();
  for (const Link& l : topo.links()) {
    int c = 0;
    switch (l.kind) {
      case LinkKind::kNvlUp:
      case LinkKind::kNvlDown: c = 0; break;
      case LinkKind::kNicUp:
      case LinkKind::kNicDown: c = 1; break;
      case LinkKind::kLeafUp:
      case LinkKind::kLeafDown: c = 2; break;
      case LinkKind::kPodUp:
      case LinkKind::kPodDown: c = 3; break;
    }
    if (static_cast<size_t>(l.id) >= link_class_.size())
      link_class_.resize(static_cast<size_t>(l.id) + 1, 0);
    link_class_[static_cast<size_t>(l.id)] = c;
    class_capacity_[static_cast<size_t>(c)] += l.capacity_bytes_per_s;
  }
}

int MaxMinNetwork::start(TimeNs t, const std::vector<FlowSpec>& flows, double bytes_scale) {
  STEPCAST_CHECK(t >= now_, "network: a transfer cannot start in the past");
  STEPCAST_CHECK(bytes_scale >= 0 && std::isfinite(bytes_scale), "network: bad bytes scale");
  if (t > now_) {
    // Nothing is due before t (the engine calls advance at every completion), so the rates
    // solved at now_ still hold; just move the clock.
    if (dirty_) resolve();
    now_ = t;
  }
  const int x = static_cast<int>(transfer_left_.size());
  int n = 0;
  for (const FlowSpec& f : flows) {
    const double bytes = f.bytes * bytes_scale;
    if (!(bytes > 0) || f.links.empty()) continue;
    const int id = solver_.add_flow(f.links, 1.0, f.copies);
    if (static_cast<size_t>(id) >= flows_.size()) flows_.resize(static_cast<size_t>(id) + 1);
    FlowState& s = flows_[static_cast<size_t>(id)];
    s.spec = &f;
    s.left = bytes;
    s.rate = 0;
    s.since = t;
    s.transfer = x;
    ++s.version;
    ++n;
  }
  transfer_left_.push_back(n);
  if (n == 0) done_now_.push_back(x);
  live_ += n;
  dirty_ = dirty_ || n > 0;
  return x;
}

void MaxMinNetwork::add_rate(const FlowState& s, double delta) {
  if (delta == 0) return;
  const std::vector<int>& links = s.spec->links;
  const std::vector<double>& copies = s.spec->copies;
  for (size_t i = 0; i < links.size(); ++i)
    class_rate_[static_cast<size_t>(link_class_[static_cast<size_t>(links[i])])] +=
        delta * (copies.empty() ? 1.0 : copies[i]);
}

void MaxMinNetwork::sample() {
  LinkUtilSample u;
  u.t = now_;
  for (int c = 0; c < kLinkClasses; ++c) {
    const auto i = static_cast<size_t>(c);
    u.util[i] = class_capacity_[i] > 0 ? std::max(0.0, class_rate_[i]) / class_capacity_[i] : 0.0;
  }
  if (!util_.empty() && util_.back().t == now_) {
    util_.back() = u;
  } else {
    util_.push_back(u);
  }
}

void MaxMinNetwork::resolve() {
  dirty_ = false;
  solver_.solve();
  ++solves_;
  for (const int id : solver_.last_solved_flow_ids()) {
    FlowState& s = flows_[static_cast<size_t>(id)];
    // Progress at the old rate up to now, then the new rate from now on.
    s.left = std::max(0.0, s.left - s.rate * to_s(now_ - s.since));
    s.since = now_;
    const double old_rate = s.rate;
    s.rate = solver_.rate(id);
    add_rate(s, s.rate - old_rate);
    STEPCAST_CHECK(s.rate > 0, "network: a flow gets no bandwidth (a zero-capacity link)");
    ++s.version;
    const double ns = std::ceil(s.left / s.rate * kNsPerS);
    heap_.push_back({now_ + static_cast<TimeNs>(ns), id, s.version});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }
  // Lazy deletion leaves stale entries; compact when they dominate.
  if (heap_.size() > 4 * static_cast<size_t>(live_) + 1024) {
    std::vector<Due> keep;
    keep.reserve(static_cast<size_t>(live_));
    for (const Due& d : heap_)
      if (flows_[static_cast<size_t>(d.flow)].version == d.version) keep.push_back(d);
    heap_.swap(keep);
    std::make_heap(heap_.begin(), heap_.end(), Later{});
  }
  sample();
}

TimeNs MaxMinNetwork::next_completion() {
  if (!done_now_.empty()) return now_;
  if (dirty_) resolve();
  while (!heap_.empty()) {
    const Due& d = heap_.front();
    if (flows_[static_cast<size_t>(d.flow)].version == d.version) return d.t;
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    heap_.pop_back();
  }
  return kNoEvent;
}

void MaxMinNetwork::advance(TimeNs t, std::vector<int>& completed) {
  STEPCAST_CHECK(t >= now_, "network: time cannot go back");
  if (dirty_) resolve();  // rates in force up to t were solved at now_
  now_ = t;
  for (int x : done_now_) completed.push_back(x);
  done_now_.clear();
  while (!heap_.empty() && heap_.front().t <= t) {
    const Due d = heap_.front();
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    heap_.pop_back();
    FlowState& s = flows_[static_cast<size_t>(d.flow)];
    if (s.version != d.version) continue;
    STEPCAST_CHECK(d.t == t, "network: a flow completion was skipped");
    ++s.version;  // invalidates any other entry of this id
    solver_.remove_flow(d.flow);
    add_rate(s, -s.rate);
    s.rate = 0;
    --live_;
    dirty_ = true;
    if (--transfer_left_[static_cast<size_t>(s.transfer)] == 0) completed.push_back(s.transfer);
  }
  if (dirty_) sample();
}

}  // namespace stepcast
