// What-if exploration: the scenario's `sweep:` block (cartesian product of dotted keys) and
// plan search over valid layouts. Each point is a full simulation.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "sim/report/search_prune.h"
#include "sim/report/validate.h"

namespace stepcast {

struct ExplorePoint {
  std::vector<std::pair<std::string, std::string>> settings;  // dotted key -> value
  bool valid = true;
  std::string error;  // why the point could not be laid out (valid == false)
  Result result;
};

// One point to evaluate: the scenario document to simulate and the settings that tell it
// apart (the table's plan column).
struct PlanCandidate {
  // The document (sweeps); a null node when `make_doc` builds it.
  YAML::Node doc;
  // Search: builds the document when the plan is evaluated, so that thousands of candidates
  // do not each hold a clone of the scenario (about 27 KB of yaml-cpp nodes per plan for
  // Llama 3 70B: 70 MB for its 2,652 plans, 0.2 GB for Mixtral's 8,232). Safe to call from
  // several threads at once.
  std::function<YAML::Node()> make_doc;
  std::vector<std::pair<std::string, std::string>> settings;
  // Search: candidates run in ascending order of `order_hint`, and among equal hints the
  // first-pass ones first (search_in_chunks), so that the plans likely to be among the best
  // set the bound for the others early. Sweeps ignore both.
  bool first_pass = true;
  double order_hint = 0;
  // Search: a lower bound of the plan's simulated step in seconds, computed without lowering
  // it (search_bound.h; 0: none). search_in_chunks runs the candidates in ascending order of
  // it and does not lower those whose bound is above the `top`-th best step so far.
  double bound_s = 0;

  // `doc`, or, when it is null, what make_doc builds (a fresh document each call).
  YAML::Node document() const { return doc.IsNull() && make_doc ? make_doc() : doc; }
};

// The points of the scenario's sweep: block, every combination of the axes (in the order
// given; last axis fastest); the scenario itself when it has none.
std::vector<PlanCandidate> sweep_candidates(const Scenario& base);

// Evaluates the candidates i with i % slice_count == slice (all of them by default) on
// `threads` worker threads; the other entries stay default. Points that fail validation
// are kept with valid = false and their message. The same points for any thread count;
// slices let MPI ranks share the work (tools/distributed.h).
std::vector<ExplorePoint> evaluate_candidates(const std::vector<PlanCandidate>& cands,
                                              const std::string& file, const SearchRunOptions& run,
                                              int threads, const Progress& progress = nullptr,
                                              int slice = 0, int slice_count = 1);

struct SearchOptions {
  int top = 10;
  int threads = 1;
  Progress progress;
  // Skip costing and simulating plans whose weights, gradients and optimizer state alone
  // exceed a GPU's memory (they cannot fit; the outcome is the same, only faster).
  bool skip_plans_that_cannot_fit = true;
  // Evaluate in chunks and skip simulating plans whose lower bound cannot be among the best
  // `top` (search_in_chunks; the best `top` are the same, only faster).
  bool skip_plans_that_cannot_be_best = true;
};

// Enumerates plans for the scenario's model, cluster and batch: tp in powers of two up to
// the NVLink domain (node.gpus: 8 on a DGX, 72 on an NVL72 rack; heads and kv_heads
// divisible), pp up to the layers (split by balanced_stage_layers when uneven), cp in powers
// of two up to the NVLink domain for long sequences, ep dividing the experts and dp for MoE
// models, microbatch in {1,2,4,8} dividing the batch per replica, schedule 1f1b / zb-h1 (pp > 1) /
// interleaved (vpp 2) (not gpipe: explore.cc), cp_kind ring / allgather (cp > 1), zero 0..3 (0
// alone when dp == 1), recompute none / selective / full, sequence parallel when tp > 1; every
// other key (overlap.grad_reduce, overlap.tp_comm when tp > 1, bucket_mb, ...) as the
// scenario sets it. Keeps the valid ones that fit in memory, sorted by step
// time (ties by layout). Deterministic for any thread count.
struct SearchOutcome {
  std::vector<ExplorePoint> best;  // at most `top`
  int considered = 0;
  int invalid = 0;
  int not_fitting = 0;
  // Not simulated: their lower bound exceeds the `top`-th best step time of the chunks run
  // before theirs, so they cannot be among the best (search_in_chunks). Fit unknown.
  int pruned = 0;
  double prune_threshold_s = std::numeric_limits<double>::infinity();
  std::vector<double> fitting_step_times;  // of every simulated plan that fits, ascending
  // Of the pruned: those ruled out by their closed-form bound (PlanCandidate::bound_s),
  // never lowered.
  int pruned_unlowered = 0;
  // Simulated step / closed-form bound of every simulated plan that fits and has a bound,
  // ascending: how tight the bound is (median, worst).
  std::vector<double> bound_ratios;
};
// Every plan of the space; for each layout (tp, pp, cp, dp, ep, mb, vpp, recompute) the
// variant most likely to fit and be fast (1f1b or interleaved, ring attention, TP overlap
// on with tp > 1, zero 2 with dp > 1) is marked first_pass; each plan's order_hint is its
// pipeline bubble and recomputation (explore.cc, order_hint), its bound_s the closed-form
// bound of its step (search_bound.h, costs memoised across the plans).
std::vector<PlanCandidate> search_candidates(const Scenario& base);
// Layers per stage for `layers` over `stages` (virtual) pipeline stages, as even as
// possible, the stages with one layer fewer at both ends (first, last, second, ...), where
// the embedding and the output head also run; as Llama 3 405B ran 126 layers on 16 stages
// (Llama 3 paper, Sec. 3.3.2: one layer fewer in the first and the last stage). Empty when
// a stage would hold no layer.
std::vector<int> balanced_stage_layers(int layers, int stages);
// How search runs each plan: skips simulating those that cannot fit (SearchOptions).
SearchRunOptions search_run_options(const SearchOptions& opt);
// Counts the invalid and non-fitting points and keeps the best `top` fitting ones.
SearchOutcome summarize_search(std::vector<ExplorePoint> pts, int top);
// Evaluates the candidates in chunks of kSearchChunk, in ascending order of their bound_s,
// then of their order_hint; among equal ones the first-pass ones first, then candidate
// order. A candidate whose bound_s is above the threshold below is not evaluated at all
// (pruned, its step_time_s that bound; in this order every later one is too, so the search
// ends there). Each chunk
// runs with run.skip_when_compute_exceeds_s = the `top`-th best fitting step time of the
// chunks before it (none while fewer fit), and all are summarised in candidate order. A
// plan is skipped only when its lower bound is above that time: `top` plans already
// evaluated are faster, so it cannot be among the best `top`, and `best` is what evaluating
// every plan fully gives. The chunks do not depend on the thread or process count, so
// neither does the outcome. `evaluate` runs a list of candidates (evaluate_candidates, or
// split over MPI ranks) reporting to the progress it is given; `share` makes the threshold
// the same everywhere (MPI: rank 0's; identity for one process); `progress` sees (plans
// evaluated, all plans).
inline constexpr size_t kSearchChunk = 32;
SearchOutcome search_in_chunks(
    const std::vector<PlanCandidate>& cands, const SearchRunOptions& run, int top,
    const std::function<std::vector<ExplorePoint>(
        const std::vector<PlanCandidate>&, const SearchRunOptions&, const Progress&)>& evaluate,
    const std::function<double(double)>& share = nullptr, const Progress& progress = nullptr);
// search_in_chunks(search_candidates(base)) on opt.threads threads (one pass over every
// candidate without opt.skip_plans_that_cannot_be_best).
SearchOutcome run_search(const Scenario& base, const SearchOptions& opt);
// One line placing the scenario's own plan (`own`, its prediction) among the searched
// ones: its step time and how many fitting plans are faster ("at least" when plans were
// pruned and it is slower than the threshold), or that it does not fit.
std::string own_plan_line(const SearchOutcome& out, const Result& own);
// One line on the closed-form bound: how many plans it ruled out unlowered, and the simulated
// step over the bound of the simulated plans (median, worst); empty without bounds.
std::string bound_line(const SearchOutcome& out);

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
