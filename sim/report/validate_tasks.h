// Per task against a measured timeline (`stepcast validate --tasks SCENARIO MEASURED.json`):
// where the model's kernel costs are wrong, by task label. The executor's --timeline gives
// every task's [start, end] per rank, in the Program's task order; the scenario, lowered
// at full fidelity as `stepcast lower --fidelity full` did for the executor, gives each
// task's label and its predicted duration in isolation (task_durations, with the
// scenario's profile and overrides). Labels are grouped with their numbers replaced by '#'
// ("fwd.L#.ln#.mb#"), so a layer's repeats add up. Only compute tasks (GEMM, attention,
// memory-bound) are compared: a communication task's measured span includes its wait for
// the other members, which its predicted duration does not.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/program/program.h"
#include "sim/scenario/scenario.h"

namespace stepcast {

struct TaskGroupComparison {
  std::string kind;   // "gemm" | "attention" | "memory_bound"
  std::string label;  // digits replaced by '#'
  int count = 0;
  double measured_s = 0, predicted_s = 0;
  double flops = 0, bytes = 0;  // summed over the group's tasks
};

// What the measurement itself adds, from the timeline alone. A task is ready once the task
// before it on its stream and its deps have ended; the executor records an event before
// and after every task, and on an H200 each record holds its stream ~1.3 us
// (docs/calibration.md), so a task starts that long after it is ready, and a task with no
// kernel (alloc, free) spans that long (a stream-ordered free more): the floor inside every
// measured duration. Neither happens in training, where no task is timed.
struct TimingFloor {
  int tasks = 0;                             // every task of the timeline
  double wait_median_s = 0, wait_sum_s = 0;  // start - ready (0 where it started at once)
  int kernelless = 0;                        // alloc and free tasks
  double kernelless_median_s = 0;            // their span: the lower of the two kinds' medians
  // waits + kernel tasks x the kernel-less median: the measured span's instrumentation
  double instrumentation_s() const {
    return wait_sum_s + static_cast<double>(tasks - kernelless) * kernelless_median_s;
  }
};

struct TaskComparison {
  std::vector<TaskGroupComparison> groups;  // by measured time, largest first
  std::vector<TaskGroupComparison> kinds;   // one per kind, the same order of kinds
  TimingFloor floor;
};

// `measured_text` is a stepcast.result/1 document with a "timeline" ([{rank, tasks_s:
// [[start_s, end_s], ...]}]). Throws InputError at the measured file's line and key: no
// timeline, a rank the Program does not have, a task count that differs from the rank's
// Program ("was it lowered from this scenario at full fidelity?"), a malformed interval.
TaskComparison compare_tasks(const Scenario& scenario, const std::string& measured_text,
                             const std::string& measured_file);

std::string render_task_comparison(const TaskComparison& c, int top);
nlohmann::json task_comparison_to_json(const TaskComparison& c);

}  // namespace stepcast
