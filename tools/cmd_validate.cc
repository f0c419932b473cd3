// `stepcast validate`: compares predictions with measurements, either a cases file of
// measured training runs (MAPE, --max-mape/--max-error gates) or two stepcast.result/1
// documents (PREDICTED.json MEASURED.json).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/error.h"
#include "sim/report/validate.h"
#include "sim/report/validate_tasks.h"
#include "tools/commands.h"

namespace stepcast::cli {

namespace {

struct ValidateFlags {
  std::string cases_file;
  std::vector<std::string> compare_files;
  bool json = false;
  std::optional<double> max_mape;
  std::optional<double> max_error;
  std::vector<std::string> override_texts;
  std::string scan_text;
  std::vector<std::string> family_filter;
  std::vector<std::string> kind_filter;
  int threads = 1;
  std::string tasks_scenario;  // --tasks SCENARIO: per task label against MEASURED.json
  int top = 25;
};

// --tasks SCENARIO MEASURED.json: the measured timeline against each task's predicted cost.
int validate_tasks(const ValidateFlags& f) {
  if (f.compare_files.size() != 1)
    throw InputError(InputIssue{"", 0, 0, "--tasks", "give one MEASURED.json (with a timeline)"});
  const Scenario s = load_scenario(f.tasks_scenario);
  TaskComparison c;
  try {
    c = compare_tasks(s, read_text_file(f.compare_files[0], "JSON"), f.compare_files[0]);
  } catch (const InputError& e) {
    if (!e.issues().empty() && e.issues()[0].file == f.compare_files[0]) throw;
    throw locate_in_scenario(e, s);
  }
  if (f.json)
    std::cout << task_comparison_to_json(c).dump(2) << "\n";
  else
    std::cout << render_task_comparison(c, f.top);
  return kExitOk;
}

// The cases of the --families and --kinds given (all when none); InputError when a kind is
// not one case_kind gives, or when no case is left.
std::vector<ValidationCase> keep_cases(std::vector<ValidationCase> all,
                                       const std::vector<std::string>& families,
                                       const std::vector<std::string>& kinds) {
  static const std::vector<std::string> kKinds = {"dense", "cp", "fsdp", "moe"};
  for (const std::string& k : kinds)
    if (std::find(kKinds.begin(), kKinds.end(), k) == kKinds.end())
      throw InputError(InputIssue{"", 0, 0, "--kinds",
                                  fmt::format("unknown kind \"{}\" (dense, cp, fsdp, moe)", k)});
  auto listed = [](const std::vector<std::string>& v, const std::string& x) {
    return v.empty() || std::find(v.begin(), v.end(), x) != v.end();
  };
  std::vector<ValidationCase> out;
  for (auto& c : all)
    if (listed(families, c.family) && listed(kinds, case_kind(c.scenario)))
      out.push_back(std::move(c));
  if (out.empty()) {
    const std::string what = kinds.empty()      ? "no case of these families"
                             : families.empty() ? "no case of these kinds"
                                                : "no case of these kinds in these families";
    throw InputError(InputIssue{"", 0, 0, kinds.empty() ? "--families" : "--kinds", what});
  }
  return out;
}

// --scan: every case again at each value of the key; prints the fit and the
// leave-one-family-out error.
void print_scan(const ValidateFlags& f, const std::vector<ProfileOverride>& overrides,
                const std::pair<ProfileOverride, std::vector<double>>& scan) {
  const auto& [key, values] = scan;
  std::vector<ValidationReport> reports;
  for (const double v : values) {
    auto with = overrides;
    with.push_back(key);
    with.back().value = fmt::format("{:g}", v);
    reports.push_back(
        run_cases(keep_cases(load_cases(f.cases_file, with), f.family_filter, f.kind_filter), {},
                  terminal_progress("scan"), f.threads));
  }
  std::cout << render_lofo(leave_one_family_out(key, values, reports));
}

// --cases FILE: runs every case, prints the report, exit 1 past a --max-* gate.
int validate_cases(const ValidateFlags& f) {
  std::vector<ProfileOverride> overrides;
  for (const std::string& t : f.override_texts) overrides.push_back(parse_profile_override(t));
  std::optional<std::pair<ProfileOverride, std::vector<double>>> scan;
  if (!f.scan_text.empty()) scan = parse_scan(f.scan_text);  // bad input before any run
  auto cases = keep_cases(load_cases(f.cases_file, overrides), f.family_filter, f.kind_filter);
  auto rep = run_cases(cases, {}, terminal_progress("validate"), f.threads);
  if (f.json) {
    std::cout << validation_to_json(rep).dump(2) << "\n";
  } else {
    std::cout << render_validation(rep);
  }
  if (scan) print_scan(f, overrides, *scan);
  bool over = false;
  if (f.max_mape && 100 * rep.mape > *f.max_mape) {
    std::cerr << fmt::format("stepcast: MAPE {:.2f}% exceeds --max-mape {:.2f}%\n", 100 * rep.mape,
                             *f.max_mape);
    over = true;
  }
  if (f.max_error) {
    for (const auto& c : rep.cases)
      if (100 * std::fabs(c.error) > *f.max_error) {
        std::cerr << fmt::format("stepcast: {}: error {:+.2f}% exceeds --max-error {:.2f}%\n", c.id,
                                 100 * c.error, *f.max_error);
        over = true;
      }
  }
  return over ? kExitInternal : kExitOk;
}

int run_validate(const ValidateFlags& f, const CLI::App& validate) {
  if (validate.count("--top") > 0 && f.tasks_scenario.empty())
    throw InputError(InputIssue{"", 0, 0, "--top", "applies to --tasks only"});
  if (!f.tasks_scenario.empty()) {
    if (!f.cases_file.empty())
      throw InputError(InputIssue{"", 0, 0, "--tasks", "not with --cases"});
    return validate_tasks(f);
  }
  if (!f.cases_file.empty() == !f.compare_files.empty() ||
      (!f.compare_files.empty() && f.compare_files.size() != 2)) {
    throw InputError(InputIssue{"", 0, 0, "validate",
                                "give either --cases FILE or PREDICTED.json MEASURED.json"});
  }
  if (f.cases_file.empty()) {
    for (const char* flag : {"--override", "--max-mape", "--max-error", "--threads", "--scan",
                             "--families", "--kinds"})
      if (validate.count(flag) > 0)
        throw InputError(InputIssue{"", 0, 0, flag, "applies to --cases only"});
  }
  if (!f.scan_text.empty() && f.json)
    throw InputError(InputIssue{"", 0, 0, "--scan", "prints a table: not with --json"});
  require_percent(f.max_mape, "--max-mape");
  require_percent(f.max_error, "--max-error");
  if (!f.cases_file.empty()) return validate_cases(f);
  nlohmann::json out;
  std::string text =
      compare_results(read_text_file(f.compare_files[0], "JSON"), f.compare_files[0],
                      read_text_file(f.compare_files[1], "JSON"), f.compare_files[1], &out);
  if (f.json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << text;
  }
  return kExitOk;
}

}  // namespace

Command add_validate_command(CLI::App& app) {
  auto f = std::make_shared<ValidateFlags>();
  auto* validate = app.add_subcommand(
      "validate",
      "compare predictions with measurements: --cases FILE, PREDICTED.json MEASURED.json, or "
      "--tasks SCENARIO MEASURED.json");
  validate->add_option("--cases", f->cases_file, "cases file (measured training runs)");
  validate
      ->add_option("FILES", f->compare_files,
                   "PREDICTED.json MEASURED.json (stepcast.result/1): compares the step, busy "
                   "time per kind and phase, and the breakdown; a name in only one file is left "
                   "out (a measured timeline may lack kinds)")
      ->expected(0, 2);
  validate->add_flag("--json", f->json, "print JSON instead of the table");
  validate->add_option("--tasks", f->tasks_scenario,
                       "SCENARIO: compare MEASURED.json's timeline (stepcast-exec --timeline) "
                       "task by task with the scenario's predicted kernel costs, by label");
  validate->add_option("--top", f->top, "with --tasks: label groups shown (0: all; default 25)")
      ->check(CLI::Range(0, 1000000));
  validate
      ->add_option("--threads", f->threads,
                   "worker threads for --cases (same report for any count)")
      ->check(CLI::Range(1, 1024));
  validate->add_option("--max-mape", f->max_mape, "exit 1 when MAPE (percent) exceeds this");
  validate->add_option("--max-error", f->max_error,
                       "exit 1 when any case's absolute error (percent) exceeds this");
  validate
      ->add_option("--override", f->override_texts,
                   "[PROFILE:]KEY=VALUE: set a profile key for every case (of that profile)")
      ->take_all();
  validate
      ->add_option("--families", f->family_filter,
                   "only the cases of these source families (comma-separated)")
      ->delimiter(',');
  validate
      ->add_option("--kinds", f->kind_filter,
                   "only the cases of these kinds of plan: dense, cp, fsdp, moe (comma-separated)")
      ->delimiter(',');
  validate->add_option("--scan", f->scan_text,
                       "[PROFILE:]KEY=V1,V2,...: also predict every case at each value and print "
                       "the fit and the leave-one-family-out error");
  return {validate, false, [f, validate](Context&) { return run_validate(*f, *validate); }};
}

}  // namespace stepcast::cli
