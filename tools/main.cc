// stepcast command line: parses arguments (CLI11), runs the parsed subcommand (commands.h,
// one cmd_*.cc each), prints errors, sets the exit code: 0 success, 1 internal error, 2 bad
// input or a plan that cannot be laid out, 3 a valid plan that does not fit in GPU memory
// (run still writes its reports), see docs/usage.md.
#include <iostream>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "model/error.h"
#include "tools/commands.h"
#include "tools/distributed.h"

namespace sc = stepcast;
using namespace stepcast::cli;

int main(int argc, char** argv) {
  CLI::App app{"stepcast: predict one training step of a large model on a GPU cluster"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every subcommand");
  const std::vector<Command> commands = {add_run_command(app),      add_lower_command(app),
                                         add_sweep_command(app),    add_search_command(app),
                                         add_validate_command(app), add_regress_command(app),
                                         add_fit_command(app)};

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitBadInput;
  }

  // Under mpirun, search and sweep share their plans across the ranks (distributed.h).
  // Errors before the split are the same on every rank: rank 0 reports them and every rank
  // exits with the code. An error while a rank evaluates its share ends all ranks.
  Context ctx;
  struct StopAtExit {
    sc::Distributed& d;
    ~StopAtExit() { sc::stop_distributed(d); }
  } stop_at_exit{ctx.dist};
  auto fail = [&](int code, const std::string& message) {
    if (ctx.in_split && ctx.dist.size > 1) {
      std::cerr << fmt::format("stepcast (rank {} of {}): {}\n", ctx.dist.rank, ctx.dist.size,
                               message);
      sc::abort_distributed(ctx.dist, code);
    }
    if (ctx.dist.rank == 0) std::cerr << "stepcast: " << message << "\n";
    return code;
  };

  try {
    ctx.dist = sc::start_distributed(&argc, &argv);
    const Command* parsed = nullptr;
    for (const Command& c : commands)
      if (c.app->parsed()) parsed = &c;
    if (ctx.dist.size > 1 && !(parsed && parsed->splits_across_ranks)) {
      throw sc::InputError(sc::InputIssue{
          "", 0, 0, "mpirun",
          fmt::format("only search and sweep split across MPI ranks; run `stepcast {}` without "
                      "mpirun",
                      app.get_subcommands().front()->get_name())});
    }
    if (parsed) return parsed->run(ctx);
  } catch (const sc::InputError& e) {
    std::string message;
    for (const auto& issue : e.issues())
      message += (message.empty() ? "" : "\nstepcast: ") + issue.str();
    return fail(kExitBadInput, message.empty() ? std::string(e.what()) : message);
  } catch (const sc::InvariantError& e) {
    return fail(kExitInternal, e.what());
  } catch (const std::exception& e) {
    return fail(kExitInternal, std::string("internal error: ") + e.what());
  }
  return kExitOk;
}
