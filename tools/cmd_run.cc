// `stepcast run`: simulates one training step of a scenario, prints the summary and writes
// the requested reports (JSON, trace, SVG, HTML); exit 3 when the plan does not fit.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "model/error.h"
#include "sim/report/visual.h"
#include "tools/commands.h"

namespace stepcast::cli {

namespace {

struct RunFlags {
  std::string scenario, json_out, trace_out, svg_out, html_out, fidelity = "folded";
  std::vector<int> trace_ranks;
  CLI::Option* fidelity_option = nullptr;
};

int run_run(const RunFlags& f) {
  if (!f.trace_ranks.empty() && f.trace_out.empty())
    throw InputError(InputIssue{"", 0, 0, "--trace-ranks", "needs --trace FILE"});
  RunOptions opt;
  opt.folded = parse_fidelity(f.fidelity);
  Scenario s = load_scenario(f.scenario);
  for (int r : f.trace_ranks)
    if (r < 0 || r >= s.gpus)  // else silently left out of the trace
      throw InputError(
          InputIssue{"", 0, 0, "--trace-ranks",
                     fmt::format("rank {} is not a global rank of the scenario's {} GPUs (0 to {})",
                                 r, s.gpus, s.gpus - 1)});
  if (f.fidelity_option->count() > 0 && opt.folded && !s.stragglers.empty()) {
    const YAML::Mark m = s.source["cluster"]["stragglers"].Mark();
    throw InputError(InputIssue{
        s.file, m.line + 1, m.column + 1, "cluster.stragglers",
        "a slow GPU or link breaks the symmetry --fidelity folded relies on: every rank is "
        "simulated; leave out --fidelity folded (or give --fidelity full)"});
  }
  opt.progress = terminal_progress("lower, simulate, report");
  opt.critical_path = true;
  Prediction p = predict(s, opt);
  std::cout << render_text(p.result);
  if (!f.json_out.empty()) write_file(f.json_out, result_to_json(p.result).dump(2) + "\n");
  if (!f.trace_out.empty()) {
    write_stream(
        f.trace_out,
        [&](std::ostream& out) { write_trace_json(p.program, p.timeline, f.trace_ranks, out); },
        true);
  }
  if (!f.svg_out.empty()) write_file(f.svg_out, pipeline_svg(p.program, p.timeline));
  if (!f.html_out.empty()) write_file(f.html_out, html_report(s, p));
  if (!p.result.fits_memory) {
    std::cerr << fmt::format(
        "stepcast: the plan does not fit: peak {:.2f} GiB per GPU > {:.2f} GiB capacity{}\n",
        p.result.memory_peak_gib, p.result.memory_capacity_gib,
        p.result.memory_reserved_gib > 0 ? " (" + reserve_note(p.result) + ")" : "");
    return kExitNoFit;
  }
  return kExitOk;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  auto* run = app.add_subcommand("run", "simulate one training step of a scenario");
  run->add_option("SCENARIO", f->scenario, "scenario YAML")->required();
  run->add_option("--json", f->json_out, "write the stepcast.result/1 JSON here");
  run->add_option("--trace", f->trace_out, "write a Chrome/Perfetto trace-event JSON here");
  run->add_option("--trace-ranks", f->trace_ranks, "only these global ranks in the trace");
  run->add_option("--svg", f->svg_out, "write the pipeline schedule picture (SVG) here");
  run->add_option("--html", f->html_out, "write a self-contained HTML report here");
  f->fidelity_option = run->add_option(
      "--fidelity", f->fidelity,
      "folded (default: symmetric ranks once; full when the cluster has stragglers) or full");
  return {run, false, [f](Context&) { return run_run(*f); }};
}

}  // namespace stepcast::cli
