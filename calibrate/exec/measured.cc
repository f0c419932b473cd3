// Recorded task times -> "stepcast.result/1" (measured.h).
#include "measured.h"

#include <algorithm>
#include <cmath>

#include "json_io.h"

namespace stepcast::exec {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}

MeasuredSummary summarize(const Plan& plan, const Recorded& recorded) {
  const Program& p = *plan.program;
  const int world = plan.world_size();
  if (static_cast<int>(recorded.times.size()) != world)
    throw ProgramError("recorded times for " + std::to_string(recorded.times.size()) + " ranks, the plan has " +
                       std::to_string(world));
  Recorded rec = recorded;
  // A rendezvous starts when its last member reaches it (the simulator's semantics): on the
  // GPU an early member's NCCL kernel starts and spins until the others arrive, so its
  // recorded start is moved to the latest member's start (header).
  for (const Rendezvous& rv : plan.rendezvous) {
    double latest = 0;
    bool ok = true;
    for (const RankTask& m : rv.members) {
      const auto& tt = rec.times[static_cast<size_t>(m.rank)];
      ok = ok && static_cast<size_t>(m.task) < tt.size();
      if (ok) latest = std::max(latest, tt[static_cast<size_t>(m.task)].start_s);
    }
    if (!ok) continue;  // reported below
    for (const RankTask& m : rv.members) {
      TaskTime& t = rec.times[static_cast<size_t>(m.rank)][static_cast<size_t>(m.task)];
      if (std::isfinite(latest) && t.end_s >= latest) t.start_s = std::max(t.start_s, latest);
    }
  }
  MeasuredSummary s;
  std::vector<double> end(static_cast<size_t>(world), 0.0);
  for (int r = 0; r < world; ++r) {
    const auto& tasks = plan.tasks_of(r);
    const auto& tt = rec.times[static_cast<size_t>(r)];
    if (tt.size() != tasks.size())
      throw ProgramError("rank " + std::to_string(r) + ": recorded " + std::to_string(tt.size()) +
                         " task times, it has " + std::to_string(tasks.size()) + " tasks");
    for (size_t i = 0; i < tt.size(); ++i) {
      if (!std::isfinite(tt[i].start_s) || !std::isfinite(tt[i].end_s) || tt[i].end_s < tt[i].start_s ||
          tt[i].start_s < 0)
        throw ProgramError("rank " + std::to_string(r) + ": " +
                           task_where(p, plan.ranks[static_cast<size_t>(r)].sim, static_cast<int>(i)) +
                           ": recorded start " + std::to_string(tt[i].start_s) + " s, end " +
                           std::to_string(tt[i].end_s) + " s");
      end[static_cast<size_t>(r)] = std::max(end[static_cast<size_t>(r)], tt[i].end_s);
    }
    s.step_time_s = std::max(s.step_time_s, end[static_cast<size_t>(r)]);
  }
  // Critical rank: ends last; then busiest compute stream; then lowest (engine.cc).
  double best_busy = -1;
  for (int r = 0; r < world; ++r) {
    if (end[static_cast<size_t>(r)] != s.step_time_s) continue;
    double busy = 0;
    const auto& tasks = plan.tasks_of(r);
    for (size_t i = 0; i < tasks.size(); ++i)
      if (tasks[i].stream == 0)
        busy += rec.times[static_cast<size_t>(r)][i].end_s - rec.times[static_cast<size_t>(r)][i].start_s;
    if (busy > best_busy) {
      best_busy = busy;
      s.critical_rank = r;
    }
  }
  const auto& tasks = plan.tasks_of(s.critical_rank);
  const auto& tt = rec.times[static_cast<size_t>(s.critical_rank)];
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].kind == Kind::kAlloc || tasks[i].kind == Kind::kFree) continue;
    const double d = tt[i].end_s - tt[i].start_s;
    s.busy_by_kind_s[kind_name(tasks[i].kind)] += d;
    s.busy_by_phase_s[kPhases[static_cast<size_t>(tasks[i].phase)]] += d;
  }
  // Exposed time per category (engine.cc Engine::breakdown): sweep the stream intervals,
  // ends before starts at equal times.
  struct Edge {
    double t;
    int start, stream, cat;
  };
  std::vector<Edge> edges;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tt[i].end_s <= tt[i].start_s) continue;
    edges.push_back({tt[i].start_s, 1, tasks[i].stream, tasks[i].category});
    edges.push_back({tt[i].end_s, 0, tasks[i].stream, tasks[i].category});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) {
    return a.t != b.t ? a.t < b.t : a.start < b.start;
  });
  const int ncat = static_cast<int>(kCategories.size());
  std::vector<double> exposed(static_cast<size_t>(ncat) + 1, 0.0);
  std::vector<int> active(kStreams.size(), -1);
  // The simulator's order (sim/engine/engine.cc, breakdown): compute, tp, tp_ring, cp,
  // cp_recv, ep, pp_send, pp_recv, dp — indices into kStreams.
  static const std::vector<size_t> kOrder = {0, 1, 8, 2, 7, 3, 4, 5, 6};
  auto attribute = [&]() -> size_t {
    for (size_t k : kOrder)
      if (active[k] >= 0) return static_cast<size_t>(active[k]);
    return static_cast<size_t>(ncat);  // bubble
  };
  double prev = 0;
  for (const Edge& e : edges) {
    if (e.t > prev) {
      exposed[attribute()] += e.t - prev;
      prev = e.t;
    }
    active[static_cast<size_t>(e.stream)] = e.start ? e.cat : -1;
  }
  exposed[attribute()] += s.step_time_s - prev;
  for (int c = 0; c < ncat; ++c) s.breakdown_s[kCategories[static_cast<size_t>(c)]] = exposed[static_cast<size_t>(c)];
  s.breakdown_s["bubble"] = exposed[static_cast<size_t>(ncat)];
  return s;
}

void write_measured(const Plan& plan, const Recorded& rec,
                    const std::map<std::string, std::string>& provenance, bool with_timeline,
                    std::ostream& out) {
  const Program& p = *plan.program;
  const MeasuredSummary s = summarize(plan, rec);
  bench::JsonWriter w(out);
  w.begin_object();
  w.field("schema", "stepcast.result/1");
  w.field("measured", true);
  w.field("scenario", p.scenario_name);
  w.field("program", p.file);
  w.field("gpus", p.world_size);
  w.field("step_time_s", s.step_time_s);
  double peak = 0;
  int stages = 1;
  for (const ExecRank& er : plan.ranks) stages = std::max(stages, er.pp_stage + 1);
  std::vector<double> per_stage(static_cast<size_t>(stages), 0.0);
  for (const ExecRank& er : plan.ranks) {
    const size_t r = static_cast<size_t>(er.rank);
    const double gib = r < rec.peak_bytes.size() && rec.peak_bytes[r] > 0 ? rec.peak_bytes[r] / kGiB : 0.0;
    peak = std::max(peak, gib);
    per_stage[static_cast<size_t>(er.pp_stage)] = std::max(per_stage[static_cast<size_t>(er.pp_stage)], gib);
  }
  w.field("memory_peak_gib", peak);
  w.key("memory_peak_gib_per_stage");
  w.begin_array();
  for (double g : per_stage) w.value(g);
  w.end_array();
  auto map_field = [&](const std::string& k, const std::map<std::string, double>& m,
                       const std::vector<std::string>& order) {
    w.key(k);
    w.begin_object();
    for (const auto& name : order)
      if (auto it = m.find(name); it != m.end()) w.field(name, it->second);
    w.end_object();
  };
  std::vector<std::string> cats = kCategories;
  cats.push_back("bubble");
  map_field("breakdown_s", s.breakdown_s, cats);
  std::vector<std::string> kinds;
  for (int k = 0; k < kKindCount; ++k) kinds.push_back(kind_name(static_cast<Kind>(k)));
  map_field("busy_by_kind_s", s.busy_by_kind_s, kinds);
  map_field("busy_by_phase_s", s.busy_by_phase_s, kPhases);
  w.field("critical_rank", s.critical_rank);
  w.field("simulated_ranks", p.world_size);
  w.field("folded", false);
  std::int64_t events = 0;
  for (const ExecRank& er : plan.ranks) events += 2 * static_cast<std::int64_t>(plan.tasks_of(er.rank).size());
  w.field("events", events);
  w.key("provenance");
  w.begin_object();
  for (const auto& [k, v] : provenance) w.field(k, v);
  w.end_object();
  if (with_timeline) {
    w.key("timeline");
    w.begin_array();
    for (size_t r = 0; r < rec.times.size(); ++r) {
      w.begin_object();
      w.field("rank", static_cast<int>(r));
      w.key("tasks_s");
      w.begin_array();
      for (const TaskTime& t : rec.times[r]) {
        w.begin_array();
        w.value(t.start_s);
        w.value(t.end_s);
        w.end_array();
      }
      w.end_array();
      w.end_object();
    }
    w.end_array();
  }
  w.end_object();
  out << "\n";
}

}  // namespace stepcast::exec
