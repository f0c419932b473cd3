#include "sim/plan/layout.h"

#include <algorithm>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "model/error.h"

namespace stepcast {
namespace {

TEST(RankLayout, MegatronOrderTpFastestThenCpDpPp) {
  // rank = tp + TP*(cp + CP*(dp + DP*pp)) with TP=2, CP=2, DP=3, PP=2:
  // (tp1, cp1, dp2, pp1) -> 1 + 2*(1 + 2*(2 + 3*1)) = 1 + 2*11 = 23.
  RankLayout l(2, 2, 3, 2);
  EXPECT_EQ(l.world_size(), 24);
  EXPECT_EQ(l.rank(1, 1, 2, 1), 23);
  EXPECT_EQ(l.rank(0, 0, 0, 0), 0);
  EXPECT_EQ(l.rank(1, 0, 0, 0), 1);   // tp fastest
  EXPECT_EQ(l.rank(0, 1, 0, 0), 2);   // then cp
  EXPECT_EQ(l.rank(0, 0, 1, 0), 4);   // then dp
  EXPECT_EQ(l.rank(0, 0, 0, 1), 12);  // pp slowest: TP*CP*DP = 12
}

TEST(RankLayout, CoordRoundTripsForEveryRank) {
  RankLayout l(2, 3, 4, 2, 2);
  for (int r = 0; r < l.world_size(); ++r) {
    RankCoord c = l.coord(r);
    EXPECT_EQ(l.rank(c), r);
    const int li = r % 24;  // index in the stage: TP*CP*DP = 24 ranks per stage
    EXPECT_EQ(c.ep, li % 2);
    EXPECT_EQ(c.edp, li / 2);
  }
}

TEST(RankLayout, GroupsPartitionTheWorld) {
  // Property over random shapes: for each group kind, the groups of all ranks partition
  // the world into world/size groups of `size` ranks, each containing its rank.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 30; ++trial) {
    const int tp = 1 << (rng() % 3), cp = 1 + static_cast<int>(rng() % 3);
    const int dp = 1 + static_cast<int>(rng() % 4);
    const int ep = (tp * cp * dp) % 4 == 0   ? 1 << (rng() % 3)
                   : (tp * cp * dp) % 2 == 0 ? 1 << (rng() % 2)
                                             : 1;
    const int pp = 1 + static_cast<int>(rng() % 3);
    const int etp = (cp * dp) % ep == 0 && rng() % 2 ? tp : 1;
    RankLayout l(tp, cp, dp, pp, ep, etp);
    struct Kind {
      std::vector<int> (RankLayout::*fn)(int) const;
      int size;
    };
    const Kind kinds[] = {{&RankLayout::tp_group, tp}, {&RankLayout::cp_group, cp},
                          {&RankLayout::dp_group, dp}, {&RankLayout::dp_cp_group, dp * cp},
                          {&RankLayout::ep_group, ep}, {&RankLayout::pp_group, pp}};
    for (const Kind& k : kinds) {
      std::set<std::vector<int>> groups;
      for (int r = 0; r < l.world_size(); ++r) {
        std::vector<int> g = (l.*k.fn)(r);
        ASSERT_EQ(static_cast<int>(g.size()), k.size);
        ASSERT_TRUE(std::find(g.begin(), g.end(), r) != g.end());
        groups.insert(g);
      }
      EXPECT_EQ(static_cast<int>(groups.size()) * k.size, l.world_size());
    }
    // Expert groups: ep x edp cut the stage's tp*cp*dp ranks; every ep group meets every
    // edp group of its stage in exactly one rank (each local expert is on one rank of an ep
    // group and replicated over its edp group).
    std::set<std::vector<int>> groups;
    const int edp = tp * cp * dp / (etp * ep);
    for (int r = 0; r < l.world_size(); ++r) {
      std::vector<int> g = l.edp_group(r);
      ASSERT_EQ(static_cast<int>(g.size()), edp);
      ASSERT_TRUE(std::find(g.begin(), g.end(), r) != g.end());
      groups.insert(g);
      int shared = 0;
      for (int q : l.ep_group(r)) shared += std::count(g.begin(), g.end(), q) > 0;
      ASSERT_EQ(shared, 1);
      for (int q : g) ASSERT_EQ(l.coord(q).pp, l.coord(r).pp);
    }
    EXPECT_EQ(static_cast<int>(groups.size()) * edp, l.world_size());
    // With etp = tp the expert groups keep the rank's tp index: one shard of each expert.
    if (etp == tp && tp > 1)
      for (int r = 0; r < l.world_size(); ++r) {
        for (int q : l.ep_group(r)) ASSERT_EQ(l.coord(q).tp, l.coord(r).tp);
        for (int q : l.edp_group(r)) ASSERT_EQ(l.coord(q).tp, l.coord(r).tp);
      }
  }
}

TEST(RankLayout, EpGroupsAreConsecutiveRanksOfTheStage) {
  // Megatron-Core, expert tensor parallel size 1: tp 2, dp 4, ep 2: the ep group of rank 0
  // is ranks {0, 1} (its tp partner), its edp group the 8 / 2 = 4 ranks {0, 2, 4, 6}.
  RankLayout l(2, 1, 4, 1, 2);
  EXPECT_EQ(l.ep_group(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(l.edp_group(0), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(l.ep_group(5), (std::vector<int>{4, 5}));
  // Mixtral's 8-node plan: tp 2, dp 32, ep 8, 8 GPUs a node: each ep group is one node
  // (ranks 8k .. 8k+7), each edp group one rank of every node (64 / 8 = 8 ranks); a stage
  // of pp 2 starts its own groups at rank 64.
  RankLayout m(2, 1, 32, 2, 8);
  EXPECT_EQ(m.ep_group(13), (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(m.edp_group(13), (std::vector<int>{5, 13, 21, 29, 37, 45, 53, 61}));
  EXPECT_EQ(m.ep_group(64), (std::vector<int>{64, 65, 66, 67, 68, 69, 70, 71}));
}

TEST(RankLayout, ExpertTensorParallelKeepsTheTpIndex) {
  // expert tp = tp = 2, dp 4, ep 2 (Megatron-Core's default expert tp, and its layout before
  // expert tp existed): the ep group of rank 0 is dp {0, 1} at tp 0, ranks {0, 2}; its edp
  // group dp {0, 2}, ranks {0, 4}. Without ep (ep 1) the edp group is the dp group.
  RankLayout l(2, 1, 4, 1, 2, 2);
  EXPECT_EQ(l.ep_group(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(l.edp_group(0), (std::vector<int>{0, 4}));
  EXPECT_EQ(l.ep_group(5), (std::vector<int>{5, 7}));
  RankLayout d(2, 1, 4, 1, 1, 2);
  EXPECT_EQ(d.edp_group(1), d.dp_group(1));
  EXPECT_THROW(RankLayout(4, 1, 2, 1, 1, 2), InvariantError);  // etp neither 1 nor tp
  EXPECT_THROW(RankLayout(2, 1, 3, 1, 2, 2), InvariantError);  // etp*ep = 4 does not divide 6
}

TEST(RankLayout, StageRanksAreContiguous) {
  RankLayout l(2, 1, 2, 3);
  EXPECT_EQ(l.stage_ranks(1), (std::vector<int>{4, 5, 6, 7}));
}

TEST(RankLayout, RejectsEpNotDividingTheStage) {
  EXPECT_THROW(RankLayout(1, 1, 3, 1, 2), InvariantError);
  EXPECT_THROW(RankLayout(2, 1, 3, 1, 4), InvariantError);  // 6 ranks a stage
  EXPECT_NO_THROW(RankLayout(2, 1, 3, 1, 2));  // ep 2 divides the stage's 6 ranks, not dp 3
  EXPECT_THROW(RankLayout(0, 1, 1, 1), InvariantError);
}

}  // namespace
}  // namespace stepcast
