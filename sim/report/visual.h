// Outputs people look at: a Chrome/Perfetto trace, the pipeline schedule as SVG, and a
// self-contained HTML report. All are deterministic functions of the Program + Timeline.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/report/report.h"

namespace stepcast {

// Chrome trace-event JSON (opens in ui.perfetto.dev and chrome://tracing): one process per
// simulated rank (named with the ranks it stands for), one thread per stream, a complete
// event ("ph": "X", microseconds) per task with kind, phase, layer, microbatch, bytes and
// FLOPs in args, and a "memory in use" counter per rank. `ranks`: keep only simulated ranks
// standing for one of these global ranks (empty: all).
nlohmann::json trace_json(const Program& p, const Timeline& t, const std::vector<int>& ranks = {});
// The same document, compact, streamed event by event (no document in memory; no newline).
void write_trace_json(const Program& p, const Timeline& t, const std::vector<int>& ranks,
                      std::ostream& out);

// One block of the pipeline picture: consecutive tasks of one pipeline unit (phase,
// microbatch, chunk) on the compute stream, or consecutive communication of one category.
struct ScheduleBlock {
  int stage = 0;
  bool comm = false;
  Phase phase = Phase::kFwd;
  Category category = Category::kCompute;
  int microbatch = -1;
  int chunk = -1;
  TimeNs start = 0, end = 0;
  int tasks = 1;                  // tasks merged into the block
  bool with_weight_grad = false;  // a backward block that also holds its weight gradients
  std::uint32_t categories = 0;   // communication: bit c set when category c is in the block
};

// The blocks drawn for each pipeline stage (one simulated rank per stage: the lowest).
// Compute: consecutive tasks of one pass (phase, microbatch, chunk) form a block.
// Communication: consecutive tasks of one category form a block while they overlap.
// `merge_gap` > 0 (a drawing passes what half a pixel is worth) also joins communication
// tasks of any category (drawn in one colour) that start within merge_gap of the block's
// end, and a backward pass's input- and
// weight-gradient tasks, which alternate layer by layer, into one backward block — so a
// step of a million tasks stays drawable. Zero-bubble's deferred weight gradients, run
// apart from their backward, stay blocks of their own.
std::vector<ScheduleBlock> schedule_blocks(const Program& p, const Timeline& t,
                                           TimeNs merge_gap = 0);

// SVG: stages by time (forward / backward-input / weight-gradient / recompute / optimizer /
// communication / bubble in distinct colours, microbatch numbers on the blocks, legend,
// time axis in ms) and below it the memory in use per stage over the step. Each block is a
// <rect class="block" ...>.
std::string pipeline_svg(const Program& p, const Timeline& t);

// A self-contained HTML page (no network): summary, breakdown stacked bar, pipeline picture,
// memory per stage against capacity, the plan and the profile used.
std::string html_report(const Scenario& sc, const Prediction& pred);

}  // namespace stepcast
