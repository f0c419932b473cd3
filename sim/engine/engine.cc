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
//  - SM interference: a compute task of positive duration runs at 1 / (1 + slowdown) of its
//    speed, the slowdown set by the communication tasks of its rank running over [t, t+)
//    (started at or before t and ending after t; the most SMs one holds, engine.h). Compute starts
//    are therefore deferred until every end and every zero-duration cascade of instant t is done,
//    and the running compute tasks of a rank whose communication changed at t are re-timed then
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

#include <string>

#include <fmt/format.h>

#include "model/error.h"
#include "sim/engine/engine_internal.h"

namespace stepcast::engine_detail {

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
      count_sms(g, static_cast<size_t>(rank_of_[g]), 1);
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
    count_sms(g, r, 1);
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
    count_sms(g, r, -1);
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
    if (--left_[s] == 0) ready_at(s, t);
  }
  if (host_ && host_wait_[r] == static_cast<std::int64_t>(g)) {
    host_wait_[r] = -1;  // the host sees the task end and goes on issuing
    advance_host(r, t);
  }
}

// The host of rank r issues its tasks in program order from time t (or from its own clock,
// if later), each after its launches' and host ops' host time, until it reaches a host_sync task:
// it then waits for that task's end (finish() resumes it). Issue times are computed ahead of the
// clock; a kernel task starts at the later of its issue and its predecessors' ends (ready_at).
// Communication tasks (collectives, send/recv) cost the host their launches but do not wait for
// their issue: the program's order between streams is not always the host's (pipeline messages are
// placed after the passes), and a communication task waiting behind a host_sync its own peers must
// pass first could deadlock where the stack does not. A kernel task on a side stream (copies on the
// NCCL stream) does wait.
void Engine::advance_host(size_t r, TimeNs t) {
  const ListGraph& lg = *graph_of_[r];
  const std::uint32_t base = rank_offset_[r];
  const auto m = static_cast<std::uint32_t>(lg.host_order.size());
  TimeNs h = std::max(host_t_[r], t);
  std::uint32_t i = host_next_[r];
  const TimeNs per = options_->host_launch_ns, per_op = options_->host_op_ns;
  while (i < m) {
    h += per * lg.launches[i];
    if (per_op > 0) h += per_op * lg.host_ops[i];
    const std::uint32_t g = base + lg.host_order[i++];
    if (!(flags_[g] & kFlagCompute)) continue;  // costs the host time, waits for nothing
    issue_[g] = h;
    const bool wait = flags_[g] & kFlagHostSync;
    if (wait) host_wait_[r] = g;  // before ready_at: a zero-length task may end at once
    if (--left_[g] == 0) ready_at(g, t);
    if (wait) break;
  }
  host_next_[r] = i;
  host_t_[r] = h;
}

Timeline Engine::run() {
  const size_t n = ntasks_;
  for (std::uint32_t g = 0; g < n; ++g)
    if (left_[g] == 0) make_ready(g, 0);
  if (host_)
    for (size_t r = 0; r < program_->ranks.size(); ++r)
      if (graph_of_[r]) advance_host(r, 0);
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
        if (host_ && g >= host_event_base_)
          make_ready(g - host_event_base_, t);  // issued now, its predecessors long done
        else if (g >= n)
          start_flows(static_cast<int>(g - n), t);  // latency over: bytes start moving
        else if (left_[g] >= 0 && at(g).end == t)   // else a stale entry of a re-timed task
          finish(g, t);
      }
    }
    settle(t);
  }
  if (finished_ != n) report_deadlock();

  summarize();
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
      if (host_ && why.empty() && (flags_[g] & kFlagCompute) && host_wait_[r] >= 0) {
        const auto w = static_cast<std::uint32_t>(host_wait_[r]);
        why = fmt::format("its issue: the host waits for {} to end",
                          task_ref(rp, static_cast<int>(w - base)));
      }
      const std::int32_t inst = match_.instance_of[g];
      if (why.empty() && inst >= 0) {
        for (auto k = static_cast<size_t>(match_.offsets[static_cast<size_t>(inst)]);
             k < static_cast<size_t>(match_.offsets[static_cast<size_t>(inst) + 1]); ++k) {
          const std::uint32_t m = inst_member_[k];
          if (m == g || left_[m] == 0) continue;
          const RankProgram& other = program_->ranks[static_cast<size_t>(rank_of_[m])];
          why += fmt::format(
              "{}{} {}", why.empty() ? "" : ", ",
              rp.tasks[i].kind == TaskKind::kCollective ? "group member" : "peer",
              task_ref(other,
                       static_cast<int>(m - rank_offset_[static_cast<size_t>(rank_of_[m])])));
        }
      }
      stuck.push_back(fmt::format("{} on stream {} waits for {}", task_ref(rp, static_cast<int>(i)),
                                  stream_name(rp.tasks[i].stream), why.empty() ? "?" : why));
    }
  }
  std::string msg = fmt::format(
      "deadlock: {} of {} tasks never ran; nothing can start. Stuck "
      "stream heads ({}):",
      ntasks_ - finished_, ntasks_, total);
  for (const auto& s : stuck) msg += "\n  " + s;
  if (total > stuck.size()) msg += fmt::format("\n  ... and {} more", total - stuck.size());
  throw InvariantError(msg);
}

}  // namespace stepcast::engine_detail

namespace stepcast {

Timeline simulate(const Program& program, const Durations& durations,
                  const EngineOptions& options) {
  static thread_local engine_detail::Engine engine;
  engine.reset(program, durations, options);
  Timeline tl = engine.run();
  if (options.keep_matching) tl.matching = engine.take_matching();
  return tl;
}

}  // namespace stepcast
