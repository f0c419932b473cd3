// The executor's CPU backend (`stepcast-exec --host`): the issue loop of schedule.h — the
// code that decides what the GPU layer issues when — run on CPU threads against a virtual
// clock instead of GPUs. A rank's task starts when its stream's previous task and its deps
// have ended; a rendezvous's members start together when the last one is ready and it lasts
// its longest member's duration (the engine's rules, sim/engine/engine.h); each task takes
// the duration given for it. Deterministic (integer nanoseconds; the maxima do not depend on
// the threads' interleaving) and fast: a Program of 10^5 tasks runs in well under a second.
// With the durations a prediction ran with, every start and end equals the prediction's
// (tests/calibrate/exec_host_test.cc checks that for every shipped scenario), so the run
// proves that the executor's threads, Board and rendezvous order reproduce the engine's
// schedule and cannot deadlock on the Program; a deadlock is a ProgramError naming the
// stuck stream heads.
#pragma once

#include <cstdint>
#include <vector>

#include "measured.h"
#include "plan.h"
#include "schedule.h"

namespace stepcast::exec {

struct SpanNs {
  std::int64_t start = 0, end = 0;
};

struct HostRun {
  std::vector<std::vector<SpanNs>> times;  // [plan rank][task id]
  std::vector<double> peak_bytes;          // per plan rank: alloc/free in time, then id order
};

// durations_ns[plan rank][task id] (>= 0). Runs every rank of the plan, one thread each (or,
// Threading::kOne, taking turns on the calling thread: the same times, faster).
HostRun run_on_host(const Plan& plan, const std::vector<std::vector<std::int64_t>>& durations_ns,
                    Threading threading = Threading::kOnePerRank);

// `ns` per task, 0 for alloc/free: what --host uses without a prediction to take them from.
std::vector<std::vector<std::int64_t>> uniform_durations(const Plan& plan, std::int64_t ns);

// The run as what write_measured takes (seconds).
Recorded to_recorded(const HostRun& run);

}  // namespace stepcast::exec
