// The stepcast subcommands, one file each (cmd_*.cc): each registers its flags and help on
// the CLI11 app and runs once parsed. main.cc dispatches to the parsed one, reports errors
// and sets the exit code. Also the helpers the subcommands share (progress bar, file output,
// flag checks) and the MPI split of search and sweep (distributed.h).
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "sim/report/explore.h"
#include "sim/report/report.h"
#include "tools/distributed.h"

namespace stepcast::cli {

// Exit codes (docs/usage.md): 0 success, 1 internal error, 2 bad input or a plan that cannot be
// laid out, 3 a valid plan that does not fit in GPU memory (run still writes its reports).
constexpr int kExitOk = 0, kExitInternal = 1, kExitBadInput = 2, kExitNoFit = 3;

// What a running subcommand shares with main: the MPI ranks and whether this rank is
// evaluating its share of the plans (an error then ends all ranks, see main.cc).
struct Context {
  Distributed dist;
  bool in_split = false;
  // Evaluates the candidates, this rank's share of them under mpirun; rank 0 gets them all.
  std::vector<ExplorePoint> evaluate_split(const std::vector<PlanCandidate>& cands,
                                           const Scenario& s, const SearchRunOptions& run_opt,
                                           int threads, const Progress& progress);
};

// One registered subcommand: its CLI11 app and how to run it once parsed.
struct Command {
  CLI::App* app = nullptr;
  bool splits_across_ranks = false;  // search and sweep split across mpirun ranks
  std::function<int(Context&)> run;
};

// In the order of `stepcast --help`.
Command add_run_command(CLI::App& app);
Command add_lower_command(CLI::App& app);
Command add_sweep_command(CLI::App& app);
Command add_search_command(CLI::App& app);
Command add_validate_command(CLI::App& app);
Command add_regress_command(CLI::App& app);
Command add_fit_command(CLI::App& app);

// A progress bar on stderr when it is a terminal; silent otherwise.
Progress terminal_progress(const std::string& what);
// Opens `path`, lets `write` stream into it, ends with a newline when asked.
void write_stream(const std::string& path, const std::function<void(std::ostream&)>& write,
                  bool newline);
void write_file(const std::string& path, const std::string& text);
// --fidelity: folded -> true, full -> false.
bool parse_fidelity(const std::string& f);
// A percentage flag (--tolerance, --max-mape, --max-error) must be a finite number >= 0.
void require_percent(const std::optional<double>& v, const char* flag);

}  // namespace stepcast::cli
