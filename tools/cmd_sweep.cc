// `stepcast sweep`: runs the scenario's sweep: block (what-if), split across mpirun ranks.
#include <algorithm>
#include <iostream>
#include <memory>

#include "tools/commands.h"

namespace stepcast::cli {

namespace {

struct SweepFlags {
  std::string scenario, csv_out, table_html;
  int threads = 1;
};

int run_sweep(const SweepFlags& f, Context& ctx) {
  Scenario s = load_scenario(f.scenario);
  auto pts = ctx.evaluate_split(sweep_candidates(s), s, {}, f.threads, terminal_progress("sweep"));
  if (ctx.dist.rank != 0) return kExitOk;
  std::cout << render_points(pts);
  if (!f.csv_out.empty()) write_file(f.csv_out, points_csv(pts));
  if (!f.table_html.empty()) write_file(f.table_html, points_html(pts, "sweep: " + s.name));
  // Some points may be plans the model or the stack cannot run (shown as such); a sweep
  // none of whose points runs is bad input.
  const bool any =
      std::any_of(pts.begin(), pts.end(), [](const ExplorePoint& p) { return p.valid; });
  if (!pts.empty() && !any) {
    std::cerr << "stepcast: " << f.scenario << ": sweep: no point of the sweep can run (above)\n";
    return kExitBadInput;
  }
  return kExitOk;
}

}  // namespace

Command add_sweep_command(CLI::App& app) {
  auto f = std::make_shared<SweepFlags>();
  auto* sweep = app.add_subcommand("sweep", "run the scenario's sweep: block (what-if)");
  sweep->add_option("SCENARIO", f->scenario, "scenario YAML with a sweep: block")->required();
  sweep->add_option("--csv", f->csv_out, "write the table as CSV here");
  sweep->add_option("--html", f->table_html, "write the table as a sortable HTML page here");
  sweep->add_option("--threads", f->threads, "worker threads (same table for any count)")
      ->check(CLI::Range(1, 1024));
  return {sweep, true, [f](Context& ctx) { return run_sweep(*f, ctx); }};
}

}  // namespace stepcast::cli
