// Helpers shared by the lowering tests (lower_*test.cc): simulate a Program under synthetic
// durations, and sum a rank's allocations.
#pragma once

#include <string>

#include "sim/engine/engine.h"
#include "sim/program/program.h"
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast::testing {

inline Timeline run(const Program& prog, const Synth& s = {}) {
  validate_program(prog);
  return simulate(prog, synth_durations(prog, s));
}

inline double alloc_bytes(const RankProgram& rp, const std::string& what) {
  double b = 0;
  for (const Task& t : rp.tasks)
    if (t.kind == TaskKind::kAlloc && t.what == what) b += t.bytes;
  return b;
}

inline double state_bytes(const RankProgram& rp) {
  return alloc_bytes(rp, "weights") + alloc_bytes(rp, "grads") + alloc_bytes(rp, "optimizer");
}

}  // namespace stepcast::testing
