// What-if exploration: the scenario's `sweep:` block (cartesian product of dotted keys) and
// plan search over valid layouts. Each point is a full simulation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "sim/report/validate.h"

namespace stepcast {

struct ExplorePoint {
  std::vector<std::pair<std::string, std::string>> settings;  // dotted key -> value
  bool valid = true;
  std::string error;      // why the point could not be laid out (valid == false)
  Result result;
};

// One point to evaluate: the scenario document to simulate and the settings that tell it
// apart (the table's plan column).
struct PlanCandidate {
  YAML::Node doc;
  std::vector<std::pair<std::string, std::string>> settings;
};

// The points of the scenario's sweep: block, every combination of the axes (in the order
// given; last axis fastest); the scenario itself when it has none.
std::vector<PlanCandidate> sweep_candidates(const Scenario& base);

// Evaluates the candidates i with i % slice_count == slice (all of them by default) on
// `threads` worker threads; the other entries stay default. Points that fail validation
// are kept with valid = false and their message. The same points for any thread count;
// slices let MPI ranks share the work (tools/distributed.h).
std::vector<ExplorePoint> evaluate_candidates(const std::vector<PlanCandidate>& cands,
                                              const std::string& file, const RunOptions& run,
                                              int threads, const Progress& progress = nullptr,
                                              int slice = 0, int slice_count = 1);

struct SearchOptions {
  int top = 10;
  int threads = 1;
  Progress progress;
  // Skip costing and simulating plans whose weights, gradients and optimizer state alone
  // exceed a GPU's memory (they cannot fit; the outcome is the same, only faster).
  bool skip_plans_that_cannot_fit = true;
};

// Enumerates plans for the scenario's model, cluster and batch: tp in {1,2,4,8} (within a
// node), pp up to the layers (split by balanced_stage_layers when uneven), cp in {1,2,4}
// for long sequences, ep dividing the experts and dp for MoE models, microbatch in
// {1,2,4,8} dividing the batch per replica, schedule 1f1b / zb-h1 / gpipe (pp > 1) /
// interleaved (vpp 2), cp_kind ring / allgather (cp > 1),
// zero 0..3 (1..3 when dp > 1), recompute none / selective / full, sequence parallel when
// tp > 1 with overlap.tp_comm off / on; every other key (overlap.grad_reduce, bucket_mb,
// ...) as the scenario sets it. Keeps the valid ones that fit in memory, sorted by step
// time (ties by layout). Deterministic for any thread count.
struct SearchOutcome {
  std::vector<ExplorePoint> best;  // at most `top`
  int considered = 0;
  int invalid = 0;
  int not_fitting = 0;
  std::vector<double> fitting_step_times;  // of every plan that fits, ascending
};
std::vector<PlanCandidate> search_candidates(const Scenario& base);
// Layers per stage for `layers` over `stages` (virtual) pipeline stages, as even as
// possible, the stages with one layer fewer at both ends (first, last, second, ...), where
// the embedding and the output head also run; as Llama 3 405B ran 126 layers on 16 stages
// (Llama 3 paper, Sec. 3.3.2: one layer fewer in the first and the last stage). Empty when
// a stage would hold no layer.
std::vector<int> balanced_stage_layers(int layers, int stages);
// How search runs each plan: skips simulating those that cannot fit (SearchOptions).
RunOptions search_run_options(const SearchOptions& opt);
// Counts the invalid and non-fitting points and keeps the best `top` fitting ones.
SearchOutcome summarize_search(std::vector<ExplorePoint> pts, int top);
// summarize_search(evaluate_candidates(search_candidates(...))).
SearchOutcome run_search(const Scenario& base, const SearchOptions& opt);
// One line placing the scenario's own plan (`own`, its prediction) among the searched
// ones: its step time and how many fitting plans are faster, or that it does not fit.
std::string own_plan_line(const SearchOutcome& out, const Result& own);

// Every field of a point in CBOR (doubles bit for bit, NaN and infinities included), and
// back: how the ranks of an MPI-split sweep or search send their points to rank 0.
std::vector<std::uint8_t> points_to_cbor(const std::vector<const ExplorePoint*>& pts);
std::vector<ExplorePoint> points_from_cbor(const std::vector<std::uint8_t>& bytes);

std::string render_points(const std::vector<ExplorePoint>& pts);
// A self-contained HTML page with the points as a table sortable by any column (click a
// header; numeric columns sort by value). `title` heads the page.
std::string points_html(const std::vector<ExplorePoint>& pts, const std::string& title);
std::string points_csv(const std::vector<ExplorePoint>& pts);

}  // namespace stepcast
