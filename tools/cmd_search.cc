// `stepcast search`: searches valid plans for the scenario's model and cluster, split across
// mpirun ranks; prints the best and where the scenario's own plan ranks among them.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "tools/commands.h"

namespace stepcast::cli {

namespace {

struct SearchFlags {
  std::string scenario, csv_out, table_html;
  int top = 10;
  int threads = 1;
};

int run_search(const SearchFlags& f, Context& ctx) {
  Scenario s = load_scenario(f.scenario);
  SearchOptions so;
  so.top = f.top;
  so.threads = f.threads;
  std::vector<PlanCandidate> cands = search_candidates(s);
  if (cands.empty()) {
    // Every combination of the space was refused (a tp that does not divide the heads or
    // fit the node, sizes that do not divide the GPUs): bad input, at the search: section
    // when the scenario has one.
    const YAML::Node source = s.source;
    const YAML::Node sec = source["search"];
    InputIssue issue{f.scenario, 0, 0, "search",
                     "no valid plan in the search space of this model and cluster (tp must "
                     "divide the heads and KV heads and fit a node; tp x pp x cp must divide "
                     "the GPUs)"};
    if (sec) {
      issue.line = sec.Mark().line + 1;
      issue.column = sec.Mark().column + 1;
    }
    throw InputError(std::move(issue));
  }
  auto out = search_in_chunks(
      cands, search_run_options(so), f.top,
      [&](const std::vector<PlanCandidate>& c, const SearchRunOptions& run_opt,
          const Progress& progress) {
        return ctx.evaluate_split(c, s, run_opt, f.threads, progress);
      },
      [&](double threshold) { return broadcast_from_rank0(ctx.dist, threshold); },
      ctx.dist.rank == 0 ? terminal_progress("search") : nullptr);
  if (ctx.dist.rank != 0) return kExitOk;
  std::cout << fmt::format(
      "search: {} plans considered, {} invalid, {} do not fit, {} cannot "
      "be among the best {} (not simulated); best {}:\n",
      out.considered, out.invalid, out.not_fitting, out.pruned, f.top, out.best.size());
  std::cout << render_points(out.best);
  std::cout << bound_line(out);
  try {
    std::cout << own_plan_line(out, predict(s).result);
  } catch (const InputError& e) {
    std::cout << "scenario's plan cannot be simulated: "
              << (e.issues().empty() ? e.what() : e.issues().front().str()) << "\n";
  }
  if (!f.csv_out.empty()) write_file(f.csv_out, points_csv(out.best));
  if (!f.table_html.empty()) write_file(f.table_html, points_html(out.best, "search: " + s.name));
  return kExitOk;
}

}  // namespace

Command add_search_command(CLI::App& app) {
  auto f = std::make_shared<SearchFlags>();
  auto* search =
      app.add_subcommand("search", "search valid plans for the scenario's model and cluster");
  search->add_option("SCENARIO", f->scenario, "scenario YAML (its plan is the starting point)")
      ->required();
  search->add_option("--top", f->top, "how many plans to show")->check(CLI::Range(1, 1000000));
  search->add_option("--csv", f->csv_out, "write the best plans as CSV here");
  search->add_option("--threads", f->threads, "worker threads")->check(CLI::Range(1, 1024));
  search->add_option("--html", f->table_html, "write the best plans as a sortable HTML page here");
  return {search, true, [f](Context& ctx) { return run_search(*f, ctx); }};
}

}  // namespace stepcast::cli
