// CI regression of predictions: every scenario under a directory against its expected
// result in <dir>/expected/<relative path>.json (written by --update).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/report/validate.h"

namespace stepcast {

struct RegressOptions {
  std::string dir = "scenarios";       // scenarios root; expected results in dir/expected
  std::vector<std::string> scenarios;  // explicit files (default: every *.yaml under dir)
  // Float tolerance in percent; default 0.01 %. Integers, strings and booleans are exact.
  std::optional<double> tolerance_pct;
  bool update = false;
  int threads = 1;  // predictions on this many threads (same outcome for any count)
  Progress progress;
};

struct RegressRow {
  std::string scenario;  // path relative to dir
  std::string metric;    // flattened key, e.g. "breakdown_s.dp_comm"
  std::string expected;  // rendered value ("" when missing)
  std::string now;
  double change_pct = 0;  // for numbers
  std::string status;  // "moved", "missing expected file", "new metric", "metric gone", "updated"
};

struct RegressOutcome {
  std::vector<RegressRow> rows;
  int scenarios = 0;
  int moved_scenarios = 0;
  int missing = 0;
  int updated = 0;
  bool ok() const { return moved_scenarios == 0 && missing == 0; }
};

// Scenario files under `dir` (recursive, sorted, skipping `expected/` and cases files).
std::vector<std::string> find_scenarios(const std::string& dir);
std::string expected_path(const std::string& dir, const std::string& scenario_file);

RegressOutcome run_regress(const RegressOptions& opt);
std::string render_regress(const RegressOutcome& o, const RegressOptions& opt);
nlohmann::json regress_to_json(const RegressOutcome& o);

// Flattens a JSON document to "a.b[2].c" -> leaf value.
std::vector<std::pair<std::string, nlohmann::json>> flatten_json(const nlohmann::json& j);

}  // namespace stepcast
