// The search's pruned variant of the pipeline (report.h, predict): the same lowering,
// costing and simulation, but a plan that cannot fit in memory or cannot be among the best
// is given up on early, by bounds below the simulated step (memory floor, step floor), stage
// by stage while lowering (LowerOptions::stop_after_stage). Sweeps and the search call it.
#pragma once

#include <limits>

#include "sim/report/report.h"

namespace stepcast {

struct SearchRunOptions : RunOptions {
  // A plan whose weights, gradients and optimizer state alone exceed a GPU's memory cannot
  // fit (that state is allocated for the whole step, so it bounds the simulated peak from
  // below); it is not costed or simulated. Its Result has simulated = false, fits_memory =
  // false and memory_peak_gib = that state (a lower bound), and the Prediction has no
  // program: the state is computed without lowering the step. A plan whose state fits is
  // lowered; if its compute stream's own allocations already exceed memory
  // (memory_floor_bytes, program.h: state plus the activations the schedule holds) it is
  // likewise not costed or simulated, its memory fields that bound.
  bool skip_when_state_exceeds_memory = false;
  // A plan whose step bound (step_floor_ns, engine.h: the longest chain of one rank's
  // dependent tasks — its compute stream and the communication it waits for) takes longer
  // than this many seconds is costed but not simulated (Result::pruned). The engine only
  // ever lengthens a task and waiting for other ranks only adds, so the bound is below the
  // simulated step. Not applied with network: flow.
  double skip_when_compute_exceeds_s = std::numeric_limits<double>::infinity();
};

// predict() with the search's bounds (SearchRunOptions); without them, predict() itself.
// Issues are placed in the scenario as predict() places them.
Prediction predict_pruned(const Scenario& sc, const SearchRunOptions& opt);

}  // namespace stepcast
