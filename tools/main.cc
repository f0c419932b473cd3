// stepcast command line: parses arguments (CLI11), calls the library, prints, sets the exit
// code: 0 success, 1 internal error, 2 bad input or a plan that cannot be laid out, 3 a valid
// plan that does not fit in GPU memory (run still writes its reports), see DESIGN.md.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "model/error.h"
#include "sim/lower/lower.h"
#include "sim/program/program_json.h"
#include "sim/report/explore.h"
#include "sim/report/regress.h"
#include "sim/report/report.h"
#include "sim/report/validate.h"
#include "sim/report/visual.h"
#include "calibrate/fit/fit.h"
#include "tools/distributed.h"

namespace sc = stepcast;

namespace {

constexpr int kExitOk = 0, kExitInternal = 1, kExitBadInput = 2, kExitNoFit = 3;

// A progress bar on stderr when it is a terminal; silent otherwise.
sc::Progress terminal_progress(const std::string& what) {
  if (!isatty(fileno(stderr))) return nullptr;
  return [what](size_t done, size_t total) {
    const int width = 30;
    int filled = total ? static_cast<int>(width * done / total) : width;
    std::fprintf(stderr, "\r%s [%s%s] %zu/%zu", what.c_str(), std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done, total);
    if (done == total) std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  };
}

// Opens `path`, lets `write` stream into it, ends with a newline when asked.
void write_stream(const std::string& path, const std::function<void(std::ostream&)>& write,
                  bool newline) {
  std::ofstream out(path);
  if (!out) throw sc::InputError(sc::InputIssue{path, 0, 0, "", "cannot write the file"});
  write(out);
  if (newline) out << '\n';
  if (!out) throw sc::InputError(sc::InputIssue{path, 0, 0, "", "write failed"});
}

void write_file(const std::string& path, const std::string& text) {
  write_stream(path, [&](std::ostream& out) { out << text; }, false);
}

bool parse_fidelity(const std::string& f) {
  if (f == "folded") return true;
  if (f == "full") return false;
  throw sc::InputError(sc::InputIssue{"", 0, 0, "--fidelity",
                                      "expected folded or full, got \"" + f + "\""});
}

// A percentage flag (--tolerance, --max-mape, --max-error) must be a finite number >= 0: NaN
// compares false with everything, so `--max-mape nan` never failed a run, and a negative
// tolerance flagged every scenario.
void require_percent(const std::optional<double>& v, const char* flag) {
  if (v && !(std::isfinite(*v) && *v >= 0))
    throw sc::InputError(sc::InputIssue{"", 0, 0, flag,
                                        fmt::format("expected a finite percentage >= 0, got {}", *v)});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stepcast: predict one training step of a large model on a GPU cluster"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every subcommand");

  // run
  std::string scenario, json_out, trace_out, svg_out, html_out, fidelity = "folded";
  std::vector<int> trace_ranks;
  auto* run = app.add_subcommand("run", "simulate one training step of a scenario");
  run->add_option("SCENARIO", scenario, "scenario YAML")->required();
  run->add_option("--json", json_out, "write the stepcast.result/1 JSON here");
  run->add_option("--trace", trace_out, "write a Chrome/Perfetto trace-event JSON here");
  run->add_option("--trace-ranks", trace_ranks, "only these global ranks in the trace");
  run->add_option("--svg", svg_out, "write the pipeline schedule picture (SVG) here");
  run->add_option("--html", html_out, "write a self-contained HTML report here");
  auto* run_fidelity = run->add_option(
      "--fidelity", fidelity,
      "folded (default: symmetric ranks once; full when the cluster has stragglers) or full");

  // lower
  std::string program_out;
  auto* lower_cmd = app.add_subcommand("lower", "write the lowered Program (for the GPU executor)");
  lower_cmd->add_option("SCENARIO", scenario, "scenario YAML")->required();
  lower_cmd->add_option("-o,--output", program_out, "Program JSON to write")->required();
  lower_cmd->add_option("--fidelity", fidelity, "folded (default) or full");

  // sweep
  std::string csv_out;
  auto* sweep = app.add_subcommand("sweep", "run the scenario's sweep: block (what-if)");
  sweep->add_option("SCENARIO", scenario, "scenario YAML with a sweep: block")->required();
  sweep->add_option("--csv", csv_out, "write the table as CSV here");
  std::string table_html;
  sweep->add_option("--html", table_html, "write the table as a sortable HTML page here");
  int threads = 1;
  sweep->add_option("--threads", threads, "worker threads (same table for any count)")
      ->check(CLI::Range(1, 1024));

  // search
  int top = 10;
  auto* search = app.add_subcommand("search", "search valid plans for the scenario's model and cluster");
  search->add_option("SCENARIO", scenario, "scenario YAML (its plan is the starting point)")->required();
  search->add_option("--top", top, "how many plans to show")->check(CLI::Range(1, 1000000));
  search->add_option("--csv", csv_out, "write the best plans as CSV here");
  search->add_option("--threads", threads, "worker threads")->check(CLI::Range(1, 1024));
  search->add_option("--html", table_html, "write the best plans as a sortable HTML page here");

  // validate
  std::string cases_file;
  std::vector<std::string> compare_files;
  bool validate_json = false;
  std::optional<double> max_mape;
  std::optional<double> max_error;
  std::vector<std::string> override_texts;
  std::string scan_text;
  std::vector<std::string> family_filter;
  auto* validate = app.add_subcommand(
      "validate", "compare predictions with measurements: --cases FILE, or PREDICTED.json MEASURED.json");
  validate->add_option("--cases", cases_file, "cases file (measured training runs)");
  validate
      ->add_option("FILES", compare_files,
                   "PREDICTED.json MEASURED.json (stepcast.result/1): compares the step, busy "
                   "time per kind and phase, and the breakdown; a name in only one file is left "
                   "out (a measured timeline may lack kinds)")
      ->expected(0, 2);
  validate->add_flag("--json", validate_json, "print JSON instead of the table");
  validate->add_option("--threads", threads, "worker threads for --cases (same report for any count)")
      ->check(CLI::Range(1, 1024));
  validate->add_option("--max-mape", max_mape, "exit 1 when MAPE (percent) exceeds this");
  validate->add_option("--max-error", max_error,
                       "exit 1 when any case's absolute error (percent) exceeds this");
  validate->add_option("--override", override_texts,
                       "[PROFILE:]KEY=VALUE: set a profile key for every case (of that profile)")
      ->take_all();
  validate->add_option("--families", family_filter,
                       "only the cases of these source families (comma-separated)")
      ->delimiter(',');
  validate->add_option("--scan", scan_text,
                       "[PROFILE:]KEY=V1,V2,...: also predict every case at each value and print "
                       "the fit and the leave-one-family-out error");

  // regress
  sc::RegressOptions ropt;
  bool regress_json = false;
  std::optional<double> tolerance;
  auto* regress = app.add_subcommand("regress", "re-run scenarios and compare with their expected results");
  regress->add_option("SCENARIOS", ropt.scenarios, "scenario files (default: every one under --dir)");
  regress->add_option("--threads", ropt.threads, "worker threads (same outcome for any count)")
      ->check(CLI::Range(1, 1024));
  regress->add_option("--dir", ropt.dir, "scenarios directory (expected results in DIR/expected)");
  regress->add_option("--tolerance", tolerance, "float tolerance in percent (default 0.01)");
  regress->add_flag("--update", ropt.update, "write the expected results anew");
  regress->add_flag("--json", regress_json, "print JSON instead of the table");

  // fit
  std::string measurements, base_profile, fit_out;
  auto* fit = app.add_subcommand("fit", "fit a hardware profile to calibration measurements");
  fit->add_option("MEASUREMENTS", measurements, "measurements.json from stepcast-bench")->required();
  fit->add_option("--base", base_profile, "profile to start from (name or path)")->required();
  fit->add_option("-o,--output", fit_out, "profile YAML to write")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitBadInput;
  }

  // Under mpirun, search and sweep share their plans across the ranks (distributed.h).
  // Errors before the split are the same on every rank: rank 0 reports them and every rank
  // exits with the code. An error while a rank evaluates its share ends all ranks.
  sc::Distributed dist;
  struct StopAtExit {
    sc::Distributed& d;
    ~StopAtExit() { sc::stop_distributed(d); }
  } stop_at_exit{dist};
  bool in_split = false;
  auto fail = [&](int code, const std::string& message) {
    if (in_split && dist.size > 1) {
      std::cerr << fmt::format("stepcast (rank {} of {}): {}\n", dist.rank, dist.size, message);
      sc::abort_distributed(dist, code);
    }
    if (dist.rank == 0) std::cerr << "stepcast: " << message << "\n";
    return code;
  };
  // Evaluates the candidates, this rank's share of them under mpirun; rank 0 gets them all.
  auto evaluate_split = [&](const std::vector<sc::PlanCandidate>& cands, const sc::Scenario& s,
                            const sc::RunOptions& run_opt, const sc::Progress& progress) {
    in_split = true;
    auto pts = sc::gather_points(
        dist, sc::evaluate_candidates(cands, s.file, run_opt, threads,
                                      dist.rank == 0 ? progress : nullptr, dist.rank,
                                      dist.size));
    in_split = false;
    return pts;
  };

  try {
    dist = sc::start_distributed(&argc, &argv);
    if (dist.size > 1 && !sweep->parsed() && !search->parsed()) {
      throw sc::InputError(sc::InputIssue{
          "", 0, 0, "mpirun",
          fmt::format("only search and sweep split across MPI ranks; run `stepcast {}` without "
                      "mpirun",
                      app.get_subcommands().front()->get_name())});
    }
    if (run->parsed()) {
      if (!trace_ranks.empty() && trace_out.empty())
        throw sc::InputError(sc::InputIssue{"", 0, 0, "--trace-ranks", "needs --trace FILE"});
      sc::RunOptions opt;
      opt.folded = parse_fidelity(fidelity);
      sc::Scenario s = sc::load_scenario(scenario);
      for (int r : trace_ranks)
        if (r < 0 || r >= s.gpus)  // else silently left out of the trace
          throw sc::InputError(sc::InputIssue{
              "", 0, 0, "--trace-ranks",
              fmt::format("rank {} is not a global rank of the scenario's {} GPUs (0 to {})", r,
                          s.gpus, s.gpus - 1)});
      if (run_fidelity->count() > 0 && opt.folded && !s.stragglers.empty()) {
        const YAML::Mark m = s.source["cluster"]["stragglers"].Mark();
        throw sc::InputError(sc::InputIssue{
            s.file, m.line + 1, m.column + 1, "cluster.stragglers",
            "a slow GPU or link breaks the symmetry --fidelity folded relies on: every rank is "
            "simulated; leave out --fidelity folded (or give --fidelity full)"});
      }
      opt.progress = terminal_progress("lower, simulate, report");
      opt.critical_path = true;
      sc::Prediction p = sc::predict(s, opt);
      std::cout << sc::render_text(p.result);
      if (!json_out.empty()) write_file(json_out, sc::result_to_json(p.result).dump(2) + "\n");
      if (!trace_out.empty()) {
        write_stream(
            trace_out,
            [&](std::ostream& out) { sc::write_trace_json(p.program, p.timeline, trace_ranks, out); },
            true);
      }
      if (!svg_out.empty()) write_file(svg_out, sc::pipeline_svg(p.program, p.timeline));
      if (!html_out.empty()) write_file(html_out, sc::html_report(s, p));
      if (!p.result.fits_memory) {
        std::cerr << fmt::format(
            "stepcast: the plan does not fit: peak {:.2f} GiB per GPU > {:.2f} GiB capacity{}\n",
            p.result.memory_peak_gib, p.result.memory_capacity_gib,
            p.result.memory_reserved_gib > 0 ? " (" + sc::reserve_note(p.result) + ")" : "");
        return kExitNoFit;
      }
      return kExitOk;
    }
    if (lower_cmd->parsed()) {
      sc::Scenario s = sc::load_scenario(scenario);
      sc::LowerOptions lo;
      lo.folded = parse_fidelity(fidelity);
      sc::Program prog;
      try {
        prog = sc::lower(s, lo);
      } catch (const sc::InputError& e) {
        throw sc::locate_in_scenario(e, s);
      }
      sc::validate_program(prog);
      write_stream(program_out, [&](std::ostream& out) { sc::write_program_json(prog, out); }, true);
      size_t tasks = 0;
      for (const auto& r : prog.ranks) tasks += r.tasks.size();
      std::cout << fmt::format("wrote {}: {} simulated ranks, {} tasks, {} groups\n", program_out,
                               prog.ranks.size(), tasks, prog.groups.size());
      return kExitOk;
    }
    if (sweep->parsed()) {
      sc::Scenario s = sc::load_scenario(scenario);
      auto pts = evaluate_split(sc::sweep_candidates(s), s, {}, terminal_progress("sweep"));
      if (dist.rank != 0) return kExitOk;
      std::cout << sc::render_points(pts);
      if (!csv_out.empty()) write_file(csv_out, sc::points_csv(pts));
      if (!table_html.empty()) write_file(table_html, sc::points_html(pts, "sweep: " + s.name));
      return kExitOk;
    }
    if (search->parsed()) {
      sc::Scenario s = sc::load_scenario(scenario);
      sc::SearchOptions so;
      so.top = top;
      so.threads = threads;
      auto out = sc::search_in_chunks(
          sc::search_candidates(s), sc::search_run_options(so), top,
          [&](const std::vector<sc::PlanCandidate>& c, const sc::RunOptions& run_opt,
              const sc::Progress& progress) { return evaluate_split(c, s, run_opt, progress); },
          [&](double threshold) { return sc::broadcast_from_rank0(dist, threshold); },
          dist.rank == 0 ? terminal_progress("search") : nullptr);
      if (dist.rank != 0) return kExitOk;
      std::cout << fmt::format("search: {} plans considered, {} invalid, {} do not fit, {} cannot "
                               "be among the best {} (not simulated); best {}:\n",
                               out.considered, out.invalid, out.not_fitting, out.pruned, top,
                               out.best.size());
      std::cout << sc::render_points(out.best);
      try {
        std::cout << sc::own_plan_line(out, sc::predict(s).result);
      } catch (const sc::InputError& e) {
        std::cout << "scenario's plan cannot be simulated: "
                  << (e.issues().empty() ? e.what() : e.issues().front().str()) << "\n";
      }
      if (!csv_out.empty()) write_file(csv_out, sc::points_csv(out.best));
      if (!table_html.empty()) write_file(table_html, sc::points_html(out.best, "search: " + s.name));
      return kExitOk;
    }
    if (validate->parsed()) {
      if (!cases_file.empty() == !compare_files.empty() ||
          (!compare_files.empty() && compare_files.size() != 2)) {
        throw sc::InputError(sc::InputIssue{"", 0, 0, "validate",
                                            "give either --cases FILE or PREDICTED.json MEASURED.json"});
      }
      if (cases_file.empty()) {
        for (const char* flag : {"--override", "--max-mape", "--max-error", "--threads", "--scan",
                                 "--families"})
          if (validate->count(flag) > 0)
            throw sc::InputError(sc::InputIssue{"", 0, 0, flag, "applies to --cases only"});
      }
      if (!scan_text.empty() && validate_json)
        throw sc::InputError(sc::InputIssue{"", 0, 0, "--scan", "prints a table: not with --json"});
      require_percent(max_mape, "--max-mape");
      require_percent(max_error, "--max-error");
      if (!cases_file.empty()) {
        std::vector<sc::ProfileOverride> overrides;
        for (const std::string& t : override_texts) overrides.push_back(sc::parse_profile_override(t));
        const auto keep = [&](std::vector<sc::ValidationCase> all) {
          if (family_filter.empty()) return all;
          std::vector<sc::ValidationCase> out;
          for (auto& c : all)
            if (std::find(family_filter.begin(), family_filter.end(), c.family) !=
                family_filter.end())
              out.push_back(std::move(c));
          if (out.empty())
            throw sc::InputError(
                sc::InputIssue{"", 0, 0, "--families", "no case of these families"});
          return out;
        };
        std::optional<std::pair<sc::ProfileOverride, std::vector<double>>> scan;
        if (!scan_text.empty()) scan = sc::parse_scan(scan_text);  // bad input before any run
        auto cases = keep(sc::load_cases(cases_file, overrides));
        auto rep = sc::run_cases(cases, {}, terminal_progress("validate"), threads);
        if (validate_json) {
          std::cout << sc::validation_to_json(rep).dump(2) << "\n";
        } else {
          std::cout << sc::render_validation(rep);
        }
        if (scan) {
          const auto& [key, values] = *scan;
          std::vector<sc::ValidationReport> reports;
          for (const double v : values) {
            auto with = overrides;
            with.push_back(key);
            with.back().value = fmt::format("{:g}", v);
            reports.push_back(sc::run_cases(keep(sc::load_cases(cases_file, with)), {},
                                            terminal_progress("scan"), threads));
          }
          std::cout << sc::render_lofo(sc::leave_one_family_out(key, values, reports));
        }
        bool over = false;
        if (max_mape && 100 * rep.mape > *max_mape) {
          std::cerr << fmt::format("stepcast: MAPE {:.2f}% exceeds --max-mape {:.2f}%\n",
                                   100 * rep.mape, *max_mape);
          over = true;
        }
        if (max_error) {
          for (const auto& c : rep.cases)
            if (100 * std::fabs(c.error) > *max_error) {
              std::cerr << fmt::format("stepcast: {}: error {:+.2f}% exceeds --max-error {:.2f}%\n",
                                       c.id, 100 * c.error, *max_error);
              over = true;
            }
        }
        return over ? kExitInternal : kExitOk;
      }
      nlohmann::json out;
      std::string text =
          sc::compare_results(sc::read_text_file(compare_files[0], "JSON"), compare_files[0],
                              sc::read_text_file(compare_files[1], "JSON"), compare_files[1], &out);
      if (validate_json) {
        std::cout << out.dump(2) << "\n";
      } else {
        std::cout << text;
      }
      return kExitOk;
    }
    if (regress->parsed()) {
      require_percent(tolerance, "--tolerance");
      ropt.tolerance_pct = tolerance;
      ropt.progress = terminal_progress("regress");
      auto out = sc::run_regress(ropt);
      if (regress_json) {
        std::cout << sc::regress_to_json(out).dump(2) << "\n";
      } else {
        std::cout << sc::render_regress(out, ropt);
      }
      return out.ok() || ropt.update ? kExitOk : kExitInternal;
    }
    if (fit->parsed()) {
      sc::FitReport report;
      sc::fit_profile(measurements, base_profile, fit_out, &report);
      std::cout << report.text();
      std::cout << "wrote " << fit_out << "\n";
      return kExitOk;
    }
  } catch (const sc::InputError& e) {
    std::string message;
    for (const auto& issue : e.issues()) message += (message.empty() ? "" : "\nstepcast: ") + issue.str();
    return fail(kExitBadInput, message.empty() ? std::string(e.what()) : message);
  } catch (const sc::InvariantError& e) {
    return fail(kExitInternal, e.what());
  } catch (const std::exception& e) {
    return fail(kExitInternal, std::string("internal error: ") + e.what());
  }
  return kExitOk;
}
