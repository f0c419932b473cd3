// Lowering (lowering.h): the communication groups the collectives name, the NCCL
// communicator memory a rank holds for them, and the retargeting of a lowered rank's program
// to the other ranks of its stage (full fidelity).
#include <algorithm>
#include <numeric>
#include <vector>

#include "sim/lower/lowering.h"

namespace stepcast::lowering {

int Lowerer::group_of(GroupKind kind, int rank) {
  // Asked once per collective emitted, always for the few ranks being lowered: remembered
  // per (kind, rank), so the members are listed once (a dp group of 256 ranks was listed
  // for every bucket of every microbatch).
  const std::int64_t asked = static_cast<std::int64_t>(kind) * layout_.world_size() + rank;
  if (auto hit = group_of_rank_.find(asked); hit != group_of_rank_.end()) return hit->second;
  const int id = find_or_add_group(kind, rank);
  group_of_rank_.emplace(asked, id);
  return id;
}

int Lowerer::find_or_add_group(GroupKind kind, int rank) {
  std::vector<int> members;
  switch (kind) {
    case GroupKind::kTp: members = layout_.tp_group(rank); break;
    case GroupKind::kCp: members = layout_.cp_group(rank); break;
    case GroupKind::kDp: members = layout_.dp_group(rank); break;
    case GroupKind::kDpCp: members = layout_.dp_cp_group(rank); break;
    case GroupKind::kEp: members = layout_.ep_group(rank); break;
    case GroupKind::kEdp: members = layout_.edp_group(rank); break;
    case GroupKind::kPp: {
      // The only pp-kind communicator the lowering uses: Megatron's embedding group, the
      // first and last stage ranks sharing tied word embeddings.
      const RankCoord c = layout_.coord(rank);
      members = {layout_.rank(c.tp, c.cp, c.dp, 0), layout_.rank(c.tp, c.cp, c.dp, p_ - 1)};
      break;
    }
    case GroupKind::kWorld:
      members.resize(static_cast<size_t>(layout_.world_size()));
      std::iota(members.begin(), members.end(), 0);
      break;
  }
  const std::int64_t key = static_cast<std::int64_t>(kind) * layout_.world_size() + members.front();
  auto it = group_ids_.find(key);
  if (it != group_ids_.end()) return it->second;
  Group g;
  g.id = static_cast<int>(prog_.groups.size());
  g.kind = kind;
  g.ranks = std::move(members);
  prog_.groups.push_back(std::move(g));
  group_ids_.emplace(key, prog_.groups.back().id);
  return prog_.groups.back().id;
}

// Device memory NCCL holds on `rank` for the communicators its tasks use: one per group
// its collectives name (of that group's size and node span), and one two-rank
// communicator per peer of its sends and receives (point-to-point connections are made
// per peer), each as collectives.communicator_memory gives it. Ranks that share a task
// list (folded, or full-fidelity copies) take the lowered rank's figure: their groups have
// the same sizes, but a peer on the same node for one may be on the next node for another.
double Lowerer::communicator_bytes(const TaskList& tasks, int rank) const {
  const int per_node = std::max(1, sc_.profile.node.gpus);
  const ListNames used = names_used(tasks);
  double sum = 0;
  for (const int id : used.groups) {
    const std::vector<int>& members = prog_.groups[static_cast<size_t>(id)].ranks;
    if (members.size() < 2) continue;
    std::vector<int> nodes;
    for (const int r : members) nodes.push_back(r / per_node);
    std::sort(nodes.begin(), nodes.end());
    const auto span = std::unique(nodes.begin(), nodes.end()) - nodes.begin();
    sum += communicator_memory_bytes(sc_.profile.collectives, static_cast<int>(members.size()),
                                     static_cast<int>(span));
  }
  for (const int peer : used.peers)
    if (peer != rank)
      sum += communicator_memory_bytes(sc_.profile.collectives, 2,
                                       peer / per_node == rank / per_node ? 1 : 2);
  return sum;
}

// A full-fidelity copy of a template rank for global rank g of the same stage and cp
// index: it shares the template's task list (program.h); collectives name g's groups of
// the same kinds, send/recv peers keep their cp and pp coordinates and take g's tp and dp.
RankProgram Lowerer::retarget(const RankProgram& tmpl, const ListNames& used, int g) {
  RankProgram rp = tmpl;
  rp.rank = g;
  const RankCoord gc = layout_.coord(g);
  rp.group_remap.clear();
  for (int id : used.groups)
    rp.group_remap.emplace_back(id, group_of(prog_.groups[static_cast<size_t>(id)].kind, g));
  rp.peer_remap.clear();
  for (int peer : used.peers) {
    const RankCoord pc = layout_.coord(peer);
    rp.peer_remap.emplace_back(peer, layout_.rank(gc.tp, pc.cp, gc.dp, pc.pp));
  }
  return rp;
}

}  // namespace stepcast::lowering
