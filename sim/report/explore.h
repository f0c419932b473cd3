// What-if exploration: the scenario's `sweep:` block (cartesian product of dotted keys) and
// plan search over valid layouts. Each point is a full simulation.
#pragma once

#include <string>
#include <vector>

#include "sim/report/validate.h"

namespace stepcast {

struct ExplorePoint {
  std::vector<std::pair<std::string, std::string>> settings;  // dotted key -> value
  bool valid = true;
  std::string error;      // why the point could not be laid out (valid == false)
  Result result;
};

// Runs every combination of the sweep axes (in the order given; last axis fastest).
// Points that fail validation are kept with valid = false and their message.
std::vector<ExplorePoint> run_sweep(const Scenario& base, const Progress& progress = nullptr);

struct SearchOptions {
  int top = 10;
  int threads = 1;
  Progress progress;
  // Skip costing and simulating plans whose weights, gradients and optimizer state alone
  // exceed a GPU's memory (they cannot fit; the outcome is the same, only faster).
  bool skip_plans_that_cannot_fit = true;
};

// Enumerates plans for the scenario's model, cluster and batch: tp in {1,2,4,8} (within a
// node), pp dividing the layers, cp in {1,2,4} for long sequences, microbatch in {1,2,4},
// schedule 1f1b / interleaved (vpp 2), zero 0/1 (3 when pp == 1), recompute none /
// selective / full, sequence parallel when tp > 1; keeps the valid ones that fit in memory,
// sorted by step time (ties by layout). Deterministic for any thread count.
struct SearchOutcome {
  std::vector<ExplorePoint> best;  // at most `top`
  int considered = 0;
  int invalid = 0;
  int not_fitting = 0;
};
SearchOutcome run_search(const Scenario& base, const SearchOptions& opt);

std::string render_points(const std::vector<ExplorePoint>& pts);
// A self-contained HTML page with the points as a table sortable by any column (click a
// header; numeric columns sort by value). `title` heads the page.
std::string points_html(const std::vector<ExplorePoint>& pts, const std::string& title);
std::string points_csv(const std::vector<ExplorePoint>& pts);

}  // namespace stepcast
