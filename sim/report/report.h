// From a scenario to a result: the pipeline (lower -> cost -> engine) and the renderers of
// its Result (text summary, stepcast.result/1 JSON).
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/engine/engine.h"
#include "sim/program/program.h"
#include "sim/report/result.h"
#include "sim/scenario/scenario.h"

namespace stepcast {

// Progress of long work: called with (steps done, total steps).
using Progress = std::function<void(size_t done, size_t total)>;

// How predict() runs (the search's bounds are SearchRunOptions, search_prune.h).
struct RunOptions {
  bool folded = true;  // --fidelity folded (default) | full
  Progress progress;   // called after lowering, simulating and reporting (1/3, 2/3, 3/3)
  // Summarise the step's critical path into Result::critical_path (one backward walk over
  // the tasks, O(tasks + deps); off for search and sweeps, which show no path).
  bool critical_path = false;
  // Task labels in the lowered Program (LowerOptions::labels); sweeps and the search, which
  // keep only each plan's Result, turn them off.
  bool labels = true;
};

struct Prediction {
  Program program;
  Timeline timeline;
  Result result;
};

// Lowers, costs and simulates one scenario. Issues raised past the loader are placed in the
// scenario (locate_in_scenario). The search's variant, which gives up early on plans that
// cannot fit or cannot be among the best, is predict_pruned (search_prune.h).
Prediction predict(const Scenario& sc, const RunOptions& opt = {});
// An issue raised past the loader (a limit of the lowering, the costing or the engine: a task
// that would take longer than stepcast simulates, too many gradient buckets) gets the
// scenario's file when it names none, and, when it has no line, the line of the nearest node
// on its key path that has one (the document's first key for an issue about the whole step).
InputError locate_in_scenario(const InputError& e, const Scenario& sc);

// Model FLOPs of one step for the whole cluster, without recomputation (what MFU counts):
// model_flops_per_sequence (model/workload.h) x global batch. For a GPT with ffn = 4h this is
// 72*B*L*s*h^2*(1 + s/(6h) + V/(12hL)) (Korthikanti et al. 2022, eq. 7).
double model_flops_per_step(const ModelArch& arch, std::int64_t seq_len, std::int64_t global_batch);

Result make_result(const Scenario& sc, const Program& p, const Timeline& t);

// The critical path (critical_path()) summarised per category, kind and phase, the ranks it
// crosses and its `longest` longest tasks (ties: the earlier first). Deterministic.
CriticalPathSummary summarize_critical_path(const Program& p, const Timeline& t,
                                            size_t longest = 5);

std::string render_text(const Result& r);
// "X GiB more kept in reserve" when the profile keeps some of the GPU's memory from the
// training tensors (gpu.memory_reserved), else empty: the one wording of the text, the HTML
// report and the does-not-fit message.
std::string reserve_note(const Result& r);
nlohmann::json result_to_json(const Result& r);
// Reads what result_to_json writes back into a Result (nlohmann::json exceptions on a
// missing key or a wrong type); scenario_file and simulated, which the schema leaves out,
// are read when present.
Result result_from_json(const nlohmann::json& j);

}  // namespace stepcast
