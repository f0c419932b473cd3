// Accuracy against measured runs (`stepcast validate --cases FILE`) and against a measured
// timeline of the same Program (`stepcast validate PREDICTED.json MEASURED.json`).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/report/report.h"

namespace stepcast {

// A cases file:
//   cases:
//   - id: megatron2021-t1-1.7B
//     source: "paper, table"
//     assumed: "what was not published"        (optional)
//     scenario: megatron2021-t1-1.7B.yaml       (path relative to the cases file, or inline)
//     measured: {step_time_s: 3.528, memory_peak_gib: 55.2, ...}   (step_time_s required)
//     family: megatron2021   (optional: the source family, for leave-one-family-out; default
//                             the id up to its first '-')
struct ValidationCase {
  std::string id;
  std::string family;  // the source family (a paper or table the case comes from)
  std::string source;
  std::string assumed;
  std::string scenario_file;  // file the scenario was read from
  Scenario scenario;
  double measured_step_s = 0;
  double measured_memory_gib = 0;  // 0: not published
};

// A profile key set for a validation run (`validate --cases FILE --override
// [PROFILE:]KEY=VALUE`): spliced into cluster.overrides of every case whose profile is
// `profile` (every case when empty), after the scenario's own overrides, so it wins. This is
// how the scan of a fitted profile parameter is reproduced (README, accuracy section).
struct ProfileOverride {
  std::string profile;  // empty: every case
  std::string key;      // dotted profile path, e.g. compute.sustained_clock
  std::string value;    // YAML scalar, e.g. 0.86 or 400 Gb/s
};
// Parses "[PROFILE:]KEY=VALUE"; InputError naming --override when it is not of that form.
ProfileOverride parse_profile_override(const std::string& text);

std::vector<ValidationCase> load_cases(const std::string& path,
                                       const std::vector<ProfileOverride>& overrides = {});

struct CaseOutcome {
  std::string id;
  std::string family;     // ValidationCase::family
  std::string framework;  // the scenario's framework preset (sim/plan/framework.h)
  std::string kind;       // case_kind: dense | moe | fsdp | cp
  double measured_step_s = 0;
  double predicted_step_s = 0;
  double error = 0;  // (predicted - measured) / measured
  double measured_memory_gib = 0;
  double memory_error = 0;  // when measured_memory_gib > 0
  Result result;
};

struct ValidationReport {
  std::vector<CaseOutcome> cases;
  double mape = 0;  // mean of |error|
  std::string worst_id;
  double worst_abs_error = 0;
  double memory_mape = 0;  // over cases with a published memory figure
  int memory_cases = 0;
  int within_5pct = 0, within_10pct = 0;  // cases with |error| <= 5%, <= 10%
  std::vector<std::string> over_10pct;    // ids of the cases with |error| > 10%
  // Per hardware profile (each has its own sustained clock): mean |error| and case count.
  std::map<std::string, std::pair<double, int>> mape_by_profile;
  // Likewise per framework preset, per kind of plan (case_kind) and per source family.
  std::map<std::string, std::pair<double, int>> mape_by_framework, mape_by_kind, mape_by_family;
  double mape_non_moe = 0;  // over the cases whose kind is not moe
  int non_moe_cases = 0;
};

// The kind of plan a case exercises, for the per-kind MAPE: "moe" (a MoE model), else
// "fsdp" (zero 3), else "cp" (cp > 1), else "dense".
std::string case_kind(const Scenario& sc);

// Leave-one-family-out: the cases predicted at each value of one profile key (`scan`), the
// value fitted (lowest MAPE) on all cases and, per source family, on the cases outside it.
struct FamilyFit {
  std::string family;
  int cases = 0;
  double in_sample_mape = 0;  // the family's MAPE at the value fitted on all cases
  double held_out_value = 0;  // the value fitted without the family
  double held_out_mape = 0;   // the family's MAPE at that value
};
struct LofoReport {
  ProfileOverride key;  // the scanned key (value: the value fitted on all cases)
  std::vector<double> values;
  std::vector<double> mape;  // per value, over all cases
  double best_value = 0;
  double in_sample_mape = 0;  // over all cases at best_value
  double held_out_mape = 0;   // over all cases, each predicted with its family left out
  std::vector<FamilyFit> families;
};
// `reports[i]`: the cases run with `key` set to values[i] (same cases, same order).
LofoReport leave_one_family_out(const ProfileOverride& key, const std::vector<double>& values,
                                const std::vector<ValidationReport>& reports);
std::string render_lofo(const LofoReport& r);
// "PROFILE:KEY=V1,V2,..." -> the key (value empty) and the values; InputError naming --scan.
std::pair<ProfileOverride, std::vector<double>> parse_scan(const std::string& text);

// Predicts every case (on `threads` worker threads; the report is the same for any count)
// and compares it with its measurement.
ValidationReport run_cases(const std::vector<ValidationCase>& cases, const RunOptions& opt,
                           const Progress& progress = {}, int threads = 1);
std::string render_validation(const ValidationReport& r);
nlohmann::json validation_to_json(const ValidationReport& r);

// Compares two stepcast.result/1 documents, given as their text (predicted and measured,
// e.g. from the GPU executor): step time, busy time per task kind and per phase, exposed
// time per breakdown category. A name in a section of only one document is left out (a
// measured timeline may lack kinds). Returns the table text and fills `json_out`. Throws
// InputError, every issue at file:line:col of the value (or of the object lacking the key):
// invalid JSON, not stepcast.result/1, step_time_s missing, negative or not finite (or 0 in
// the measured document: the errors divide by it), a section not a mapping, or a value in
// it not a non-negative finite number.
std::string compare_results(const std::string& predicted_text, const std::string& predicted_file,
                            const std::string& measured_text, const std::string& measured_file,
                            nlohmann::json* json_out);

nlohmann::json read_json_file(const std::string& path);  // InputError on failure

}  // namespace stepcast
