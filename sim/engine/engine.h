// The discrete-event engine: runs a Program with task durations from cost models and
// yields a Timeline. Knows events and resources, not transformers. Integer nanoseconds;
// deterministic (ties broken by rank, stream, task id).
//
// Semantics (docs/model.md, "Engine"):
//  - each simulated rank has one in-order queue per stream;
//  - a task may start when it is at the head of its stream, its deps are done, and — for a
//    collective — every simulated rank standing for a member of its group has reached it
//    (rendezvous; all members start together and stay busy for its duration); a send and its
//    recv (same tag) likewise start together;
//  - alloc/free take no time; memory in use per rank is tracked and its peak recorded.
//
// Details (engine.cc; engine_internal.h lists the files of the Engine's parts):
//  - stream order: a task also waits for the previous task on its stream to end;
//  - matching (sim/program/matching.h): group members map to the simulated ranks whose
//    `stands_for` lists them (deduplicated; a folded group may meet on one simulated rank);
//    the k-th collective on a group at each participant meet; the k-th send s->d with a tag
//    meets the k-th recv d<-s with that tag (s == d allowed, on different streams);
//  - a rendezvous lasts the longest of its members' durations;
//  - SM interference: a gemm/attention/memory_bound task runs at 1 / (1 + slowdown) of its
//    speed while a collective/send/recv of its rank that holds SMs runs ([start, end);
//    EngineOptions::comm_sms), at full speed otherwise: with S the most SMs held by one
//    of the communication kernels running on its rank, slowdown = S / (sms - S)
//    (EngineOptions::comm_sms says why the largest, not the sum). Its end is decided at its
//    start from what runs then (llround(d x factor)) and re-decided whenever the
//    communication running on its rank changes: it keeps the work it has left,
//    work = d - (time at each factor / that factor). Without
//    interference, every time is a max-plus expression of the durations, so lengthening a
//    task never shortens the step; with it, it can (a delayed collective may overlap less
//    compute);
//  - HBM contention (EngineOptions::comm_hbm_share): both sides of an overlap between
//    communication and a memory-bound kernel slow, by (1 + share) over the overlap —
//    proportional sharing of HBM when the kernel alone would saturate it (demands C and
//    share x C on a capacity C: both run at 1 / (1 + share) of their speed while they
//    overlap). The memory-bound kernel follows the SM rule above with 1 + the larger of the
//    SM slowdown and the summed shares of the communication running on its rank; a
//    rendezvous goes at 1 / (1 + share) while any of its member ranks runs memory-bound
//    compute, and is re-timed like a kernel when that changes (keeping the work it has
//    left; all members keep one end). Flow-mode transfers take no part (their rates come
//    from the network model);
//  - memory: allocs/frees apply in causal order within an instant; the curve keeps one
//    sample per instant (the value after it);
//  - a program where tasks remain but none can start throws InvariantError naming each stuck
//    stream head and what it waits for; unmatched sends/collectives throw before running;
//  - events = starts + ends = 2 x tasks. Throughput: tests/bench/bench_engine.cc.
//  - Flow mode (EngineOptions::flow, sim/report/flow_mode.h): a collective or send/recv
//    rendezvous becomes a transfer: members start together, wait the latency (alpha) part of
//    the duration, then its flows (sim/network/flows.h: collective_flows over the group's full
//    global membership, or route(src, dst) for a send) move bytes over the topology's links,
//    sharing them max-min fairly with every other flow in flight (sim/engine/flow_network.h);
//    all members end when the last flow does. Flow bytes are scaled so that the transfer
//    alone takes exactly its analytical bandwidth time (duration - alpha): a lone collective
//    matches the analytical mode (to the ns rounding), contention only slows it.
//    Folded programs: a collective's flows cover its group's full global membership (groups
//    always list it) and a send's flow runs from the simulated rank's global rank to its
//    peer. The symmetric copies a folded rank stands for (e.g. the DP groups of the other TP
//    ranks, on other rails, or the pipeline sends of every rank of the stage) are not
//    simulated but charged: each transfer stands for its translates by fold_offsets
//    (sim/network/flows.h: the translates of its members that tile the simulated rank's
//    stage, for Megatron's rank order exactly the groups of the same kind), and each flow of
//    a copy adds one to FlowSpec::copies of the matching simulated flow on every link that
//    some simulated flow of the program crosses (charge_copies). A link then carries the
//    copies' load as in full fidelity — a NIC shared by the GPUs behind it, the NVLink port
//    of the GPU that owns it (the copies' PXN hop), a pod uplink or spine link crossed by
//    copies on other rails, a NIC a simulated dp ring uses that a copy's pipeline send also
//    crosses — while the links only copies cross (their own NICs and leaves) are left out:
//    by symmetry their load is that of a charged link's. Tests: folded equals full on random
//    plans with shared NICs, and with pods at 1:2 / 1:4 with and without PXN (flow_test.cc).
//    llama3-70b on 32 nodes, pods of 64 GPUs at 1:4: folded 9.066178 s = full (8.991418 s
//    before the copies were charged); one NIC per node: 10.366913 s = full (10.357197 s).
//    Cost: the copies' flows are generated once per flow set; llama3-405b on 16,384 GPUs in
//    flow mode, folded: 3.5-4.3 s user against 3.0-4.0 s before (this 2-core VM, loaded).
//    Flow mode is never faster than analytical for the same durations (test: random
//    programs) except: with SM interference on (the engine is then not monotone, above);
//    via predict(), for cross-pod groups, whose analytical cost assumes the full 1:k
//    oversubscription while flows meet the real uplink load, and for NICs shared by GPUs,
//    whose analytical cost assumes every GPU behind the NIC transfers at once (flow_mode.h); and in
//    principle because max-min sharing is not monotone (a new flow can speed up another), so a
//    multi-flow transfer could beat its lone time — not observed on the tested programs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "model/huge_alloc.h"
#include "model/units.h"
#include "sim/engine/link_util.h"
#include "sim/program/durations.h"
#include "sim/program/program.h"

namespace stepcast {

class Topology;             // sim/network/topology.h
struct RendezvousMatching;  // sim/program/matching.h

// Flow network mode (engine.h header comment; sim/report/flow_mode.h builds it from a profile).
struct FlowMode {
  const Topology* topology = nullptr;     // links the flows cross; world_size GPUs at least
  const Topology* nominal = nullptr;      // same links at their line rates (slow links in
                                          // `topology`); null: `topology` is nominal. A
                                          // transfer's bytes are scaled to take its
                                          // analytical bandwidth time alone on this one
  const Durations* latency_ns = nullptr;  // per task: the part of its duration paid before
                                          // bytes move (alpha); clamped to the duration
  bool pxn = true;                        // NCCL PXN routing (Topology::route)
};

struct EngineOptions {
  // SM interference, per task (sim/cost/coster.h comm_sms): the SMs a communication task's
  // kernels hold while it runs (0: none, e.g. a copy-engine transfer), below gpu_sms. Set,
  // a compute task runs slower by S / (gpu_sms - S) while communication runs on its rank, S
  // the most SMs one of the running communication kernels holds (a change of S re-times
  // it like a start or end). The largest, not the sum: NCCL's comm_sms is the measured
  // slowdown of a GEMM beside a collective (calibrate/, compute.comm_sms), and letting
  // concurrent collectives add up was tried and did not change the validation picture
  // (docs/accuracy-history.md, "SMs per NCCL collective"); with every kernel at comm_sms
  // it is the uniform rule below, bit for bit. It understates a DeepEP kernel running
  // beside an NCCL one (20 + 16 SMs held); the sum instead moves the validation cases by
  // 0.3 points at most (docs/model.md, "Interference"). The instance's first member's task
  // decides.
  std::function<int(const RankProgram&, const Task&)> comm_sms;
  int gpu_sms = 0;  // the GPU's SMs (comm_sms set: must be above every task's count)
  // comm_sms unset: every communication task that holds SMs (comm_holds_sms) slows the
  // compute of its rank by this fraction (0 = none) while it runs.
  double compute_slowdown_when_comm = 0.0;
  // HBM contention (docs/model.md, "Pitfalls the model accounts for" 1: "both slow when
  // HBM-bound"): per communication task, the fraction of its GPU's achievable HBM bandwidth its
  // kernels use while it runs (sim/cost/coster.h comm_hbm_share; unset: no HBM contention). Then a
  // memory-bound compute task (kMemoryBound) runs slower by 1 + the larger of the SM slowdown and
  // the sum of their shares while communication runs on its rank, and an analytical communication
  // rendezvous runs at 1 / (1 + share) of its speed while a memory-bound compute task runs
  // on one of its member ranks.
  std::function<double(const RankProgram&, const Task&, TimeNs duration)> comm_hbm_share;
  // comm_sms unset: whether a communication task's kernels hold SMs (unset: every one
  // does). One that holds none (a copy-engine transfer) does not slow the compute beside it
  // by compute_slowdown_when_comm; its HBM share still applies (as with comm_sms 0).
  std::function<bool(const RankProgram&, const Task&)> comm_holds_sms;
  // The host (docs/model.md, "The host"): one host thread per rank issues its tasks in
  // program order; issuing a task costs Task::launches x host_launch_ns + Task::host_ops x
  // host_op_ns (alloc/free: nothing)
  // and a task starts no earlier than its issue; after a Task::host_sync task the host waits
  // for its end before issuing the next. 0 with no host_sync task: the host is always ahead
  // (kernels queued long before they run), the engine without a host, bit for bit.
  TimeNs host_launch_ns = 0;
  // Host time of one framework op that launches nothing (Task::host_ops), same model.
  TimeNs host_op_ns = 0;
  bool record_memory_curve = true;
  // Set: network: flow (communication as flows sharing links); null: analytical durations.
  const FlowMode* flow = nullptr;
  // Hand the rendezvous matching the run computed to Timeline::matching (for critical_path,
  // which then need not match again); off, the engine keeps it to reuse its memory.
  bool keep_matching = false;
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
  std::span<TaskTiming> tasks;  // per task id (into Timeline::task_timing)
  TimeNs end = 0;               // last task end
  // Time its compute tasks ran longer than their durations: SM interference and HBM
  // contention (the sum over gemm/attention/memory_bound tasks of end - start - duration).
  TimeNs interference_ns = 0;
  // Time its compute tasks (gemm/attention/memory_bound) waited, with every predecessor
  // done, for the host to issue them (EngineOptions::host_launch_ns, Task::host_sync).
  TimeNs host_bound_ns = 0;
  double peak_bytes = 0;
  std::vector<MemorySample> memory;  // when record_memory_curve
};

struct Timeline {
  std::vector<RankTimeline> ranks;  // per simulated rank
  // Storage of every rank's task timings, rank after rank (RankTimeline::tasks view it;
  // copies of a Timeline share it).
  std::shared_ptr<HugeVector<TaskTiming>> task_timing;
  TimeNs step_ns = 0;     // max over ranks
  int critical_rank = 0;  // index of the rank that ends last; on ties the one whose
                          // compute stream was busiest, then the lowest
  // Exposed time on the critical rank per category, plus bubble (index kCategoryCount):
  // sums exactly to step_ns. Attribution per instant: compute stream busy -> its task's
  // category; else the comm stream category busy first in the order tp, cp (sends, then
  // receives), ep, pp, dp;
  // else bubble.
  std::array<TimeNs, kCategoryCount + 1> breakdown_ns{};
  std::uint64_t events = 0;                      // task starts + ends processed
  std::vector<LinkUtilSample> link_utilization;  // flow mode only
  std::uint64_t flow_transfers = 0;              // flow mode: rendezvous run as flows over links
  // The program's rendezvous matching, with EngineOptions::keep_matching; else null.
  std::shared_ptr<const RendezvousMatching> matching;
};

Timeline simulate(const Program& program, const Durations& durations,
                  const EngineOptions& options = {});

// A lower bound on the step simulate() gives (analytical mode), from the durations alone:
// the largest, over ranks, of the longest chain of a rank's tasks linked by dependencies
// and stream order, summing their durations. A task starts no earlier than its
// dependencies and its stream predecessor end, and the engine only ever lengthens a task
// (SM interference, HBM contention; a rendezvous lasts its longest member's duration), so
// every task ends no earlier than its chain; waiting for other ranks only adds. It is at
// least the busiest compute stream's total, and higher where the compute stream waits for
// blocking communication (tensor-parallel collectives). O(tasks + deps), no event queue.
// Programs whose dependencies point forward (not lowered ones) fall back to the compute
// stream's total for that rank.
TimeNs step_floor_ns(const Program& program, const Durations& durations);

}  // namespace stepcast
