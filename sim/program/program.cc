#include "sim/program/program.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <boost/graph/strong_components.hpp>
#include <boost/graph/topological_sort.hpp>

#include "model/error.h"
#include "sim/program/matching.h"

namespace stepcast {

const char* stream_name(StreamKind s) {
  switch (s) {
    case StreamKind::kCompute: return "compute";
    case StreamKind::kTp: return "tp";
    case StreamKind::kCp: return "cp";
    case StreamKind::kEp: return "ep";
    case StreamKind::kPpSend: return "pp_send";
    case StreamKind::kPpRecv: return "pp_recv";
    case StreamKind::kCpRecv: return "cp_recv";
    case StreamKind::kTpRing: return "tp_ring";
    case StreamKind::kDp: return "dp";
    case StreamKind::kCount: break;
  }
  return "?";
}

const char* task_kind_name(TaskKind k) {
  switch (k) {
    case TaskKind::kGemm: return "gemm";
    case TaskKind::kAttention: return "attention";
    case TaskKind::kMemoryBound: return "memory_bound";
    case TaskKind::kCollective: return "collective";
    case TaskKind::kSend: return "send";
    case TaskKind::kRecv: return "recv";
    case TaskKind::kAlloc: return "alloc";
    case TaskKind::kFree: return "free";
  }
  return "?";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kFwd: return "fwd";
    case Phase::kBwdInput: return "bwd_input";
    case Phase::kBwdWeight: return "bwd_weight";
    case Phase::kRecompute: return "recompute";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kOther: return "other";
  }
  return "?";
}

const char* category_name(Category c) {
  switch (c) {
    case Category::kCompute: return "compute";
    case Category::kRecompute: return "recompute";
    case Category::kTpComm: return "tp_comm";
    case Category::kCpComm: return "cp_comm";
    case Category::kEpComm: return "ep_comm";
    case Category::kPpComm: return "pp_comm";
    case Category::kDpComm: return "dp_comm";
    case Category::kOptimizer: return "optimizer";
    case Category::kCount: break;
  }
  return "?";
}

const char* coll_op_name(CollOp op) {
  switch (op) {
    case CollOp::kAllReduce: return "allreduce";
    case CollOp::kReduceScatter: return "reduce_scatter";
    case CollOp::kAllGather: return "allgather";
    case CollOp::kAllToAll: return "all_to_all";
    case CollOp::kBroadcast: return "broadcast";
  }
  return "?";
}

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::kTp: return "tp";
    case GroupKind::kCp: return "cp";
    case GroupKind::kEp: return "ep";
    case GroupKind::kPp: return "pp";
    case GroupKind::kDp: return "dp";
    case GroupKind::kDpCp: return "dp_cp";
    case GroupKind::kEdp: return "edp";
    case GroupKind::kWorld: return "world";
  }
  return "?";
}

ListNames names_used(const TaskList& tasks) {
  ListNames u;
  for (const Task& t : tasks) {
    if (t.kind == TaskKind::kCollective) u.groups.push_back(t.group);
    if (t.kind == TaskKind::kSend || t.kind == TaskKind::kRecv) u.peers.push_back(t.peer);
  }
  for (auto* v : {&u.groups, &u.peers}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  return u;
}

bool is_training_state_alloc(const Task& t) {
  if (t.kind != TaskKind::kAlloc) return false;
  for (const char* w : kTrainingStateWhat)
    if (t.what == w) return true;
  return false;
}

int add_task(RankProgram& rp, Task t) {
  t.id = static_cast<int>(rp.tasks.size());
  rp.tasks.push_back(std::move(t));
  return rp.tasks.back().id;
}

namespace {

// Compressed sparse rows: built once from the edge list, no allocation per vertex or edge
// (a folded 1T-parameter plan has ~50k tasks per rank).
using Graph = boost::compressed_sparse_row_graph<boost::directedS>;

// One simple cycle inside a strongly connected component `comp_id` that contains `start`:
// breadth-first search from `start` along edges that stay in the component until an edge
// returns to `start`. O(V + E) of the component.
std::vector<int> cycle_through(const Graph& g, const std::vector<int>& comp, int comp_id,
                               int start) {
  std::vector<int> parent(boost::num_vertices(g), -2);
  std::vector<int> queue{start};
  parent[static_cast<size_t>(start)] = -1;
  for (size_t qi = 0; qi < queue.size(); ++qi) {
    int v = queue[qi];
    for (auto [e, end] = boost::out_edges(static_cast<size_t>(v), g); e != end; ++e) {
      int w = static_cast<int>(boost::target(*e, g));
      if (comp[static_cast<size_t>(w)] != comp_id) continue;
      if (w == start) {
        std::vector<int> cycle;
        for (int x = v; x != -1; x = parent[static_cast<size_t>(x)]) cycle.push_back(x);
        std::reverse(cycle.begin(), cycle.end());
        return cycle;
      }
      if (parent[static_cast<size_t>(w)] != -2) continue;
      parent[static_cast<size_t>(w)] = v;
      queue.push_back(w);
    }
  }
  return {start};
}

// Per-rank checks: dense ids, deps in range, acyclic over deps + stream order edges.
void check_rank_graph(const RankProgram& rp, std::vector<std::string>& problems) {
  const int n = static_cast<int>(rp.tasks.size());
  bool ids_ok = true;
  for (int i = 0; i < n; ++i) {
    const Task& t = rp.tasks[static_cast<size_t>(i)];
    if (t.id != i) {
      problems.push_back(
          fmt::format("rank {}: task at index {} ('{}') has id {}; ids must be "
                      "dense (tasks[i].id == i)",
                      rp.rank, i, t.label, t.id));
      ids_ok = false;
    }
    for (int d : t.deps) {
      if (d < 0 || d >= n || d == i) {
        problems.push_back(
            fmt::format("rank {}: task {} depends on {}, which is not another "
                        "task of this rank (0..{})",
                        rp.rank, task_ref(rp, i), d, n - 1));
        ids_ok = false;
      }
    }
  }
  if (!ids_ok) return;

  // Vertices are task ids; edges dep -> task and stream predecessor -> task.
  std::vector<std::pair<size_t, size_t>> edges;
  edges.reserve(static_cast<size_t>(n) * 2);
  std::array<int, kStreamCount> last{};
  last.fill(-1);
  for (int i = 0; i < n; ++i) {
    const Task& t = rp.tasks[static_cast<size_t>(i)];
    for (int d : t.deps) edges.emplace_back(static_cast<size_t>(d), static_cast<size_t>(i));
    int s = static_cast<int>(t.stream);
    if (s < 0 || s >= kStreamCount) {
      problems.push_back(
          fmt::format("rank {}: task {} has an invalid stream", rp.rank, task_ref(rp, i)));
      return;
    }
    if (last[static_cast<size_t>(s)] >= 0)
      edges.emplace_back(static_cast<size_t>(last[static_cast<size_t>(s)]), static_cast<size_t>(i));
    last[static_cast<size_t>(s)] = i;
  }
  const Graph g(boost::edges_are_unsorted_multi_pass, edges.begin(), edges.end(),
                static_cast<size_t>(n));
  std::vector<size_t> order;
  order.reserve(static_cast<size_t>(n));
  try {
    boost::topological_sort(g, std::back_inserter(order));
    return;
  } catch (const boost::not_a_dag&) {}
  std::vector<int> comp(static_cast<size_t>(n));
  int ncomp = boost::strong_components(
      g, boost::make_iterator_property_map(comp.begin(), boost::get(boost::vertex_index, g)));
  std::vector<int> size(static_cast<size_t>(ncomp), 0);
  for (int c : comp) ++size[static_cast<size_t>(c)];
  for (int v = 0; v < n; ++v) {
    if (size[static_cast<size_t>(comp[static_cast<size_t>(v)])] < 2) continue;
    std::vector<int> cycle = cycle_through(g, comp, comp[static_cast<size_t>(v)], v);
    std::string names;
    for (int x : cycle) names += task_ref(rp, x) + " -> ";
    names += task_ref(rp, cycle.front());
    problems.push_back(
        fmt::format("rank {}: dependency cycle (deps and stream order): {}", rp.rank, names));
    return;  // one cycle per rank is enough to act on
  }
}

}  // namespace

double memory_floor_bytes(const RankProgram& rp) {
  // `what` of memory allocated or freed on other streams
  std::unordered_set<std::string> elsewhere;
  for (const Task& t : rp.tasks)
    if ((t.kind == TaskKind::kAlloc || t.kind == TaskKind::kFree) &&
        t.stream != StreamKind::kCompute)
      elsewhere.insert(t.what);
  double held = 0, most = 0;
  for (const Task& t : rp.tasks) {
    if (t.stream != StreamKind::kCompute) continue;
    switch (t.kind) {
      case TaskKind::kAlloc:
        if (elsewhere.empty() || elsewhere.count(t.what) == 0) held += t.bytes;
        break;
      case TaskKind::kFree:
        if (elsewhere.empty() || elsewhere.count(t.what) == 0) held -= t.bytes;
        break;
      case TaskKind::kGemm:
      case TaskKind::kAttention:
      case TaskKind::kMemoryBound: most = std::max(most, held); break;
      default: break;
    }
  }
  return most;
}

std::vector<double> memory_floor_bytes(const Program& p) {
  std::vector<double> out;
  out.reserve(p.ranks.size());
  for (const RankProgram& rp : p.ranks) out.push_back(memory_floor_bytes(rp));
  return out;
}

void validate_program(const Program& p) {
  std::vector<std::string> problems;
  for (const RankProgram& rp : p.ranks) check_rank_graph(rp, problems);

  for (const RankProgram& rp : p.ranks) {
    // Allocations and frees per `what`: a free never releases more than was allocated under
    // the same name; what is never freed stays resident (weights, optimizer state).
    std::map<std::string, double> held;
    for (const Task& t : rp.tasks) {
      if (t.kind == TaskKind::kAlloc) {
        if (t.bytes < 0)
          problems.push_back(
              fmt::format("rank {}: alloc {} has negative bytes", rp.rank, task_ref(rp, t.id)));
        held[t.what] += t.bytes;
      }
    }
    std::map<std::string, double> freed;
    for (const Task& t : rp.tasks) {
      if (t.kind != TaskKind::kFree) continue;
      freed[t.what] += t.bytes;
      auto it = held.find(t.what);
      double alloc = it == held.end() ? 0.0 : it->second;
      if (freed[t.what] > alloc * (1 + 1e-12) + 1e-6) {
        problems.push_back(
            fmt::format("rank {}: frees of '{}' total {} bytes but only {} bytes were allocated",
                        rp.rank, t.what, freed[t.what], alloc));
        freed[t.what] = -1e300;  // report once
      }
    }
  }

  if (problems.empty()) {
    // Cross-rank matching needs valid ids; it reports sends without recvs, byte mismatches,
    // missing groups and members no simulated rank stands for.
    RendezvousMatching m = match_rendezvous(p);
    problems.insert(problems.end(), m.problems.begin(), m.problems.end());
  }

  if (problems.empty()) return;
  std::string msg = fmt::format("invalid program ({} problem{}):", problems.size(),
                                problems.size() == 1 ? "" : "s");
  const size_t shown = std::min<size_t>(problems.size(), 20);
  for (size_t i = 0; i < shown; ++i) msg += "\n  " + problems[i];
  if (shown < problems.size()) msg += fmt::format("\n  ... and {} more", problems.size() - shown);
  throw InvariantError(msg);
}

}  // namespace stepcast
