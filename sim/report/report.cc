#include "sim/report/report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/params.h"
#include "sim/cost/coster.h"
#include "sim/engine/critical_path.h"
#include "sim/io/yaml_util.h"
#include "sim/lower/lower.h"
#include "sim/report/flow_mode.h"
#include "sim/report/pipeline.h"

namespace stepcast {

const char* breakdown_name(int index) {
  if (index == kCategoryCount) return "bubble";
  return category_name(static_cast<Category>(index));
}

static std::string layout_string(const Scenario& sc) {
  const ParallelSpec& p = sc.parallel;
  std::string s = fmt::format("tp{} pp{} dp{} cp{} ep{}", p.tp, p.pp, p.dp, p.cp, p.ep);
  if (p.vpp > 1) s += fmt::format(" vpp{}", p.vpp);
  s += fmt::format(" mb{} {} zero{}", p.microbatch, schedule_name(p.schedule), p.zero);
  if (p.sequence_parallel) s += " sp";
  s += fmt::format(" recompute={}", recompute_name(p.recompute));
  return s;
}

Result result_header(const Scenario& sc) {
  Result r;
  r.scenario_name = sc.name;
  r.scenario_file = sc.file;
  r.model_name = sc.model.name;
  r.profile_name = sc.profile.name;
  r.gpus = sc.gpus;
  r.layout = layout_string(sc);
  r.params_total = count_params(sc.model).total;
  r.stragglers = stragglers_text(sc);
  r.memory_capacity_gib = sc.profile.gpu.usable_memory_bytes() / kGiB;
  r.memory_reserved_gib = sc.profile.gpu.memory_reserved_bytes / kGiB;
  return r;
}

// Placed as the loader places issues about nodes it created (yaml_util.h, set_root).
InputError locate_in_scenario(const InputError& e, const Scenario& sc) {
  std::vector<InputIssue> issues = e.issues();
  if (sc.file.empty() || !sc.source.IsMap() || sc.source.size() == 0) return InputError(issues);
  for (InputIssue& i : issues) {
    if (i.file.empty()) i.file = sc.file;
    if (i.line > 0 || i.file != sc.file) continue;
    YAML::Mark m = sc.source.begin()->first.Mark();
    YAML::Node n = sc.source;
    std::string key = i.key.substr(0, i.key.find('['));
    for (const std::string& seg : split_dotted(key)) {
      // Const access and reset(), never operator[] or = on a Node: those would change the
      // scenario's document (a zombie key, or the node rebound in place).
      const YAML::Node& cur = n;
      if (!cur.IsMap() || !cur[seg]) break;
      n.reset(cur[seg]);
      if (!n.Mark().is_null()) m = n.Mark();
    }
    i.line = m.line + 1;
    i.column = m.column + 1;
  }
  return InputError(issues);
}

// The key an issue about the whole step is placed at: a task longer than kMaxTaskSeconds
// (sim/cost/coster.cc) or more than 2^60 ns of work in the step (sim/engine/engine.cc),
// raised where no scenario key is known. No one key causes them (a task's time grows with
// the model's widths, the tokens of a microbatch and the slowness of the profile), so the
// issue names the workload size furthest beyond the largest published one or, when none
// is beyond it, the hardware profile (its overrides when the scenario gives some). The
// published sizes: hidden 25,600 and ffn_hidden 102,400 (the 1T GPT of Korthikanti et al.
// 2022, model/arch.cc gpt-1t), head_dim 256 (Gemma), vocab 256,000 (Gemma), seq_len 131,072
// (Llama 3's long context), microbatch 32 (the largest in scenarios/).
static std::string whole_step_key(const Scenario& sc) {
  const ModelArch& m = sc.model;
  const std::pair<const char*, double> sizes[] = {
      {"training.seq_len", static_cast<double>(sc.training.seq_len) / 131072},
      {"model.hidden", static_cast<double>(m.hidden) / 25600},
      {"model.ffn_hidden", static_cast<double>(m.ffn_hidden) / 102400},
      {"model.moe.ffn_hidden", m.moe ? static_cast<double>(m.moe->ffn_hidden) / 102400 : 0.0},
      {"model.head_dim", static_cast<double>(m.head_dim) / 256},
      {"model.vocab", static_cast<double>(m.vocab) / 256000},
      {"parallel.microbatch", static_cast<double>(sc.parallel.microbatch) / 32}};
  std::string key;
  double most = 1;
  for (const auto& [k, ratio] : sizes) {
    if (ratio > most) {
      most = ratio;
      key = k;
    }
  }
  if (!key.empty()) return key;
  const YAML::Node& cluster = sc.source;  // const access: the document may be shared
  const bool overrides = cluster.IsMap() && cluster["cluster"] && cluster["cluster"].IsMap() &&
                         cluster["cluster"]["overrides"];
  return overrides ? "cluster.overrides" : "cluster.profile";
}

Prediction predict_located(const Scenario& sc,
                           const std::function<Prediction()>& predict_unlocated) {
  try {
    return predict_unlocated();
  } catch (const InputError& e) {
    std::vector<InputIssue> issues = e.issues();
    for (InputIssue& i : issues)
      if (i.key.empty()) i.key = whole_step_key(sc);
    throw locate_in_scenario(InputError(std::move(issues)), sc);
  }
}

void simulate_and_report(const Scenario& sc, const RunOptions& opt, const GpuSpeeds& speeds,
                         Durations* d, Prediction& out) {
  EngineOptions eo;
  eo.keep_matching = opt.critical_path;  // summarize_critical_path reuses it
  eo.comm_hbm_share = [&p = out.program, &hw = sc.profile](const RankProgram& rp, const Task& t,
                                                           TimeNs dur) {
    return comm_hbm_share(p, rp, t, dur, hw);
  };
  eo.gpu_sms = sc.profile.gpu.sms;
  eo.comm_sms = [&hw = sc.profile](const RankProgram&, const Task& t) { return comm_sms(t, hw); };
  eo.host_launch_ns = static_cast<TimeNs>(std::llround(sc.framework.host_launch_us * 1e3));
  eo.host_op_ns = static_cast<TimeNs>(std::llround(sc.framework.host_op_us * 1e3));
  if (sc.network == NetworkMode::kFlow) {  // communication as flows sharing links (flow_mode.h)
    out.timeline = simulate_flow_mode(out.program, sc.profile, eo, speeds);
  } else if (d) {
    out.timeline = simulate(out.program, *d, eo);
  } else {
    out.timeline = simulate(out.program, task_durations(out.program, sc.profile, speeds), eo);
  }
  if (opt.progress) opt.progress(2, 3);
  out.result = make_result(sc, out.program, out.timeline);
  if (opt.critical_path) {
    out.result.critical_path = summarize_critical_path(out.program, out.timeline);
    out.result.has_critical_path = true;
  }
  if (opt.progress) opt.progress(3, 3);
}

// The pipeline: lower, cost, simulate, report. The search's pruned variant of it is
// predict_pruned (search_prune.h).
static Prediction predict_unlocated(const Scenario& sc, const RunOptions& opt) {
  Prediction out;
  // A slow GPU or link breaks the symmetry folding relies on: every rank is simulated.
  const GpuSpeeds speeds = gpu_speeds(sc);
  LowerOptions lo;
  lo.folded = opt.folded && speeds.empty();  // lower() checks the size of what it holds
  lo.labels = opt.labels;
  out.program = lower(sc, lo);
  if (opt.progress) opt.progress(1, 3);
  simulate_and_report(sc, opt, speeds, nullptr, out);
  return out;
}

Prediction predict(const Scenario& sc, const RunOptions& opt) {
  return predict_located(sc, [&] { return predict_unlocated(sc, opt); });
}

double model_flops_per_step(const ModelArch& a, std::int64_t seq_len, std::int64_t global_batch) {
  return model_flops_per_sequence(a, seq_len) * static_cast<double>(global_batch);
}

Result make_result(const Scenario& sc, const Program& p, const Timeline& t) {
  Result r = result_header(sc);
  r.step_time_s = to_s(t.step_ns);
  const double tokens =
      static_cast<double>(sc.training.global_batch) * static_cast<double>(sc.training.seq_len);
  r.model_flops = model_flops_per_step(sc.model, sc.training.seq_len, sc.training.global_batch);
  if (r.step_time_s > 0) {
    r.tokens_per_s = tokens / r.step_time_s;
    r.tflops_per_gpu = r.model_flops / r.step_time_s / sc.gpus / 1e12;
    // MFU against the training dtype's own peak (fp8, mxfp8, nvfp4: the FP8 / FP4 rate).
    auto it = sc.profile.gpu.peak_flop_per_s.find(sc.training.dtype);
    double peak = it != sc.profile.gpu.peak_flop_per_s.end() ? it->second : 0.0;
    r.mfu = peak > 0 ? r.model_flops / (r.step_time_s * sc.gpus * peak) : 0.0;
  }
  r.memory_peak_gib_per_stage.assign(static_cast<size_t>(sc.parallel.pp), 0.0);
  for (size_t i = 0; i < p.ranks.size(); ++i) {
    double gib = t.ranks[i].peak_bytes / kGiB;
    int stage = p.ranks[i].pp_stage;
    STEPCAST_CHECK(stage >= 0 && stage < sc.parallel.pp, "rank stage out of range");
    auto& slot = r.memory_peak_gib_per_stage[static_cast<size_t>(stage)];
    slot = std::max(slot, gib);
    r.memory_peak_gib = std::max(r.memory_peak_gib, gib);
  }
  r.fits_memory = r.memory_peak_gib <= r.memory_capacity_gib;
  for (int i = 0; i <= kCategoryCount; ++i) {
    r.breakdown_s[static_cast<size_t>(i)] = to_s(t.breakdown_ns[static_cast<size_t>(i)]);
  }
  if (!p.ranks.empty()) {
    const auto& rp = p.ranks[static_cast<size_t>(t.critical_rank)];
    const auto& rt = t.ranks[static_cast<size_t>(t.critical_rank)];
    for (const Task& task : rp.tasks) {
      if (task.kind == TaskKind::kAlloc || task.kind == TaskKind::kFree) continue;
      const TaskTiming& tt = rt.tasks[static_cast<size_t>(task.id)];
      double sec = to_s(tt.end - tt.start);
      r.busy_by_kind_s[task_kind_name(task.kind)] += sec;
      r.busy_by_phase_s[phase_name(task.phase)] += sec;
    }
    r.interference_s = to_s(rt.interference_ns);
    r.host_bound_s = to_s(rt.host_bound_ns);
  }
  r.critical_rank = p.ranks.empty() ? 0 : p.ranks[static_cast<size_t>(t.critical_rank)].rank;
  r.events = t.events;
  r.simulated_ranks = static_cast<int>(p.ranks.size());
  r.folded = p.folded;
  return r;
}

CriticalPathSummary summarize_critical_path(const Program& p, const Timeline& t, size_t longest) {
  CriticalPathSummary out;
  const auto path = critical_path(p, t);
  std::vector<CriticalPathSegment> segs;
  int prev_rank = -1;
  TimeNs prev_end = 0;
  for (const auto& [ri, id] : path) {
    const RankProgram& rp = p.ranks[static_cast<size_t>(ri)];
    const Task& task = rp.tasks[static_cast<size_t>(id)];
    const TaskTiming& tt = t.ranks[static_cast<size_t>(ri)].tasks[static_cast<size_t>(id)];
    if (tt.start > prev_end) {  // a kernel waiting for its launch (critical_path.h)
      // "host" in each breakdown, so that every one of them adds up to total_s.
      const double wait = to_s(tt.start - prev_end);
      out.total_s += wait;
      for (auto* by : {&out.by_category_s, &out.by_kind_s, &out.by_phase_s}) (*by)["host"] += wait;
    }
    prev_end = tt.end;
    if (prev_rank >= 0 && rp.rank != prev_rank) ++out.rank_changes;
    prev_rank = rp.rank;
    out.ranks.push_back(rp.rank);
    if (tt.end == tt.start) continue;  // allocations, frees, empty tasks
    const double sec = to_s(tt.end - tt.start);
    ++out.tasks;
    out.total_s += sec;
    out.by_category_s[category_name(task.category)] += sec;
    out.by_kind_s[task_kind_name(task.kind)] += sec;
    out.by_phase_s[phase_name(task.phase)] += sec;
    segs.push_back({task.label, task_kind_name(task.kind), category_name(task.category), rp.rank,
                    to_s(tt.start), sec});
  }
  std::sort(out.ranks.begin(), out.ranks.end());
  out.ranks.erase(std::unique(out.ranks.begin(), out.ranks.end()), out.ranks.end());
  // The longest first; equal ones in time order (segments are in time order already).
  const size_t keep = std::min(longest, segs.size());
  std::partial_sort(segs.begin(), segs.begin() + static_cast<std::ptrdiff_t>(keep), segs.end(),
                    [](const CriticalPathSegment& a, const CriticalPathSegment& b) {
                      if (a.duration_s != b.duration_s) return a.duration_s > b.duration_s;
                      return a.start_s < b.start_s;
                    });
  segs.resize(keep);
  out.longest = std::move(segs);
  return out;
}

// "0-7" for consecutive ranks, else "0, 8, 16" (at most 6 shown, then "... (N ranks)").
static std::string ranks_text(const std::vector<int>& ranks) {
  if (ranks.empty()) return "-";
  if (ranks.size() > 1 && ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size()))
    return fmt::format("{}-{}", ranks.front(), ranks.back());
  std::string o;
  for (size_t i = 0; i < ranks.size() && i < 6; ++i)
    o += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 6) o += fmt::format(", ... ({} ranks)", ranks.size());
  return o;
}

// The map's entries, largest first (ties by name), as "compute 12.460 s, tp_comm 1.149 s".
static std::string largest_first(const std::map<std::string, double>& m, size_t max_items) {
  std::vector<std::pair<std::string, double>> v(m.begin(), m.end());
  std::stable_sort(v.begin(), v.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string o;
  for (size_t i = 0; i < v.size() && i < max_items; ++i)
    o += fmt::format("{}{} {}", i ? ", " : "", v[i].first, format_time(v[i].second));
  return o;
}

std::string reserve_note(const Result& r) {
  if (r.memory_reserved_gib <= 0) return {};
  return fmt::format("{:.2f} GiB more kept in reserve", r.memory_reserved_gib);
}

std::string render_text(const Result& r) {
  std::string o;
  o += fmt::format("stepcast: {}\n", r.scenario_name);
  o += fmt::format("  model    {} ({:.2f} B parameters)\n", r.model_name, r.params_total / 1e9);
  o += fmt::format("  cluster  {} x {} GPUs\n", r.profile_name, r.gpus);
  o += fmt::format("  plan     {}\n", r.layout);
  if (!r.stragglers.empty()) o += fmt::format("  slow     {}\n", r.stragglers);
  o += fmt::format("  engine   {} simulated ranks ({}), {} events\n", r.simulated_ranks,
                   r.folded ? "folded" : "full fidelity", r.events);
  if (!r.stragglers.empty())
    o += fmt::format("  critical rank {} (the one that ends last)\n", r.critical_rank);
  o += "\n";
  if (!r.fits_memory) {
    o += "  *** DOES NOT FIT IN GPU MEMORY: the step time below is not achievable ***\n\n";
  }
  o += fmt::format("  Step time            {}\n", format_time(r.step_time_s));
  o += fmt::format("  Tokens/s             {:.0f}\n", r.tokens_per_s);
  o += fmt::format("  TFLOP/s per GPU      {:.1f}\n", r.tflops_per_gpu);
  o += fmt::format("  MFU                  {:.1f} %\n", r.mfu * 100);
  const std::string reserve = reserve_note(r);
  o += fmt::format("  Peak memory per GPU  {:.2f} GiB of {:.2f} GiB ({}{}{})\n", r.memory_peak_gib,
                   r.memory_capacity_gib, r.fits_memory ? "fits" : "does not fit",
                   reserve.empty() ? "" : "; ", reserve);
  for (size_t s = 0; s < r.memory_peak_gib_per_stage.size(); ++s) {
    if (r.memory_peak_gib_per_stage.size() > 1) {
      o += fmt::format("    stage {:<3} {:8.2f} GiB\n", s, r.memory_peak_gib_per_stage[s]);
    }
  }
  o += "\n  Breakdown (exposed time on the critical rank)\n";
  for (int i = 0; i <= kCategoryCount; ++i) {
    double v = r.breakdown_s[static_cast<size_t>(i)];
    double pct = r.step_time_s > 0 ? 100.0 * v / r.step_time_s : 0.0;
    o += fmt::format("    {:<10} {:>12}  {:5.1f} %\n", breakdown_name(i), format_time(v), pct);
  }
  if (r.interference_s > 0)
    o += fmt::format("    (kernels slowed by communication beside them: +{} of busy time)\n",
                     format_time(r.interference_s));
  if (r.host_bound_s > 0)
    o += fmt::format("    (kernels waiting for the host to launch them: {})\n",
                     format_time(r.host_bound_s));
  if (r.has_critical_path) {
    const CriticalPathSummary& cp = r.critical_path;
    o += fmt::format("\n  Critical path: {} tasks on rank{} {}\n", cp.tasks,
                     cp.ranks.size() == 1 ? "" : "s", ranks_text(cp.ranks));
    o += fmt::format("    {}\n", largest_first(cp.by_category_s, 4));
    if (!cp.longest.empty())
      o += fmt::format("    longest: {} {} ({})\n", cp.longest.front().label,
                       format_time(cp.longest.front().duration_s), cp.longest.front().kind);
  }
  return o;
}

nlohmann::json result_to_json(const Result& r) {
  nlohmann::json j;
  j["schema"] = kResultSchema;
  j["scenario"] = r.scenario_name;
  j["model"] = r.model_name;
  j["profile"] = r.profile_name;
  j["gpus"] = r.gpus;
  j["layout"] = r.layout;
  j["step_time_s"] = r.step_time_s;
  j["tokens_per_s"] = r.tokens_per_s;
  j["tflops_per_gpu"] = r.tflops_per_gpu;
  j["mfu"] = r.mfu;
  j["model_flops_per_step"] = r.model_flops;
  j["params_total"] = r.params_total;
  j["memory_peak_gib"] = r.memory_peak_gib;
  j["memory_peak_gib_per_stage"] = r.memory_peak_gib_per_stage;
  j["memory_capacity_gib"] = r.memory_capacity_gib;
  j["memory_reserved_gib"] = r.memory_reserved_gib;  // 0 when the profile reserves none
  j["fits_memory"] = r.fits_memory;
  nlohmann::json b = nlohmann::json::object();
  for (int i = 0; i <= kCategoryCount; ++i)
    b[breakdown_name(i)] = r.breakdown_s[static_cast<size_t>(i)];
  j["breakdown_s"] = b;
  j["busy_by_kind_s"] = r.busy_by_kind_s;
  j["busy_by_phase_s"] = r.busy_by_phase_s;
  j["interference_s"] = r.interference_s;
  j["host_bound_s"] = r.host_bound_s;
  j["critical_rank"] = r.critical_rank;
  j["simulated_ranks"] = r.simulated_ranks;
  j["folded"] = r.folded;
  j["events"] = r.events;
  if (!r.stragglers.empty()) j["stragglers"] = r.stragglers;
  if (r.has_critical_path) {
    const CriticalPathSummary& cp = r.critical_path;
    nlohmann::json c;
    c["total_s"] = cp.total_s;
    c["tasks"] = cp.tasks;
    c["by_category_s"] = cp.by_category_s;
    c["by_kind_s"] = cp.by_kind_s;
    c["by_phase_s"] = cp.by_phase_s;
    c["ranks"] = cp.ranks;
    c["rank_changes"] = cp.rank_changes;
    nlohmann::json segs = nlohmann::json::array();
    for (const CriticalPathSegment& s : cp.longest)
      segs.push_back({{"label", s.label},
                      {"kind", s.kind},
                      {"category", s.category},
                      {"rank", s.rank},
                      {"start_s", s.start_s},
                      {"duration_s", s.duration_s}});
    c["longest"] = std::move(segs);
    j["critical_path"] = std::move(c);
  }
  return j;
}

Result result_from_json(const nlohmann::json& j) {
  Result r;
  j.at("scenario").get_to(r.scenario_name);
  j.at("model").get_to(r.model_name);
  j.at("profile").get_to(r.profile_name);
  j.at("gpus").get_to(r.gpus);
  j.at("layout").get_to(r.layout);
  j.at("step_time_s").get_to(r.step_time_s);
  j.at("tokens_per_s").get_to(r.tokens_per_s);
  j.at("tflops_per_gpu").get_to(r.tflops_per_gpu);
  j.at("mfu").get_to(r.mfu);
  j.at("model_flops_per_step").get_to(r.model_flops);
  j.at("params_total").get_to(r.params_total);
  j.at("memory_peak_gib").get_to(r.memory_peak_gib);
  j.at("memory_peak_gib_per_stage").get_to(r.memory_peak_gib_per_stage);
  j.at("memory_capacity_gib").get_to(r.memory_capacity_gib);
  j.at("fits_memory").get_to(r.fits_memory);
  const nlohmann::json& b = j.at("breakdown_s");
  for (int i = 0; i <= kCategoryCount; ++i)
    b.at(breakdown_name(i)).get_to(r.breakdown_s[static_cast<size_t>(i)]);
  j.at("busy_by_kind_s").get_to(r.busy_by_kind_s);
  j.at("busy_by_phase_s").get_to(r.busy_by_phase_s);
  j.at("critical_rank").get_to(r.critical_rank);
  j.at("simulated_ranks").get_to(r.simulated_ranks);
  j.at("folded").get_to(r.folded);
  j.at("events").get_to(r.events);
  if (j.contains("scenario_file")) j["scenario_file"].get_to(r.scenario_file);
  if (j.contains("simulated")) j["simulated"].get_to(r.simulated);
  if (j.contains("pruned")) j["pruned"].get_to(r.pruned);
  if (j.contains("stragglers")) j["stragglers"].get_to(r.stragglers);
  if (j.contains("interference_s")) j["interference_s"].get_to(r.interference_s);
  if (j.contains("host_bound_s")) j["host_bound_s"].get_to(r.host_bound_s);
  if (j.contains("memory_reserved_gib")) j["memory_reserved_gib"].get_to(r.memory_reserved_gib);
  if (j.contains("critical_path")) {
    const nlohmann::json& c = j["critical_path"];
    CriticalPathSummary& cp = r.critical_path;
    c.at("total_s").get_to(cp.total_s);
    c.at("tasks").get_to(cp.tasks);
    c.at("by_category_s").get_to(cp.by_category_s);
    c.at("by_kind_s").get_to(cp.by_kind_s);
    c.at("by_phase_s").get_to(cp.by_phase_s);
    c.at("ranks").get_to(cp.ranks);
    c.at("rank_changes").get_to(cp.rank_changes);
    for (const auto& s : c.at("longest"))
      cp.longest.push_back({s.at("label").get<std::string>(), s.at("kind").get<std::string>(),
                            s.at("category").get<std::string>(), s.at("rank").get<int>(),
                            s.at("start_s").get<double>(), s.at("duration_s").get<double>()});
    r.has_critical_path = true;
  }
  return r;
}

}  // namespace stepcast
