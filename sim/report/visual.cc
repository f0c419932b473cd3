#include "sim/report/visual.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "sim/scenario/scenario.h"

namespace stepcast {

namespace {

double us(TimeNs ns) { return static_cast<double>(ns) / 1e3; }

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// Colours per phase / category (also the legend).
const char* phase_colour(Phase ph) {
  switch (ph) {
    case Phase::kFwd: return "#4c78a8";
    case Phase::kBwdInput: return "#54a24b";
    case Phase::kBwdWeight: return "#72b7b2";
    case Phase::kRecompute: return "#f58518";
    case Phase::kOptimizer: return "#b279a2";
    case Phase::kOther: return "#9d755d";
  }
  return "#999999";
}
const char* comm_colour() { return "#e45756"; }
const char* bubble_colour() { return "#eeeeee"; }

// The simulated rank drawn for each stage: the first one with that stage.
std::vector<int> stage_ranks(const Program& p) {
  std::map<int, int> first;
  for (size_t i = 0; i < p.ranks.size(); ++i)
    first.emplace(p.ranks[i].pp_stage, static_cast<int>(i));
  std::vector<int> out;
  for (auto& [stage, idx] : first) out.push_back(idx);
  return out;
}

}  // namespace

namespace {

// Every trace event in order, handed to `emit` one at a time (a folded trillion-parameter
// step has millions: the whole document would cost gigabytes).
void for_each_trace_event(const Program& p, const Timeline& t, const std::vector<int>& ranks,
                          const std::function<void(nlohmann::json&&)>& emit) {
  std::set<int> keep(ranks.begin(), ranks.end());
  for (size_t ri = 0; ri < p.ranks.size(); ++ri) {
    const RankProgram& rp = p.ranks[ri];
    if (!keep.empty()) {
      bool any = keep.count(rp.rank) > 0;
      for (int g : rp.stands_for) any = any || keep.count(g) > 0;
      if (!any) continue;
    }
    const int pid = static_cast<int>(ri);
    std::string pname = fmt::format("rank {} (stage {})", rp.rank, rp.pp_stage);
    if (rp.stands_for.size() > 1) {
      pname += fmt::format(", stands for {} ranks", rp.stands_for.size());
    }
    emit({{"ph", "M"}, {"pid", pid}, {"name", "process_name"}, {"args", {{"name", pname}}}});
    emit({{"ph", "M"},
          {"pid", pid},
          {"name", "process_sort_index"},
          {"args", {{"sort_index", pid}}}});
    for (int s = 0; s < kStreamCount; ++s) {
      emit({{"ph", "M"},
            {"pid", pid},
            {"tid", s},
            {"name", "thread_name"},
            {"args", {{"name", stream_name(static_cast<StreamKind>(s))}}}});
    }
    const RankTimeline& rt = t.ranks[ri];
    for (const Task& task : rp.tasks) {
      if (task.kind == TaskKind::kAlloc || task.kind == TaskKind::kFree) continue;
      const TaskTiming& tt = rt.tasks[static_cast<size_t>(task.id)];
      nlohmann::json args = {{"kind", task_kind_name(task.kind)},
                             {"phase", phase_name(task.phase)},
                             {"category", category_name(task.category)}};
      if (task.layer >= 0) args["layer"] = task.layer;
      if (task.microbatch >= 0) args["microbatch"] = task.microbatch;
      if (task.chunk >= 0) args["chunk"] = task.chunk;
      if (task.flops > 0) args["flops"] = task.flops;
      if (task.bytes > 0) args["bytes"] = task.bytes;
      if (task.kind == TaskKind::kGemm) {
        args["gemm"] = fmt::format("{}x{}x{} batch {}", task.gemm.m, task.gemm.n, task.gemm.k,
                                   task.gemm.batch);
      }
      if (task.kind == TaskKind::kCollective) {
        args["op"] = coll_op_name(task.coll);
        args["group"] = rp.group_of(task);
      }
      emit({{"ph", "X"},
            {"pid", pid},
            {"tid", static_cast<int>(task.stream)},
            {"name", task.label.empty() ? task_kind_name(task.kind) : task.label},
            {"cat", task_kind_name(task.kind)},
            {"ts", us(tt.start)},
            {"dur", us(tt.end - tt.start)},
            {"args", args}});
    }
    for (const MemorySample& m : rt.memory) {
      emit({{"ph", "C"},
            {"pid", pid},
            {"name", "memory in use"},
            {"ts", us(m.t)},
            {"args", {{"GiB", m.bytes / kGiB}}}});
    }
  }
  if (!t.link_utilization.empty()) {
    // Flow mode: utilisation of each link class over the step, as one counter track.
    const int pid = static_cast<int>(p.ranks.size());
    emit({{"ph", "M"},
          {"pid", pid},
          {"name", "process_name"},
          {"args", {{"name", "network (flow mode): link utilisation %"}}}});
    for (const LinkUtilSample& s : t.link_utilization) {
      nlohmann::json args = nlohmann::json::object();
      for (int c = 0; c < kLinkClasses; ++c)
        args[kLinkClassNames[c]] = 100.0 * s.util[static_cast<size_t>(c)];
      emit({{"ph", "C"},
            {"pid", pid},
            {"name", "link utilisation %"},
            {"ts", us(s.t)},
            {"args", args}});
    }
  }
}

nlohmann::json trace_header(const Program& p) {
  return {{"displayTimeUnit", "ms"},
          {"otherData", {{"generator", "stepcast"}, {"scenario", p.scenario_name}}}};
}

}  // namespace

nlohmann::json trace_json(const Program& p, const Timeline& t, const std::vector<int>& ranks) {
  nlohmann::json events = nlohmann::json::array();
  for_each_trace_event(p, t, ranks, [&](nlohmann::json&& e) { events.push_back(std::move(e)); });
  nlohmann::json doc = trace_header(p);
  doc["traceEvents"] = std::move(events);
  return doc;
}

void write_trace_json(const Program& p, const Timeline& t, const std::vector<int>& ranks,
                      std::ostream& out) {
  // The keys sort as "displayTimeUnit" < "otherData" < "traceEvents", so the header's
  // dump without its closing brace is the start of the document.
  std::string head = trace_header(p).dump();
  head.pop_back();
  out << head << ",\"traceEvents\":[";
  std::string buf;
  bool first = true;
  for_each_trace_event(p, t, ranks, [&](nlohmann::json&& e) {
    if (!first) buf += ',';
    first = false;
    buf += e.dump();
    if (buf.size() >= (size_t{1} << 20)) {
      out << buf;
      buf.clear();
    }
  });
  out << buf << "]}";
}

std::vector<ScheduleBlock> schedule_blocks(const Program& p, const Timeline& t, TimeNs merge_gap) {
  std::vector<ScheduleBlock> out;
  for (int ri : stage_ranks(p)) {
    const RankProgram& rp = p.ranks[static_cast<size_t>(ri)];
    const RankTimeline& rt = t.ranks[static_cast<size_t>(ri)];
    // Tasks of each row in time order; merge consecutive tasks of the same unit.
    for (int row = 0; row < 2; ++row) {
      const bool comm = row == 1;
      std::vector<const Task*> tasks;
      for (const Task& task : rp.tasks) {
        if (task.kind == TaskKind::kAlloc || task.kind == TaskKind::kFree) continue;
        const bool is_compute = task.stream == StreamKind::kCompute;
        if (is_compute == comm) continue;
        const TaskTiming& tt = rt.tasks[static_cast<size_t>(task.id)];
        if (tt.end <= tt.start) continue;
        tasks.push_back(&task);
      }
      std::stable_sort(tasks.begin(), tasks.end(), [&](const Task* a, const Task* b) {
        return rt.tasks[static_cast<size_t>(a->id)].start <
               rt.tasks[static_cast<size_t>(b->id)].start;
      });
      for (const Task* task : tasks) {
        const TaskTiming& tt = rt.tasks[static_cast<size_t>(task->id)];
        if (!out.empty()) {
          ScheduleBlock& last = out.back();
          const bool backward_parts = merge_gap > 0 && last.phase == Phase::kBwdInput &&
                                      task->phase == Phase::kBwdWeight &&
                                      tt.start <= last.end + merge_gap;
          const bool same_unit =
              last.stage == rp.pp_stage && last.comm == comm &&
              (comm ? last.category == task->category || merge_gap > 0
                    : ((last.phase == task->phase || backward_parts) &&
                       last.microbatch == task->microbatch && last.chunk == task->chunk));
          if (same_unit && (!comm || tt.start <= last.end + merge_gap)) {
            last.end = std::max(last.end, tt.end);
            ++last.tasks;
            last.with_weight_grad = last.with_weight_grad || backward_parts;
            if (comm) last.categories |= 1u << static_cast<unsigned>(task->category);
            continue;
          }
        }
        ScheduleBlock b;
        b.stage = rp.pp_stage;
        b.comm = comm;
        b.phase = task->phase;
        b.category = task->category;
        b.microbatch = task->microbatch;
        b.chunk = task->chunk;
        b.start = tt.start;
        b.end = tt.end;
        if (comm) b.categories = 1u << static_cast<unsigned>(task->category);
        out.push_back(b);
      }
    }
  }
  return out;
}

// The schedule's legend: one swatch per phase, communication and idle, from (left, ly).
static std::string legend_svg(double left, double ly) {
  std::string o;
  struct Item {
    const char* name;
    const char* colour;
  };
  const Item items[] = {{"forward", phase_colour(Phase::kFwd)},
                        {"backward (input grad)", phase_colour(Phase::kBwdInput)},
                        {"weight grad", phase_colour(Phase::kBwdWeight)},
                        {"recompute", phase_colour(Phase::kRecompute)},
                        {"optimizer", phase_colour(Phase::kOptimizer)},
                        {"communication", comm_colour()},
                        {"bubble / idle", bubble_colour()}};
  double lx = left;
  for (const Item& it : items) {
    o += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\" stroke=\"#999\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
        lx, ly, it.colour, lx + 16, ly + 10, it.name);
    lx += 150;
  }
  return o;
}

std::string pipeline_svg(const Program& p, const Timeline& t) {
  const std::vector<int> srs = stage_ranks(p);
  const int stages = static_cast<int>(srs.size());
  const double left = 80, width = 1100, row_h = 26, comm_h = 8, gap = 10;
  const double stage_h = row_h + comm_h + gap;
  const double top = 40;
  const double sched_h = stages * stage_h;
  const double mem_top = top + sched_h + 50, mem_h = 140;
  const double total_h = mem_top + mem_h + 70;
  const double step = std::max<double>(1.0, static_cast<double>(t.step_ns));
  auto x = [&](TimeNs ns) { return left + width * static_cast<double>(ns) / step; };
  std::string o;
  o += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"10\">\n",
      left + width + 40, total_h);
  o += fmt::format(
      "<text x=\"{}\" y=\"18\" font-size=\"13\">Pipeline schedule: {} (step {})</text>\n", left,
      xml_escape(p.scenario_name), xml_escape(format_time(to_s(t.step_ns))));
  // Stage rows with bubble background.
  for (int s = 0; s < stages; ++s) {
    double y = top + s * stage_h;
    o += fmt::format("<text x=\"4\" y=\"{:.1f}\">stage {}</text>\n", y + row_h * 0.7,
                     p.ranks[static_cast<size_t>(srs[static_cast<size_t>(s)])].pp_stage);
    o += fmt::format(
        "<rect class=\"bubble\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
        "fill=\"{}\"/>\n",
        left, y, width, row_h, bubble_colour());
  }
  std::map<int, int> row_of;
  for (int s = 0; s < stages; ++s)
    row_of[p.ranks[static_cast<size_t>(srs[static_cast<size_t>(s)])].pp_stage] = s;
  // Merged at half a pixel (schedule_blocks): tooltips count the tasks of a block.
  for (const ScheduleBlock& b : schedule_blocks(p, t, static_cast<TimeNs>(step / width / 2))) {
    double y = top + row_of[b.stage] * stage_h + (b.comm ? row_h + 1 : 0);
    double h = b.comm ? comm_h : row_h;
    double x0 = x(b.start), w = std::max(0.5, x(b.end) - x0);
    const char* colour = b.comm ? comm_colour() : phase_colour(b.phase);
    std::string comm_kinds;
    for (int c = 0; c < kCategoryCount; ++c)
      if (b.categories & (1u << static_cast<unsigned>(c)))
        comm_kinds += (comm_kinds.empty() ? "" : " + ") +
                      std::string(category_name(static_cast<Category>(c)));
    std::string title =
        b.comm ? fmt::format("{} ({} task{})", comm_kinds, b.tasks, b.tasks == 1 ? "" : "s")
               : fmt::format("{}{} mb{}{}", phase_name(b.phase),
                             b.with_weight_grad ? " + bwd_weight" : "", b.microbatch,
                             b.chunk >= 0 ? fmt::format(" chunk{}", b.chunk) : "");
    o += fmt::format(
        "<rect class=\"block\" data-stage=\"{}\" data-kind=\"{}\" x=\"{:.2f}\" y=\"{:.1f}\" "
        "width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\" stroke=\"#ffffff\" stroke-width=\"0.3\">"
        "<title>{} {}..{}</title></rect>\n",
        b.stage, b.comm ? category_name(b.category) : phase_name(b.phase), x0, y, w, h, colour,
        xml_escape(title), xml_escape(format_time(to_s(b.start))),
        xml_escape(format_time(to_s(b.end))));
    if (!b.comm && b.microbatch >= 0 && w >= 12) {
      o += fmt::format(
          "<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#ffffff\" text-anchor=\"middle\">{}</text>\n",
          x0 + w / 2, y + row_h * 0.65, b.microbatch);
    }
  }
  // Time axis in ms.
  const double axis_y = top + sched_h;
  o += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#333\"/>\n",
                   left, axis_y, left + width, axis_y);
  for (int i = 0; i <= 10; ++i) {
    double xi = left + width * i / 10.0;
    double ms = to_s(t.step_ns) * 1e3 * i / 10.0;
    o += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#333\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4:.1f}</text>\n",
        xi, axis_y, axis_y + 4, axis_y + 15, ms);
  }
  o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">time (ms)</text>\n",
                   left + width / 2, axis_y + 28);
  // Memory in use per stage.
  double peak = 1;
  for (int ri : srs) peak = std::max(peak, t.ranks[static_cast<size_t>(ri)].peak_bytes);
  o += fmt::format(
      "<text x=\"{}\" y=\"{:.1f}\" font-size=\"12\">Memory in use per stage (peak {})</text>\n",
      left, mem_top - 8, xml_escape(format_bytes(peak)));
  o += fmt::format(
      "<rect x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n",
      left, mem_top, width, mem_h);
  static const char* kLineColours[] = {"#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2",
                                       "#b279a2", "#ff9da6", "#9d755d", "#bab0ac", "#eeca3b"};
  for (int s = 0; s < stages; ++s) {
    const RankTimeline& rt = t.ranks[static_cast<size_t>(srs[static_cast<size_t>(s)])];
    std::string pts;
    double prev = 0;
    for (const MemorySample& m : rt.memory) {
      double xm = x(m.t);
      pts += fmt::format("{:.1f},{:.1f} ", xm, mem_top + mem_h - mem_h * prev / peak);
      pts += fmt::format("{:.1f},{:.1f} ", xm, mem_top + mem_h - mem_h * m.bytes / peak);
      prev = m.bytes;
    }
    pts += fmt::format("{:.1f},{:.1f}", left + width, mem_top + mem_h - mem_h * prev / peak);
    o += fmt::format(
        "<polyline class=\"memory\" data-stage=\"{}\" fill=\"none\" stroke=\"{}\" "
        "points=\"{}\"/>\n",
        s, kLineColours[s % 10], pts);
  }
  o += legend_svg(left, mem_top + mem_h + 25);
  o += "</svg>\n";
  return o;
}

// The chain of tasks that sets the step time (Result::critical_path), as HTML tables.
static std::string critical_path_html(const CriticalPathSummary& cp) {
  std::string o;
  o += fmt::format(
      "<h2>Critical path</h2>\n<p id=\"critical-path\">{} tasks, {:.6f} s, across "
      "{} rank(s) ({} hops between ranks).</p>\n",
      cp.tasks, cp.total_s, cp.ranks.size(), cp.rank_changes);
  auto table = [&](const char* id, const char* what, const std::map<std::string, double>& m) {
    o += fmt::format("<table id=\"{}\"><tr><th>{}</th><th>time on the path</th><th></th></tr>\n",
                     id, what);
    for (const auto& [k, v] : m)
      o += fmt::format(
          "<tr><td>{}</td><td class=\"num\">{:.6f} s</td><td class=\"num\">{:.1f} %</td></tr>\n",
          xml_escape(k), v, cp.total_s > 0 ? 100 * v / cp.total_s : 0.0);
    o += "</table>\n";
  };
  table("critical-path-category", "category", cp.by_category_s);
  table("critical-path-kind", "task kind", cp.by_kind_s);
  table("critical-path-phase", "phase", cp.by_phase_s);
  o += "<table id=\"critical-path-longest\"><tr><th>longest tasks</th><th>kind</th><th>rank</th>"
       "<th>start</th><th>duration</th></tr>\n";
  for (const CriticalPathSegment& sg : cp.longest)
    o += fmt::format(
        "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.6f} s</td>"
        "<td class=\"num\">{:.6f} s</td></tr>\n",
        xml_escape(sg.label), xml_escape(sg.kind), sg.rank, sg.start_s, sg.duration_s);
  std::string ranks;
  for (size_t i = 0; i < cp.ranks.size(); ++i)
    ranks += (i ? ", " : "") + std::to_string(cp.ranks[i]);
  o += fmt::format("</table>\n<p id=\"critical-path-ranks\">Ranks on the path: {}</p>\n", ranks);
  return o;
}

// The hardware profile's main figures, as table rows.
static std::string profile_rows_html(const HwProfile& hw) {
  std::string o;
  auto prow = [&](const std::string& k, const std::string& v) {
    o += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", xml_escape(k), xml_escape(v));
  };
  prow("profile", hw.name + " (" + hw.file + ")");
  prow("gpu", fmt::format("{}, {}, HBM {}", hw.gpu.name, format_bytes(hw.gpu.memory_bytes),
                          format_bandwidth(hw.gpu.hbm_bytes_per_s)));
  for (const auto& [dt, f] : hw.gpu.peak_flop_per_s)
    prow(fmt::format("peak {}", dtype_name(dt)), fmt::format("{:.1f} TFLOP/s", f / 1e12));
  prow("node",
       fmt::format("{} GPUs, NVLink {} per direction{}, {} NICs x {}", hw.node.gpus,
                   format_bandwidth(hw.node.nvlink_bytes_per_s), hw.node.nvls ? ", NVLS" : "",
                   hw.node.nics, format_bandwidth(hw.node.nic_bytes_per_s)));
  prow("fabric", fmt::format("{}, oversubscription {}, pod {} GPUs", hw.fabric.topology,
                             hw.fabric.oversubscription, hw.fabric.pod_gpus));
  prow("nccl constants", hw.collectives.nccl_version);
  return o;
}

std::string html_report(const Scenario& sc, const Prediction& pred) {
  const Result& r = pred.result;
  std::string o;
  o += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  o += fmt::format("<title>stepcast: {}</title>\n", xml_escape(r.scenario_name));
  o += "<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse}"
       "td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}"
       ".num{text-align:right;font-variant-numeric:tabular-nums}.bar{display:flex;height:28px;"
       "width:900px;"
       "border:1px solid #999}.bar div{height:100%}.warn{color:#b00;font-weight:bold}"
       "pre{background:#f6f6f6;padding:8px;max-width:1000px;overflow:auto}</style></head><body>\n";
  o += fmt::format("<h1>{}</h1>\n", xml_escape(r.scenario_name));
  if (!r.fits_memory) {
    o += "<p class=\"warn\" id=\"no-fit\">This plan does not fit in GPU memory: the step time is "
         "not "
         "achievable.</p>\n";
  }
  o += "<h2>Summary</h2><table id=\"summary\">\n";
  auto row = [&](const char* id, const char* name, const std::string& value) {
    o += fmt::format("<tr><th>{}</th><td class=\"num\" id=\"{}\">{}</td></tr>\n", name, id,
                     xml_escape(value));
  };
  row("model", "Model",
      fmt::format("{} ({:.2f} B parameters)", r.model_name, r.params_total / 1e9));
  row("cluster", "Cluster", fmt::format("{} x {} GPUs", r.profile_name, r.gpus));
  row("plan", "Plan", r.layout);
  if (!r.stragglers.empty()) {
    row("stragglers", "Slow GPUs", r.stragglers);
    row("critical-rank", "Critical rank", std::to_string(r.critical_rank));
  }
  row("step-time", "Step time", fmt::format("{:.6f} s", r.step_time_s));
  row("tokens-per-s", "Tokens/s", fmt::format("{:.0f}", r.tokens_per_s));
  row("tflops", "TFLOP/s per GPU", fmt::format("{:.1f}", r.tflops_per_gpu));
  row("mfu", "MFU", fmt::format("{:.1f} %", 100 * r.mfu));
  row("memory-peak", "Peak memory per GPU",
      fmt::format("{:.2f} GiB of {:.2f} GiB{}", r.memory_peak_gib, r.memory_capacity_gib,
                  r.memory_reserved_gib > 0 ? " (" + reserve_note(r) + ")" : ""));
  o += "</table>\n<h2>Where the time goes</h2>\n<div class=\"bar\" id=\"breakdown-bar\">\n";
  static const char* kColours[] = {"#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b",
                                   "#eeca3b", "#b279a2", "#9d755d", "#cccccc"};
  for (int i = 0; i <= kCategoryCount; ++i) {
    double v = r.breakdown_s[static_cast<size_t>(i)];
    if (v <= 0 || r.step_time_s <= 0) continue;
    o += fmt::format("<div title=\"{} {}\" style=\"width:{:.3f}%;background:{}\"></div>\n",
                     breakdown_name(i), xml_escape(format_time(v)), 100 * v / r.step_time_s,
                     kColours[i % 9]);
  }
  o += "</div>\n<table id=\"breakdown\">\n";
  for (int i = 0; i <= kCategoryCount; ++i) {
    double v = r.breakdown_s[static_cast<size_t>(i)];
    o += fmt::format(
        "<tr><td><span style=\"display:inline-block;width:10px;height:10px;background:{}\"></span> "
        "{}</td>"
        "<td class=\"num\" id=\"breakdown-{}\">{:.6f} s</td><td class=\"num\">{:.1f} %</td></tr>\n",
        kColours[i % 9], breakdown_name(i), breakdown_name(i), v,
        r.step_time_s > 0 ? 100 * v / r.step_time_s : 0.0);
  }
  o += "</table>\n";
  if (r.interference_s > 0)  // Result::interference_s: part of the terms above
    o += fmt::format(
        "<p>Kernels slowed by communication beside them: +<span "
        "id=\"interference\">{:.6f} s</span> of busy time.</p>\n",
        r.interference_s);
  if (r.host_bound_s > 0)  // Result::host_bound_s: idle time inside the terms above
    o += fmt::format(
        "<p>Kernels waiting for the host to launch them: <span "
        "id=\"host-bound\">{:.6f} s</span>.</p>\n",
        r.host_bound_s);
  if (r.has_critical_path) o += critical_path_html(r.critical_path);
  o += "<h2>Pipeline schedule</h2>\n";
  o += pipeline_svg(pred.program, pred.timeline);
  o += "<h2>Memory per stage</h2>\n<table "
       "id=\"memory\"><tr><th>stage</th><th>peak</th><th>capacity</th><th></th></tr>\n";
  for (size_t s = 0; s < r.memory_peak_gib_per_stage.size(); ++s) {
    double g = r.memory_peak_gib_per_stage[s];
    double frac = r.memory_capacity_gib > 0 ? g / r.memory_capacity_gib : 0;
    o += fmt::format(
        "<tr><td>{}</td><td class=\"num\" id=\"memory-stage-{}\">{:.2f} GiB</td><td "
        "class=\"num\">{:.2f} GiB</td>"
        "<td><div style=\"width:300px;border:1px solid #999\"><div "
        "style=\"width:{:.1f}%;height:10px;"
        "background:{}\"></div></div></td></tr>\n",
        s, s, g, r.memory_capacity_gib, std::min(100.0, 100 * frac),
        frac > 1 ? "#e45756" : "#54a24b");
  }
  o += "</table>\n<h2>Plan (scenario)</h2>\n<pre id=\"scenario\">";
  YAML::Emitter e;
  e << sc.source;
  o += xml_escape(e.c_str());
  o += "</pre>\n<h2>Hardware profile</h2>\n<table id=\"profile\">\n";
  o += profile_rows_html(sc.profile);
  o += "</table>\n<p>Generated by stepcast. Breakdown = exposed time on the critical rank; MFU "
       "counts model "
       "FLOPs without recomputation.</p>\n</body></html>\n";
  return o;
}

}  // namespace stepcast
