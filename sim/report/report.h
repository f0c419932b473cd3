// From a scenario to a result: the pipeline (lower -> cost -> engine) and the renderers of
// its Result (text summary, stepcast.result/1 JSON).
#pragma once

#include <functional>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/engine/engine.h"
#include "sim/program/program.h"
#include "sim/report/result.h"
#include "sim/scenario/scenario.h"

namespace stepcast {

// Progress of long work: called with (steps done, total steps).
using Progress = std::function<void(size_t done, size_t total)>;

struct RunOptions {
  bool folded = true;  // --fidelity folded (default) | full
  Progress progress;   // called after lowering, simulating and reporting (1/3, 2/3, 3/3)
  // For search: a plan whose weights, gradients and optimizer state alone exceed a GPU's
  // memory cannot fit (that state is allocated for the whole step, so it bounds the
  // simulated peak from below); it is not costed or simulated. Its Result has
  // simulated = false, fits_memory = false and memory_peak_gib = that state (a lower bound),
  // and the Prediction has no program: the state is computed without lowering the step.
  // A plan whose state fits is lowered; if its compute stream's own allocations already
  // exceed memory (memory_floor_bytes, program.h: state plus the activations the schedule
  // holds) it is likewise not costed or simulated, its memory fields that bound.
  bool skip_when_state_exceeds_memory = false;
  // Summarise the step's critical path into Result::critical_path (one backward walk over
  // the tasks, O(tasks + deps); off for search and sweeps, which show no path).
  bool critical_path = false;
  // For search: a plan whose step bound (step_floor_ns, engine.h: the longest chain of one
  // rank's dependent tasks — its compute stream and the communication it waits for) takes
  // longer than this many seconds is costed but not simulated (Result::pruned). The engine
  // only ever lengthens a task and waiting for other ranks only adds, so the bound is below
  // the simulated step. Not applied with network: flow.
  double skip_when_compute_exceeds_s = std::numeric_limits<double>::infinity();
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
// scenario (locate_in_scenario).
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
