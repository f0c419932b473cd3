// `stepcast regress`: re-runs scenarios and compares them with their expected results
// (scenarios/expected); exit 1 when a prediction moved beyond the tolerance.
#include <iostream>
#include <memory>

#include "sim/report/regress.h"
#include "tools/commands.h"

namespace stepcast::cli {

namespace {

struct RegressFlags {
  RegressOptions ropt;
  bool json = false;
  std::optional<double> tolerance;
};

int run_regress_command(RegressFlags& f) {
  require_percent(f.tolerance, "--tolerance");
  f.ropt.tolerance_pct = f.tolerance;
  f.ropt.progress = terminal_progress("regress");
  auto out = run_regress(f.ropt);
  if (f.json) {
    std::cout << regress_to_json(out).dump(2) << "\n";
  } else {
    std::cout << render_regress(out, f.ropt);
  }
  return out.ok() || f.ropt.update ? kExitOk : kExitInternal;
}

}  // namespace

Command add_regress_command(CLI::App& app) {
  auto f = std::make_shared<RegressFlags>();
  RegressOptions& ropt = f->ropt;
  auto* regress =
      app.add_subcommand("regress", "re-run scenarios and compare with their expected results");
  regress->add_option("SCENARIOS", ropt.scenarios,
                      "scenario files (default: every one under --dir)");
  regress->add_option("--threads", ropt.threads, "worker threads (same outcome for any count)")
      ->check(CLI::Range(1, 1024));
  regress->add_option("--dir", ropt.dir, "scenarios directory (expected results in DIR/expected)");
  regress->add_option("--tolerance", f->tolerance, "float tolerance in percent (default 0.01)");
  regress->add_flag("--update", ropt.update, "write the expected results anew");
  regress->add_flag("--json", f->json, "print JSON instead of the table");
  return {regress, false, [f](Context&) { return run_regress_command(*f); }};
}

}  // namespace stepcast::cli
