// Helpers shared by the lowering tests (lower_*test.cc): simulate a Program under synthetic
// durations, and sum a rank's allocations.
#pragma once

#include <random>
#include <sstream>
#include <string>

#include "sim/engine/engine.h"
#include "sim/plan/framework.h"
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

// A collective of `op` (kAllGather, kReduceScatter, ...), and how many a rank issues.
inline bool is_coll(const Task& t, CollOp op) {
  return t.kind == TaskKind::kCollective && t.coll == op;
}

inline int count_colls(const Program& prog, CollOp op, int rank = 0) {
  int n = 0;
  for (const Task& t : prog.ranks[static_cast<size_t>(rank)].tasks) n += is_coll(t, op);
  return n;
}

// A random plan on tiny_gpt(8), or tiny_moe(8) where it has expert parallelism, changed by
// `adjust`, then given dp >= 2 (ep dividing it), under `f`'s rules; `what` says which plan it
// is, for traces.
template <class Adjust>
Scenario random_dp_scenario(std::mt19937& rng, Framework f, std::string* what, Adjust adjust) {
  Plan p = random_plan(rng);
  adjust(p);
  if (p.dp < 2) p.dp = 2 * p.ep;
  Scenario sc = make_scenario(p.ep > 1 ? tiny_moe(8) : tiny_gpt(8), p);
  sc.framework = framework_preset(f);
  std::ostringstream os;
  os << "pp" << p.pp << " dp" << p.dp << " ep" << p.ep << " zero" << p.zero << " mb"
     << p.microbatches << " " << schedule_name(p.schedule) << " " << framework_name(f);
  *what = os.str();
  return sc;
}

// The same under ZeRO-3 (set_sharded_zero).
inline Scenario random_zero3_scenario(std::mt19937& rng, Framework f, std::string* what) {
  return random_dp_scenario(rng, f, what, [](Plan& p) { set_sharded_zero(p, 3); });
}

inline double state_bytes(const RankProgram& rp) {
  return alloc_bytes(rp, "weights") + alloc_bytes(rp, "grads") + alloc_bytes(rp, "optimizer");
}

}  // namespace stepcast::testing
