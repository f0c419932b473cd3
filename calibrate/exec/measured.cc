// Recorded task times -> "stepcast.result/1" (measured.h).
#include "measured.h"

#include <algorithm>
#include <cmath>

#include "json_io.h"

namespace stepcast::exec {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A rendezvous starts when its last member reaches it (the simulator's semantics): on the
// GPU an early member's NCCL kernel starts and spins until the others arrive, so its
// recorded start is moved to the latest member's start (header).
void align_rendezvous(const Plan& plan, Recorded& rec) {
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
}

// Each rank's end (its last task's); checks every recorded time. The step ends with the last.
std::vector<double> rank_ends(const Plan& plan, const Recorded& rec, MeasuredSummary& s) {
  const Program& p = *plan.program;
  const int world = plan.world_size();
  std::vector<double> end(static_cast<size_t>(world), 0.0);
  for (int r = 0; r < world; ++r) {
    const auto& tasks = plan.tasks_of(r);
    const auto& tt = rec.times[static_cast<size_t>(r)];
    if (tt.size() != tasks.size())
      throw ProgramError("rank " + std::to_string(r) + ": recorded " + std::to_string(tt.size()) +
                         " task times, it has " + std::to_string(tasks.size()) + " tasks");
    for (size_t i = 0; i < tt.size(); ++i) {
      if (!std::isfinite(tt[i].start_s) || !std::isfinite(tt[i].end_s) ||
          tt[i].end_s < tt[i].start_s || tt[i].start_s < 0)
        throw ProgramError(
            "rank " + std::to_string(r) + ": " +
            task_where(p, plan.ranks[static_cast<size_t>(r)].sim, static_cast<int>(i)) +
            ": recorded start " + std::to_string(tt[i].start_s) + " s, end " +
            std::to_string(tt[i].end_s) + " s");
      end[static_cast<size_t>(r)] = std::max(end[static_cast<size_t>(r)], tt[i].end_s);
    }
    s.step_time_s = std::max(s.step_time_s, end[static_cast<size_t>(r)]);
  }
  return end;
}

// Critical rank: ends last; then busiest compute stream; then lowest (engine.cc).
void find_critical_rank(const Plan& plan, const Recorded& rec, const std::vector<double>& end,
                        MeasuredSummary& s) {
  const int world = plan.world_size();
  double best_busy = -1;
  for (int r = 0; r < world; ++r) {
    if (end[static_cast<size_t>(r)] != s.step_time_s) continue;
    double busy = 0;
    const auto& tasks = plan.tasks_of(r);
    for (size_t i = 0; i < tasks.size(); ++i)
      if (tasks[i].stream == 0)
        busy += rec.times[static_cast<size_t>(r)][i].end_s -
                rec.times[static_cast<size_t>(r)][i].start_s;
    if (busy > best_busy) {
      best_busy = busy;
      s.critical_rank = r;
    }
  }
}

// Exposed time per category (engine.cc Engine::breakdown) on the critical rank: sweep the
// stream intervals, ends before starts at equal times.
void exposed_breakdown(const std::vector<Task>& tasks, const std::vector<TaskTime>& tt,
                       MeasuredSummary& s) {
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
  for (int c = 0; c < ncat; ++c)
    s.breakdown_s[kCategories[static_cast<size_t>(c)]] = exposed[static_cast<size_t>(c)];
  s.breakdown_s["bubble"] = exposed[static_cast<size_t>(ncat)];
}

}  // namespace

MeasuredSummary summarize(const Plan& plan, const Recorded& recorded) {
  const int world = plan.world_size();
  if (static_cast<int>(recorded.times.size()) != world)
    throw ProgramError("recorded times for " + std::to_string(recorded.times.size()) +
                       " ranks, the plan has " + std::to_string(world));
  Recorded rec = recorded;
  align_rendezvous(plan, rec);
  MeasuredSummary s;
  const std::vector<double> end = rank_ends(plan, rec, s);
  find_critical_rank(plan, rec, end, s);
  const auto& tasks = plan.tasks_of(s.critical_rank);
  const auto& tt = rec.times[static_cast<size_t>(s.critical_rank)];
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].kind == Kind::kAlloc || tasks[i].kind == Kind::kFree) continue;
    const double d = tt[i].end_s - tt[i].start_s;
    s.busy_by_kind_s[kind_name(tasks[i].kind)] += d;
    s.busy_by_phase_s[kPhases[static_cast<size_t>(tasks[i].phase)]] += d;
  }
  exposed_breakdown(tasks, tt, s);
  return s;
}

void write_measured(const Plan& plan, const Recorded& rec,
                    const std::map<std::string, std::string>& provenance, bool with_timeline,
                    std::ostream& out) {
  const Program& p = *plan.program;
  const MeasuredSummary s = summarize(plan, rec);
  bench::Json doc;
  doc["schema"] = "stepcast.result/1";
  doc["measured"] = true;
  doc["scenario"] = p.scenario_name;
  doc["program"] = p.file;
  doc["gpus"] = p.world_size;
  doc["step_time_s"] = s.step_time_s;
  if (rec.untimed_step_s >= 0) doc["step_time_untimed_s"] = rec.untimed_step_s;
  double peak = 0;
  int stages = 1;
  for (const ExecRank& er : plan.ranks) stages = std::max(stages, er.pp_stage + 1);
  std::vector<double> per_stage(static_cast<size_t>(stages), 0.0);
  for (const ExecRank& er : plan.ranks) {
    const size_t r = static_cast<size_t>(er.rank);
    const double gib =
        r < rec.peak_bytes.size() && rec.peak_bytes[r] > 0 ? rec.peak_bytes[r] / kGiB : 0.0;
    peak = std::max(peak, gib);
    per_stage[static_cast<size_t>(er.pp_stage)] =
        std::max(per_stage[static_cast<size_t>(er.pp_stage)], gib);
  }
  doc["memory_peak_gib"] = peak;
  doc["memory_peak_gib_per_stage"] = per_stage;
  auto map_field = [&](const std::string& k, const std::map<std::string, double>& m,
                       const std::vector<std::string>& order) {
    bench::Json& o = doc[k] = bench::Json::object();
    for (const auto& name : order)
      if (auto it = m.find(name); it != m.end()) o[name] = it->second;
  };
  std::vector<std::string> cats = kCategories;
  cats.push_back("bubble");
  map_field("breakdown_s", s.breakdown_s, cats);
  std::vector<std::string> kinds;
  for (int k = 0; k < kKindCount; ++k) kinds.push_back(kind_name(static_cast<Kind>(k)));
  map_field("busy_by_kind_s", s.busy_by_kind_s, kinds);
  map_field("busy_by_phase_s", s.busy_by_phase_s, kPhases);
  doc["critical_rank"] = s.critical_rank;
  doc["simulated_ranks"] = p.world_size;
  doc["folded"] = false;
  std::int64_t events = 0;
  for (const ExecRank& er : plan.ranks)
    events += 2 * static_cast<std::int64_t>(plan.tasks_of(er.rank).size());
  doc["events"] = events;
  bench::Json& prov = doc["provenance"] = bench::Json::object();
  for (const auto& [k, v] : provenance) prov[k] = v;
  if (with_timeline) {
    bench::Json& timeline = doc["timeline"] = bench::Json::array();
    for (size_t r = 0; r < rec.times.size(); ++r) {
      bench::Json tasks_s = bench::Json::array();
      for (const TaskTime& t : rec.times[r]) tasks_s.push_back({t.start_s, t.end_s});
      timeline.push_back({{"rank", static_cast<int>(r)}, {"tasks_s", std::move(tasks_s)}});
    }
  }
  bench::write_json(out, doc);
  out << "\n";
}

}  // namespace stepcast::exec
