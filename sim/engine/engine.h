// The discrete-event engine: runs a Program with task durations from cost models and
// yields a Timeline. Knows events and resources, not transformers. Integer nanoseconds;
// deterministic (ties broken by rank, stream, task id).
//
// Semantics (DESIGN.md, Engine):
//  - each simulated rank has one in-order queue per stream;
//  - a task may start when it is at the head of its stream, its deps are done, and — for a
//    collective — every simulated rank standing for a member of its group has reached it
//    (rendezvous; all members start together and stay busy for its duration); a send and its
//    recv (same tag) likewise start together;
//  - alloc/free take no time; memory in use per rank is tracked and its peak recorded.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "model/units.h"
#include "sim/program/program.h"

namespace stepcast {

// Durations of every task, per simulated rank (same indexing as Program::ranks[r].tasks).
using Durations = std::vector<std::vector<TimeNs>>;

struct EngineOptions {
  // SM interference: a compute task that starts while a communication task of the same rank
  // runs takes this much longer (fraction; 0 = none). Set from the profile by the caller.
  double compute_slowdown_when_comm = 0.0;
  bool record_memory_curve = true;
};

struct TaskTiming {
  TimeNs start = 0;
  TimeNs end = 0;
};

struct MemorySample {
  TimeNs t = 0;
  double bytes = 0;  // in use after the event at t
};

struct RankTimeline {
  std::vector<TaskTiming> tasks;    // per task id
  TimeNs end = 0;                   // last task end
  double peak_bytes = 0;
  std::vector<MemorySample> memory; // when record_memory_curve
};

struct Timeline {
  std::vector<RankTimeline> ranks;  // per simulated rank
  TimeNs step_ns = 0;               // max over ranks
  int critical_rank = 0;            // index of the rank that ends last (lowest on ties)
  // Exposed time on the critical rank per category, plus bubble (index kCategoryCount):
  // sums exactly to step_ns. Attribution per instant: compute stream busy -> its task's
  // category; else the comm stream category busy first in the order tp, cp, ep, pp, dp;
  // else bubble.
  std::array<TimeNs, kCategoryCount + 1> breakdown_ns{};
  std::uint64_t events = 0;         // task starts + ends processed
};

Timeline simulate(const Program& program, const Durations& durations,
                  const EngineOptions& options = {});

}  // namespace stepcast
