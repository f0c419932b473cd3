// Building the Engine (engine_internal.h) from a Program and its durations: per rank its
// global task indices and durations, the task graph of each distinct task list (CSR
// successors, predecessor counts, flags), the rendezvous instances; then the flow-mode and
// contention state (engine_flows.cc, contention.cc) and the run's counters.
#include "sim/engine/engine_internal.h"

#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "model/error.h"

namespace stepcast::engine_detail {

namespace {

// Sum of all task durations a step may have: 2^60 ns (36.5 years); with interference
// stretching a task by at most a few times, the clock stays far below int64's 2^63.
constexpr double kMaxTotalNs = 1152921504606846976.0;

}  // namespace

// Local CSR of one task list: one pass over the Tasks (large structs) gathers flags and the
// predecessors; the successor CSR is then built from those alone.
void Engine::build_list(const RankProgram& rp, ListGraph& lg) {
  const int ntasks = static_cast<int>(rp.tasks.size());
  const auto n = static_cast<size_t>(ntasks);
  lg.flags.resize(n);
  lg.npred.resize(n);
  lg.preds.clear();
  lg.pred_off.assign(n + 1, 0);
  lg.host_order.clear();  // filled by build_host when the host model is on
  lg.launches.clear();
  lg.host_ops.clear();
  lg.host_sync = false;
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
    STEPCAST_CHECK(t.launches >= 0,
                   fmt::format("{} has a negative launch count", task_ref(rp, t.id)));
    STEPCAST_CHECK(
        !t.host_sync || t.stream == StreamKind::kCompute,
        fmt::format("{}: host_sync is modelled on compute-stream tasks only", task_ref(rp, t.id)));
    if (t.host_sync) {
      f |= kFlagHostSync;
      lg.host_sync = true;
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
    for (std::uint32_t e = lg.pred_off[i]; e < lg.pred_off[i + 1]; ++e)
      ++lg.succ_off[lg.preds[e] + 1];
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
  build_ranks(d);

  match_rendezvous(*program_, match_);
  if (!match_.problems.empty()) {
    std::string msg = "program cannot run: tasks that must meet do not match:";
    for (size_t i = 0; i < std::min<size_t>(match_.problems.size(), 10); ++i)
      msg += "\n  " + match_.problems[i];
    throw InvariantError(msg);
  }

  build_graphs();
  build_instances();

  flow_ = options_->flow;
  transfer_inst_.clear();
  if (flow_) build_flows();

  build_contention();
  build_host();
  comm_running_.assign(nranks, 0);
  mem_now_.assign(nranks, 0.0);
  mem_peak_.assign(nranks, 0.0);
  queue_.clear();
  zero_stack_.clear();
  deferred_.clear();
  events_ = 0;
  finished_ = 0;
}

// Per rank: its durations, checked, and its first global index.
void Engine::build_ranks(const Durations& d) {
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
    STEPCAST_CHECK(
        d[r].size() == rp.tasks.size(),
        fmt::format("rank {}: {} durations for {} tasks", rp.rank, d[r].size(), rp.tasks.size()));
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
}

// One graph per distinct task list; per rank, its flags and predecessor counts; the Timeline's
// task timings.
void Engine::build_graphs() {
  const size_t nranks = program_->ranks.size();
  const size_t n = ntasks_;
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
        lists_[nlists_].first_rank = r;
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
    std::fill_n(rank_of_.begin() + static_cast<std::ptrdiff_t>(base), m,
                static_cast<std::int32_t>(r));
    std::copy(lg.flags.begin(), lg.flags.end(), flags_.begin() + static_cast<std::ptrdiff_t>(base));
    std::copy(lg.npred.begin(), lg.npred.end(), left_.begin() + static_cast<std::ptrdiff_t>(base));
  }
}

void Engine::build_instances() {
  // Rendezvous instances: members as global indices, duration = the longest member's.
  const int ninst = match_.instance_count();
  inst_left_.resize(static_cast<size_t>(ninst));
  inst_dur_.assign(static_cast<size_t>(ninst), 0);
  inst_member_.resize(match_.members.size());
  for (int i = 0; i < ninst; ++i) {
    const int b = match_.offsets[static_cast<size_t>(i)],
              e = match_.offsets[static_cast<size_t>(i) + 1];
    inst_left_[static_cast<size_t>(i)] = e - b;
    for (int k = b; k < e; ++k) {
      const auto [r, id] = match_.members[static_cast<size_t>(k)];
      const std::uint32_t g = rank_offset_[static_cast<size_t>(r)] + static_cast<std::uint32_t>(id);
      inst_member_[static_cast<size_t>(k)] = g;
      inst_dur_[static_cast<size_t>(i)] = std::max(inst_dur_[static_cast<size_t>(i)], dur(g));
    }
  }
}

// The host model is on when launches cost host time or a task makes the host wait; then
// every kernel task (kFlagCompute) waits for its issue (one more predecessor count), the
// other tasks only cost the host their launches, and the host starts at 0.
void Engine::build_host() {
  const size_t nranks = program_->ranks.size();
  // Task::host_ops is read only when it costs something (a field the other passes never
  // touch, so the engine without host ops reads no more of a task than before).
  const bool ops = options_->host_op_ns > 0;
  host_ = options_->host_launch_ns > 0;
  for (size_t l = 0; l < nlists_ && !host_; ++l) {
    host_ = lists_[l].host_sync;
    const TaskList& tasks = program_->ranks[lists_[l].first_rank].tasks;
    for (size_t i = 0; ops && i < tasks.size() && !host_; ++i) host_ = tasks[i].host_ops > 0;
  }
  if (!host_) return;
  STEPCAST_CHECK(options_->host_launch_ns >= 0 && options_->host_op_ns >= 0,
                 "host launch and op times must not be negative");
  const std::uint64_t base = ntasks_ + static_cast<std::uint64_t>(match_.instance_count());
  STEPCAST_CHECK(base + ntasks_ < (std::uint64_t{1} << 32), "program too large for the host model");
  host_event_base_ = static_cast<std::uint32_t>(base);
  for (size_t l = 0; l < nlists_; ++l) {  // what each list's host launches, in order
    ListGraph& lg = lists_[l];
    const TaskList& tasks = program_->ranks[lg.first_rank].tasks;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (lg.flags[i] & (kFlagAlloc | kFlagFree)) continue;
      lg.host_order.push_back(static_cast<std::uint32_t>(i));
      lg.launches.push_back(tasks[i].launches);
      if (ops) {
        STEPCAST_CHECK(tasks[i].host_ops >= 0,
                       fmt::format("{} has a negative host-op count",
                                   task_ref(program_->ranks[lg.first_rank], static_cast<int>(i))));
        lg.host_ops.push_back(tasks[i].host_ops);
      }
    }
  }
  issue_.assign(ntasks_, 0);
  for (size_t r = 0; r < nranks; ++r)
    if (graph_of_[r])
      for (const std::uint32_t i : graph_of_[r]->host_order)
        if (flags_[rank_offset_[r] + i] & kFlagCompute) ++left_[rank_offset_[r] + i];
  host_next_.assign(nranks, 0);
  host_t_.assign(nranks, 0);
  host_wait_.assign(nranks, -1);
}

}  // namespace stepcast::engine_detail
