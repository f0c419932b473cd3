// Test helpers: build Programs and their Durations by hand, and random symmetric Programs
// (N identical replicas, optionally folded onto one simulated rank) for property tests.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sim/engine/engine.h"
#include "sim/program/program.h"

namespace stepcast::testing {

struct Builder {
  Program p;
  Durations d;

  // Adds a simulated rank; `stands_for` empty means {global}.
  int rank(int global, std::vector<int> stands_for = {}, int pp_stage = 0) {
    RankProgram rp;
    rp.rank = global;
    rp.pp_stage = pp_stage;
    rp.stands_for = stands_for.empty() ? std::vector<int>{global} : std::move(stands_for);
    p.ranks.push_back(std::move(rp));
    d.emplace_back();
    p.world_size = std::max(p.world_size, global + 1);
    for (int g : p.ranks.back().stands_for) p.world_size = std::max(p.world_size, g + 1);
    return static_cast<int>(p.ranks.size()) - 1;
  }
  int group(GroupKind kind, std::vector<int> members) {
    Group g;
    g.id = static_cast<int>(p.groups.size());
    g.kind = kind;
    g.ranks = std::move(members);
    p.groups.push_back(std::move(g));
    return p.groups.back().id;
  }
  int add(int r, Task t, TimeNs dur) {
    d[static_cast<size_t>(r)].push_back(dur);
    return add_task(p.ranks[static_cast<size_t>(r)], std::move(t));
  }
  int compute(int r, const std::string& label, TimeNs dur, std::vector<int> deps = {},
              Category cat = Category::kCompute, StreamKind s = StreamKind::kCompute) {
    Task t;
    t.kind = TaskKind::kGemm;
    t.stream = s;
    t.category = cat;
    t.label = label;
    t.deps = std::move(deps);
    t.gemm = {64, 64, 64, 1, DType::kBf16, GemmLayout::kNN};
    t.flops = 2.0 * 64 * 64 * 64;
    return add(r, std::move(t), dur);
  }
  int coll(int r, const std::string& label, int group_id, TimeNs dur, std::vector<int> deps = {},
           StreamKind s = StreamKind::kTp, Category cat = Category::kTpComm) {
    Task t;
    t.kind = TaskKind::kCollective;
    t.stream = s;
    t.category = cat;
    t.label = label;
    t.group = group_id;
    t.bytes = 1 << 20;
    t.deps = std::move(deps);
    return add(r, std::move(t), dur);
  }
  int p2p(int r, bool send, const std::string& label, int peer, std::int64_t tag, TimeNs dur,
          std::vector<int> deps = {}, double bytes = 4096) {
    Task t;
    t.kind = send ? TaskKind::kSend : TaskKind::kRecv;
    t.stream = send ? StreamKind::kPpSend : StreamKind::kPpRecv;
    t.category = Category::kPpComm;
    t.label = label;
    t.peer = peer;
    t.tag = tag;
    t.bytes = bytes;
    t.deps = std::move(deps);
    return add(r, std::move(t), dur);
  }
  int mem(int r, bool alloc, const std::string& what, double bytes, std::vector<int> deps = {},
          StreamKind s = StreamKind::kCompute) {
    Task t;
    t.kind = alloc ? TaskKind::kAlloc : TaskKind::kFree;
    t.stream = s;
    t.label = std::string(alloc ? "alloc." : "free.") + what;
    t.what = what;
    t.bytes = bytes;
    t.deps = std::move(deps);
    return add(r, std::move(t), 0);
  }
};

// One replica's task list, generated once and stamped onto every replica. Task j's deps are
// earlier ids; a send at id s is always followed by its recv at s + 1 (no dep between them),
// and collectives are issued at the same id on every replica, so the program cannot deadlock
// (induction over ids: every partner of task x has id x or x + 1 and waits only on ids < x).
struct TemplateTask {
  enum Kind { kCompute, kCollWorld, kCollPair, kSend, kRecv, kAlloc, kFree } kind;
  TimeNs dur;
  std::vector<int> deps;
  Category cat;
  double bytes;
};

inline std::vector<TemplateTask> random_template(std::mt19937_64& rng, int ntasks) {
  std::vector<TemplateTask> tt;
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<TimeNs> dur(0, 2000);
  std::vector<int> allocs;  // ids of allocs not yet freed
  while (static_cast<int>(tt.size()) < ntasks) {
    const int id = static_cast<int>(tt.size());
    std::vector<int> deps;
    if (id > 0) {
      std::uniform_int_distribution<int> nd(0, 2), pick(0, id - 1);
      for (int k = nd(rng); k > 0; --k) deps.push_back(pick(rng));
      std::sort(deps.begin(), deps.end());
      deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    }
    const int k = kind(rng);
    const Category cats[] = {Category::kCompute, Category::kRecompute, Category::kOptimizer};
    if (k <= 3) {
      tt.push_back({TemplateTask::kCompute, dur(rng), deps, cats[k % 3], 0});
    } else if (k == 4) {
      tt.push_back({TemplateTask::kCollWorld, dur(rng), deps, Category::kDpComm, 0});
    } else if (k == 5) {
      tt.push_back({TemplateTask::kCollPair, dur(rng), deps, Category::kTpComm, 0});
    } else if (k == 6 || k == 7) {
      const TimeNs d = dur(rng);
      const double bytes = 1024.0 * (1 + id);
      tt.push_back({TemplateTask::kSend, d, deps, Category::kPpComm, bytes});
      // The recv may not depend on its own send (see above): drop deps on id itself.
      tt.push_back({TemplateTask::kRecv, dur(rng), deps, Category::kPpComm, bytes});
    } else if (k == 8) {
      tt.push_back({TemplateTask::kAlloc, 0, deps, Category::kCompute, 1000.0 * (1 + id % 7)});
      allocs.push_back(id);
    } else if (!allocs.empty()) {
      const int a = allocs.back();
      allocs.pop_back();
      deps.push_back(a);
      tt.push_back(
          {TemplateTask::kFree, 0, deps, Category::kCompute, tt[static_cast<size_t>(a)].bytes});
    }
  }
  tt.resize(static_cast<size_t>(ntasks));
  // A truncated trailing send would lose its recv: turn it into compute.
  if (!tt.empty() && tt.back().kind == TemplateTask::kSend) tt.back().kind = TemplateTask::kCompute;
  return tt;
}

// Stamps the template onto `replicas` global ranks (even count: pair groups {2i, 2i+1}).
// Send/recv form a ring: replica i sends to i+1 and receives from i-1 with the same tag.
// folded: one simulated rank standing for every replica. `jitter` (full fidelity only) adds
// per-rank duration noise, which breaks symmetry but not the structure.
inline Builder build_replicated(const std::vector<TemplateTask>& tt, int replicas, bool folded,
                                std::mt19937_64* jitter = nullptr) {
  Builder b;
  const int world = b.group(GroupKind::kWorld, [&] {
    std::vector<int> all;
    for (int i = 0; i < replicas; ++i) all.push_back(i);
    return all;
  }());
  std::vector<int> pair_group(static_cast<size_t>(replicas));
  for (int i = 0; i < replicas; i += 2) {
    std::vector<int> members{i};
    if (i + 1 < replicas) members.push_back(i + 1);
    const int g = b.group(GroupKind::kTp, members);
    for (int m : members) pair_group[static_cast<size_t>(m)] = g;
  }
  std::vector<int> all;
  for (int i = 0; i < replicas; ++i) all.push_back(i);
  const int sims = folded ? 1 : replicas;
  for (int s = 0; s < sims; ++s) {
    const int r = folded ? b.rank(0, all) : b.rank(s);
    const int me = s;
    for (size_t j = 0; j < tt.size(); ++j) {
      const TemplateTask& x = tt[j];
      TimeNs dur = x.dur;
      if (jitter) dur += std::uniform_int_distribution<TimeNs>(0, 300)(*jitter);
      std::string label = std::to_string(j);
      label.insert(label.begin(), 't');
      switch (x.kind) {
        case TemplateTask::kCompute: {
          const int id = b.compute(r, label, dur, x.deps, x.cat);
          // Optimizer-category compute is memory-bound (matters for HBM contention only).
          if (x.cat == Category::kOptimizer)
            b.p.ranks[static_cast<size_t>(r)].tasks.mut(static_cast<size_t>(id)).kind =
                TaskKind::kMemoryBound;
          break;
        }
        case TemplateTask::kCollWorld:
          b.coll(r, label, world, dur, x.deps, StreamKind::kDp, Category::kDpComm);
          break;
        case TemplateTask::kCollPair:
          b.coll(r, label, pair_group[static_cast<size_t>(me)], dur, x.deps);
          break;
        case TemplateTask::kSend:
          b.p2p(r, true, label, (me + 1) % replicas, static_cast<std::int64_t>(j), dur, x.deps,
                x.bytes);
          break;
        case TemplateTask::kRecv:
          b.p2p(r, false, label, (me + replicas - 1) % replicas, static_cast<std::int64_t>(j - 1),
                dur, x.deps, x.bytes);
          break;
        case TemplateTask::kAlloc:
          b.mem(r, true, std::string("buf").append(std::to_string(j)), x.bytes, x.deps);
          break;
        case TemplateTask::kFree: {
          const int a = x.deps.back();
          b.mem(r, false, std::string("buf").append(std::to_string(a)), x.bytes, x.deps);
          break;
        }
      }
    }
  }
  return b;
}

}  // namespace stepcast::testing
