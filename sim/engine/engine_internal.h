// The Engine's internals (engine.h, engine.cc), private to sim/engine: the per-task flags,
// the event queue and the Engine class, whose members are defined by responsibility in
//  - engine.cc: the kernel — the run loop, task starts and ends, rendezvous, deadlock report;
//  - engine_build.cc: the task graph and per-task state built from the Program;
//  - engine_flows.cc: flow mode — transfers as flows over the network model;
//  - contention.cc: SM interference and HBM contention (settling an instant, re-timing);
//  - accounting.cc: memory tracking and the results (step, critical rank, breakdown).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/huge_alloc.h"
#include "model/units.h"
#include "sim/engine/engine.h"
#include "sim/engine/flow_network.h"
#include "sim/network/flows.h"
#include "sim/program/matching.h"

namespace stepcast::engine_detail {

enum : std::uint8_t {
  kFlagComm = 1,     // collective / send / recv
  kFlagCompute = 2,  // gemm / attention / memory_bound: subject to SM interference
  kFlagAlloc = 4,
  kFlagFree = 8,
  kFlagMemBound = 16,  // memory_bound kind: subject to HBM contention
  kFlagHostSync = 32,  // Task::host_sync: the host waits for its end before issuing more
};

// The pending task ends, a monotone priority queue over (time, g): a radix heap (Ahuja,
// Mehlhorn, Orlin and Tarjan 1990). Every time pushed is >= the last time taken out, as in
// any discrete-event loop (ends are pushed at now + d, d > 0). Bucket 0 holds the entries
// at time last_; bucket b > 0 those whose time first differs from last_ in bit b - 1 (and is
// larger). Push is O(1); an entry moves down at most 64 buckets in its life. take_min()
// hands out every entry at the earliest time at once, sorted by g: the (time, g) order of
// the binary heap it replaced, so results do not change.
class EventQueue {
 public:
  void clear() {
    for (auto& b : buckets_) b.clear();
    last_ = 0;
    size_ = 0;
  }
  bool empty() const { return size_ == 0; }
  void push(TimeNs t, std::uint32_t g) {
    buckets_[bucket(t)].push_back({t, g});
    ++size_;
  }
  // The earliest time queued (not empty). Does not move last_: the caller may still push
  // times between now and it.
  TimeNs min_time() const {
    if (!buckets_[0].empty()) return last_;
    const auto& b = first_nonempty();
    TimeNs m = b.front().t;
    for (const Entry& e : b) m = std::min(m, e.t);
    return m;
  }
  // Moves the entries at the earliest time into `out`, ascending g.
  void take_min(std::vector<std::uint32_t>& out) {
    out.clear();
    if (buckets_[0].empty()) {
      auto& b = first_nonempty();
      TimeNs m = b.front().t;
      for (const Entry& e : b) m = std::min(m, e.t);
      last_ = m;
      for (const Entry& e : b) buckets_[bucket(e.t)].push_back(e);  // all to buckets below
      b.clear();
    }
    for (const Entry& e : buckets_[0]) out.push_back(e.g);
    size_ -= buckets_[0].size();
    buckets_[0].clear();
    std::sort(out.begin(), out.end());
  }

 private:
  struct Entry {
    TimeNs t;
    std::uint32_t g;
  };
  size_t bucket(TimeNs t) const {
    const auto x = static_cast<std::uint64_t>(t) ^ static_cast<std::uint64_t>(last_);
    return x == 0 ? 0 : static_cast<size_t>(64 - std::countl_zero(x));
  }
  std::vector<Entry>& first_nonempty() {
    size_t i = 1;
    while (buckets_[i].empty()) ++i;
    return buckets_[i];
  }
  const std::vector<Entry>& first_nonempty() const {
    return const_cast<EventQueue*>(this)->first_nonempty();
  }
  std::array<std::vector<Entry>, 65> buckets_;
  TimeNs last_ = 0;
  size_t size_ = 0;
};

// One Engine per thread is kept and reused (simulate() below): build() refills every array
// in place, so repeated runs — plan search, sweeps — reuse memory instead of faulting in
// tens of MB of fresh pages per run. It holds the capacity of the largest program run on
// the thread (about 60 bytes per task).
class Engine {
 public:
  void reset(const Program& p, const Durations& d, const EngineOptions& o) {
    program_ = &p;
    options_ = &o;
    build(d);
  }

  Timeline run();
  // The last run's matching, moved out (the next build() matches afresh).
  std::shared_ptr<const RendezvousMatching> take_matching() {
    auto m = std::make_shared<const RendezvousMatching>(std::move(match_));
    match_ = RendezvousMatching{};
    return m;
  }

 private:
  // Building (engine_build.cc; build_contention in contention.cc, build_flows in
  // engine_flows.cc).
  void build(const Durations& d);
  void build_ranks(const Durations& d);
  void build_graphs();
  void build_instances();
  void build_contention();
  void build_flows();
  // The run loop (engine.cc; settle and the re-timing in contention.cc, apply_memory and the
  // results in accounting.cc).
  void start_flows(int inst, TimeNs t);
  void make_ready(std::uint32_t g, TimeNs t);
  void start_rendezvous(int inst, TimeNs t);
  void start_task(std::uint32_t g, TimeNs t, TimeNs duration);
  void launch(std::uint32_t g, TimeNs t, TimeNs duration);
  void finish(std::uint32_t g, TimeNs t);
  void apply_memory(std::uint32_t g, TimeNs t);
  // A task whose predecessors and issue are all done at t starts at t; one issued by a host
  // that ran ahead starts when the host issues it (a queued event), the wait counted as
  // host-bound time for compute. Inline: every task end passes here.
  void ready_at(std::uint32_t g, TimeNs t) {
    if (!host_ || issue_[g] <= t) {
      make_ready(g, t);
      return;
    }
    if (flags_[g] & kFlagCompute)
      tl_.ranks[static_cast<size_t>(rank_of_[g])].host_bound_ns += issue_[g] - t;
    queue_.push(issue_[g], host_event_base_ + g);
  }
  void advance_host(size_t r, TimeNs t);  // issue rank r's tasks from time t (engine.cc)
  void build_host();
  void settle(TimeNs t);
  [[noreturn]] void report_deadlock() const;
  void summarize();
  void breakdown(Timeline& tl) const;

  const Program* program_ = nullptr;
  const EngineOptions* options_ = nullptr;
  RendezvousMatching match_;
  std::vector<std::uint32_t> now_;  // settle scratch

  // The dependency structure of each distinct task list (ranks sharing a TaskList share
  // it, program.h): successors in local task ids (deps plus the stream-order edge from the
  // previous task on the same stream) as CSR, predecessor counts and flags.
  struct ListGraph {
    std::vector<std::uint32_t> succ_off, succ;  // CSR, size tasks + 1
    std::vector<std::int32_t> npred;
    std::vector<std::uint8_t> flags;
    std::vector<std::uint32_t> preds, pred_off;  // build scratch
    // With the host model on (build_host): the tasks the host launches (all but
    // alloc/free), in program order, and their Task::launches.
    std::vector<std::uint32_t> host_order;
    std::vector<std::int32_t> launches;
    std::vector<std::int32_t> host_ops;  // and their Task::host_ops (when host_op_ns > 0)
    bool host_sync = false;              // a task has Task::host_sync
    size_t first_rank = 0;               // a rank whose TaskList this is
  };
  std::vector<ListGraph> lists_;  // [0, nlists_) in use; capacity kept
  size_t nlists_ = 0;
  std::vector<const ListGraph*> graph_of_;  // per rank
  std::vector<const TimeNs*> dur_of_;       // per rank: its durations (Durations row)

  std::vector<std::uint32_t> rank_offset_;  // size ranks + 1
  HugeVector<std::int32_t> rank_of_;
  HugeVector<std::uint8_t> flags_;
  HugeVector<std::int32_t> left_;  // unfinished predecessors; -1 once done
  TaskTiming* timing_ = nullptr;   // the Timeline's task timings, by g
  size_t ntasks_ = 0;
  TimeNs dur(std::uint32_t g) const {
    const auto r = static_cast<size_t>(rank_of_[g]);
    return (flags_[g] & (kFlagAlloc | kFlagFree)) ? 0 : dur_of_[r][g - rank_offset_[r]];
  }
  void build_list(const RankProgram& rp, ListGraph& lg);
  TimeNs& start_of(std::uint32_t g) { return at(g).start; }
  TaskTiming& at(std::uint32_t g) { return timing_[g]; }
  const TaskTiming& at(std::uint32_t g) const { return timing_[g]; }
  Timeline tl_;

  // The host (EngineOptions::host_launch_ns, Task::host_sync; engine.cc advance_host): per
  // task when the host issued it, per rank the next of its ListGraph::host_order to issue,
  // the host's clock and the host_sync task it waits for (-1: none). Every kernel task
  // (kFlagCompute) holds one extra predecessor count, released when it is issued. Queue ids from
  // host_event_base_ on: a task whose predecessors were done before the host issued it becomes
  // ready.
  bool host_ = false;
  std::uint32_t host_event_base_ = 0;
  HugeVector<TimeNs> issue_;
  std::vector<std::uint32_t> host_next_;
  std::vector<TimeNs> host_t_;
  std::vector<std::int64_t> host_wait_;

  std::vector<std::int32_t> inst_left_;     // members not yet ready
  std::vector<TimeNs> inst_dur_;            // max of the members' durations
  std::vector<std::uint32_t> inst_member_;  // global indices, CSR by match_.offsets

  std::vector<std::int32_t> comm_running_;  // per rank, comm tasks running with duration > 0
  // SM interference (EngineOptions::comm_sms; unset, comm_holds_sms with the uniform
  // compute_slowdown_when_comm) in levels: the distinct slowdowns communication kernels
  // cause, ascending, level 0 = none (sm_slow_); per instance its level; per rank and level
  // how many of its running comm tasks are at it. A rank's compute slows by its highest
  // level with a running task (the most SMs held, engine.h).
  std::vector<double> sm_slow_;
  std::vector<std::int32_t> sm_level_sms_;      // comm_sms set: the SMs of each level
  std::vector<std::uint8_t> inst_sm_level_;     // by instance
  std::vector<std::int32_t> sm_level_running_;  // [rank x levels + level]
  std::vector<std::int32_t> sm_held_;           // build scratch
  // Every communication task meets its peers in an instance (matching throws otherwise).
  size_t sm_level(std::uint32_t g) const {
    const std::int32_t inst = match_.instance_of[g];
    return inst < 0 ? 0 : inst_sm_level_[static_cast<size_t>(inst)];
  }
  void build_sm_levels();  // contention.cc
  void count_sms(std::uint32_t g, size_t r, std::int32_t delta) {
    const size_t l = sm_level(g);
    if (l > 0) sm_level_running_[r * sm_slow_.size() + l] += delta;
  }
  double sm_slowdown(size_t r) const {
    const size_t n = sm_slow_.size();
    for (size_t l = n - 1; l > 0; --l)
      if (sm_level_running_[r * n + l] > 0) return sm_slow_[l];
    return 0.0;
  }
  // HBM contention (EngineOptions::comm_hbm_share), in parts per million so that sums are
  // exact: per instance its share; per rank the shares of its running comm tasks and the
  // number of its running memory-bound compute tasks.
  bool hbm_ = false;
  std::vector<std::int64_t> inst_hbm_ppm_, comm_hbm_ppm_;
  std::vector<std::int32_t> mb_running_;
  std::vector<std::int32_t> deferred_rdv_;  // rendezvous waiting for the instant to settle
  // The communication side, over the overlap like the kernel side: a running rendezvous
  // with an HBM share goes at 1 / (1 + share) of its speed while a member rank runs
  // memory-bound compute. Per instance: whether it runs, its work left (ns at full speed)
  // as of `since` and its factor since then. A rank with such rendezvous running whose
  // memory-bound count changed is marked; when the instant settles, the rendezvous it takes
  // part in, and those started in the instant, are re-timed from the final state
  // (Engine::retime_rendezvous).
  std::vector<char> inst_running_, inst_touched_, mb_changed_;
  std::vector<double> inst_work_, inst_factor_;
  std::vector<TimeNs> inst_since_;
  std::vector<std::vector<std::int32_t>> rdv_of_rank_;  // running HBM rendezvous per rank
                                                        // (a member's end removes it)
  std::vector<std::uint32_t> mb_changed_ranks_;
  std::vector<std::int32_t> touched_;
  void mark_mb_changed(size_t r) {
    if (mb_changed_[r] || rdv_of_rank_[r].empty()) return;
    mb_changed_[r] = 1;
    mb_changed_ranks_.push_back(static_cast<std::uint32_t>(r));
  }
  void touch(std::int32_t inst) {
    if (inst_touched_[static_cast<size_t>(inst)]) return;
    inst_touched_[static_cast<size_t>(inst)] = 1;
    touched_.push_back(inst);
  }
  // 1 + share while a member of the rendezvous runs memory-bound compute, else 1.
  double rendezvous_factor(size_t ui) const {
    const auto b = static_cast<size_t>(match_.offsets[ui]),
               e = static_cast<size_t>(match_.offsets[ui + 1]);
    for (size_t k = b; k < e; ++k)
      if (mb_running_[static_cast<size_t>(rank_of_[inst_member_[k]])] > 0)
        return 1.0 + static_cast<double>(inst_hbm_ppm_[ui]) * 1e-6;
    return 1.0;
  }
  void retime_rendezvous(TimeNs t);
  // Interference over the overlap (engine.h): each rank's running compute tasks with their
  // work left (ns at full speed) as of `since` and the factor they run slower by since then.
  // A change of a rank's running communication marks it; when the instant settles, its
  // running compute tasks are re-timed (their old queue entries go stale: run() skips an
  // entry whose time is no longer its task's end).
  struct Running {
    std::uint32_t g;
    double work_ns;
    TimeNs since;
    double factor;
  };
  bool interference_ = false;
  std::vector<std::vector<Running>> running_;
  std::vector<char> comm_changed_;
  std::vector<std::uint32_t> changed_ranks_;
  void mark_comm_changed(size_t r) {
    if (!interference_ || comm_changed_[r]) return;
    comm_changed_[r] = 1;
    changed_ranks_.push_back(static_cast<std::uint32_t>(r));
  }
  // How much slower a compute task runs now, from the communication running on its rank.
  double slowdown_factor(size_t r, std::uint32_t g) const {
    if (comm_running_[r] == 0) return 1.0;
    double slow = sm_slowdown(r);
    if (hbm_ && (flags_[g] & kFlagMemBound))
      slow = std::max(slow, static_cast<double>(comm_hbm_ppm_[r]) * 1e-6);
    return 1.0 + slow;
  }
  void retime_running(TimeNs t);
  static TimeNs stretch(TimeNs d, double factor) {
    return static_cast<TimeNs>(std::llround(static_cast<double>(d) * factor));
  }
  std::vector<double> mem_now_, mem_peak_;

  // Flow mode (options_->flow): per rendezvous instance, its flow set (-1: analytical), the
  // latency paid before bytes move and the bytes scale (analytical bandwidth time / time of
  // the flow set alone). Queue entries with g >= tasks are "latency over" events of instance
  // g - tasks.
  struct FlowSet {
    std::vector<FlowSpec> flows;
    double alone_s = 0;  // the flows alone on the topology (simulate_flows_s)
  };
  const FlowMode* flow_ = nullptr;
  MaxMinNetwork net_;
  MaxMinSolver alone_solver_;  // times each flow set alone (empty between uses)
  std::vector<FlowSet> flow_sets_;
  std::vector<std::int32_t> inst_flow_set_;
  std::vector<TimeNs> inst_alpha_;
  std::vector<double> inst_scale_;
  std::vector<std::int32_t> transfer_inst_;  // network transfer id -> instance
  std::vector<int> completed_;

  EventQueue queue_;
  std::vector<std::uint32_t> batch_;       // the task ends of one instant
  std::vector<std::uint32_t> zero_stack_;  // tasks ending in the current instant
  std::vector<std::uint32_t> deferred_;    // compute starts waiting for the instant to settle
  std::uint64_t events_ = 0;
  std::uint64_t finished_ = 0;
};

}  // namespace stepcast::engine_detail
