// task_durations / comm_compute_slowdown (coster.h).
#include "sim/cost/coster.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include <fmt/format.h>

#include "model/error.h"

namespace stepcast {
namespace {

struct CollKey {
  int group;
  CollOp op;
  double bytes;
  bool nccl;
  bool operator==(const CollKey& o) const {
    return group == o.group && op == o.op && bytes == o.bytes && nccl == o.nccl;
  }
};

struct CollKeyHash {
  size_t operator()(const CollKey& k) const {
    std::uint64_t b;
    std::memcpy(&b, &k.bytes, sizeof b);
    std::uint64_t h = b * 0x9E3779B97F4A7C15ull;
    h ^= (static_cast<std::uint64_t>(k.group) << 8) ^ static_cast<std::uint64_t>(k.op) ^
         (k.nccl ? 0u : 0x80u);
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

}  // namespace

std::vector<size_t> same_cost_ranks(const Program& p, const std::vector<GroupShape>& shapes,
                                    const std::vector<bool>* own_row, int pod_gpus) {
  struct List {
    size_t rep;       // first rank seen with this list
    ListNames names;  // what the list names (filled when a second rank shares it)
    bool named = false;
  };
  std::unordered_map<const Task*, List> lists;
  std::vector<size_t> out(p.ranks.size());
  const int gpn = p.gpus_per_node;
  auto shape_of = [&](int g) -> const GroupShape* {
    return g >= 0 && g < static_cast<int>(shapes.size()) ? &shapes[static_cast<size_t>(g)]
                                                         : nullptr;
  };
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    out[r] = r;
    const RankProgram& rp = p.ranks[r];
    if (rp.tasks.empty() || (own_row != nullptr && (*own_row)[r])) continue;
    auto [it, fresh] = lists.try_emplace(&rp.tasks[0], List{r, {}, false});
    List& l = it->second;
    if (fresh) continue;  // folded programs: every list is seen once, never scanned here
    if (!l.named) {
      l.names = names_used(rp.tasks);
      l.named = true;
    }
    const RankProgram& rep = p.ranks[l.rep];
    bool same = true;
    for (int g : l.names.groups) {
      const GroupShape *a = shape_of(rp.group_of_id(g)), *b = shape_of(rep.group_of_id(g));
      same = same && a && b && *a == *b;
    }
    for (int q : l.names.peers)
      same = same && pair_shape(rp.rank, rp.peer_of_id(q), gpn, pod_gpus) ==
                         pair_shape(rep.rank, rep.peer_of_id(q), gpn, pod_gpus);
    if (same) out[r] = l.rep;
  }
  return out;
}

std::vector<GroupShape> group_shapes(const Program& p, const HwProfile& hw) {
  STEPCAST_CHECK(p.gpus_per_node > 0, "program gpus_per_node must be positive");
  std::vector<GroupShape> shapes;
  shapes.reserve(p.groups.size());
  for (const Group& g : p.groups)
    shapes.push_back(group_shape(g.ranks, p.gpus_per_node, hw.fabric.pod_gpus));
  return shapes;
}

Durations rows_per_cost_class(
    const Program& p, const std::vector<GroupShape>& shapes,
    const std::function<void(const RankProgram&, std::vector<TimeNs>&)>& fill,
    const std::vector<bool>* own_row, int pod_gpus) {
  const std::vector<size_t> same = same_cost_ranks(p, shapes, own_row, pod_gpus);
  Durations out(p.ranks.size());
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    if (same[r] != r) {
      out.share_row(r, same[r]);
      continue;
    }
    std::vector<TimeNs>& row = out[r];
    row.assign(p.ranks[r].tasks.size(), 0);
    fill(p.ranks[r], row);
  }
  return out;
}

TimeNs task_ns(double seconds, const Task& t) {
  if (!(seconds <= kMaxTaskSeconds)) {
    throw InputError(InputIssue{
        "", 0, 0, "",
        fmt::format("task '{}' would take {:.3g} s on one GPU, beyond the {:.0g} s per task "
                    "stepcast simulates: a model dimension, the batch or a hardware profile "
                    "value is implausibly large",
                    t.label, seconds, kMaxTaskSeconds)});
  }
  return to_ns(seconds);
}

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

// alpha + (t - alpha) / f, alpha clamped to [0, t].
double slowed_s(double t, double alpha, double f) {
  const double a = std::clamp(alpha, 0.0, t);
  return a + (t - a) / f;
}

}  // namespace

double collective_latency_s(CollOp op, double bytes, const GroupShape& g, const HwProfile& hw,
                            bool nccl) {
  const CollectiveChoice c = collective_time(op, bytes, g, hw, nccl);
  if (g.ranks <= 1) return 0.0;
  if (c.calibrated || !(bytes > 0))
    return latency_by_difference(
        bytes, [&](double b) { return collective_time(op, b, g, hw, nccl).time_s; });
  // The chosen (algorithm, protocol) is linear in S: its slope from two sizes.
  auto same = [&](double b) {
    for (const CollectiveChoice& k : collective_candidates(op, b, g, hw, nccl))
      if (k.algo == c.algo && k.proto == c.proto) return k.time_s;
    return std::nan("");
  };
  const double hi = same(bytes), lo = same(bytes * (1.0 - kRelStep));
  if (!std::isfinite(hi) || !std::isfinite(lo))
    return latency_by_difference(
        bytes, [&](double b) { return collective_time(op, b, g, hw, nccl).time_s; });
  return c.time_s - bytes * (hi - lo) / (kRelStep * bytes);
}

double p2p_latency_s(double bytes, const GroupShape& pair, const HwProfile& hw) {
  return latency_by_difference(bytes, [&](double b) { return p2p_time_s(b, pair, hw); });
}

Durations task_durations(const Program& p, const HwProfile& hw, const GpuSpeeds& speeds,
                         bool slow_links) {
  const std::vector<GroupShape> shapes = group_shapes(p, hw);
  std::unordered_map<CollKey, TimeNs, CollKeyHash> coll_cache;
  // Ranks running slower than the profile: their own rows.
  std::vector<bool> own_row;
  if (!speeds.empty()) {
    own_row.assign(p.ranks.size(), false);
    for (size_t r = 0; r < p.ranks.size(); ++r) {
      const int g = p.ranks[r].rank;
      STEPCAST_CHECK(g >= 0 && g < static_cast<int>(speeds.size()),
                     fmt::format("task_durations: no speed for rank {}", g));
      own_row[r] = !speeds[static_cast<size_t>(g)].nominal();
    }
    STEPCAST_CHECK(!p.folded || std::all_of(speeds.begin(), speeds.end(),
                                            [](const GpuSpeed& v) { return v.nominal(); }),
                   "task_durations: GPU speeds need an unfolded program (every rank simulated)");
  }
  return rows_per_cost_class(
      p, shapes,
      [&](const RankProgram& rp, std::vector<TimeNs>& d) {
        const GpuSpeed v = speeds.empty() ? GpuSpeed{} : speeds[static_cast<size_t>(rp.rank)];
        const bool slow = slow_links && (v.nic != 1 || v.nvlink != 1);
        std::unordered_map<CollKey, TimeNs, CollKeyHash> slow_cache;  // this rank's
        for (size_t i = 0; i < rp.tasks.size(); ++i) {
          const Task& t = rp.tasks[i];
          switch (t.kind) {
            case TaskKind::kGemm:
            case TaskKind::kAttention:
            case TaskKind::kMemoryBound:
              d[i] = task_ns(compute_time_s(t, hw) / v.compute, t);
              break;
            case TaskKind::kCollective: {
              const int group = rp.group_of(t);
              STEPCAST_CHECK(group >= 0 && group < static_cast<int>(shapes.size()),
                             "collective '" + t.label + "' names a missing group");
              const GroupShape& g = shapes[static_cast<size_t>(group)];
              const bool nccl = !t.ep_kernels;
              const CollKey key{group, t.coll, t.bytes, nccl};
              const double f = g.nodes > 1 ? v.nic : v.nvlink;
              if (slow && f != 1 && g.ranks > 1) {
                auto it = slow_cache.find(key);
                if (it == slow_cache.end()) {
                  const double total = collective_time(t.coll, t.bytes, g, hw, nccl).time_s;
                  it = slow_cache
                           .emplace(
                               key,
                               task_ns(
                                   slowed_s(total,
                                            collective_latency_s(t.coll, t.bytes, g, hw, nccl), f),
                                   t))
                           .first;
                }
                d[i] = it->second;
                break;
              }
              auto it = coll_cache.find(key);
              if (it == coll_cache.end())
                it = coll_cache
                         .emplace(key,
                                  task_ns(collective_time(t.coll, t.bytes, g, hw, nccl).time_s, t))
                         .first;
              d[i] = it->second;
              break;
            }
            case TaskKind::kSend:
            case TaskKind::kRecv: {
              const int peer = rp.peer_of(t);
              STEPCAST_CHECK(peer >= 0, "send/recv '" + t.label + "' has no peer");
              const GroupShape pair =
                  pair_shape(rp.rank, peer, p.gpus_per_node, hw.fabric.pod_gpus);
              const double f = pair.nodes == 1 ? v.nvlink : v.nic;
              double sec = p2p_time_s(t.bytes, pair, hw);
              if (slow && f != 1) sec = slowed_s(sec, p2p_latency_s(t.bytes, pair, hw), f);
              d[i] = task_ns(sec, t);
              break;
            }
            case TaskKind::kAlloc:
            case TaskKind::kFree: d[i] = 0; break;
          }
        }
      },
      own_row.empty() ? nullptr : &own_row, hw.fabric.pod_gpus);
}

double comm_hbm_share(const Program& p, const RankProgram& rp, const Task& t, TimeNs duration,
                      const HwProfile& hw) {
  const double hbm = hw.gpu.hbm_bytes_per_s * hw.compute.membound_eff;
  if (!(hbm > 0) || duration <= 0 || !(t.bytes > 0)) return 0;
  double factor = 1;  // send / recv
  if (t.kind == TaskKind::kCollective) {
    const int g = rp.group_of(t);
    STEPCAST_CHECK(g >= 0 && g < static_cast<int>(p.groups.size()),
                   "collective '" + t.label + "' names a missing group");
    factor = bus_factor_of(t.coll, static_cast<int>(p.groups[static_cast<size_t>(g)].ranks.size()));
  } else if (t.kind != TaskKind::kSend && t.kind != TaskKind::kRecv) {
    return 0;
  }
  const double busbw = t.bytes * factor / to_s(duration);
  return std::min(1.0, 2.0 * busbw / hbm);
}

int comm_sms(const Task& t, const HwProfile& hw) {
  if (hw.gpu.sms <= 0 || t.stream == StreamKind::kTpRing) return 0;
  if (t.ep_kernels) return kDeepEpSms;
  return std::max(0, hw.compute.comm_sms);
}

double comm_compute_slowdown(const HwProfile& hw) {
  const int sms = hw.gpu.sms, comm = hw.compute.comm_sms;
  if (sms <= 0 || comm <= 0) return 0;
  STEPCAST_CHECK(comm < sms, "compute.comm_sms must be below the GPU's SM count");
  return static_cast<double>(comm) / static_cast<double>(sms - comm);
}

}  // namespace stepcast
