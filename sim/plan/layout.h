// Rank layout of a parallel plan (DESIGN.md, Plan -> RankLayout + groups).
//
// Megatron-LM's rank order (megatron/core/parallel_state.py, order "tp-cp-ep-dp-pp"
// with ep folded into dp): tensor parallel varies fastest, then context parallel, then data
// parallel, then pipeline parallel:
//   rank = tp + TP * (cp + CP * (dp + DP * pp)).
// Expert parallelism is carved out of the data-parallel dimension: the ep group of a rank is
// the EP consecutive dp indices of its block (dp / EP fixed), and expert parameters are
// replicated over the expert-data-parallel (edp) group: same dp % EP, DP / EP members.
//
// Groups are returned as global ranks in ring order (ascending coordinate).
#pragma once

#include <vector>

namespace stepcast {

struct RankCoord {
  int tp = 0, cp = 0, dp = 0, pp = 0;
  int ep = 0;   // dp % EP: index inside the ep group
  int edp = 0;  // dp / EP: index inside the expert-data-parallel group
};

class RankLayout {
 public:
  // Throws InvariantError unless every size is >= 1 and ep divides dp.
  RankLayout(int tp, int cp, int dp, int pp, int ep = 1);

  int tp() const { return tp_; }
  int cp() const { return cp_; }
  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int ep() const { return ep_; }
  int edp() const { return dp_ / ep_; }
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
  // Expert-data-parallel group: dp indices with the rank's dp % EP; with `with_cp` also
  // every cp index (expert gradients are then synced over edp x cp).
  std::vector<int> edp_group(int rank, bool with_cp = false) const;
  std::vector<int> pp_group(int rank) const;
  // All ranks of pipeline stage `stage`, ascending.
  std::vector<int> stage_ranks(int stage) const;

 private:
  int tp_, cp_, dp_, pp_, ep_;
};

}  // namespace stepcast
