// `stepcast lower`: writes the lowered Program of a scenario (stepcast.program/1, for the
// GPU executor stepcast-exec).
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "sim/lower/lower.h"
#include "sim/program/program_json.h"
#include "tools/commands.h"

namespace stepcast::cli {

namespace {

struct LowerFlags {
  std::string scenario, program_out, fidelity = "folded";
};

int run_lower(const LowerFlags& f) {
  Scenario s = load_scenario(f.scenario);
  LowerOptions lo;
  lo.folded = parse_fidelity(f.fidelity);
  Program prog;
  try {
    prog = lower(s, lo);
  } catch (const InputError& e) {
    throw locate_in_scenario(e, s);
  }
  validate_program(prog);
  write_stream(
      f.program_out, [&](std::ostream& out) { write_program_json(prog, out); }, true);
  size_t tasks = 0;
  for (const auto& r : prog.ranks) tasks += r.tasks.size();
  std::cout << fmt::format("wrote {}: {} simulated ranks, {} tasks, {} groups\n", f.program_out,
                           prog.ranks.size(), tasks, prog.groups.size());
  return kExitOk;
}

}  // namespace

Command add_lower_command(CLI::App& app) {
  auto f = std::make_shared<LowerFlags>();
  auto* lower_cmd = app.add_subcommand("lower", "write the lowered Program (for the GPU executor)");
  lower_cmd->add_option("SCENARIO", f->scenario, "scenario YAML")->required();
  lower_cmd->add_option("-o,--output", f->program_out, "Program JSON to write")->required();
  lower_cmd->add_option("--fidelity", f->fidelity, "folded (default) or full");
  return {lower_cmd, false, [f](Context&) { return run_lower(*f); }};
}

}  // namespace stepcast::cli
