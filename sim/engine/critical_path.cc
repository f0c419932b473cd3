#include "sim/engine/critical_path.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "model/error.h"
#include "sim/program/matching.h"

namespace stepcast {

std::vector<std::pair<int, int>> critical_path(const Program& program, const Timeline& timeline) {
  std::vector<std::pair<int, int>> path;
  const size_t nranks = program.ranks.size();
  STEPCAST_CHECK(timeline.ranks.size() == nranks, "timeline does not belong to this program");
  if (nranks == 0 || timeline.step_ns == 0) return path;
  // The engine's own matching when it kept it (EngineOptions::keep_matching), else matched
  // here.
  RendezvousMatching own;
  if (!timeline.matching) own = match_rendezvous(program);
  const RendezvousMatching& m = timeline.matching ? *timeline.matching : own;
  STEPCAST_CHECK(m.problems.empty(), "program has unmatched collectives or send/recv");
  for (size_t r = 0; r < nranks; ++r)
    STEPCAST_CHECK(timeline.ranks[r].tasks.size() == program.ranks[r].tasks.size(),
                   "timeline does not belong to this program");

  // Previous task on the same stream, built for a rank when the walk first reaches it (a
  // full-fidelity path crosses few of the ranks).
  std::vector<std::vector<int>> stream_prev(nranks);
  auto prev_on_stream = [&](int r, int i) {
    auto& sp = stream_prev[static_cast<size_t>(r)];
    if (sp.empty()) {
      const auto& tasks = program.ranks[static_cast<size_t>(r)].tasks;
      std::array<int, kStreamCount> last{};
      last.fill(-1);
      sp.resize(tasks.size());
      for (size_t k = 0; k < tasks.size(); ++k) {
        auto& l = last[static_cast<size_t>(tasks[k].stream)];
        sp[k] = l;
        l = static_cast<int>(k);
      }
    }
    return sp[static_cast<size_t>(i)];
  };
  auto end_of = [&](int r, int i) {
    return timeline.ranks[static_cast<size_t>(r)].tasks[static_cast<size_t>(i)].end;
  };
  auto start_of = [&](int r, int i) {
    return timeline.ranks[static_cast<size_t>(r)].tasks[static_cast<size_t>(i)].start;
  };

  // Last task to end on the critical rank (highest id among ties: the later in program order).
  const int cr = timeline.critical_rank;
  int cur_t = -1;
  for (int i = 0; i < static_cast<int>(program.ranks[static_cast<size_t>(cr)].tasks.size()); ++i)
    if (end_of(cr, i) == timeline.step_ns) cur_t = i;
  STEPCAST_CHECK(cur_t >= 0, "no task ends at the step time on the critical rank");
  int cur_r = cr;

  // A task's tight predecessor: one of its own (or its rendezvous members') predecessors that
  // ended exactly at its start.
  const size_t limit = [&] {
    size_t n = 0;
    for (const auto& rp : program.ranks) n += rp.tasks.size();
    return n;
  }();
  while (path.size() <= limit) {
    path.emplace_back(cur_r, cur_t);
    const TimeNs s = start_of(cur_r, cur_t);
    std::vector<std::pair<int, int>> holders{{cur_r, cur_t}};
    const int inst = m.instance(cur_r, cur_t);
    if (inst >= 0) {
      for (int k = m.offsets[static_cast<size_t>(inst)];
           k < m.offsets[static_cast<size_t>(inst) + 1]; ++k)
        if (m.members[static_cast<size_t>(k)] != std::make_pair(cur_r, cur_t))
          holders.push_back(m.members[static_cast<size_t>(k)]);
    }
    int next_r = -1, next_t = -1;
    for (auto [r, i] : holders) {
      const Task& t = program.ranks[static_cast<size_t>(r)].tasks[static_cast<size_t>(i)];
      auto consider = [&](int d) {
        if (next_t < 0 && d >= 0 && end_of(r, d) == s) {
          next_r = r;
          next_t = d;
        }
      };
      consider(prev_on_stream(r, i));
      for (int d : t.deps) consider(d);
      if (next_t >= 0) break;
    }
    if (next_t < 0) {
      // A kernel no predecessor bound waited for the host to launch it (EngineOptions::
      // host_launch_ns): the path goes on through the task before it on its stream, the
      // time between the host's (summarize_critical_path counts it). Else it started at 0.
      const Task& t = program.ranks[static_cast<size_t>(cur_r)].tasks[static_cast<size_t>(cur_t)];
      const bool kernel = t.kind == TaskKind::kGemm || t.kind == TaskKind::kAttention ||
                          t.kind == TaskKind::kMemoryBound;
      const int before = kernel && s > 0 ? prev_on_stream(cur_r, cur_t) : -1;
      if (before < 0) break;
      next_r = cur_r;
      next_t = before;
    }
    cur_r = next_r;
    cur_t = next_t;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

}  // namespace stepcast
