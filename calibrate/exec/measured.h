// The measured timeline as a "stepcast.result/1" document (what `stepcast validate
// PREDICTED.json MEASURED.json` compares, sim/report/validate.h compare_results): the same
// quantities the simulator reports (sim/report/report.cc make_result, sim/engine/engine.cc),
// computed the same way from recorded start/end times instead of simulated ones:
//  - step_time_s: the latest task end over all ranks, each rank's times from its own zero
//    (an event recorded on every GPU after a barrier, before the first task);
//  - critical_rank: the rank that ends last; on ties the one whose compute stream was
//    busiest, then the lowest;
//  - a collective or send/recv counts from when its last member started it (the latest
//    recorded start over the members, each on its own GPU's clock: the zeros of different
//    GPUs are aligned to within the barrier's skew, microseconds in one process) to its end
//    on each member — as the simulator's rendezvous; the raw --timeline keeps the recorded
//    starts, which include the wait for the others;
//  - busy_by_kind_s / busy_by_phase_s: summed end - start of the critical rank's tasks per
//    kind and per phase, alloc/free left out;
//  - breakdown_s: exposed time on the critical rank per category, plus "bubble": each instant
//    goes to the task on the compute stream, else to the first busy stream in the order tp,
//    tp_ring, cp, cp_recv, ep, pp_send, pp_recv, dp, else to bubble; they sum to step_time_s;
//  - memory_peak_gib (and per pp stage): the peak bytes each GPU's allocator held (recorded,
//    -1 when unknown: then 0);
//  - "timeline": per rank, per task id, [start_s, end_s] (with --timeline).
// Host-only: the GPU layer and the tests (synthetic times) both go through write_measured.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "plan.h"

namespace stepcast::exec {

struct TaskTime {
  double start_s = 0, end_s = 0;  // seconds from the rank's zero
};

struct Recorded {
  std::vector<std::vector<TaskTime>> times;  // [global rank][task id]
  std::vector<double> peak_bytes;            // per global rank; < 0 unknown
  // --untimed: the step replayed with no event around each task (the longest rank's first to
  // last node); written as step_time_untimed_s. < 0: not measured.
  double untimed_step_s = -1;
};

struct MeasuredSummary {
  double step_time_s = 0;
  int critical_rank = 0;
  std::map<std::string, double> busy_by_kind_s, busy_by_phase_s, breakdown_s;
};

// ProgramError when `rec` does not have a time for every task (an end before its start, a
// non-finite time).
MeasuredSummary summarize(const Plan& plan, const Recorded& rec);

// `provenance`: string fields (gpu, driver, cuda_runtime, nccl, hostname, date_utc, ...).
void write_measured(const Plan& plan, const Recorded& rec,
                    const std::map<std::string, std::string>& provenance, bool with_timeline,
                    std::ostream& out);

}  // namespace stepcast::exec
