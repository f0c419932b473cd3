// Per task against a measured timeline (validate_tasks.h).
#include "sim/report/validate_tasks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "model/error.h"
#include "model/units.h"
#include "sim/cost/coster.h"
#include "sim/io/json_locator.h"
#include "sim/lower/lower.h"

namespace stepcast {

namespace {

// "fwd.L12.ln1.mb3" -> "fwd.L#.ln#.mb#": a run of digits becomes one '#'.
std::string label_pattern(const std::string& label) {
  std::string out;
  for (std::size_t i = 0; i < label.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(label[i]))) {
      if (out.empty() || out.back() != '#') out += '#';
    } else {
      out += label[i];
    }
  }
  return out;
}

bool compared(TaskKind k) {
  return k == TaskKind::kGemm || k == TaskKind::kAttention || k == TaskKind::kMemoryBound;
}

// The measured timeline: rank -> [start, end] per task. Every problem is collected, then
// thrown at its line in the file.
std::map<int, std::vector<std::pair<double, double>>> read_timeline(const Program& prog,
                                                                    const std::string& text,
                                                                    const std::string& file) {
  const nlohmann::json j = parse_json(text, file);
  std::vector<InputIssue> issues;
  auto add = [&](const std::string& key, const std::string& msg) {
    issues.push_back(InputIssue{file, 0, 0, key, msg});
  };
  std::map<int, std::vector<std::pair<double, double>>> out;
  if (!j.is_object() || !j.contains("timeline") || !j["timeline"].is_array()) {
    add("", "no \"timeline\" array: run stepcast-exec with --timeline");
  } else {
    const nlohmann::json& tl = j["timeline"];
    for (std::size_t i = 0; i < tl.size(); ++i) {
      const std::string at = fmt::format("/timeline/{}", i);
      const nlohmann::json& e = tl[i];
      if (!e.is_object() || !e.contains("rank") || !e["rank"].is_number_integer() ||
          !e.contains("tasks_s") || !e["tasks_s"].is_array()) {
        add(at, "expected {\"rank\": integer, \"tasks_s\": [[start_s, end_s], ...]}");
        continue;
      }
      const nlohmann::json& r = e["rank"];
      if (r.is_number_unsigned() ? r.get<std::uint64_t>() >= prog.ranks.size()
                                 : (r.get<std::int64_t>() < 0 ||
                                    r.get<std::int64_t>() >= std::int64_t(prog.ranks.size()))) {
        add(at + "/rank", fmt::format("rank {} is not in the scenario's Program ({} ranks)",
                                      r.dump(), prog.ranks.size()));
        continue;
      }
      const int rank = r.get<int>();
      if (out.count(rank)) {
        add(at + "/rank", fmt::format("rank {} is given twice", rank));
        continue;
      }
      const nlohmann::json& ts = e["tasks_s"];
      const std::size_t want = prog.ranks[static_cast<std::size_t>(rank)].tasks.size();
      if (ts.size() != want) {
        add(at + "/tasks_s",
            fmt::format("{} tasks, but rank {} of the scenario's Program has {}: was the "
                        "measured Program lowered from this scenario with --fidelity full?",
                        ts.size(), rank, want));
        continue;
      }
      auto& row = out[rank];
      for (std::size_t k = 0; k < ts.size(); ++k) {
        const nlohmann::json& p = ts[k];
        if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number() ||
            !(p[0].get<double>() >= 0) || !(p[1].get<double>() >= p[0].get<double>()) ||
            !std::isfinite(p[1].get<double>())) {
          add(fmt::format("{}/tasks_s/{}", at, k),
              "expected [start_s, end_s], finite, 0 <= start_s <= end_s");
          break;
        }
        row.emplace_back(p[0].get<double>(), p[1].get<double>());
      }
    }
    if (issues.empty() && out.empty()) add("/timeline", "no rank in the timeline");
  }
  if (!issues.empty()) {
    locate_json_pointer_issues(issues, text);
    throw InputError(std::move(issues));
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// TimingFloor (validate_tasks.h): the ready time of each task from its stream's previous
// task and its deps (same-rank ids, Program order), against its measured start.
TimingFloor timing_floor(const Program& prog,
                         const std::map<int, std::vector<std::pair<double, double>>>& timeline) {
  TimingFloor f;
  std::vector<double> waits, allocs, frees;
  for (const auto& [rank, row] : timeline) {
    const RankProgram& rp = prog.ranks[static_cast<std::size_t>(rank)];
    std::map<StreamKind, double> stream_end;
    for (std::size_t i = 0; i < row.size(); ++i) {
      const Task& t = rp.tasks[i];
      double ready = 0;
      if (auto it = stream_end.find(t.stream); it != stream_end.end()) ready = it->second;
      for (int d : t.deps) ready = std::max(ready, row[static_cast<std::size_t>(d)].second);
      const double wait = std::max(0.0, row[i].first - ready);
      waits.push_back(wait);
      f.wait_sum_s += wait;
      if (t.kind == TaskKind::kAlloc) allocs.push_back(row[i].second - row[i].first);
      if (t.kind == TaskKind::kFree) frees.push_back(row[i].second - row[i].first);
      stream_end[t.stream] = row[i].second;
    }
  }
  f.tasks = static_cast<int>(waits.size());
  f.kernelless = static_cast<int>(allocs.size() + frees.size());
  f.wait_median_s = median(std::move(waits));
  // The cheaper kind's median: issued on the stream, a free is a stream-ordered
  // cudaFreeAsync (2.0 us on the H200 run, against 1.3 us for an alloc; 1.3 both in a graph).
  if (allocs.empty() || frees.empty())
    f.kernelless_median_s = median(allocs.empty() ? std::move(frees) : std::move(allocs));
  else
    f.kernelless_median_s = std::min(median(std::move(allocs)), median(std::move(frees)));
  return f;
}

}  // namespace

TaskComparison compare_tasks(const Scenario& scenario, const std::string& measured_text,
                             const std::string& measured_file) {
  LowerOptions lo;
  lo.folded = false;  // the executor runs every rank
  const Program prog = lower(scenario, lo);
  const auto timeline = read_timeline(prog, measured_text, measured_file);
  const Durations d = task_durations(prog, scenario.profile);
  std::map<std::pair<std::string, std::string>, TaskGroupComparison> groups;
  for (const auto& [rank, row] : timeline) {
    const RankProgram& rp = prog.ranks[static_cast<std::size_t>(rank)];
    for (std::size_t i = 0; i < row.size(); ++i) {
      const Task& t = rp.tasks[i];
      if (!compared(t.kind)) continue;
      TaskGroupComparison& g = groups[{task_kind_name(t.kind), label_pattern(t.label)}];
      g.kind = task_kind_name(t.kind);
      g.label = label_pattern(t.label);
      ++g.count;
      g.measured_s += row[i].second - row[i].first;
      g.predicted_s += static_cast<double>(d[static_cast<std::size_t>(rank)][i]) * 1e-9;
      g.flops += t.flops;
      g.bytes += t.bytes_read + t.bytes_written;
    }
  }
  TaskComparison out;
  std::map<std::string, TaskGroupComparison> kinds;
  for (auto& [key, g] : groups) {
    TaskGroupComparison& k = kinds[g.kind];
    k.kind = g.kind;
    k.label = "(all)";
    k.count += g.count;
    k.measured_s += g.measured_s;
    k.predicted_s += g.predicted_s;
    k.flops += g.flops;
    k.bytes += g.bytes;
    out.groups.push_back(g);
  }
  auto by_measured = [](const TaskGroupComparison& a, const TaskGroupComparison& b) {
    return std::tie(b.measured_s, a.kind, a.label) < std::tie(a.measured_s, b.kind, b.label);
  };
  std::sort(out.groups.begin(), out.groups.end(), by_measured);
  for (auto& [name, k] : kinds) out.kinds.push_back(k);
  std::sort(out.kinds.begin(), out.kinds.end(), by_measured);
  out.floor = timing_floor(prog, timeline);
  return out;
}

namespace {

// What the measured tasks achieved: TFLOP/s for GEMM and attention, GB/s for memory-bound.
std::string achieved(const TaskGroupComparison& g) {
  if (g.measured_s <= 0) return "";
  if (g.kind == "memory_bound") return fmt::format("{:.0f} GB/s", g.bytes / g.measured_s / 1e9);
  return fmt::format("{:.0f} TFLOP/s", g.flops / g.measured_s / 1e12);
}

double error_of(const TaskGroupComparison& g) {
  return g.measured_s > 0 ? g.predicted_s / g.measured_s - 1 : 0.0;
}

}  // namespace

std::string render_task_comparison(const TaskComparison& c, int top) {
  std::string o = fmt::format("{:<13} {:<34} {:>6} {:>11} {:>11} {:>8} {:>14}\n", "kind", "label",
                              "tasks", "predicted", "measured", "error", "measured rate");
  auto line = [&](const TaskGroupComparison& g) {
    o += fmt::format("{:<13} {:<34} {:>6} {:>11} {:>11} {:>+7.1f}% {:>14}\n", g.kind, g.label,
                     g.count, format_time(g.predicted_s), format_time(g.measured_s),
                     100 * error_of(g), achieved(g));
  };
  for (const TaskGroupComparison& k : c.kinds) line(k);
  const TimingFloor& f = c.floor;
  o += fmt::format(
      "\nmeasurement floor: {} tasks started a median {} after they were ready ({} in all);\n"
      "{} tasks with no kernel (alloc, free) spanned a median {}; about {} of the measured\n"
      "span is the timing itself (the waits, and that floor in every kernel task)\n\n",
      f.tasks, format_time(f.wait_median_s), format_time(f.wait_sum_s), f.kernelless,
      format_time(f.kernelless_median_s), format_time(f.instrumentation_s()));
  int shown = 0;
  for (const TaskGroupComparison& g : c.groups) {
    if (top > 0 && shown++ >= top) {
      o += fmt::format("... {} more label groups (--top 0: all)\n", c.groups.size() - top);
      break;
    }
    line(g);
  }
  return o;
}

nlohmann::json task_comparison_to_json(const TaskComparison& c) {
  auto rows = [](const std::vector<TaskGroupComparison>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const TaskGroupComparison& g : v)
      a.push_back({{"kind", g.kind},
                   {"label", g.label},
                   {"tasks", g.count},
                   {"predicted_s", g.predicted_s},
                   {"measured_s", g.measured_s},
                   {"error", error_of(g)},
                   {"flops", g.flops},
                   {"bytes", g.bytes}});
    return a;
  };
  const TimingFloor& f = c.floor;
  return {{"kinds", rows(c.kinds)},
          {"groups", rows(c.groups)},
          {"floor",
           {{"tasks", f.tasks},
            {"wait_median_s", f.wait_median_s},
            {"wait_sum_s", f.wait_sum_s},
            {"kernelless_tasks", f.kernelless},
            {"kernelless_median_s", f.kernelless_median_s},
            {"instrumentation_s", f.instrumentation_s()}}}};
}

}  // namespace stepcast
