// The discrete-event engine (engine.h). Layout for speed (>= 10 M events/s on one core,
// tests/bench/bench_engine.cc): every task of every rank gets a global index
// g = rank_offset[r] + id; per-task state (countdown of unfinished predecessors, flags,
// timing) lives in flat arrays; the dependency structure (deps plus the stream-order edge
// from the previous task on the same stream) is a CSR successor list built once per
// distinct task list, so ranks sharing a list (program.h) share it and durations are read
// in place; the only queued events are task ends with positive duration, keyed (time, g),
// in a radix heap (EventQueue).
// Zero-duration tasks (alloc/free, empty ops) end in the same instant through a work stack.
//
// Instant semantics (all order-independent, so results do not depend on tie-breaking):
//  - a task starts at the instant its last dependency ends (or, for a rendezvous, when its
//    last member becomes ready);
//  - SM interference: a compute task of positive duration runs at 1 / (1 +
//    compute_slowdown_when_comm) of its speed while a communication task of its rank runs
//    over [t, t+) (started at or before t and ending after t). Compute starts are therefore
//    deferred until every end and every zero-duration cascade of instant t is done, and the
//    running compute tasks of a rank whose communication changed at t are re-timed then
//    (Engine::retime_running), from the final set: the result does not depend on the order
//    in which the instant's events were processed.
//  - HBM contention (engine.h): memory-bound compute runs slower by the larger of that
//    slowdown and the summed HBM shares of the communication running over [t, t+); a
//    rendezvous with an HBM share starting at t is deferred likewise, and it runs 1 + share
//    slower while a member's memory-bound compute runs over [t, t+): the rendezvous of the
//    ranks whose memory-bound compute started or ended at t, and those started at t, are
//    re-timed from the final set (Engine::retime_rendezvous).
//  - memory: alloc/free apply at their instant in processing order, which follows causality
//    (an alloc that depends on a free is applied after it); ties between independent events
//    go by (time, rank, task id), so the peak is deterministic.
#include "sim/engine/engine.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "model/error.h"
#include "sim/engine/flow_network.h"
#include "sim/network/flows.h"
#include "sim/network/topology.h"
#include "sim/program/matching.h"

namespace stepcast {
namespace {

// Sum of all task durations a step may have: 2^60 ns (36.5 years); with interference
// stretching a task by at most a few times, the clock stays far below int64's 2^63.
constexpr double kMaxTotalNs = 1152921504606846976.0;

enum : std::uint8_t {
  kFlagComm = 1,     // collective / send / recv
  kFlagCompute = 2,  // gemm / attention / memory_bound: subject to SM interference
  kFlagAlloc = 4,
  kFlagFree = 8,
  kFlagMemBound = 16,  // memory_bound kind: subject to HBM contention
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
  void build(const Durations& d);
  void build_flows();
  void start_flows(int inst, TimeNs t);
  void make_ready(std::uint32_t g, TimeNs t);
  void start_rendezvous(int inst, TimeNs t);
  void start_task(std::uint32_t g, TimeNs t, TimeNs duration);
  void launch(std::uint32_t g, TimeNs t, TimeNs duration);
  void finish(std::uint32_t g, TimeNs t);
  void apply_memory(std::uint32_t g, TimeNs t);
  void settle(TimeNs t);
  [[noreturn]] void report_deadlock() const;
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
  };
  std::vector<ListGraph> lists_;             // [0, nlists_) in use; capacity kept
  size_t nlists_ = 0;
  std::vector<const ListGraph*> graph_of_;  // per rank
  std::vector<const TimeNs*> dur_of_;       // per rank: its durations (Durations row)

  std::vector<std::uint32_t> rank_offset_;  // size ranks + 1
  HugeVector<std::int32_t> rank_of_;
  HugeVector<std::uint8_t> flags_;
  HugeVector<std::int32_t> left_;           // unfinished predecessors; -1 once done
  TaskTiming* timing_ = nullptr;            // the Timeline's task timings, by g
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

  std::vector<std::int32_t> inst_left_;     // members not yet ready
  std::vector<TimeNs> inst_dur_;            // max of the members' durations
  std::vector<std::uint32_t> inst_member_;  // global indices, CSR by match_.offsets

  std::vector<std::int32_t> comm_running_;  // per rank, comm tasks running with duration > 0
  // EngineOptions::comm_holds_sms: per instance 1 when its kernels hold no SMs, and per rank
  // how many of its running comm tasks hold SMs.
  std::vector<char> inst_no_sms_;
  std::vector<std::int32_t> sm_comm_running_;
  bool holds_sms(std::uint32_t g) const {
    if (inst_no_sms_.empty()) return true;
    const std::int32_t inst = match_.instance_of[g];
    return inst < 0 || !inst_no_sms_[static_cast<size_t>(inst)];
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
    const auto b = static_cast<size_t>(match_.offsets[ui]), e = static_cast<size_t>(match_.offsets[ui + 1]);
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
    double slow = sm_comm_running_[r] > 0 ? options_->compute_slowdown_when_comm : 0.0;
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
  std::vector<std::uint32_t> batch_;        // the task ends of one instant
  std::vector<std::uint32_t> zero_stack_;   // tasks ending in the current instant
  std::vector<std::uint32_t> deferred_;     // compute starts waiting for the instant to settle
  std::uint64_t events_ = 0;
  std::uint64_t finished_ = 0;
};

// Local CSR of one task list: one pass over the Tasks (large structs) gathers flags and the
// predecessors; the successor CSR is then built from those alone.
void Engine::build_list(const RankProgram& rp, ListGraph& lg) {
  const int ntasks = static_cast<int>(rp.tasks.size());
  const auto n = static_cast<size_t>(ntasks);
  lg.flags.resize(n);
  lg.npred.resize(n);
  lg.preds.clear();
  lg.pred_off.assign(n + 1, 0);
  std::array<int, kStreamCount> last{};
  last.fill(-1);
  for (int i = 0; i < ntasks; ++i) {
    const Task& t = rp.tasks[static_cast<size_t>(i)];
    STEPCAST_CHECK(t.id == i, fmt::format("rank {}: task ids must be dense", rp.rank));
    std::uint8_t f = 0;
    switch (t.kind) {
      case TaskKind::kCollective:
      case TaskKind::kSend:
      case TaskKind::kRecv: f = kFlagComm; break;
      case TaskKind::kGemm:
      case TaskKind::kAttention: f = kFlagCompute; break;
      case TaskKind::kMemoryBound: f = kFlagCompute | kFlagMemBound; break;
      case TaskKind::kAlloc: f = kFlagAlloc; break;
      case TaskKind::kFree: f = kFlagFree; break;
    }
    lg.flags[static_cast<size_t>(i)] = f;
    for (int dep : t.deps) {
      STEPCAST_CHECK(dep >= 0 && dep < ntasks && dep != i,
                     fmt::format("{} has dependency {} out of range", task_ref(rp, t.id), dep));
      lg.preds.push_back(static_cast<std::uint32_t>(dep));
    }
    const auto s = static_cast<size_t>(t.stream);
    STEPCAST_CHECK(s < static_cast<size_t>(kStreamCount), "invalid stream");
    if (last[s] >= 0) lg.preds.push_back(static_cast<std::uint32_t>(last[s]));
    last[s] = i;
    lg.pred_off[static_cast<size_t>(i) + 1] = static_cast<std::uint32_t>(lg.preds.size());
  }
  lg.succ_off.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    lg.npred[i] = static_cast<std::int32_t>(lg.pred_off[i + 1] - lg.pred_off[i]);
    for (std::uint32_t e = lg.pred_off[i]; e < lg.pred_off[i + 1]; ++e) ++lg.succ_off[lg.preds[e] + 1];
  }
  for (size_t i = 0; i < n; ++i) lg.succ_off[i + 1] += lg.succ_off[i];
  lg.succ.resize(lg.succ_off[n]);
  std::vector<std::uint32_t> fill(lg.succ_off.begin(), lg.succ_off.end() - 1);
  for (size_t i = 0; i < n; ++i)
    for (std::uint32_t e = lg.pred_off[i]; e < lg.pred_off[i + 1]; ++e)
      lg.succ[fill[lg.preds[e]]++] = static_cast<std::uint32_t>(i);
}

void Engine::build(const Durations& d) {
  const size_t nranks = program_->ranks.size();
  STEPCAST_CHECK(d.size() == nranks,
                 fmt::format("durations for {} ranks, program has {}", d.size(), nranks));
  rank_offset_.assign(nranks + 1, 0);
  dur_of_.resize(nranks);
  // The step never outlasts the sum of every task's duration (times a bounded slowdown from
  // interference), so bounding that sum keeps the int64 clock from overflowing.
  double total_ns = 0;
  for (size_t r = 0; r < nranks; ++r) {
    const RankProgram& rp = program_->ranks[r];
    STEPCAST_CHECK(d[r].size() == rp.tasks.size(),
                   fmt::format("rank {}: {} durations for {} tasks", rp.rank, d[r].size(),
                               rp.tasks.size()));
    for (size_t i = 0; i < d[r].size(); ++i) {
      STEPCAST_CHECK(d[r][i] >= 0, fmt::format("negative duration {} ns for {}", d[r][i],
                                               task_ref(rp, static_cast<int>(i))));
      total_ns += static_cast<double>(d[r][i]);
    }
    if (total_ns > kMaxTotalNs) {
      throw InputError(InputIssue{
          "", 0, 0, "",
          fmt::format("the tasks of this step add up to more than {:.0f} years of GPU time, "
                      "beyond what stepcast simulates: the model, the batch or a hardware "
                      "profile value is implausibly large",
                      kMaxTotalNs / 1e9 / 3.156e7)});
    }
    dur_of_[r] = d[r].data();
    rank_offset_[r + 1] = rank_offset_[r] + static_cast<std::uint32_t>(rp.tasks.size());
  }
  const size_t n = rank_offset_[nranks];
  ntasks_ = n;

  match_rendezvous(*program_, match_);
  if (!match_.problems.empty()) {
    std::string msg = "program cannot run: tasks that must meet do not match:";
    for (size_t i = 0; i < std::min<size_t>(match_.problems.size(), 10); ++i)
      msg += "\n  " + match_.problems[i];
    throw InvariantError(msg);
  }

  // One graph per distinct task list; per rank, its flags and predecessor counts.
  nlists_ = 0;
  graph_of_.assign(nranks, nullptr);
  {
    std::unordered_map<const Task*, size_t> seen;
    std::vector<size_t> list_of(nranks, 0);
    for (size_t r = 0; r < nranks; ++r) {
      const RankProgram& rp = program_->ranks[r];
      if (rp.tasks.empty()) continue;
      auto [it, fresh] = seen.try_emplace(&rp.tasks[0], nlists_);
      if (fresh) {
        if (lists_.size() <= nlists_) lists_.emplace_back();
        build_list(rp, lists_[nlists_++]);
      }
      list_of[r] = it->second;
    }
    for (size_t r = 0; r < nranks; ++r)  // lists_ no longer grows: pointers stay valid
      if (!program_->ranks[r].tasks.empty()) graph_of_[r] = &lists_[list_of[r]];
  }
  rank_of_.resize(n);
  flags_.resize(n);
  left_.resize(n);
  tl_ = Timeline{};
  tl_.ranks.resize(nranks);
  tl_.task_timing = std::make_shared<HugeVector<TaskTiming>>(n, TaskTiming{-1, -1});
  timing_ = tl_.task_timing->data();
  for (size_t r = 0; r < nranks; ++r) {
    const size_t m = program_->ranks[r].tasks.size();
    tl_.ranks[r].tasks = std::span<TaskTiming>(timing_ + rank_offset_[r], m);
    if (m == 0) continue;
    const ListGraph& lg = *graph_of_[r];
    const size_t base = rank_offset_[r];
    std::fill_n(rank_of_.begin() + static_cast<std::ptrdiff_t>(base), m, static_cast<std::int32_t>(r));
    std::copy(lg.flags.begin(), lg.flags.end(), flags_.begin() + static_cast<std::ptrdiff_t>(base));
    std::copy(lg.npred.begin(), lg.npred.end(), left_.begin() + static_cast<std::ptrdiff_t>(base));
  }

  // Rendezvous instances: members as global indices, duration = the longest member's.
  const int ninst = match_.instance_count();
  inst_left_.resize(static_cast<size_t>(ninst));
  inst_dur_.assign(static_cast<size_t>(ninst), 0);
  inst_member_.resize(match_.members.size());
  for (int i = 0; i < ninst; ++i) {
    const int b = match_.offsets[static_cast<size_t>(i)], e = match_.offsets[static_cast<size_t>(i) + 1];
    inst_left_[static_cast<size_t>(i)] = e - b;
    for (int k = b; k < e; ++k) {
      const auto [r, id] = match_.members[static_cast<size_t>(k)];
      const std::uint32_t g = rank_offset_[static_cast<size_t>(r)] + static_cast<std::uint32_t>(id);
      inst_member_[static_cast<size_t>(k)] = g;
      inst_dur_[static_cast<size_t>(i)] = std::max(inst_dur_[static_cast<size_t>(i)], dur(g));
    }
  }

  flow_ = options_->flow;
  transfer_inst_.clear();
  if (flow_) build_flows();

  hbm_ = static_cast<bool>(options_->comm_hbm_share);
  inst_hbm_ppm_.assign(hbm_ ? static_cast<size_t>(ninst) : 0, 0);
  for (int i = 0; hbm_ && i < ninst; ++i) {
    const auto ui = static_cast<size_t>(i);
    if (flow_ && inst_flow_set_[ui] >= 0) continue;  // flow transfers: not stretched
    const auto [r, id] = match_.members[static_cast<size_t>(match_.offsets[ui])];
    const RankProgram& rp = program_->ranks[static_cast<size_t>(r)];
    const double share = options_->comm_hbm_share(rp, rp.tasks[static_cast<size_t>(id)], inst_dur_[ui]);
    STEPCAST_CHECK(share >= 0 && share <= 1, fmt::format("HBM share {} of {} is outside [0, 1]",
                                                         share, task_ref(rp, id)));
    inst_hbm_ppm_[ui] = std::llround(share * 1e6);
  }
  comm_hbm_ppm_.assign(nranks, 0);
  mb_running_.assign(nranks, 0);
  deferred_rdv_.clear();
  const size_t hinst = hbm_ ? static_cast<size_t>(ninst) : 0;
  inst_running_.assign(hinst, 0);
  inst_work_.assign(hinst, 0.0);
  inst_factor_.assign(hinst, 1.0);
  inst_since_.assign(hinst, 0);
  inst_touched_.assign(hinst, 0);
  mb_changed_.assign(hbm_ ? nranks : 0, 0);
  rdv_of_rank_.resize(hbm_ ? nranks : 0);
  for (auto& v : rdv_of_rank_) v.clear();
  mb_changed_ranks_.clear();
  touched_.clear();
  inst_no_sms_.assign(options_->comm_holds_sms ? static_cast<size_t>(ninst) : 0, 0);
  for (size_t i = 0; i < inst_no_sms_.size(); ++i) {
    const auto [r, id] = match_.members[static_cast<size_t>(match_.offsets[i])];
    const RankProgram& rp = program_->ranks[static_cast<size_t>(r)];
    inst_no_sms_[i] = options_->comm_holds_sms(rp, rp.tasks[static_cast<size_t>(id)]) ? 0 : 1;
  }
  sm_comm_running_.assign(nranks, 0);
  interference_ = options_->compute_slowdown_when_comm > 0 || hbm_;
  running_.resize(interference_ ? nranks : 0);
  for (auto& v : running_) v.clear();
  comm_changed_.assign(interference_ ? nranks : 0, 0);
  changed_ranks_.clear();
  comm_running_.assign(nranks, 0);
  mem_now_.assign(nranks, 0.0);
  mem_peak_.assign(nranks, 0.0);
  queue_.clear();
  zero_stack_.clear();
  deferred_.clear();
  events_ = 0;
  finished_ = 0;
}

// Flow mode: one flow set per distinct (collective op, group, bytes) or (src, dst, bytes),
// with its time alone on the topology; per instance, alpha and the bytes scale.
void Engine::build_flows() {
  STEPCAST_CHECK(flow_->topology != nullptr && flow_->latency_ns != nullptr,
                 "flow mode needs a topology and per-task latencies");
  const Topology& topo = *flow_->topology;
  const Durations& lat = *flow_->latency_ns;
  STEPCAST_CHECK(lat.size() == program_->ranks.size(), "flow mode: latencies per rank missing");
  for (size_t r = 0; r < lat.size(); ++r)
    STEPCAST_CHECK(lat[r].size() == program_->ranks[r].tasks.size(),
                   fmt::format("flow mode: rank {} has {} latencies for {} tasks",
                               program_->ranks[r].rank, lat[r].size(),
                               program_->ranks[r].tasks.size()));
  STEPCAST_CHECK(program_->world_size <= topo.gpus(),
                 fmt::format("flow mode: program has {} ranks, topology {} GPUs",
                             program_->world_size, topo.gpus()));
  net_.reset(topo);
  alone_solver_ = MaxMinSolver((flow_->nominal != nullptr ? *flow_->nominal : topo).capacities());
  flow_sets_.clear();
  transfer_inst_.clear();
  std::map<std::tuple<int, int, int, double>, std::int32_t> key_to_set;
  struct SetCopies {  // per flow set: what its folded copies need
    std::vector<int> offsets;
    const Task* task = nullptr;
    std::vector<int> members;
  };
  std::vector<SetCopies> set_copies;
  const int ninst = match_.instance_count();
  inst_flow_set_.assign(static_cast<size_t>(ninst), -1);
  inst_alpha_.assign(static_cast<size_t>(ninst), 0);
  inst_scale_.assign(static_cast<size_t>(ninst), 0.0);
  for (int i = 0; i < ninst; ++i) {
    const auto ui = static_cast<size_t>(i);
    const int b = match_.offsets[ui], e = match_.offsets[ui + 1];
    // The task that defines the transfer: the collective of any member, or the send.
    std::uint32_t lead = inst_member_[static_cast<size_t>(b)];
    TimeNs alpha = 0;
    for (int k = b; k < e; ++k) {
      const std::uint32_t g = inst_member_[static_cast<size_t>(k)];
      const auto r = static_cast<size_t>(rank_of_[g]);
      const auto id = static_cast<size_t>(g - rank_offset_[r]);
      alpha = std::max(alpha, lat[r][id]);
      if (program_->ranks[r].tasks[id].kind == TaskKind::kSend) lead = g;
    }
    const TimeNs total = inst_dur_[ui];
    alpha = std::clamp<TimeNs>(alpha, 0, total);
    const TimeNs bw_ns = total - alpha;
    if (bw_ns <= 0) continue;  // latency only: nothing to share
    const auto lr = static_cast<size_t>(rank_of_[lead]);
    const RankProgram& rp = program_->ranks[lr];
    const Task& t = rp.tasks[lead - rank_offset_[lr]];
    std::tuple<int, int, int, double> key;
    if (t.kind == TaskKind::kCollective) {
      key = {0, rp.group_of(t), static_cast<int>(t.coll), t.bytes};
    } else if (t.kind == TaskKind::kSend) {
      key = {1, rp.rank, rp.peer_of(t), t.bytes};
    } else {
      continue;  // a rendezvous of non-communication tasks: not a transfer
    }
    auto it = key_to_set.find(key);
    if (it == key_to_set.end()) {
      FlowSet fs;
      std::vector<int> members;  // the transfer's ranks (for its folded copies)
      if (t.kind == TaskKind::kCollective) {
        const Group& grp = program_->groups[static_cast<size_t>(rp.group_of(t))];
        fs.flows = collective_flows(t.coll, grp.ranks, t.bytes, topo, flow_->pxn);
        members = grp.ranks;
      } else if (const int peer = rp.peer_of(t); rp.rank != peer && t.bytes > 0) {
        fs.flows.push_back(FlowSpec{rp.rank, peer, topo.route(rp.rank, peer, flow_->pxn),
                                    t.bytes, {}});
        members = {rp.rank, peer};
      }
      bool moves = false;
      for (const FlowSpec& f : fs.flows) moves = moves || (f.bytes > 0 && !f.links.empty());
      // Alone means one copy; the copies join in below.
      fs.alone_s = moves ? simulate_flows_s(fs.flows, alone_solver_) : 0.0;
      const std::int32_t id = fs.alone_s > 0 ? static_cast<std::int32_t>(flow_sets_.size()) : -1;
      if (id >= 0) {
        flow_sets_.push_back(std::move(fs));
        set_copies.push_back({fold_offsets(rp.rank, rp.stands_for, members), &t, std::move(members)});
      }
      it = key_to_set.emplace(key, id).first;
    }
    if (it->second < 0) continue;  // moves nothing over links (one GPU): analytical
    inst_flow_set_[ui] = it->second;
    inst_alpha_[ui] = alpha;
    // Scaled so that the flow set alone takes exactly the analytical bandwidth time.
    inst_scale_[ui] = to_s(bw_ns) / flow_sets_[static_cast<size_t>(it->second)].alone_s;
  }
  // Folded copies (engine.h): each flow set stands for its translates by fold_offsets; their
  // flows are charged on every link some simulated flow crosses.
  std::vector<char> charged(topo.links().size(), 0);
  for (const FlowSet& fs : flow_sets_)
    for (const FlowSpec& f : fs.flows)
      for (int l : f.links) charged[static_cast<size_t>(l)] = 1;
  for (size_t k = 0; k < flow_sets_.size(); ++k) {
    const SetCopies& c = set_copies[k];
    if (c.offsets.size() <= 1) continue;
    charge_copies(flow_sets_[k].flows, c.offsets, [&](int d) {
      std::vector<int> moved = c.members;
      for (int& m : moved) m += d;
      if (c.task->kind == TaskKind::kCollective)
        return collective_flows(c.task->coll, moved, c.task->bytes, topo, flow_->pxn);
      return std::vector<FlowSpec>{FlowSpec{moved[0], moved[1],
                                            topo.route(moved[0], moved[1], flow_->pxn),
                                            c.task->bytes, {}}};
    }, charged);
  }
}

void Engine::start_flows(int inst, TimeNs t) {
  const auto ui = static_cast<size_t>(inst);
  const int x = net_.start(t, flow_sets_[static_cast<size_t>(inst_flow_set_[ui])].flows,
                           inst_scale_[ui]);
  STEPCAST_CHECK(x == static_cast<int>(transfer_inst_.size()), "network transfer ids out of order");
  transfer_inst_.push_back(inst);
}

void Engine::make_ready(std::uint32_t g, TimeNs t) {
  const std::int32_t inst = match_.instance_of[g];
  if (inst < 0) {
    start_task(g, t, dur(g));
    return;
  }
  if (--inst_left_[static_cast<size_t>(inst)] == 0) start_rendezvous(inst, t);
}

// Every member of a collective or send/recv pair starts now and stays busy for the
// instance's duration. Analytical network mode: the end is known at the start. A flow-mode
// network model would take over here — register the instance's flows and push the members'
// ends when its max-min solver says the last byte arrives — without touching the rest.
void Engine::start_rendezvous(int inst, TimeNs t) {
  const TimeNs d = inst_dur_[static_cast<size_t>(inst)];
  const auto b = static_cast<size_t>(match_.offsets[static_cast<size_t>(inst)]);
  const auto e = static_cast<size_t>(match_.offsets[static_cast<size_t>(inst) + 1]);
  if (flow_ && inst_flow_set_[static_cast<size_t>(inst)] >= 0) {
    // Flow mode: members are busy from now until the network says the last byte arrived
    // (always after t: the transfer moves a positive number of bytes at a finite rate).
    for (size_t k = b; k < e; ++k) {
      const std::uint32_t g = inst_member_[k];
      ++events_;
      TaskTiming& tm = at(g);
      tm.start = t;
      tm.end = t;
      ++comm_running_[static_cast<size_t>(rank_of_[g])];
      if (holds_sms(g)) ++sm_comm_running_[static_cast<size_t>(rank_of_[g])];
      mark_comm_changed(static_cast<size_t>(rank_of_[g]));
    }
    const TimeNs alpha = inst_alpha_[static_cast<size_t>(inst)];
    if (alpha == 0) {
      start_flows(inst, t);
    } else {
      queue_.push(t + alpha, static_cast<std::uint32_t>(ntasks_ + static_cast<size_t>(inst)));
    }
    return;
  }
  if (hbm_ && inst_hbm_ppm_[static_cast<size_t>(inst)] > 0) {
    deferred_rdv_.push_back(inst);  // stretch decided when the instant settles
    return;
  }
  for (size_t k = b; k < e; ++k) start_task(inst_member_[k], t, d);
}

void Engine::start_task(std::uint32_t g, TimeNs t, TimeNs duration) {
  if ((flags_[g] & kFlagCompute) && duration > 0 && interference_) {
    start_of(g) = t;  // marks it started; its length is decided when the instant settles
    deferred_.push_back(g);
    return;
  }
  launch(g, t, duration);
}

void Engine::launch(std::uint32_t g, TimeNs t, TimeNs duration) {
  ++events_;
  TaskTiming& tm = at(g);
  tm.start = t;
  tm.end = t + duration;
  if (flags_[g] & (kFlagAlloc | kFlagFree)) apply_memory(g, t);
  if (duration == 0) {
    zero_stack_.push_back(g);
    return;
  }
  const auto r = static_cast<size_t>(rank_of_[g]);
  if (flags_[g] & kFlagComm) {
    ++comm_running_[r];
    if (holds_sms(g)) ++sm_comm_running_[r];
    if (hbm_) comm_hbm_ppm_[r] += inst_hbm_ppm_[static_cast<size_t>(match_.instance_of[g])];
    mark_comm_changed(r);
  }
  if (hbm_ && (flags_[g] & kFlagMemBound)) {
    ++mb_running_[r];
    mark_mb_changed(r);
  }
  queue_.push(t + duration, g);
}

void Engine::finish(std::uint32_t g, TimeNs t) {
  ++events_;
  ++finished_;
  left_[g] = -1;  // done
  const auto r = static_cast<size_t>(rank_of_[g]);
  const TaskTiming& tm = at(g);
  if ((flags_[g] & kFlagComm) && tm.end > tm.start) {
    --comm_running_[r];
    if (holds_sms(g)) --sm_comm_running_[r];
    const std::int32_t inst = match_.instance_of[g];
    if (hbm_ && inst >= 0) {
      comm_hbm_ppm_[r] -= inst_hbm_ppm_[static_cast<size_t>(inst)];
      inst_running_[static_cast<size_t>(inst)] = 0;  // its members all end now
      auto& list = rdv_of_rank_[r];
      for (size_t k = 0; k < list.size(); ++k) {
        if (list[k] != inst) continue;
        list[k] = list.back();
        list.pop_back();
        break;
      }
    }
    mark_comm_changed(r);
  }
  if (hbm_ && (flags_[g] & kFlagMemBound) && tm.end > tm.start) {
    --mb_running_[r];
    mark_mb_changed(r);
  }
  if (interference_ && (flags_[g] & kFlagCompute) && tm.end > tm.start) {
    tl_.ranks[r].interference_ns += tm.end - tm.start - dur(g);
    auto& run = running_[r];
    for (size_t k = 0; k < run.size(); ++k) {
      if (run[k].g != g) continue;
      run[k] = run.back();
      run.pop_back();
      break;
    }
  }
  const ListGraph& lg = *graph_of_[r];
  const std::uint32_t base = rank_offset_[r], i = g - base;
  for (std::uint32_t e = lg.succ_off[i]; e < lg.succ_off[i + 1]; ++e) {
    const std::uint32_t s = base + lg.succ[e];
    if (--left_[s] == 0) make_ready(s, t);
  }
}

void Engine::apply_memory(std::uint32_t g, TimeNs t) {
  const size_t r = static_cast<size_t>(rank_of_[g]);
  const double bytes = program_->ranks[r].tasks[g - rank_offset_[r]].bytes;
  mem_now_[r] += (flags_[g] & kFlagAlloc) ? bytes : -bytes;
  mem_peak_[r] = std::max(mem_peak_[r], mem_now_[r]);
  if (!options_->record_memory_curve) return;
  auto& curve = tl_.ranks[r].memory;
  if (!curve.empty() && curve.back().t == t)
    curve.back().bytes = mem_now_[r];  // coalesce same-instant samples: value after the instant
  else
    curve.push_back({t, mem_now_[r]});
}

void Engine::settle(TimeNs t) {
  for (;;) {
    while (!zero_stack_.empty()) {
      const std::uint32_t g = zero_stack_.back();
      zero_stack_.pop_back();
      finish(g, t);
    }
    if (deferred_.empty() && deferred_rdv_.empty()) {
      if (!changed_ranks_.empty()) retime_running(t);
      if (!mb_changed_ranks_.empty() || !touched_.empty()) retime_rendezvous(t);
      return;
    }
    // Every end and zero-length cascade of this instant is done: the sets of running tasks
    // are final, so the interference decisions do not depend on processing order. First the
    // rendezvous (timed from the memory-bound compute running now; retime_rendezvous
    // re-times them from the final state when the instant settles), then the compute tasks
    // (which see the communication started at t).
    for (const std::int32_t inst : deferred_rdv_) {
      const auto ui = static_cast<size_t>(inst);
      const auto b = static_cast<size_t>(match_.offsets[ui]), e = static_cast<size_t>(match_.offsets[ui + 1]);
      const TimeNs d0 = inst_dur_[ui];
      const double f = rendezvous_factor(ui);
      if (d0 > 0) {
        for (size_t k = b; k < e; ++k)
          rdv_of_rank_[static_cast<size_t>(rank_of_[inst_member_[k]])].push_back(inst);
        touch(inst);
      }
      inst_running_[ui] = d0 > 0;
      inst_work_[ui] = static_cast<double>(d0);
      inst_since_[ui] = t;
      inst_factor_[ui] = f;
      const TimeNs d = f == 1.0 || d0 == 0 ? d0 : std::max<TimeNs>(1, stretch(d0, f));
      for (size_t k = b; k < e; ++k) launch(inst_member_[k], t, d);
    }
    deferred_rdv_.clear();
    std::vector<std::uint32_t>& now = now_;
    now.swap(deferred_);
    for (std::uint32_t g : now) {
      const TimeNs d = dur(g);
      const auto r = static_cast<size_t>(rank_of_[g]);
      const double f = slowdown_factor(r, g);
      running_[r].push_back({g, static_cast<double>(d), t, f});
      launch(g, t, f == 1.0 ? d : stretch(d, f));
    }
    now.clear();
    if (deferred_.empty()) deferred_.swap(now);  // keep the capacity
  }
}

// Instant t has settled and the communication running on these ranks changed during it:
// each of their running compute tasks goes on at its new speed with the work it has left. A
// task that started at t and was timed with the final set keeps its end.
void Engine::retime_running(TimeNs t) {
  for (const std::uint32_t ur : changed_ranks_) {
    const size_t r = ur;
    comm_changed_[r] = 0;
    for (Running& x : running_[r]) {
      const double f = slowdown_factor(r, x.g);
      if (f == x.factor) continue;
      x.work_ns -= static_cast<double>(t - x.since) / x.factor;
      x.since = t;
      x.factor = f;
      // Still running after t (tasks ending at t were finished before the instant settled).
      const TimeNs end = t + std::max<TimeNs>(1, std::llround(std::max(0.0, x.work_ns) * f));
      TaskTiming& tm = at(x.g);
      if (end == tm.end) continue;
      tm.end = end;
      queue_.push(end, x.g);
    }
  }
  changed_ranks_.clear();
}

// Instant t has settled: each running rendezvous with an HBM share that started in it, or
// that a rank whose memory-bound count changed takes part in, goes on at its speed from now
// (1 + share slower while any member runs memory-bound compute) with the work it has left;
// all its members keep one end.
void Engine::retime_rendezvous(TimeNs t) {
  for (const std::uint32_t ur : mb_changed_ranks_) {
    const size_t r = ur;
    mb_changed_[r] = 0;
    for (const std::int32_t inst : rdv_of_rank_[r]) touch(inst);
  }
  mb_changed_ranks_.clear();
  for (const std::int32_t inst : touched_) {
    const auto ui = static_cast<size_t>(inst);
    inst_touched_[ui] = 0;
    if (!inst_running_[ui]) continue;
    const double f = rendezvous_factor(ui);
    if (f == inst_factor_[ui]) continue;
    inst_work_[ui] -= static_cast<double>(t - inst_since_[ui]) / inst_factor_[ui];
    inst_since_[ui] = t;
    inst_factor_[ui] = f;
    const TimeNs end =
        t + std::max<TimeNs>(1, std::llround(std::max(0.0, inst_work_[ui]) * f));
    const auto b = static_cast<size_t>(match_.offsets[ui]), e = static_cast<size_t>(match_.offsets[ui + 1]);
    for (size_t k = b; k < e; ++k) {
      const std::uint32_t g = inst_member_[k];
      if (at(g).end == end) continue;
      at(g).end = end;
      queue_.push(end, g);
    }
  }
  touched_.clear();
}

Timeline Engine::run() {
  const size_t n = ntasks_;
  for (std::uint32_t g = 0; g < n; ++g)
    if (left_[g] == 0) make_ready(g, 0);
  settle(0);
  for (;;) {
    const TimeNs queue_t = queue_.empty() ? kNoEvent : queue_.min_time();
    TimeNs t = queue_t;
    const TimeNs net_t = flow_ ? net_.next_completion() : kNoEvent;
    t = std::min(t, net_t);
    if (t == kNoEvent) break;
    if (net_t == t) {
      completed_.clear();
      net_.advance(t, completed_);
      for (const int x : completed_) {
        const auto inst = static_cast<size_t>(transfer_inst_[static_cast<size_t>(x)]);
        for (auto k = static_cast<size_t>(match_.offsets[inst]);
             k < static_cast<size_t>(match_.offsets[inst + 1]); ++k) {
          const std::uint32_t g = inst_member_[k];
          at(g).end = t;
          finish(g, t);
        }
      }
    }
    if (queue_t == t) {
      // Ends are pushed at later instants only (positive durations), so this is every event
      // of the instant.
      queue_.take_min(batch_);
      for (const std::uint32_t g : batch_) {
        if (g >= n)
          start_flows(static_cast<int>(g - n), t);  // latency over: bytes start moving
        else if (left_[g] >= 0 && at(g).end == t)  // else a stale entry of a re-timed task
          finish(g, t);
      }
    }
    settle(t);
  }
  if (finished_ != n) report_deadlock();

  Timeline& tl = tl_;
  const size_t nranks = program_->ranks.size();
  for (size_t r = 0; r < nranks; ++r) {
    RankTimeline& rt = tl.ranks[r];
    for (const TaskTiming& tm : rt.tasks) rt.end = std::max(rt.end, tm.end);
    rt.peak_bytes = mem_peak_[r];
    tl.step_ns = std::max(tl.step_ns, rt.end);
  }
  // The critical rank: of those that end last (often all of them: a final collective ends
  // together), the one whose compute stream was busiest, i.e. the one the others waited for
  // (a slow GPU); the lowest index among equals.
  TimeNs best_busy = -1;
  for (size_t r = 0; r < nranks; ++r) {
    const RankTimeline& rt = tl.ranks[r];
    if (rt.end != tl.step_ns) continue;
    TimeNs busy = 0;
    const TaskList& tasks = program_->ranks[r].tasks;
    for (size_t i = 0; i < tasks.size(); ++i)
      if (tasks[i].stream == StreamKind::kCompute) busy += rt.tasks[i].end - rt.tasks[i].start;
    if (busy > best_busy) {
      best_busy = busy;
      tl.critical_rank = static_cast<int>(r);
    }
  }
  tl.events = events_;
  tl.flow_transfers = transfer_inst_.size();
  if (flow_) tl.link_utilization = net_.utilization();
  breakdown(tl);
  return std::move(tl_);
}

void Engine::report_deadlock() const {
  std::vector<std::string> stuck;
  size_t total = 0;
  for (size_t r = 0; r < program_->ranks.size(); ++r) {
    const RankProgram& rp = program_->ranks[r];
    const std::uint32_t base = rank_offset_[r];
    std::array<bool, kStreamCount> seen{};
    for (size_t i = 0; i < rp.tasks.size(); ++i) {
      const std::uint32_t g = base + static_cast<std::uint32_t>(i);
      const size_t s = static_cast<size_t>(rp.tasks[i].stream);
      if (at(g).start >= 0 || seen[s]) continue;
      seen[s] = true;  // the head of this stream's queue
      ++total;
      if (stuck.size() >= 12) continue;
      std::string why;
      for (int dep : rp.tasks[i].deps)
        if (left_[base + static_cast<std::uint32_t>(dep)] >= 0)  // not done
          why += fmt::format("{}dep {}", why.empty() ? "" : ", ", task_ref(rp, dep));
      const std::int32_t inst = match_.instance_of[g];
      if (why.empty() && inst >= 0) {
        for (auto k = static_cast<size_t>(match_.offsets[static_cast<size_t>(inst)]);
             k < static_cast<size_t>(match_.offsets[static_cast<size_t>(inst) + 1]); ++k) {
          const std::uint32_t m = inst_member_[k];
          if (m == g || left_[m] == 0) continue;
          const RankProgram& other = program_->ranks[static_cast<size_t>(rank_of_[m])];
          why += fmt::format("{}{} {}", why.empty() ? "" : ", ",
                             rp.tasks[i].kind == TaskKind::kCollective ? "group member" : "peer",
                             task_ref(other, static_cast<int>(m - rank_offset_[static_cast<size_t>(rank_of_[m])])));
        }
      }
      stuck.push_back(fmt::format("{} on stream {} waits for {}", task_ref(rp, static_cast<int>(i)),
                                  stream_name(rp.tasks[i].stream), why.empty() ? "?" : why));
    }
  }
  std::string msg = fmt::format("deadlock: {} of {} tasks never ran; nothing can start. Stuck "
                                "stream heads ({}):",
                                ntasks_ - finished_, ntasks_, total);
  for (const auto& s : stuck) msg += "\n  " + s;
  if (total > stuck.size()) msg += fmt::format("\n  ... and {} more", total - stuck.size());
  throw InvariantError(msg);
}

// Exposed time per category on the critical rank (engine.h): sweep the stream intervals.
void Engine::breakdown(Timeline& tl) const {
  tl.breakdown_ns.fill(0);
  if (program_->ranks.empty()) return;
  const size_t r = static_cast<size_t>(tl.critical_rank);
  const RankProgram& rp = program_->ranks[r];
  struct Edge {
    TimeNs t;
    std::int8_t start;  // 0 = end (applied first), 1 = start
    std::int8_t stream;
    std::int8_t cat;
  };
  std::vector<Edge> edges;
  edges.reserve(rp.tasks.size() * 2);
  for (size_t i = 0; i < rp.tasks.size(); ++i) {
    const TaskTiming& tm = tl.ranks[r].tasks[i];
    if (tm.end <= tm.start) continue;
    const auto s = static_cast<std::int8_t>(rp.tasks[i].stream);
    const auto c = static_cast<std::int8_t>(rp.tasks[i].category);
    edges.push_back({tm.start, 1, s, c});
    edges.push_back({tm.end, 0, s, c});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) {
    return a.t != b.t ? a.t < b.t : a.start < b.start;
  });
  std::array<int, kStreamCount> active;
  active.fill(-1);
  // Compute stream first, then the comm streams: tp (NCCL, ring exchange), cp (sends,
  // receives), ep, pp_send, pp_recv, dp.
  static constexpr std::array<StreamKind, kStreamCount> kOrder = {
      StreamKind::kCompute, StreamKind::kTp,     StreamKind::kTpRing, StreamKind::kCp,
      StreamKind::kCpRecv,  StreamKind::kEp,     StreamKind::kPpSend, StreamKind::kPpRecv,
      StreamKind::kDp};
  auto attribute = [&]() -> size_t {
    for (const StreamKind s : kOrder)
      if (active[static_cast<size_t>(s)] >= 0) return static_cast<size_t>(active[static_cast<size_t>(s)]);
    return kCategoryCount;  // bubble
  };
  TimeNs prev = 0;
  for (const Edge& e : edges) {
    if (e.t > prev) {
      tl.breakdown_ns[attribute()] += e.t - prev;
      prev = e.t;
    }
    active[static_cast<size_t>(e.stream)] = e.start ? e.cat : -1;
  }
  tl.breakdown_ns[attribute()] += tl.step_ns - prev;
}

}  // namespace

TimeNs step_floor_ns(const Program& program, const Durations& durations) {
  TimeNs floor = 0;
  std::vector<TimeNs> end;
  for (size_t r = 0; r < program.ranks.size(); ++r) {
    const TaskList& tasks = program.ranks[r].tasks;
    const Durations::Row& d = durations[r];
    end.assign(tasks.size(), 0);
    std::array<TimeNs, kStreamCount> stream_end{};
    TimeNs compute = 0, last = 0;
    bool forward = false;
    for (size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      const auto s = static_cast<size_t>(t.stream);
      TimeNs start = stream_end[s];
      for (int dep : t.deps) {
        if (static_cast<size_t>(dep) >= i) {
          forward = true;
          break;
        }
        start = std::max(start, end[static_cast<size_t>(dep)]);
      }
      end[i] = start + d[i];
      stream_end[s] = end[i];
      last = std::max(last, end[i]);
      if (t.stream == StreamKind::kCompute) compute += d[i];
    }
    floor = std::max(floor, forward ? compute : last);
  }
  return floor;
}

Timeline simulate(const Program& program, const Durations& durations,
                  const EngineOptions& options) {
  static thread_local Engine engine;
  engine.reset(program, durations, options);
  Timeline tl = engine.run();
  if (options.keep_matching) tl.matching = engine.take_matching();
  return tl;
}

}  // namespace stepcast
