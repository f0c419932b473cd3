#include "sim/report/regress.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "sim/io/yaml_util.h"
#include "sim/report/parallel.h"

namespace fs = std::filesystem;

namespace stepcast {

static bool is_cases_file(const fs::path& p) {
  try {
    YAML::Node n = YAML::LoadFile(p.string());
    return n.IsMap() && n["cases"];
  } catch (const YAML::Exception&) {
    return false;  // a broken file is a scenario problem: load_scenario reports it
  }
}

std::vector<std::string> find_scenarios(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::is_directory(dir)) {
    throw InputError(InputIssue{dir, 0, 0, "--dir", "not a directory"});
  }
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().extension() != ".yaml") continue;
    fs::path rel = fs::relative(e.path(), dir);
    if (!rel.empty() && *rel.begin() == "expected") continue;
    if (is_cases_file(e.path())) continue;
    out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string expected_path(const std::string& dir, const std::string& scenario_file) {
  fs::path rel = fs::relative(fs::path(scenario_file), fs::path(dir));
  if (rel.empty() || *rel.begin() == "..") rel = fs::path(scenario_file).filename();
  rel.replace_extension(".json");
  return (fs::path(dir) / "expected" / rel).string();
}

static void flatten_into(const nlohmann::json& j, const std::string& prefix,
                         std::vector<std::pair<std::string, nlohmann::json>>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      flatten_into(v, prefix.empty() ? k : prefix + "." + k, out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) flatten_into(j[i], fmt::format("{}[{}]", prefix, i), out);
  } else {
    out.emplace_back(prefix, j);
  }
}

std::vector<std::pair<std::string, nlohmann::json>> flatten_json(const nlohmann::json& j) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  flatten_into(j, "", out);
  return out;
}

static std::string show(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:.6g}", v.get<double>());
  return v.dump();
}

static void write_json(const std::string& path, const nlohmann::json& j) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path);
  if (!out) throw InputError(InputIssue{path, 0, 0, "", "cannot write the file"});
  out << j.dump(2) << "\n";
}

RegressOutcome run_regress(const RegressOptions& opt) {
  RegressOutcome o;
  std::vector<std::string> files = opt.scenarios.empty() ? find_scenarios(opt.dir) : opt.scenarios;
  const double tol = (opt.tolerance_pct ? *opt.tolerance_pct : 0.01) / 100.0;
  // Predictions on worker threads (the outcome does not depend on their number); the
  // comparison runs in file order.
  std::vector<nlohmann::json> results(files.size());
  parallel_for(
      files.size(), opt.threads,
      [&](size_t i) { results[i] = result_to_json(predict(load_scenario(files[i])).result); },
      opt.progress);
  for (size_t fi = 0; fi < files.size(); ++fi) {
    const std::string& file = files[fi];
    ++o.scenarios;
    const std::string rel = fs::relative(fs::path(file), fs::path(opt.dir)).string();
    const std::string exp_path = expected_path(opt.dir, file);
    const nlohmann::json& now = results[fi];
    if (opt.update) {
      write_json(exp_path, now);
      ++o.updated;
      continue;
    }
    if (!fs::exists(exp_path)) {
      ++o.missing;
      o.rows.push_back({rel, "", "", "", 0, "missing expected file " + exp_path});
      continue;
    }
    nlohmann::json expected = read_json_file(exp_path);
    std::map<std::string, nlohmann::json> e_flat, n_flat;
    for (auto& [k, v] : flatten_json(expected)) e_flat[k] = v;
    for (auto& [k, v] : flatten_json(now)) n_flat[k] = v;
    bool moved = false;
    for (const auto& [k, ev] : e_flat) {
      auto it = n_flat.find(k);
      if (it == n_flat.end()) {
        o.rows.push_back({rel, k, show(ev), "", 0, "metric gone"});
        moved = true;
        continue;
      }
      const nlohmann::json& nv = it->second;
      bool same = false;
      double change = 0;
      if (ev.is_number_float() || nv.is_number_float()) {
        if (ev.is_number() && nv.is_number()) {
          double a = ev.get<double>(), b = nv.get<double>();
          change = a != 0 ? 100.0 * (b - a) / std::fabs(a) : (b == 0 ? 0.0 : 100.0);
          same = std::fabs(b - a) <= tol * std::fabs(a) || std::fabs(b - a) <= 1e-12;
        }
      } else {
        same = ev == nv;
        if (!same && ev.is_number() && nv.is_number() && ev.get<double>() != 0) {
          change = 100.0 * (nv.get<double>() - ev.get<double>()) / std::fabs(ev.get<double>());
        }
      }
      if (!same) {
        o.rows.push_back({rel, k, show(ev), show(nv), change, "moved"});
        moved = true;
      }
    }
    for (const auto& [k, nv] : n_flat) {
      if (!e_flat.count(k)) {
        o.rows.push_back({rel, k, "", show(nv), 0, "new metric"});
        moved = true;
      }
    }
    if (moved) ++o.moved_scenarios;
  }
  return o;
}

std::string render_regress(const RegressOutcome& o, const RegressOptions& opt) {
  std::string s;
  if (opt.update) {
    return fmt::format("regress: wrote {} expected results under {}/expected\n", o.updated,
                       opt.dir);
  }
  if (!o.rows.empty()) {
    s += fmt::format("{:<44} {:<34} {:>14} {:>14} {:>9}\n", "scenario", "metric", "expected", "now",
                     "change");
    for (const auto& r : o.rows) {
      if (r.status == "moved" || r.status == "new metric" || r.status == "metric gone") {
        s += fmt::format("{:<44} {:<34} {:>14} {:>14} {:>+8.3f}%{}\n", r.scenario, r.metric,
                         r.expected, r.now, r.change_pct,
                         r.status == "moved" ? "" : "  (" + r.status + ")");
      } else {
        s += fmt::format("{:<44} {}\n", r.scenario, r.status);
      }
    }
    s += "\n";
  }
  s += fmt::format("regress: {} scenarios, {} moved, {} without expected results{}\n", o.scenarios,
                   o.moved_scenarios, o.missing, o.ok() ? " (all within tolerance)" : "");
  if (!o.ok()) {
    s += "regress: if the change is intended, run `tools/stepcast regress --update` and say in "
         "the commit which predictions moved and why\n";
  }
  return s;
}

nlohmann::json regress_to_json(const RegressOutcome& o) {
  nlohmann::json j;
  j["schema"] = "stepcast.regress/1";
  j["scenarios"] = o.scenarios;
  j["moved"] = o.moved_scenarios;
  j["missing"] = o.missing;
  j["ok"] = o.ok();
  j["rows"] = nlohmann::json::array();
  for (const auto& r : o.rows) {
    j["rows"].push_back({{"scenario", r.scenario},
                         {"metric", r.metric},
                         {"expected", r.expected},
                         {"now", r.now},
                         {"change_pct", r.change_pct},
                         {"status", r.status}});
  }
  return j;
}

}  // namespace stepcast
