// Cross-rank matching of a Program's group operations (matching.h): global ranks to simulated
// ranks, the participants of each group, collectives met per group, sends met with recvs.
#include "sim/program/matching.h"

#include <algorithm>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace stepcast {

std::string task_ref(const RankProgram& rp, int id) {
  const Task& t = rp.tasks[static_cast<size_t>(id)];
  return fmt::format("'{}' (rank {} task {})", t.label.empty() ? task_kind_name(t.kind) : t.label,
                     rp.rank, id);
}

namespace {

struct P2p {
  int src, dst;
  std::int64_t tag;
  int task;  // on src for sends, on dst for recvs
  bool operator<(const P2p& o) const {
    return std::tie(src, dst, tag, task) < std::tie(o.src, o.dst, o.tag, o.task);
  }
  bool same_key(const P2p& o) const { return src == o.src && dst == o.dst && tag == o.tag; }
  bool key_less(const P2p& o) const {
    return std::tie(src, dst, tag) < std::tie(o.src, o.dst, o.tag);
  }
};

struct Coll {
  int rank, task;
};

// Ids of the collectives (first) and of the sends/recvs (second) of one task list.
using CommIds = std::pair<std::vector<int>, std::vector<int>>;

void set_instance(RendezvousMatching& m, int r, int id, int inst) {
  m.instance_of[static_cast<size_t>(m.task_offset[static_cast<size_t>(r)] + id)] = inst;
}

// The simulated rank standing for global rank `global`, -1 if none.
int sim_of(const RendezvousMatching& m, int global) {
  const int world = static_cast<int>(m.sim_of_global.size());
  return global >= 0 && global < world ? m.sim_of_global[static_cast<size_t>(global)] : -1;
}

// Global rank -> simulated rank.
void map_global_ranks(const Program& p, RendezvousMatching& m) {
  const int nranks = static_cast<int>(p.ranks.size());
  auto& problems = m.problems;
  int world = p.world_size;
  for (const RankProgram& rp : p.ranks) {
    world = std::max(world, rp.rank + 1);
    for (int g : rp.stands_for) world = std::max(world, g + 1);
  }
  for (const Group& g : p.groups)
    for (int r : g.ranks) world = std::max(world, r + 1);
  m.sim_of_global.assign(static_cast<size_t>(world), -1);
  for (int r = 0; r < nranks; ++r) {
    const RankProgram& rp = p.ranks[static_cast<size_t>(r)];
    std::vector<int> own = rp.stands_for.empty() ? std::vector<int>{rp.rank} : rp.stands_for;
    for (int g : own) {
      if (g < 0) {
        problems.push_back(fmt::format("rank {}: stands_for lists negative rank {}", rp.rank, g));
        continue;
      }
      int& slot = m.sim_of_global[static_cast<size_t>(g)];
      if (slot >= 0 && slot != r)
        problems.push_back(fmt::format("global rank {} is stood for by simulated ranks {} and {}",
                                       g, p.ranks[static_cast<size_t>(slot)].rank, rp.rank));
      else
        slot = r;
    }
  }
}

// Participants of each group: distinct simulated ranks of its members, ascending; group_ok:
// every member is stood for.
void find_participants(const Program& p, RendezvousMatching& m,
                       std::vector<std::vector<int>>& participants, std::vector<bool>& group_ok) {
  auto& problems = m.problems;
  const int ngroups = static_cast<int>(p.groups.size());
  participants.assign(static_cast<size_t>(ngroups), {});
  group_ok.assign(static_cast<size_t>(ngroups), true);
  for (int gi = 0; gi < ngroups; ++gi) {
    const Group& g = p.groups[static_cast<size_t>(gi)];
    if (g.id != gi)
      problems.push_back(
          fmt::format("group at index {} has id {}; ids must equal the index", gi, g.id));
    auto& part = participants[static_cast<size_t>(gi)];
    for (int member : g.ranks) {
      int s = sim_of(m, member);
      if (s < 0) {
        group_ok[static_cast<size_t>(gi)] = false;
        continue;
      }
      part.push_back(s);
    }
    std::sort(part.begin(), part.end());
    part.erase(std::unique(part.begin(), part.end()), part.end());
  }
}

// Ids of the collectives and sends/recvs of each distinct task list (ranks sharing a
// list, program.h, are scanned once): the passes below visit only those.
void find_comm(const Program& p, std::unordered_map<const Task*, CommIds>& comm_of_list,
               std::vector<const CommIds*>& comm) {
  const int nranks = static_cast<int>(p.ranks.size());
  comm.assign(static_cast<size_t>(nranks), nullptr);
  for (int r = 0; r < nranks; ++r) {
    const RankProgram& rp = p.ranks[static_cast<size_t>(r)];
    if (rp.tasks.empty()) continue;
    auto [it, fresh] = comm_of_list.try_emplace(&rp.tasks[0]);
    if (fresh)
      for (size_t i = 0; i < rp.tasks.size(); ++i) {
        const TaskKind k = rp.tasks[i].kind;
        if (k == TaskKind::kCollective) it->second.first.push_back(static_cast<int>(i));
        if (k == TaskKind::kSend || k == TaskKind::kRecv)
          it->second.second.push_back(static_cast<int>(i));
      }
    comm[static_cast<size_t>(r)] = &it->second;
  }
}

// Collectives bucketed by group (counting sort), keeping (rank, task id) order inside a
// group: then each participant's collectives on the group are one contiguous run. O(tasks).
// Fills per_group (bucket offsets) and by_group (the collectives, bucket after bucket).
void bucket_collectives(const Program& p, RendezvousMatching& m,
                        const std::vector<std::vector<int>>& participants,
                        const std::vector<const CommIds*>& comm, std::vector<int>& per_group,
                        std::vector<Coll>& by_group) {
  const int nranks = static_cast<int>(p.ranks.size());
  const int ngroups = static_cast<int>(p.groups.size());
  auto& problems = m.problems;
  per_group.assign(static_cast<size_t>(ngroups) + 1, 0);
  // Scratch kept per thread so that repeated runs do not fault in fresh pages.
  static thread_local std::vector<std::pair<int, Coll>> found;  // (group, member)
  found.clear();
  for (int r = 0; r < nranks; ++r) {
    const RankProgram& rp = p.ranks[static_cast<size_t>(r)];
    if (!comm[static_cast<size_t>(r)]) continue;
    for (const int id : comm[static_cast<size_t>(r)]->first) {
      const Task& t = rp.tasks[static_cast<size_t>(id)];
      const int group = rp.group_of(t);
      if (group < 0 || group >= ngroups) {
        problems.push_back(
            fmt::format("collective {} names group {}, which does not exist "
                        "({} groups)",
                        task_ref(rp, t.id), group, ngroups));
        continue;
      }
      const auto& part = participants[static_cast<size_t>(group)];
      if (!std::binary_search(part.begin(), part.end(), r)) {
        problems.push_back(
            fmt::format("collective {} names group {}, but rank {} stands for no "
                        "member of it",
                        task_ref(rp, t.id), group, rp.rank));
        continue;
      }
      found.push_back({group, {r, t.id}});
      ++per_group[static_cast<size_t>(group) + 1];
    }
  }
  for (int gi = 0; gi < ngroups; ++gi)
    per_group[static_cast<size_t>(gi) + 1] += per_group[static_cast<size_t>(gi)];
  by_group.resize(found.size());
  size_t p2p_tasks = 0;
  for (const auto* c : comm)
    if (c) p2p_tasks += c->second.size();
  m.members.reserve(found.size() + p2p_tasks);
  {
    std::vector<int> fill(per_group.begin(), per_group.end() - 1);
    for (const auto& [g, c] : found)
      by_group[static_cast<size_t>(fill[static_cast<size_t>(g)]++)] = c;
  }
}

// The collectives of group gi, by_group[b, e): the k-th of each participant meet.
void match_group(const Program& p, RendezvousMatching& m, int gi, const std::vector<int>& part,
                 bool group_ok, const std::vector<Coll>& by_group, int b, int e) {
  auto& problems = m.problems;
  const Group& grp = p.groups[static_cast<size_t>(gi)];
  if (!group_ok) {
    for (int member : grp.ranks)
      if (sim_of(m, member) < 0)
        problems.push_back(
            fmt::format("group {} ({}) has member {}, which no simulated rank "
                        "stands for",
                        gi, group_kind_name(grp.kind), member));
    return;
  }
  // Run of each participant: [run_begin[j], run_begin[j] + count).
  std::vector<int> run_begin(part.size()), run_len(part.size(), 0);
  for (size_t j = 0, k = static_cast<size_t>(b); j < part.size(); ++j) {
    run_begin[j] = static_cast<int>(k);
    while (k < static_cast<size_t>(e) && by_group[k].rank == part[j]) {
      ++k;
      ++run_len[j];
    }
  }
  const int count = run_len[0];
  if (std::any_of(run_len.begin(), run_len.end(), [&](int c) { return c != count; })) {
    std::string counts;
    for (size_t j = 0; j < part.size(); ++j) {
      const RankProgram& rp = p.ranks[static_cast<size_t>(part[j])];
      counts += fmt::format("{}rank {}: {}", counts.empty() ? "" : ", ", rp.rank, run_len[j]);
      if (run_len[j] > 0)
        counts += fmt::format(
            " (last {})",
            task_ref(rp, by_group[static_cast<size_t>(run_begin[j] + run_len[j] - 1)].task));
    }
    problems.push_back(
        fmt::format("group {} ({}): members issue different numbers of "
                    "collectives, so some never meet: {}",
                    gi, group_kind_name(grp.kind), counts));
    return;
  }
  for (int k = 0; k < count; ++k) {
    const int inst = m.instance_count();
    for (size_t j = 0; j < part.size(); ++j) {
      const Coll& c = by_group[static_cast<size_t>(run_begin[j] + k)];
      m.members.emplace_back(c.rank, c.task);
      set_instance(m, c.rank, c.task, inst);
    }
    m.offsets.push_back(static_cast<int>(m.members.size()));
  }
}

// Sends and recvs keyed by (src sim rank, dst sim rank, tag).
void match_p2p(const Program& p, RendezvousMatching& m, const std::vector<const CommIds*>& comm) {
  const int nranks = static_cast<int>(p.ranks.size());
  auto& problems = m.problems;
  static thread_local std::vector<P2p> sends, recvs;
  sends.clear();
  recvs.clear();
  for (int r = 0; r < nranks; ++r) {
    const RankProgram& rp = p.ranks[static_cast<size_t>(r)];
    if (!comm[static_cast<size_t>(r)]) continue;
    for (const int id : comm[static_cast<size_t>(r)]->second) {
      const Task& t = rp.tasks[static_cast<size_t>(id)];
      const int peer = rp.peer_of(t);
      int other = sim_of(m, peer);
      if (other < 0) {
        problems.push_back(fmt::format("{} {} names peer {}, which no simulated rank stands for",
                                       task_kind_name(t.kind), task_ref(rp, t.id), peer));
        continue;
      }
      if (t.kind == TaskKind::kSend)
        sends.push_back({r, other, t.tag, t.id});
      else
        recvs.push_back({other, r, t.tag, t.id});
    }
  }
  std::sort(sends.begin(), sends.end());
  std::sort(recvs.begin(), recvs.end());
  auto unmatched = [&](const P2p& x, bool is_send) {
    const RankProgram& rp = p.ranks[static_cast<size_t>(is_send ? x.src : x.dst)];
    const RankProgram& other = p.ranks[static_cast<size_t>(is_send ? x.dst : x.src)];
    problems.push_back(fmt::format("{} {} (tag {}, {} rank {}) has no matching {}",
                                   is_send ? "send" : "recv", task_ref(rp, x.task), x.tag,
                                   is_send ? "to" : "from", other.rank, is_send ? "recv" : "send"));
  };
  size_t i = 0, j = 0;
  while (i < sends.size() || j < recvs.size()) {
    if (j == recvs.size() || (i < sends.size() && sends[i].key_less(recvs[j]))) {
      unmatched(sends[i++], true);
      continue;
    }
    if (i == sends.size() || recvs[j].key_less(sends[i])) {
      unmatched(recvs[j++], false);
      continue;
    }
    const P2p& s = sends[i++];
    const P2p& v = recvs[j++];
    const Task& st = p.ranks[static_cast<size_t>(s.src)].tasks[static_cast<size_t>(s.task)];
    const Task& vt = p.ranks[static_cast<size_t>(v.dst)].tasks[static_cast<size_t>(v.task)];
    if (st.bytes != vt.bytes)
      problems.push_back(
          fmt::format("send {} carries {} bytes but its recv {} expects {}",
                      task_ref(p.ranks[static_cast<size_t>(s.src)], s.task), st.bytes,
                      task_ref(p.ranks[static_cast<size_t>(v.dst)], v.task), vt.bytes));
    if (s.src == v.dst && st.stream == vt.stream)
      problems.push_back(
          fmt::format("send {} and its recv {} are on the same rank and stream; "
                      "they would wait for each other forever",
                      task_ref(p.ranks[static_cast<size_t>(s.src)], s.task),
                      task_ref(p.ranks[static_cast<size_t>(v.dst)], v.task)));
    int inst = m.instance_count();
    m.members.emplace_back(s.src, s.task);
    m.members.emplace_back(v.dst, v.task);
    set_instance(m, s.src, s.task, inst);
    set_instance(m, v.dst, v.task, inst);
    m.offsets.push_back(static_cast<int>(m.members.size()));
  }
}

}  // namespace

RendezvousMatching match_rendezvous(const Program& p) {
  RendezvousMatching m;
  match_rendezvous(p, m);
  return m;
}

void match_rendezvous(const Program& p, RendezvousMatching& m) {
  m.sim_of_global.clear();
  m.offsets.assign(1, 0);
  m.members.clear();
  m.task_offset.clear();
  m.instance_of.clear();
  m.problems.clear();
  const int nranks = static_cast<int>(p.ranks.size());

  map_global_ranks(p, m);
  m.task_offset.assign(static_cast<size_t>(nranks) + 1, 0);
  for (int r = 0; r < nranks; ++r)
    m.task_offset[static_cast<size_t>(r) + 1] =
        m.task_offset[static_cast<size_t>(r)] +
        static_cast<int>(p.ranks[static_cast<size_t>(r)].tasks.size());
  m.instance_of.assign(static_cast<size_t>(m.task_offset.back()), -1);

  std::vector<std::vector<int>> participants;
  std::vector<bool> group_ok;
  find_participants(p, m, participants, group_ok);

  std::unordered_map<const Task*, CommIds> comm_of_list;
  std::vector<const CommIds*> comm;
  find_comm(p, comm_of_list, comm);
  std::vector<int> per_group;
  // Scratch kept per thread so that repeated runs do not fault in fresh pages.
  static thread_local std::vector<Coll> by_group;
  bucket_collectives(p, m, participants, comm, per_group, by_group);
  for (int gi = 0; gi < static_cast<int>(p.groups.size()); ++gi) {
    const int b = per_group[static_cast<size_t>(gi)], e = per_group[static_cast<size_t>(gi) + 1];
    if (b == e) continue;
    match_group(p, m, gi, participants[static_cast<size_t>(gi)], group_ok[static_cast<size_t>(gi)],
                by_group, b, e);
  }

  match_p2p(p, m, comm);
}

}  // namespace stepcast
