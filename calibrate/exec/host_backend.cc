// The CPU backend on a virtual clock (host_backend.h).
#include "host_backend.h"

#include <algorithm>
#include <array>

#include "schedule.h"

namespace stepcast::exec {

namespace {

class VirtualDevice : public Device {
 public:
  VirtualDevice(const Plan& plan, const std::vector<std::vector<std::int64_t>>& d)
      : dur_(d), stream_end_(plan.ranks.size()) {
    run_.times.resize(plan.ranks.size());
    for (size_t r = 0; r < plan.ranks.size(); ++r) {
      run_.times[r].assign(plan.tasks_of(static_cast<int>(r)).size(), SpanNs{});
      stream_end_[r].fill(0);
      if (dur_[r].size() != run_.times[r].size())
        throw ProgramError("run_on_host: rank " + std::to_string(r) + " has " +
                           std::to_string(run_.times[r].size()) + " tasks but " +
                           std::to_string(dur_[r].size()) + " durations");
    }
  }

  // Each rank's state is touched by its own thread only.
  void issue(int rank, const Task& t) override {
    const std::int64_t start = ready(rank, t);
    finish(rank, t, start, start + duration(rank, t));
  }
  Arrival arrive(int rank, const Task& t) override { return {ready(rank, t), duration(rank, t)}; }
  void issue_rendezvous(int rank, const Task& t, int, const Arrival& all) override {
    finish(rank, t, all.ready, all.ready + all.duration);
  }

  HostRun take() { return std::move(run_); }

 private:
  std::int64_t duration(int rank, const Task& t) const {
    return dur_[static_cast<size_t>(rank)][static_cast<size_t>(t.id)];
  }
  std::int64_t ready(int rank, const Task& t) const {
    const auto r = static_cast<size_t>(rank);
    std::int64_t at = stream_end_[r][static_cast<size_t>(t.stream)];
    for (int d : t.deps) at = std::max(at, run_.times[r][static_cast<size_t>(d)].end);
    return at;
  }
  void finish(int rank, const Task& t, std::int64_t start, std::int64_t end) {
    const auto r = static_cast<size_t>(rank);
    run_.times[r][static_cast<size_t>(t.id)] = {start, end};
    stream_end_[r][static_cast<size_t>(t.stream)] = end;
  }

  const std::vector<std::vector<std::int64_t>>& dur_;
  std::vector<std::array<std::int64_t, 9>> stream_end_;  // per rank, per kStreams entry
  HostRun run_;
};

// Memory in use over the virtual timeline: allocs and frees at their start, in time order and
// within an instant in task-id order (ids are causal in a lowered Program).
double peak_of(const std::vector<Task>& tasks, const std::vector<SpanNs>& times) {
  std::vector<int> ids;
  for (const Task& t : tasks)
    if (t.kind == Kind::kAlloc || t.kind == Kind::kFree) ids.push_back(t.id);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) {
    return times[static_cast<size_t>(a)].start < times[static_cast<size_t>(b)].start;
  });
  double now = 0, peak = 0;
  for (int id : ids) {
    const Task& t = tasks[static_cast<size_t>(id)];
    now += t.kind == Kind::kAlloc ? t.bytes : -t.bytes;
    peak = std::max(peak, now);
  }
  return peak;
}

}  // namespace

HostRun run_on_host(const Plan& plan, const std::vector<std::vector<std::int64_t>>& durations_ns,
                    Threading threading) {
  if (durations_ns.size() != plan.ranks.size())
    throw ProgramError("run_on_host: " + std::to_string(durations_ns.size()) +
                       " ranks of durations for " + std::to_string(plan.ranks.size()) + " ranks");
  if (kStreams.size() != 9) throw ProgramError("run_on_host: internal: stream count changed");
  VirtualDevice dev(plan, durations_ns);
  std::vector<int> ranks;
  for (const ExecRank& er : plan.ranks) ranks.push_back(er.rank);
  run_ranks(plan, ranks, dev, threading);
  HostRun run = dev.take();
  for (size_t r = 0; r < plan.ranks.size(); ++r)
    run.peak_bytes.push_back(peak_of(plan.tasks_of(static_cast<int>(r)), run.times[r]));
  return run;
}

std::vector<std::vector<std::int64_t>> uniform_durations(const Plan& plan, std::int64_t ns) {
  std::vector<std::vector<std::int64_t>> d(plan.ranks.size());
  for (size_t r = 0; r < plan.ranks.size(); ++r)
    for (const Task& t : plan.tasks_of(static_cast<int>(r)))
      d[r].push_back(t.kind == Kind::kAlloc || t.kind == Kind::kFree ? 0 : ns);
  return d;
}

Recorded to_recorded(const HostRun& run) {
  Recorded rec;
  rec.peak_bytes = run.peak_bytes;
  for (const auto& rank : run.times) {
    rec.times.emplace_back();
    for (const SpanNs& s : rank)
      rec.times.back().push_back(
          {static_cast<double>(s.start) * 1e-9, static_cast<double>(s.end) * 1e-9});
  }
  return rec;
}

}  // namespace stepcast::exec
