#include "sim/report/validate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "sim/io/json_locator.h"
#include "sim/io/yaml_util.h"
#include "sim/report/parallel.h"

namespace stepcast {

ProfileOverride parse_profile_override(const std::string& text) {
  ProfileOverride o;
  const size_t eq = text.find('=');
  std::string lhs = eq == std::string::npos ? text : text.substr(0, eq);
  if (eq != std::string::npos) o.value = text.substr(eq + 1);
  if (const size_t colon = lhs.find(':'); colon != std::string::npos) {
    o.profile = lhs.substr(0, colon);
    lhs = lhs.substr(colon + 1);
  }
  o.key = lhs;
  auto blank = [](const std::string& s) { return s.find_first_not_of(" \t") == std::string::npos; };
  if (eq == std::string::npos || blank(o.key) || blank(o.value) ||
      (lhs.size() != text.substr(0, eq).size() && blank(o.profile))) {
    throw InputError(
        InputIssue{"", 0, 0, "--override",
                   "expected [PROFILE:]KEY=VALUE (e.g. h100-sxm:compute.sustained_clock=0.86), "
                   "got \"" +
                       text + "\""});
  }
  return o;
}

namespace {

// The scenario document with the overrides that apply to its profile spliced into
// cluster.overrides (a scenario without a cluster mapping is left for the loader to reject).
YAML::Node with_overrides(YAML::Node doc, const std::vector<ProfileOverride>& overrides) {
  if (overrides.empty()) return doc;
  YAML::Node cluster = doc["cluster"];
  if (!cluster || !cluster.IsMap()) return doc;
  const YAML::Node prof = cluster["profile"];
  const std::string profile = prof && prof.IsScalar() ? prof.Scalar() : "";
  for (const ProfileOverride& o : overrides) {
    if (!o.profile.empty() && o.profile != profile) continue;
    if (!cluster["overrides"] || !cluster["overrides"].IsMap())
      cluster["overrides"] = YAML::Node(YAML::NodeType::Map);
    cluster["overrides"][o.key] = YAML::Load(o.value);
  }
  return doc;
}

}  // namespace

std::vector<ValidationCase> load_cases(const std::string& path,
                                       const std::vector<ProfileOverride>& overrides) {
  YAML::Node root = load_yaml_file(path);
  IssueList issues;
  YamlReader r(path, issues);
  r.expect_map(root, "", {"cases"});
  std::vector<ValidationCase> out;
  YAML::Node list = root["cases"];
  if (!list || !list.IsSequence() || list.size() == 0) {
    r.error(list ? list : root, "cases", "expected a non-empty list of cases");
    issues.throw_if_any();
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::set<std::string> override_errors;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node c = list[i];
    const std::string cp = fmt::format("cases[{}]", i);
    if (!r.expect_map(c, cp, {"id", "source", "assumed", "scenario", "measured", "family"}))
      continue;
    ValidationCase vc;
    if (r.require(c, cp, "id")) vc.id = r.get_string(c, cp, "id").value_or("");
    vc.family = r.get_string(c, cp, "family").value_or(vc.id.substr(0, vc.id.find('-')));
    vc.source = r.get_string(c, cp, "source").value_or("");
    vc.assumed = r.get_string(c, cp, "assumed").value_or("");
    bool ok = r.require(c, cp, "scenario") && r.require(c, cp, "measured");
    if (!ok) continue;
    const YAML::Node m = c["measured"];
    const std::string mp = cp + ".measured";
    if (r.expect_map(m, mp,
                     {"step_time_s", "memory_peak_gib", "tflops_per_gpu_published", "mfu_published",
                      "flops_formula", "note", "tokens_per_s_per_gpu"})) {
      if (r.require(m, mp, "step_time_s")) {
        vc.measured_step_s = r.get_double(m, mp, "step_time_s", 1e-9, 1e9).value_or(0);
      }
      vc.measured_memory_gib = r.get_double(m, mp, "memory_peak_gib", 0, 1e6).value_or(0);
      r.get_double(m, mp, "tflops_per_gpu_published", 0, 1e6);
      r.get_double(m, mp, "mfu_published", 0, 1);
      r.get_double(m, mp, "tokens_per_s_per_gpu", 0, 1e12);
      r.get_string(m, mp, "flops_formula");
      r.get_string(m, mp, "note");
    }
    try {
      const YAML::Node s = c["scenario"];
      if (!s.IsScalar() && !s.IsMap()) {  // else "expected a mapping" at 1:1 with no key
        r.error(s, cp + ".scenario",
                "expected a scenario file name or the scenario inline (a mapping), got " +
                    show_node(s));
        continue;
      }
      if (s.IsScalar()) {
        std::filesystem::path sp = s.Scalar();
        if (sp.is_relative()) sp = dir / sp;
        vc.scenario_file = sp.string();
        std::error_code ec;
        if (!std::filesystem::is_regular_file(sp, ec)) {  // else "cannot open" with no line
          r.error(s, cp + ".scenario",
                  fmt::format("no scenario file {} (a path relative to the cases file, or the "
                              "scenario inline)",
                              sp.string()));
          continue;
        }
        vc.scenario = load_scenario_node(
            with_overrides(load_yaml_file(vc.scenario_file), overrides), vc.scenario_file);
      } else {
        vc.scenario_file = path;
        vc.scenario = load_scenario_node(with_overrides(YAML::Clone(s), overrides), path);
      }
    } catch (const InputError& e) {
      for (const auto& issue : e.issues()) {
        // An override's own error is the flag's, reported once for all the cases.
        const ProfileOverride* o = nullptr;
        for (const auto& ov : overrides)
          if (issue.key.rfind("cluster.overrides." + ov.key, 0) == 0) o = &ov;
        if (o == nullptr) {
          issues.add(issue);
        } else if (override_errors.insert(issue.key + issue.message).second) {
          issues.add(InputIssue{
              "", 0, 0, "--override",
              issue.key.substr(std::string("cluster.overrides.").size()) + ": " + issue.message});
        }
      }
      continue;
    }
    for (const ValidationCase& seen : out)
      if (!vc.id.empty() && seen.id == vc.id)
        r.error(c["id"], cp + ".id", "case id \"" + vc.id + "\" is given twice");
    out.push_back(std::move(vc));
  }
  // An override for a profile no case runs on would change nothing, its key unchecked:
  // a typo in the profile's name (or the wrong cases file). Only once every case has loaded:
  // a case refused above (by the override's own value, say) runs on a profile not seen here.
  std::set<std::string> profiles;
  for (const ValidationCase& vc : out) profiles.insert(vc.scenario.profile.name);
  const bool all_loaded = out.size() == list.size();
  for (const ProfileOverride& o : overrides)
    if (!o.profile.empty() && all_loaded && !profiles.count(o.profile))
      issues.add(InputIssue{"", 0, 0, "--override",
                            fmt::format("no case runs on profile \"{}\" (the cases' profiles: {})",
                                        o.profile, fmt::join(profiles, ", "))});
  issues.throw_if_any();
  return out;
}

ValidationReport run_cases(const std::vector<ValidationCase>& cases, const RunOptions& opt,
                           const Progress& progress, int threads) {
  // Predictions in parallel (predict is reentrant: per-thread engines), kept as results
  // only; the report is then assembled in case order, so it does not depend on `threads`.
  std::vector<Result> results(cases.size());
  parallel_for(
      cases.size(), threads, [&](size_t i) { results[i] = predict(cases[i].scenario, opt).result; },
      progress);

  ValidationReport rep;
  double sum = 0, mem_sum = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const ValidationCase& c = cases[i];
    Result& result = results[i];
    CaseOutcome o;
    o.id = c.id;
    o.family = c.family;
    o.framework = framework_name(c.scenario.framework.name);
    o.kind = case_kind(c.scenario);
    o.measured_step_s = c.measured_step_s;
    o.predicted_step_s = result.step_time_s;
    o.error = (o.predicted_step_s - o.measured_step_s) / o.measured_step_s;
    o.measured_memory_gib = c.measured_memory_gib;
    if (c.measured_memory_gib > 0) {
      o.memory_error = (result.memory_peak_gib - c.measured_memory_gib) / c.measured_memory_gib;
      mem_sum += std::fabs(o.memory_error);
      ++rep.memory_cases;
    }
    o.result = std::move(result);
    const double abs_error = std::fabs(o.error);
    sum += abs_error;
    rep.within_5pct += abs_error <= 0.05;
    rep.within_10pct += abs_error <= 0.10;
    if (abs_error > 0.10) rep.over_10pct.push_back(o.id);
    for (auto [map, key] :
         {std::pair{&rep.mape_by_profile, &o.result.profile_name},
          std::pair{&rep.mape_by_framework, &o.framework}, std::pair{&rep.mape_by_kind, &o.kind},
          std::pair{&rep.mape_by_family, &o.family}}) {
      auto& [group_sum, group_cases] = (*map)[*key];
      group_sum += abs_error;
      ++group_cases;
    }
    if (o.kind != "moe") {
      rep.mape_non_moe += abs_error;
      ++rep.non_moe_cases;
    }
    if (abs_error > rep.worst_abs_error || rep.worst_id.empty()) {
      rep.worst_abs_error = abs_error;
      rep.worst_id = o.id;
    }
    rep.cases.push_back(std::move(o));
  }
  if (!rep.cases.empty()) rep.mape = sum / static_cast<double>(rep.cases.size());
  if (rep.memory_cases > 0) rep.memory_mape = mem_sum / rep.memory_cases;
  for (auto* map :
       {&rep.mape_by_profile, &rep.mape_by_framework, &rep.mape_by_kind, &rep.mape_by_family})
    for (auto& [name, sn] : *map) sn.first /= sn.second;
  if (rep.non_moe_cases > 0) rep.mape_non_moe /= rep.non_moe_cases;
  return rep;
}

std::string render_validation(const ValidationReport& r) {
  std::string o;
  o += fmt::format("{:<40} {:>10} {:>10} {:>8}  {:>8} {:>8} {:>8} {:>8} {:>8}  {:>16}\n", "case",
                   "measured", "predicted", "error", "compute", "recomp", "tp", "pp+dp", "bubble",
                   "memory GiB (err)");
  for (const auto& c : r.cases) {
    const auto& b = c.result.breakdown_s;
    auto at = [&](Category cat) { return b[static_cast<size_t>(cat)]; };
    std::string mem =
        fmt::format("{}{:.1f}", c.result.fits_memory ? "" : "over ", c.result.memory_peak_gib);
    if (c.measured_memory_gib > 0) mem += fmt::format(" ({:+.1f}%)", 100 * c.memory_error);
    o += fmt::format(
        "{:<40} {:>9.3f}s {:>9.3f}s {:>+7.1f}%  {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f}  "
        "{:>16}\n",
        c.id, c.measured_step_s, c.predicted_step_s, 100 * c.error, at(Category::kCompute),
        at(Category::kRecompute), at(Category::kTpComm),
        at(Category::kPpComm) + at(Category::kDpComm), b[static_cast<size_t>(kCategoryCount)], mem);
  }
  o += fmt::format("\nMAPE {:.2f}% over {} cases; worst {} ({:.2f}%)\n", 100 * r.mape,
                   r.cases.size(), r.worst_id, 100 * r.worst_abs_error);
  std::string worse;
  for (const std::string& id : r.over_10pct) worse += (worse.empty() ? "" : ", ") + id;
  o += fmt::format("within 5%: {} cases; within 10%: {}; worse than 10%: {}\n", r.within_5pct,
                   r.within_10pct, worse.empty() ? "none" : worse);
  if (r.non_moe_cases > 0 && r.non_moe_cases < static_cast<int>(r.cases.size()))
    o += fmt::format("MAPE {:.2f}% over the {} non-MoE cases\n", 100 * r.mape_non_moe,
                     r.non_moe_cases);
  for (auto [title, map] :
       {std::pair{"profile", &r.mape_by_profile}, std::pair{"framework", &r.mape_by_framework},
        std::pair{"kind", &r.mape_by_kind}, std::pair{"family", &r.mape_by_family}}) {
    if (map->size() <= 1) continue;
    std::string parts;
    for (const auto& [name, mn] : *map)
      parts += fmt::format("{}{} {:.2f}% over {}", parts.empty() ? "" : ", ", name, 100 * mn.first,
                           mn.second);
    o += fmt::format("MAPE by {}: {}\n", title, parts);
  }
  if (r.memory_cases > 0) {
    o += fmt::format("memory: mean absolute error {:.2f}% over {} cases with published figures\n",
                     100 * r.memory_mape, r.memory_cases);
  }
  // The runs all ran: a case predicted over its GPUs' memory is a memory miss the step's MAPE
  // does not show ("over" in the table).
  std::string over;
  for (const auto& c : r.cases)
    if (!c.result.fits_memory)
      over += fmt::format("{}{} ({:.1f} of {:.1f} GiB)", over.empty() ? "" : ", ", c.id,
                          c.result.memory_peak_gib, c.result.memory_capacity_gib);
  if (!over.empty()) o += "predicted not to fit in GPU memory, though the run did: " + over + "\n";
  return o;
}

nlohmann::json validation_to_json(const ValidationReport& r) {
  nlohmann::json j;
  j["schema"] = "stepcast.validation/1";
  j["mape"] = r.mape;
  j["worst_case"] = r.worst_id;
  j["worst_abs_error"] = r.worst_abs_error;
  j["cases_within_5pct"] = r.within_5pct;
  j["cases_within_10pct"] = r.within_10pct;
  for (auto [title, map] : {std::pair{"mape_by_profile", &r.mape_by_profile},
                            std::pair{"mape_by_framework", &r.mape_by_framework},
                            std::pair{"mape_by_kind", &r.mape_by_kind},
                            std::pair{"mape_by_family", &r.mape_by_family}}) {
    j[title] = nlohmann::json::object();
    for (const auto& [name, mn] : *map) j[title][name] = {{"mape", mn.first}, {"cases", mn.second}};
  }
  j["mape_non_moe"] = r.mape_non_moe;
  j["memory_mape"] = r.memory_mape;
  j["cases"] = nlohmann::json::array();
  for (const auto& c : r.cases) {
    nlohmann::json cj;
    cj["id"] = c.id;
    cj["family"] = c.family;
    cj["framework"] = c.framework;
    cj["kind"] = c.kind;
    cj["measured_step_time_s"] = c.measured_step_s;
    cj["predicted_step_time_s"] = c.predicted_step_s;
    cj["error"] = c.error;
    cj["fits_memory"] = c.result.fits_memory;
    if (c.measured_memory_gib > 0) {
      cj["measured_memory_gib"] = c.measured_memory_gib;
      cj["memory_error"] = c.memory_error;
    }
    cj["prediction"] = result_to_json(c.result);
    j["cases"].push_back(cj);
  }
  return j;
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_json(read_text_file(path, "JSON"), path);
}

namespace {

constexpr const char* kSections[] = {"busy_by_kind_s", "busy_by_phase_s", "breakdown_s"};

// A value for the messages: a number as written, anything else by its type (a mutated
// document may hold a 20,000-character string).
std::string show_value(const nlohmann::json& v) {
  return v.is_number() ? fmt::format("{:.6g}", v.get<double>()) : std::string(v.type_name());
}

bool seconds_ok(const nlohmann::json& v) {
  return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0;
}

// The problems of one stepcast.result/1 document of a comparison, each at the line and
// column of the offending value (or of the object that lacks a key) in `text`.
std::vector<InputIssue> result_issues(const nlohmann::json& j, const std::string& text,
                                      const std::string& file, bool measured) {
  std::vector<InputIssue> out;
  auto add = [&](const std::string& key, const std::string& message) {
    out.push_back(InputIssue{file, 0, 0, key, message});
  };
  if (!j.is_object() || !j.contains("schema") || j["schema"] != kResultSchema) {
    add("schema", fmt::format("expected a \"{}\" document", kResultSchema));
  } else {
    // A step: positive where measured (the errors divide by it), else non-negative.
    auto step = [&](const char* key) {
      if (!j.contains(key) || !j[key].is_number()) {
        add(key, "missing or not a number");
        return;
      }
      const nlohmann::json& t = j[key];
      if (!seconds_ok(t) || (measured && t.get<double>() == 0))
        add(key, fmt::format("expected a {} finite number of seconds{}, got {}",
                             measured ? "positive" : "non-negative",
                             measured ? " (the errors divide by it)" : "", show_value(t)));
    };
    step("step_time_s");
    // The executor's step without its task events (stepcast-exec --graph --untimed).
    if (measured && j.contains("step_time_untimed_s")) step("step_time_untimed_s");
    for (const char* section : kSections) {
      if (!j.contains(section)) continue;
      const nlohmann::json& sec = j[section];
      if (!sec.is_object()) {
        add(section, "expected a mapping of names to seconds, got " + show_value(sec));
        continue;
      }
      for (const auto& [k, v] : sec.items())
        if (!seconds_ok(v))
          add(std::string(section) + "." + k,
              "expected a non-negative finite number of seconds, got " + show_value(v));
    }
  }
  if (!out.empty()) {
    const JsonLocator at(text);
    for (InputIssue& i : out) std::tie(i.line, i.column) = at.find(i.key);
    std::stable_sort(out.begin(), out.end(), [](const InputIssue& a, const InputIssue& b) {
      return std::tie(a.line, a.column) < std::tie(b.line, b.column);  // in the file's order
    });
  }
  return out;
}

}  // namespace

std::string compare_results(const std::string& pred_text, const std::string& pred_file,
                            const std::string& meas_text, const std::string& meas_file,
                            nlohmann::json* json_out) {
  const nlohmann::json pred = parse_json(pred_text, pred_file);
  const nlohmann::json meas = parse_json(meas_text, meas_file);
  std::vector<InputIssue> issues = result_issues(pred, pred_text, pred_file, false);
  for (InputIssue& i : result_issues(meas, meas_text, meas_file, true))
    issues.push_back(std::move(i));
  if (!issues.empty()) throw InputError(std::move(issues));
  nlohmann::json rows = nlohmann::json::array();
  std::string o =
      fmt::format("{:<28} {:>12} {:>12} {:>8}\n", "what", "predicted", "measured", "error");
  auto row = [&](const std::string& what, double p, double m) {
    double err = m != 0 ? (p - m) / m : 0.0;
    o += fmt::format("{:<28} {:>12} {:>12} {:>+7.1f}%\n", what, format_time(p), format_time(m),
                     100 * err);
    rows.push_back({{"what", what}, {"predicted_s", p}, {"measured_s", m}, {"error", err}});
  };
  row("step", pred["step_time_s"].get<double>(), meas["step_time_s"].get<double>());
  if (meas.contains("step_time_untimed_s"))  // the same step replayed without task events
    row("step, untimed", pred["step_time_s"].get<double>(),
        meas["step_time_untimed_s"].get<double>());
  // A key in only one file is left out (a measured timeline may lack kinds or phases).
  for (const char* section : kSections) {
    if (!pred.contains(section) || !meas.contains(section)) continue;
    for (const auto& [k, v] : pred[section].items()) {
      if (!meas[section].contains(k)) continue;
      row(std::string(section).substr(0, std::string(section).size() - 2) + "." + k,
          v.get<double>(), meas[section][k].get<double>());
    }
  }
  if (json_out) *json_out = {{"schema", "stepcast.comparison/1"}, {"rows", rows}};
  return o;
}

}  // namespace stepcast
