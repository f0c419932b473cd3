// Rank layout of a parallel plan (docs/model.md, "Data flow": plan -> rank layout + groups).
//
// Megatron-LM's rank order (megatron/core/parallel_state.py, order "tp-cp-ep-dp-pp"
// with ep folded into dp): tensor parallel varies fastest, then context parallel, then data
// parallel, then pipeline parallel:
//   rank = tp + TP * (cp + CP * (dp + DP * pp)).
// Expert parallelism (Megatron-Core's expert RankGenerator: expert tensor parallel size ETP,
// EP, cp 1, order "tp-cp-ep-dp-pp"): the TP*CP*DP ranks of a stage are re-cut into
// ETP x EP x EDP. With the local index li = tp + TP * (cp + CP * dp) of a rank in its stage,
// its etp index is li % ETP, its ep index (li / ETP) % EP and its expert-data-parallel index
// li / (ETP * EP). ETP is 1 or TP (model/workload.h expert_tp_of): with ETP = TP the etp
// group is the tp group and the ep group takes the same tp index of EP consecutive (cp, dp)
// positions; with ETP = 1 the ep group is EP consecutive ranks (tensor- and context-parallel
// partners first, so it stays inside a node when it can). A local expert shard is
// replicated over the edp group: the TP*CP*DP / (ETP*EP) ranks with the same etp and ep
// indices.
//
// Groups are returned as global ranks in ring order (ascending coordinate).
#pragma once

#include <vector>

namespace stepcast {

struct RankCoord {
  int tp = 0, cp = 0, dp = 0, pp = 0;
  int ep = 0;   // (li / ETP) % EP: index inside the ep group (li: index in the stage, above)
  int edp = 0;  // li / (ETP * EP): index inside the expert-data-parallel group
};

class RankLayout {
 public:
  // Throws InvariantError unless every size is >= 1, etp is 1 or tp, and etp * ep divides
  // tp * cp * dp.
  RankLayout(int tp, int cp, int dp, int pp, int ep = 1, int etp = 1);

  int tp() const { return tp_; }
  int cp() const { return cp_; }
  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int ep() const { return ep_; }
  int etp() const { return etp_; }
  int edp() const { return tp_ * cp_ * dp_ / (etp_ * ep_); }
  int world_size() const { return tp_ * cp_ * dp_ * pp_; }
  int ranks_per_stage() const { return tp_ * cp_ * dp_; }

  int rank(int tp, int cp, int dp, int pp) const;
  int rank(const RankCoord& c) const { return rank(c.tp, c.cp, c.dp, c.pp); }
  RankCoord coord(int rank) const;

  // Communicators of `rank`, all with the rank's other coordinates fixed.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> cp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
  // Gradient-sync group when cp > 1 (Megatron: data_parallel_group with_context_parallel):
  // every (cp, dp) pair at the rank's tp and pp, cp fastest.
  std::vector<int> dp_cp_group(int rank) const;
  std::vector<int> ep_group(int rank) const;
  // Expert-data-parallel group: the ranks of the stage with the rank's etp and ep indices
  // (the group expert gradients are synced over).
  std::vector<int> edp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  // All ranks of pipeline stage `stage`, ascending.
  std::vector<int> stage_ranks(int stage) const;

 private:
  int tp_, cp_, dp_, pp_, ep_, etp_;
};

}  // namespace stepcast
