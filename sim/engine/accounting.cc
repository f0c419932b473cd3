// Accounting of the Engine (engine.h): memory in use per rank and its peak (and curve), and
// the results of a run — per-rank ends, the step, the critical rank, the breakdown of the
// critical rank's time by category.
#include "sim/engine/engine_internal.h"

namespace stepcast::engine_detail {

void Engine::apply_memory(std::uint32_t g, TimeNs t) {
  const size_t r = static_cast<size_t>(rank_of_[g]);
  const double bytes = program_->ranks[r].tasks[g - rank_offset_[r]].bytes;
  mem_now_[r] += (flags_[g] & kFlagAlloc) ? bytes : -bytes;
  mem_peak_[r] = std::max(mem_peak_[r], mem_now_[r]);
  if (!options_->record_memory_curve) return;
  auto& curve = tl_.ranks[r].memory;
  if (!curve.empty() && curve.back().t == t)
    curve.back().bytes = mem_now_[r];  // coalesce same-instant samples: value after the instant
  else
    curve.push_back({t, mem_now_[r]});
}

// The Timeline's results once every task has run: rank ends and peaks, the step, the
// critical rank, the counters and the breakdown.
void Engine::summarize() {
  Timeline& tl = tl_;
  const size_t nranks = program_->ranks.size();
  for (size_t r = 0; r < nranks; ++r) {
    RankTimeline& rt = tl.ranks[r];
    for (const TaskTiming& tm : rt.tasks) rt.end = std::max(rt.end, tm.end);
    rt.peak_bytes = mem_peak_[r];
    tl.step_ns = std::max(tl.step_ns, rt.end);
  }
  // The critical rank: of those that end last (often all of them: a final collective ends
  // together), the one whose compute stream was busiest, i.e. the one the others waited for
  // (a slow GPU); the lowest index among equals.
  TimeNs best_busy = -1;
  for (size_t r = 0; r < nranks; ++r) {
    const RankTimeline& rt = tl.ranks[r];
    if (rt.end != tl.step_ns) continue;
    TimeNs busy = 0;
    const TaskList& tasks = program_->ranks[r].tasks;
    for (size_t i = 0; i < tasks.size(); ++i)
      if (tasks[i].stream == StreamKind::kCompute) busy += rt.tasks[i].end - rt.tasks[i].start;
    if (busy > best_busy) {
      best_busy = busy;
      tl.critical_rank = static_cast<int>(r);
    }
  }
  tl.events = events_;
  tl.flow_transfers = transfer_inst_.size();
  if (flow_) tl.link_utilization = net_.utilization();
  breakdown(tl);
}

// Exposed time per category on the critical rank (engine.h): sweep the stream intervals.
void Engine::breakdown(Timeline& tl) const {
  tl.breakdown_ns.fill(0);
  if (program_->ranks.empty()) return;
  const size_t r = static_cast<size_t>(tl.critical_rank);
  const RankProgram& rp = program_->ranks[r];
  struct Edge {
    TimeNs t;
    std::int8_t start;  // 0 = end (applied first), 1 = start
    std::int8_t stream;
    std::int8_t cat;
  };
  std::vector<Edge> edges;
  edges.reserve(rp.tasks.size() * 2);
  for (size_t i = 0; i < rp.tasks.size(); ++i) {
    const TaskTiming& tm = tl.ranks[r].tasks[i];
    if (tm.end <= tm.start) continue;
    const auto s = static_cast<std::int8_t>(rp.tasks[i].stream);
    const auto c = static_cast<std::int8_t>(rp.tasks[i].category);
    edges.push_back({tm.start, 1, s, c});
    edges.push_back({tm.end, 0, s, c});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) {
    return a.t != b.t ? a.t < b.t : a.start < b.start;
  });
  std::array<int, kStreamCount> active;
  active.fill(-1);
  // Compute stream first, then the comm streams: tp (NCCL, ring exchange), cp (sends,
  // receives), ep, pp_send, pp_recv, dp.
  static constexpr std::array<StreamKind, kStreamCount> kOrder = {
      StreamKind::kCompute, StreamKind::kTp,     StreamKind::kTpRing,
      StreamKind::kCp,      StreamKind::kCpRecv, StreamKind::kEp,
      StreamKind::kPpSend,  StreamKind::kPpRecv, StreamKind::kDp};
  auto attribute = [&]() -> size_t {
    for (const StreamKind s : kOrder)
      if (active[static_cast<size_t>(s)] >= 0)
        return static_cast<size_t>(active[static_cast<size_t>(s)]);
    return kCategoryCount;  // bubble
  };
  TimeNs prev = 0;
  for (const Edge& e : edges) {
    if (e.t > prev) {
      tl.breakdown_ns[attribute()] += e.t - prev;
      prev = e.t;
    }
    active[static_cast<size_t>(e.stream)] = e.start ? e.cat : -1;
  }
  tl.breakdown_ns[attribute()] += tl.step_ns - prev;
}

}  // namespace stepcast::engine_detail
