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
  EXPECT_EQ(l.rank(1, 0, 0, 0), 1);  // tp fastest
  EXPECT_EQ(l.rank(0, 1, 0, 0), 2);  // then cp
  EXPECT_EQ(l.rank(0, 0, 1, 0), 4);  // then dp
  EXPECT_EQ(l.rank(0, 0, 0, 1), 12);  // pp slowest: TP*CP*DP = 12
}

TEST(RankLayout, CoordRoundTripsForEveryRank) {
  RankLayout l(2, 3, 4, 2, 2);
  for (int r = 0; r < l.world_size(); ++r) {
    RankCoord c = l.coord(r);
    EXPECT_EQ(l.rank(c), r);
    EXPECT_EQ(c.ep, c.dp % 2);
    EXPECT_EQ(c.edp, c.dp / 2);
  }
}

TEST(RankLayout, GroupsPartitionTheWorld) {
  // Property over random shapes: for each group kind, the groups of all ranks partition
  // the world into world/size groups of `size` ranks, each containing its rank.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 30; ++trial) {
    const int tp = 1 << (rng() % 3), cp = 1 + static_cast<int>(rng() % 3);
    const int ep = 1 << (rng() % 2), dp = ep * (1 + static_cast<int>(rng() % 3));
    const int pp = 1 + static_cast<int>(rng() % 3);
    RankLayout l(tp, cp, dp, pp, ep);
    struct Kind {
      std::vector<int> (RankLayout::*fn)(int) const;
      int size;
    };
    const Kind kinds[] = {{&RankLayout::tp_group, tp},     {&RankLayout::cp_group, cp},
                          {&RankLayout::dp_group, dp},     {&RankLayout::dp_cp_group, dp * cp},
                          {&RankLayout::ep_group, ep},     {&RankLayout::pp_group, pp}};
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
    for (bool with_cp : {false, true}) {
      std::set<std::vector<int>> groups;
      for (int r = 0; r < l.world_size(); ++r) {
        std::vector<int> g = l.edp_group(r, with_cp);
        ASSERT_EQ(static_cast<int>(g.size()), (dp / ep) * (with_cp ? cp : 1));
        ASSERT_TRUE(std::find(g.begin(), g.end(), r) != g.end());
        groups.insert(g);
      }
      EXPECT_EQ(static_cast<int>(groups.size()) * (dp / ep) * (with_cp ? cp : 1), l.world_size());
    }
  }
}

TEST(RankLayout, EpGroupsAreConsecutiveDpIndices) {
  // dp 4, ep 2, tp 2: ep group of rank 0 = dp indices {0,1} at tp 0 = ranks {0, 2};
  // edp group of rank 0 = dp indices {0, 2} = ranks {0, 4}.
  RankLayout l(2, 1, 4, 1, 2);
  EXPECT_EQ(l.ep_group(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(l.edp_group(0), (std::vector<int>{0, 4}));
  EXPECT_EQ(l.ep_group(5), (std::vector<int>{5, 7}));  // tp1 dp2 -> dp {2,3}
}

TEST(RankLayout, StageRanksAreContiguous) {
  RankLayout l(2, 1, 2, 3);
  EXPECT_EQ(l.stage_ranks(1), (std::vector<int>{4, 5, 6, 7}));
}

TEST(RankLayout, RejectsEpNotDividingDp) {
  EXPECT_THROW(RankLayout(1, 1, 3, 1, 2), InvariantError);
  EXPECT_THROW(RankLayout(0, 1, 1, 1), InvariantError);
}

}  // namespace
}  // namespace stepcast
