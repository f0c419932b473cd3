// The critical path of a simulated step: the chain of tasks that set the step time.
#pragma once

#include <utility>
#include <vector>

#include "sim/engine/engine.h"
#include "sim/program/program.h"

namespace stepcast {

// Walks back from the task that ends last on the critical rank: each task's start was set by
// the predecessor that ended exactly then (a dependency, the previous task on its stream, or
// — for a collective or send/recv — a predecessor of whichever member arrived last, possibly
// on another rank). Returns (rank index, task id) from the first task to the last. Because
// every start in the engine is the end of some predecessor (or 0), the tasks returned cover
// [0, step_ns] without gaps: the durations along the path add up to the step time.
// O(tasks + deps) for the walk plus one rendezvous matching.
std::vector<std::pair<int, int>> critical_path(const Program& program, const Timeline& timeline);

}  // namespace stepcast
