// The helpers the subcommands share (commands.h): progress bar, file output, flag checks,
// and the MPI split of the plans of search and sweep.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "model/error.h"
#include "tools/commands.h"

namespace stepcast::cli {

Progress terminal_progress(const std::string& what) {
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

void write_stream(const std::string& path, const std::function<void(std::ostream&)>& write,
                  bool newline) {
  std::ofstream out(path);
  if (!out) throw InputError(InputIssue{path, 0, 0, "", "cannot write the file"});
  write(out);
  if (newline) out << '\n';
  if (!out) throw InputError(InputIssue{path, 0, 0, "", "write failed"});
}

void write_file(const std::string& path, const std::string& text) {
  write_stream(
      path, [&](std::ostream& out) { out << text; }, false);
}

bool parse_fidelity(const std::string& f) {
  if (f == "folded") return true;
  if (f == "full") return false;
  throw InputError(
      InputIssue{"", 0, 0, "--fidelity", "expected folded or full, got \"" + f + "\""});
}

// NaN compares false with everything, so `--max-mape nan` never failed a run, and a
// negative tolerance flagged every scenario.
void require_percent(const std::optional<double>& v, const char* flag) {
  if (v && !(std::isfinite(*v) && *v >= 0))
    throw InputError(
        InputIssue{"", 0, 0, flag, fmt::format("expected a finite percentage >= 0, got {}", *v)});
}

std::vector<ExplorePoint> Context::evaluate_split(const std::vector<PlanCandidate>& cands,
                                                  const Scenario& s,
                                                  const SearchRunOptions& run_opt, int threads,
                                                  const Progress& progress) {
  in_split = true;
  auto pts = gather_points(
      dist, evaluate_candidates(cands, s.file, run_opt, threads,
                                dist.rank == 0 ? progress : nullptr, dist.rank, dist.size));
  in_split = false;
  return pts;
}

}  // namespace stepcast::cli
