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
// on another rank). Returns (rank index, task id) from the first task to the last. Every
// start in the engine is the end of some predecessor, 0, or — with the host
// (EngineOptions::host_launch_ns) — a kernel's launch: such a kernel is followed back to the
// task before it on its stream. So the tasks returned cover [0, step_ns], the gaps between
// consecutive ones (and before the first) the host's: durations plus gaps add up to the
// step time.
// O(tasks + deps) for the walk plus one rendezvous matching.
std::vector<std::pair<int, int>> critical_path(const Program& program, const Timeline& timeline);

}  // namespace stepcast
