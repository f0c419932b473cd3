// The executor's issue loop, shared by every backend (the GPU layer, gpu_runner.cu, and the
// CPU one, host_backend.h): one host thread per rank walks that rank's streams and hands a
// task to the backend when
//  - it heads its stream and every dep has been handed over (same rank): a local task;
//  - for a collective or send/recv, in addition, every member of its rendezvous (plan.h) has
//    reached it: each member thread posts its arrival on a Board shared by the threads of
//    this process, and once all members have arrived each hands over its own part.
// A thread hands over everything it can on each stream in turn (stream order of kStreams),
// and when a pass over its streams hands over nothing it sleeps until a rendezvous it is in
// completes. When every thread of the process sleeps (or has finished) while some still have
// tasks, no arrival can ever come: the Program deadlocks, and the run stops with a
// ProgramError naming each rank's stuck stream heads (make_plan proves the same statically
// with one global order; this is the same rule run by the threads that issue the work).
// Members in other processes (MPI: each process runs its own ranks' threads) count as
// arrived: their processes run the same plan, and the rendezvous happens in NCCL.
//
// An arrival carries two numbers the backend chooses (Device::arrive): the CPU backend's
// virtual clock posts when the member is ready and how long it would take, and every member
// receives the maxima (the engine's rendezvous, sim/engine/engine.h: members start together
// when the last is ready and the rendezvous lasts the longest member's duration).
#pragma once

#include <cstdint>
#include <vector>

#include "plan.h"

namespace stepcast::exec {

struct Arrival {
  std::int64_t ready = 0;     // when this member could start (backend's clock)
  std::int64_t duration = 0;  // how long its part takes
};

class Device {
 public:
  virtual ~Device() = default;
  // Rank `rank`'s local task `t`, heading its stream with its deps handed over.
  virtual void issue(int rank, const Task& t) = 0;
  // What rank `rank` posts when its task `t` of a rendezvous heads its stream (deps handed
  // over); called once per member, before the others may have arrived.
  virtual Arrival arrive(int /*rank*/, const Task& /*t*/) { return {}; }
  // Every member arrived: hand over rank `rank`'s part of rendezvous `instance`; `all`
  // holds the maxima of the members' arrivals.
  virtual void issue_rendezvous(int rank, const Task& t, int instance, const Arrival& all) = 0;
};

// kOnePerRank: what the GPU layer runs (one host thread per GPU). kOne: the same per-rank
// walks taking turns on the calling thread (a pass over each rank's streams in turn; a round
// in which none hands anything over is a deadlock) — the same decisions without the thread
// hand-offs, which on a Program of 10^5 rendezvous cost seconds (CI runs every scenario so).
enum class Threading { kOnePerRank, kOne };

// Runs the ranks in `ranks` (Plan rank indices handled by this process), each handing its
// tasks to `device` (which, with kOnePerRank, must be safe to call from those threads for
// different ranks at once). Returns when every rank has handed over all its tasks. Rethrows
// the first exception a thread raised (the others are stopped); a deadlock is a ProgramError.
void run_ranks(const Plan& plan, const std::vector<int>& ranks, Device& device,
               Threading threading = Threading::kOnePerRank);

}  // namespace stepcast::exec
