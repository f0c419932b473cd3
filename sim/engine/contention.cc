// Contention in the Engine (engine.h, engine_internal.h): SM interference and HBM
// contention. Compute starts and HBM-shared rendezvous are deferred until their instant
// settles; the running compute tasks and rendezvous whose conditions changed in it are then
// re-timed, keeping the work they have left.
#include "sim/engine/engine_internal.h"

#include <algorithm>

#include <fmt/format.h>

#include "model/error.h"

namespace stepcast::engine_detail {

// The contention state of a run: HBM shares per rendezvous instance, whether each holds SMs,
// and the per-rank counts of what runs.
void Engine::build_contention() {
  const size_t nranks = program_->ranks.size();
  const int ninst = match_.instance_count();
  hbm_ = static_cast<bool>(options_->comm_hbm_share);
  inst_hbm_ppm_.assign(hbm_ ? static_cast<size_t>(ninst) : 0, 0);
  for (int i = 0; hbm_ && i < ninst; ++i) {
    const auto ui = static_cast<size_t>(i);
    if (flow_ && inst_flow_set_[ui] >= 0) continue;  // flow transfers: not stretched
    const auto [r, id] = match_.members[static_cast<size_t>(match_.offsets[ui])];
    const RankProgram& rp = program_->ranks[static_cast<size_t>(r)];
    const double share =
        options_->comm_hbm_share(rp, rp.tasks[static_cast<size_t>(id)], inst_dur_[ui]);
    STEPCAST_CHECK(share >= 0 && share <= 1,
                   fmt::format("HBM share {} of {} is outside [0, 1]", share, task_ref(rp, id)));
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
  build_sm_levels();
  interference_ = sm_slow_.back() > 0 || hbm_;
  running_.resize(interference_ ? nranks : 0);
  for (auto& v : running_) v.clear();
  comm_changed_.assign(interference_ ? nranks : 0, 0);
  changed_ranks_.clear();
}

// The SM levels (engine_internal.h) of a run: EngineOptions::comm_sms gives each instance
// its SMs, one level per distinct count; without it, one level at
// compute_slowdown_when_comm for every instance that holds SMs (comm_holds_sms).
void Engine::build_sm_levels() {
  const auto ninst = static_cast<size_t>(match_.instance_count());
  auto task_of = [this](size_t i) -> std::pair<const RankProgram&, const Task&> {
    const auto [r, id] = match_.members[static_cast<size_t>(match_.offsets[i])];
    const RankProgram& rp = program_->ranks[static_cast<size_t>(r)];
    return {rp, rp.tasks[static_cast<size_t>(id)]};
  };
  sm_level_sms_.assign(1, 0);
  inst_sm_level_.assign(ninst, 1);
  if (!options_->comm_sms) {
    sm_slow_.assign({0.0, std::max(0.0, options_->compute_slowdown_when_comm)});
    for (size_t i = 0; options_->comm_holds_sms && i < ninst; ++i) {
      const auto [rp, task] = task_of(i);
      inst_sm_level_[i] = options_->comm_holds_sms(rp, task) ? 1 : 0;
    }
  } else {
    const int sms = options_->gpu_sms;
    std::vector<std::int32_t>& held = sm_held_;  // per instance, then its level
    held.resize(ninst);
    for (size_t i = 0; i < ninst; ++i) {
      const auto [rp, task] = task_of(i);
      const int s = options_->comm_sms(rp, task);
      STEPCAST_CHECK(
          s == 0 || (s > 0 && s < sms),
          fmt::format("{} holds {} SMs, outside [0, gpu_sms = {})", task_ref(rp, task.id), s, sms));
      held[i] = s;
      if (std::find(sm_level_sms_.begin(), sm_level_sms_.end(), s) == sm_level_sms_.end())
        sm_level_sms_.push_back(s);
    }
    std::sort(sm_level_sms_.begin(), sm_level_sms_.end());
    STEPCAST_CHECK(sm_level_sms_.size() <= 256, "more than 255 distinct SM counts");
    sm_slow_.assign(sm_level_sms_.size(), 0.0);  // level 0: none
    for (size_t l = 1; l < sm_slow_.size(); ++l)
      sm_slow_[l] =
          static_cast<double>(sm_level_sms_[l]) / static_cast<double>(sms - sm_level_sms_[l]);
    for (size_t i = 0; i < ninst; ++i)
      inst_sm_level_[i] = static_cast<std::uint8_t>(
          std::lower_bound(sm_level_sms_.begin(), sm_level_sms_.end(), held[i]) -
          sm_level_sms_.begin());
  }
  sm_level_running_.assign(program_->ranks.size() * sm_slow_.size(), 0);
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
      const auto b = static_cast<size_t>(match_.offsets[ui]),
                 e = static_cast<size_t>(match_.offsets[ui + 1]);
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
    const TimeNs end = t + std::max<TimeNs>(1, std::llround(std::max(0.0, inst_work_[ui]) * f));
    const auto b = static_cast<size_t>(match_.offsets[ui]),
               e = static_cast<size_t>(match_.offsets[ui + 1]);
    for (size_t k = b; k < e; ++k) {
      const std::uint32_t g = inst_member_[k];
      if (at(g).end == end) continue;
      at(g).end = end;
      queue_.push(end, g);
    }
  }
  touched_.clear();
}

}  // namespace stepcast::engine_detail
