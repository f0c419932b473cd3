// Expansion, matching, issue order and placement of a Program (plan.h).
#include "plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace stepcast::exec {

namespace {

std::string ranks_text(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string group_text(const Program& p, int g) {
  const Group& gr = p.groups[static_cast<size_t>(g)];
  return "group " + std::to_string(g) + " (" + gr.kind + " " + ranks_text(gr.ranks) + ")";
}

int index_in(const std::vector<int>& v, int x) {
  auto it = std::find(v.begin(), v.end(), x);
  return it == v.end() ? -1 : static_cast<int>(it - v.begin());
}

[[noreturn]] void fail(const Program& p, const std::string& what,
                       const std::vector<std::string>& problems) {
  std::string msg = p.file + ": " + what + " (" + std::to_string(problems.size()) + " problem" +
                    (problems.size() > 1 ? "s" : "") + "):";
  for (size_t i = 0; i < problems.size() && i < 12; ++i) msg += "\n  " + problems[i];
  if (problems.size() > 12) msg += "\n  ... and " + std::to_string(problems.size() - 12) + " more";
  throw ProgramError(msg);
}

// The group of `kind` that contains global rank `a`, -1 if none.
int group_of_kind_with(const Program& p, const std::string& kind, int a) {
  for (size_t g = 0; g < p.groups.size(); ++g)
    if (p.groups[g].kind == kind && index_in(p.groups[g].ranks, a) >= 0) return static_cast<int>(g);
  return -1;
}

// Rank `a` (standing for simulated rank index `si`) translated: groups and peers (header).
void expand_rank(const Program& p, const std::vector<int>& sim_of, int si, int a, ExecRank& er,
                 std::vector<std::string>& problems) {
  const SimRank& sr = p.ranks[static_cast<size_t>(si)];
  er.rank = a;
  er.sim = si;
  er.pp_stage = sr.pp_stage;
  er.group.assign(sr.tasks.size(), -1);
  er.peer.assign(sr.tasks.size(), -1);
  for (const Task& t : sr.tasks) {
    const size_t i = static_cast<size_t>(t.id);
    if (t.kind == Kind::kCollective) {
      const Group& g = p.groups[static_cast<size_t>(t.group)];
      er.group[i] =
          a == sr.rank || index_in(g.ranks, a) >= 0 ? t.group : group_of_kind_with(p, g.kind, a);
      if (er.group[i] < 0)
        problems.push_back(task_where(p, si, t.id) + ": folded: rank " + std::to_string(a) +
                           " stands for rank " + std::to_string(sr.rank) + " but no " + g.kind +
                           " group contains it; lower with --fidelity full");
    } else if (t.kind == Kind::kSend || t.kind == Kind::kRecv) {
      if (a == sr.rank) {
        er.peer[i] = t.peer;
        continue;
      }
      // The peer's simulated rank's copy at a's position in R's stands_for (header).
      const int q = sim_of[static_cast<size_t>(t.peer)];
      const auto& mine = sr.stands_for;
      const auto& theirs = p.ranks[static_cast<size_t>(q)].stands_for;
      if (mine.size() != theirs.size() || index_in(theirs, t.peer) != index_in(mine, sr.rank)) {
        problems.push_back(
            task_where(p, si, t.id) + ": folded: cannot tell rank " + std::to_string(a) +
            "'s peer for peer " + std::to_string(t.peer) + " of rank " + std::to_string(sr.rank) +
            " (simulated ranks " + std::to_string(sr.rank) + " and " +
            std::to_string(p.ranks[static_cast<size_t>(q)].rank) +
            " stand for different numbers of ranks, or the peer sits elsewhere in its list); lower "
            "with --fidelity full");
        continue;
      }
      er.peer[i] = theirs[static_cast<size_t>(index_in(mine, a))];
    }
  }
}

void match(const Program& p, Plan& plan) {
  std::vector<std::string> problems;
  const int world = plan.world_size();
  plan.instance.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    plan.instance[static_cast<size_t>(r)].assign(plan.tasks_of(r).size(), -1);
  auto where = [&](const RankTask& rt) {
    const ExecRank& er = plan.ranks[static_cast<size_t>(rt.rank)];
    return task_where(p, er.sim, rt.task) +
           (plan.mode == PlanMode::kExpanded && rt.rank != p.ranks[static_cast<size_t>(er.sim)].rank
                ? " run as rank " + std::to_string(rt.rank)
                : "");
  };
  // Collectives: per group, per member, in id order.
  plan.collectives_per_group.assign(p.groups.size(), 0);
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const auto& members = plan.group_members[g];
    std::vector<std::vector<int>> lists(members.size());
    for (size_t m = 0; m < members.size(); ++m) {
      const ExecRank& er = plan.ranks[static_cast<size_t>(members[m])];
      for (size_t i = 0; i < er.group.size(); ++i)
        if (er.group[i] == static_cast<int>(g)) lists[m].push_back(static_cast<int>(i));
    }
    size_t count = lists[0].size();
    bool same = true;
    for (size_t m = 1; m < members.size(); ++m) same = same && lists[m].size() == count;
    if (!same) {
      std::string counts;
      for (size_t m = 0; m < members.size(); ++m)
        counts += (m ? ", " : "") + std::string("rank ") + std::to_string(members[m]) + ": " +
                  std::to_string(lists[m].size());
      problems.push_back(group_text(p, static_cast<int>(g)) +
                         ": members issue different numbers of collectives on it (" + counts + ")");
      continue;
    }
    plan.collectives_per_group[g] = static_cast<int>(count);
    for (size_t k = 0; k < count; ++k) {
      Rendezvous rv;
      rv.group = static_cast<int>(g);
      for (size_t m = 0; m < members.size(); ++m) rv.members.push_back({members[m], lists[m][k]});
      const Task& first = plan.task(rv.members[0]);
      for (const RankTask& rt : rv.members) {
        const Task& t = plan.task(rt);
        if (t.op != first.op || t.bytes != first.bytes)
          problems.push_back(where(rt) + ": collective #" + std::to_string(k) + " on " +
                             group_text(p, static_cast<int>(g)) + " is " +
                             kCollOps[static_cast<size_t>(t.op)] + " of " +
                             std::to_string(t.bytes) + " bytes, but on rank " +
                             std::to_string(rv.members[0].rank) + " (" + first.label + ") " +
                             kCollOps[static_cast<size_t>(first.op)] + " of " +
                             std::to_string(first.bytes) + " bytes");
      }
      const int idx = static_cast<int>(plan.rendezvous.size());
      for (const RankTask& rt : rv.members)
        plan.instance[static_cast<size_t>(rt.rank)][static_cast<size_t>(rt.task)] = idx;
      plan.rendezvous.push_back(std::move(rv));
    }
  }
  // Send/recv: (src, dst, tag) -> sends on src and recvs on dst, in id order.
  std::map<std::tuple<int, int, std::int64_t>, std::pair<std::vector<int>, std::vector<int>>> p2p;
  for (int r = 0; r < world; ++r) {
    const auto& tasks = plan.tasks_of(r);
    const ExecRank& er = plan.ranks[static_cast<size_t>(r)];
    for (const Task& t : tasks) {
      const int peer = er.peer[static_cast<size_t>(t.id)];
      if (t.kind == Kind::kSend) p2p[{r, peer, t.tag}].first.push_back(t.id);
      if (t.kind == Kind::kRecv) p2p[{peer, r, t.tag}].second.push_back(t.id);
    }
  }
  for (const auto& [key, lists] : p2p) {
    const auto& [src, dst, tag] = key;
    const auto& [sends, recvs] = lists;
    for (size_t k = 0; k < std::max(sends.size(), recvs.size()); ++k) {
      if (k >= recvs.size()) {
        problems.push_back(where({src, sends[k]}) + ": send to rank " + std::to_string(dst) +
                           " tag " + std::to_string(tag) + " has no matching recv on rank " +
                           std::to_string(dst));
        continue;
      }
      if (k >= sends.size()) {
        problems.push_back(where({dst, recvs[k]}) + ": recv from rank " + std::to_string(src) +
                           " tag " + std::to_string(tag) + " has no matching send on rank " +
                           std::to_string(src));
        continue;
      }
      Rendezvous rv;
      rv.members = {{src, sends[k]}, {dst, recvs[k]}};
      auto pair = std::find_if(plan.pairs.begin(), plan.pairs.end(),
                               [&](const P2pPair& q) { return q.src == src && q.dst == dst; });
      rv.pair = static_cast<int>(pair - plan.pairs.begin());
      if (pair == plan.pairs.end()) plan.pairs.push_back({src, dst});
      if (plan.task(rv.members[0]).bytes != plan.task(rv.members[1]).bytes)
        problems.push_back(where(rv.members[0]) + ": sends " +
                           std::to_string(plan.task(rv.members[0]).bytes) + " bytes but its recv " +
                           where(rv.members[1]) + " expects " +
                           std::to_string(plan.task(rv.members[1]).bytes));
      const int idx = static_cast<int>(plan.rendezvous.size());
      for (const RankTask& rt : rv.members)
        plan.instance[static_cast<size_t>(rt.rank)][static_cast<size_t>(rt.task)] = idx;
      plan.rendezvous.push_back(std::move(rv));
    }
  }
  if (!problems.empty()) fail(p, "collectives and sends/recvs do not match", problems);
}

// The issue order (header): advances every stream as far as it can, repeatedly.
void order(const Program& p, Plan& plan) {
  const int world = plan.world_size();
  const size_t ns = kStreams.size();
  std::vector<std::vector<std::vector<int>>> lists(static_cast<size_t>(world),
                                                   std::vector<std::vector<int>>(ns));
  std::vector<std::vector<char>> issued(static_cast<size_t>(world));
  size_t total = 0;
  for (int r = 0; r < world; ++r) {
    const auto& tasks = plan.tasks_of(r);
    issued[static_cast<size_t>(r)].assign(tasks.size(), 0);
    for (const Task& t : tasks)
      lists[static_cast<size_t>(r)][static_cast<size_t>(t.stream)].push_back(t.id);
    total += tasks.size();
  }
  std::vector<std::vector<size_t>> head(static_cast<size_t>(world), std::vector<size_t>(ns, 0));
  std::vector<int> arrived(plan.rendezvous.size(), 0);
  std::vector<std::vector<char>> at_head(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    at_head[static_cast<size_t>(r)].assign(issued[static_cast<size_t>(r)].size(), 0);
  size_t done = 0;
  auto deps_issued = [&](int r, const Task& t) {
    for (int d : t.deps)
      if (!issued[static_cast<size_t>(r)][static_cast<size_t>(d)]) return false;
    return true;
  };
  auto issue = [&](const RankTask& rt) {
    issued[static_cast<size_t>(rt.rank)][static_cast<size_t>(rt.task)] = 1;
    ++head[static_cast<size_t>(rt.rank)][static_cast<size_t>(plan.task(rt).stream)];
    ++done;
  };
  while (done < total) {
    bool progress = false;
    for (int r = 0; r < world; ++r) {
      for (size_t s = 0; s < ns; ++s) {
        const auto& list = lists[static_cast<size_t>(r)][s];
        while (head[static_cast<size_t>(r)][s] < list.size()) {
          const int id = list[head[static_cast<size_t>(r)][s]];
          const Task& t = plan.tasks_of(r)[static_cast<size_t>(id)];
          if (!deps_issued(r, t)) break;
          const int inst = plan.instance[static_cast<size_t>(r)][static_cast<size_t>(id)];
          if (inst < 0) {
            plan.steps.push_back({-1, {{r, id}}});
            issue({r, id});
            progress = true;
            continue;
          }
          char& here = at_head[static_cast<size_t>(r)][static_cast<size_t>(id)];
          if (!here) {
            here = 1;
            ++arrived[static_cast<size_t>(inst)];
          }
          const Rendezvous& rv = plan.rendezvous[static_cast<size_t>(inst)];
          if (arrived[static_cast<size_t>(inst)] < static_cast<int>(rv.members.size())) break;
          plan.steps.push_back({inst, rv.members});
          for (const RankTask& m : rv.members) issue(m);
          progress = true;
        }
      }
    }
    if (progress) continue;
    // Deadlock: name each stuck stream head and what it waits for.
    std::vector<std::string> stuck;
    for (int r = 0; r < world; ++r)
      for (size_t s = 0; s < ns; ++s) {
        const auto& list = lists[static_cast<size_t>(r)][s];
        if (head[static_cast<size_t>(r)][s] >= list.size()) continue;
        const int id = list[head[static_cast<size_t>(r)][s]];
        const Task& t = plan.tasks_of(r)[static_cast<size_t>(id)];
        std::string why;
        for (int d : t.deps)
          if (!issued[static_cast<size_t>(r)][static_cast<size_t>(d)])
            why += (why.empty() ? "dep " : ", dep ") + std::to_string(d) + " ('" +
                   plan.tasks_of(r)[static_cast<size_t>(d)].label + "' on stream " +
                   kStreams[static_cast<size_t>(plan.tasks_of(r)[static_cast<size_t>(d)].stream)] +
                   ")";
        const int inst = plan.instance[static_cast<size_t>(r)][static_cast<size_t>(id)];
        if (why.empty() && inst >= 0)
          for (const RankTask& m : plan.rendezvous[static_cast<size_t>(inst)].members)
            if (!at_head[static_cast<size_t>(m.rank)][static_cast<size_t>(m.task)])
              why += (why.empty() ? "" : ", ") +
                     std::string(t.kind == Kind::kCollective ? "group member" : "peer") + " rank " +
                     std::to_string(m.rank) + " task " + std::to_string(m.task) + " ('" +
                     plan.task(m).label + "'), not yet at the head of its stream";
        stuck.push_back("rank " + std::to_string(r) + " stream " + kStreams[s] + ": " +
                        task_where(p, plan.ranks[static_cast<size_t>(r)].sim, id) + " waits for " +
                        why);
      }
    fail(p,
         "would deadlock: " + std::to_string(total - done) + " of " + std::to_string(total) +
             " tasks can never start; stuck stream heads",
         stuck);
  }
}

// Simulated mode (header): the simulated ranks as they are; groups' participants and peers
// translated to simulated indices as the engine does (sim/program/matching.cc).
void simulated_ranks(const Program& p, const std::vector<int>& sim_of, Plan& plan) {
  plan.ranks.resize(p.ranks.size());
  for (size_t si = 0; si < p.ranks.size(); ++si) {
    const SimRank& sr = p.ranks[si];
    ExecRank& er = plan.ranks[si];
    er.rank = static_cast<int>(si);
    er.sim = static_cast<int>(si);
    er.pp_stage = sr.pp_stage;
    er.group.assign(sr.tasks.size(), -1);
    er.peer.assign(sr.tasks.size(), -1);
    for (const Task& t : sr.tasks) {
      if (t.kind == Kind::kCollective) er.group[static_cast<size_t>(t.id)] = t.group;
      if (t.kind == Kind::kSend || t.kind == Kind::kRecv)
        er.peer[static_cast<size_t>(t.id)] = sim_of[static_cast<size_t>(t.peer)];
    }
  }
  for (const Group& g : p.groups) {
    std::vector<int> members;
    for (int a : g.ranks)
      if (index_in(members, sim_of[static_cast<size_t>(a)]) < 0)
        members.push_back(sim_of[static_cast<size_t>(a)]);
    plan.group_members.push_back(std::move(members));
  }
}

}  // namespace

Plan make_plan(const Program& p, PlanMode mode) {
  Plan plan;
  plan.program = &p;
  plan.mode = mode;
  std::vector<std::string> problems;
  std::vector<int> sim_of(static_cast<size_t>(p.world_size), 0);
  for (size_t si = 0; si < p.ranks.size(); ++si)
    for (int a : p.ranks[si].stands_for) sim_of[static_cast<size_t>(a)] = static_cast<int>(si);
  if (mode == PlanMode::kSimulated) {
    simulated_ranks(p, sim_of, plan);
    match(p, plan);
    order(p, plan);
    return plan;
  }
  plan.ranks.resize(static_cast<size_t>(p.world_size));
  for (const Group& g : p.groups) plan.group_members.push_back(g.ranks);
  for (size_t si = 0; si < p.ranks.size(); ++si)
    for (int a : p.ranks[si].stands_for)
      expand_rank(p, sim_of, static_cast<int>(si), a, plan.ranks[static_cast<size_t>(a)], problems);
  // One line per (rank, reason): the same translation fails for every task of a kind.
  std::vector<std::string> unique;
  std::set<std::string> seen;
  for (const auto& pr : problems) {
    const auto cut = pr.find(": folded: ");
    if (seen.insert(cut == std::string::npos ? pr : pr.substr(cut)).second) unique.push_back(pr);
  }
  if (!unique.empty()) fail(p, "cannot expand the folded Program", unique);
  match(p, plan);
  order(p, plan);
  return plan;
}

void place_single_process(Plan& plan, int gpus) {
  if (plan.world_size() > gpus)
    throw ProgramError(plan.program->file + ": the Program has " +
                       std::to_string(plan.world_size()) + " ranks but this process sees " +
                       std::to_string(gpus) +
                       " GPU(s): it needs one GPU per rank (run it on more GPUs, across nodes with "
                       "mpirun and a build with -DSTEPCAST_BENCH_MPI=ON, or lower a smaller plan)");
  for (ExecRank& er : plan.ranks) {
    er.process = 0;
    er.device = er.rank;
  }
}

void place_one_per_process(Plan& plan, int processes, int this_process, int node_rank,
                           int node_size, int gpus) {
  const Program& p = *plan.program;
  if (processes != plan.world_size())
    throw ProgramError(p.file + ": the Program has " + std::to_string(plan.world_size()) +
                       " ranks but mpirun started " + std::to_string(processes) +
                       " processes: start exactly one process per rank (mpirun -np " +
                       std::to_string(plan.world_size()) + ")");
  // Megatron's rank order (the lowering's groups, sim/lower/groups.cc): ranks
  // n*gpus_per_node .. (n+1)*gpus_per_node - 1 share node n, rank r on its GPU r % gpus_per_node.
  const int gpn = p.gpus_per_node;
  const std::string launch =
      " (the Program places rank r on node r / gpus_per_node, GPU r % "
      "gpus_per_node, gpus_per_node = " +
      std::to_string(gpn) + "; start it with mpirun --map-by ppr:" + std::to_string(gpn) +
      ":node, ranks filling one node after another)";
  if (node_rank != this_process % gpn || node_size > gpn)
    throw ProgramError(p.file + ": process " + std::to_string(this_process) + " is process " +
                       std::to_string(node_rank) + " of " + std::to_string(node_size) +
                       " on its node, expected " + std::to_string(this_process % gpn) +
                       " of at most " + std::to_string(gpn) + launch);
  if (gpus < std::min(gpn, plan.world_size()))
    throw ProgramError(p.file + ": process " + std::to_string(this_process) + " sees " +
                       std::to_string(gpus) + " GPU(s) but the Program has " + std::to_string(gpn) +
                       " per node" + launch);
  for (ExecRank& er : plan.ranks) {
    er.process = er.rank;
    er.device = er.rank == this_process ? this_process % gpn : -1;
  }
}

std::string describe(const Plan& plan) {
  const Program& p = *plan.program;
  std::string o = "stepcast-exec: " + p.file +
                  (p.scenario_name.empty() ? "" : " (" + p.scenario_name + ")") + "\n";
  o += "  world      " + std::to_string(p.world_size) + " rank(s), one GPU each";
  if (p.ranks.size() != static_cast<size_t>(p.world_size))
    o += " (folded Program: " + std::to_string(p.ranks.size()) + " simulated ranks expanded to " +
         std::to_string(p.world_size) + ")";
  o += "\n";
  std::vector<long long> per_kind(kKindCount, 0);
  size_t total = 0;
  for (const ExecRank& er : plan.ranks) {
    const auto& tasks = plan.tasks_of(er.rank);
    std::vector<int> per_stream(kStreams.size(), 0);
    for (const Task& t : tasks) {
      ++per_stream[static_cast<size_t>(t.stream)];
      ++per_kind[static_cast<size_t>(t.kind)];
    }
    total += tasks.size();
    o += "  rank " + std::to_string(er.rank) + ": ";
    o += er.device >= 0
             ? "process " + std::to_string(er.process) + " GPU " + std::to_string(er.device)
             : std::string("not placed");
    o += ", pp stage " + std::to_string(er.pp_stage) + ", runs simulated rank " +
         std::to_string(p.ranks[static_cast<size_t>(er.sim)].rank) + "; " +
         std::to_string(tasks.size()) + " tasks on streams";
    for (size_t s = 0; s < kStreams.size(); ++s)
      if (per_stream[s] > 0) o += " " + kStreams[s] + " " + std::to_string(per_stream[s]);
    o += "\n";
  }
  o += "  tasks      " + std::to_string(total) + ":";
  for (int k = 0; k < kKindCount; ++k)
    if (per_kind[static_cast<size_t>(k)] > 0)
      o += " " + std::string(kind_name(static_cast<Kind>(k))) + " " +
           std::to_string(per_kind[static_cast<size_t>(k)]);
  o += "\n";
  int comms = 0;
  for (size_t g = 0; g < p.groups.size(); ++g)
    if (plan.collectives_per_group[g] > 0) ++comms;
  int pairs = 0;
  for (const Rendezvous& rv : plan.rendezvous) pairs += rv.group < 0 ? 1 : 0;
  o += "  communicators " + std::to_string(comms) + " group(s) with collectives" +
       (plan.pairs.empty()
            ? std::string()
            : " + " + std::to_string(plan.pairs.size()) + " directed pair(s) for send/recv") +
       "\n";
  for (size_t g = 0; g < p.groups.size(); ++g)
    if (plan.collectives_per_group[g] > 0)
      o += "    " + group_text(p, static_cast<int>(g)) + ": " +
           std::to_string(plan.collectives_per_group[g]) + " collectives per member\n";
  o += "  rendezvous " + std::to_string(plan.rendezvous.size() - static_cast<size_t>(pairs)) +
       " collectives, " + std::to_string(pairs) + " send/recv pairs\n";
  o += "  issue order " + std::to_string(plan.steps.size()) + " steps, no deadlock\n";
  return o;
}

}  // namespace stepcast::exec
