// Max-min fair sharing solver (sim/network/maxmin.cc).
#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "model/error.h"
#include "sim/network/maxmin.h"

namespace stepcast {
namespace {

// Two equal flows on one 10 GB/s link: 5 each.
TEST(MaxMin, TwoFlowsShareALinkEqually) {
  MaxMinSolver s({10e9});
  const int a = s.add_flow({0}), b = s.add_flow({0});
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(a), 5e9);
  EXPECT_DOUBLE_EQ(s.rate(b), 5e9);
}

// Classic example (Bertsekas & Gallager, Data Networks, 6.5.2): links A (1) and B (2);
// f1 over A and B, f2 over A, f3 over B. A saturates first at 1/2 each: f1 = f2 = 0.5;
// B then gives f3 its remaining 2 - 0.5 = 1.5.
TEST(MaxMin, ProgressiveFillingTextbookExample) {
  MaxMinSolver s({1.0, 2.0});
  const int f1 = s.add_flow({0, 1}), f2 = s.add_flow({0}), f3 = s.add_flow({1});
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(f1), 0.5);
  EXPECT_DOUBLE_EQ(s.rate(f2), 0.5);
  EXPECT_DOUBLE_EQ(s.rate(f3), 1.5);
}

// Weights: on one link of 3, weights 1 and 2 get 1 and 2.
TEST(MaxMin, WeightsScaleShares) {
  MaxMinSolver s({3.0});
  const int a = s.add_flow({0}, 1.0), b = s.add_flow({0}, 2.0);
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(a), 1.0);
  EXPECT_DOUBLE_EQ(s.rate(b), 2.0);
}

// Use: a flow standing for k copies on a link takes k x its rate there. Link 0 (8) holds
// a with use 3 and b; link 1 (1) holds b alone. Link 1 saturates first (share 1): b = 1;
// then link 0 leaves 8 - 1 = 7 for a's use of 3: a = 7/3, and link 0 carries 3 a + b = 8.
TEST(MaxMin, UseMultipliesALinksLoad) {
  MaxMinSolver s({8.0, 1.0});
  const int a = s.add_flow({0}, 1.0, {3.0}), b = s.add_flow({0, 1});
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(b), 1.0);
  EXPECT_DOUBLE_EQ(s.rate(a), 7.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.link_load(0), 8.0);
  EXPECT_THROW(s.add_flow({0}, 1.0, {0.0}), InvariantError);
  EXPECT_THROW(s.add_flow({0, 1}, 1.0, {1.0}), InvariantError);
}

// Incremental: removing a flow re-solves only its component; the other keeps its rate.
TEST(MaxMin, IncrementalResolveTouchesOnlyAffectedComponent) {
  MaxMinSolver s({4.0, 6.0});
  const int a = s.add_flow({0}), b = s.add_flow({0});
  const int c = s.add_flow({1}), d = s.add_flow({1}), e = s.add_flow({1});
  s.solve();
  EXPECT_EQ(s.last_solved_flows(), 5);
  EXPECT_DOUBLE_EQ(s.rate(c), 2.0);
  s.remove_flow(b);
  s.solve();
  EXPECT_EQ(s.last_solved_flows(), 1);  // only flow a's component
  EXPECT_DOUBLE_EQ(s.rate(a), 4.0);
  EXPECT_DOUBLE_EQ(s.rate(c), 2.0);
  const int f = s.add_flow({0, 1});
  s.solve();
  EXPECT_EQ(s.last_solved_flows(), 5);  // a, c, d, e, f are now one component
  // Link 1: 4 flows -> 1.5 each; link 0: a and f, f fixed at 1.5 -> a gets 2.5.
  EXPECT_DOUBLE_EQ(s.rate(f), 1.5);
  EXPECT_DOUBLE_EQ(s.rate(a), 2.5);
  EXPECT_DOUBLE_EQ(s.rate(e), 1.5);
  EXPECT_DOUBLE_EQ(s.rate(d), 1.5);
}

TEST(MaxMin, LinklessFlowIsUnboundedAndDeadFlowIsAnError) {
  MaxMinSolver s({1.0});
  const int f = s.add_flow({});
  s.solve();
  EXPECT_TRUE(std::isinf(s.rate(f)));
  s.remove_flow(f);
  EXPECT_THROW(s.rate(f), InvariantError);
  EXPECT_THROW(s.add_flow({5}), InvariantError);
}

// Max-min fairness properties over random instances, re-solved incrementally through random
// adds/removes and compared with a fresh solve:
//  (1) feasibility: sum of rates on every link <= capacity;
//  (2) bottleneck: every flow crosses a saturated link on which its rate/weight is maximal
//      (the characterisation of the max-min fair allocation, Bertsekas & Gallager 6.5).
TEST(MaxMin, RandomInstancesAreFeasibleAndEveryFlowBottlenecked) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int links = 5 + trial;
    std::uniform_real_distribution<double> cap(1.0, 100.0), wt(0.5, 3.0);
    std::uniform_int_distribution<int> pick(0, links - 1), len(1, 4);
    std::vector<double> caps;
    for (int l = 0; l < links; ++l) caps.push_back(cap(rng));
    MaxMinSolver s(caps);
    std::vector<int> live;
    std::map<int, double> weight;
    for (int step = 0; step < 6 * links; ++step) {
      if (!live.empty() && rng() % 4 == 0) {
        const size_t i = rng() % live.size();
        s.remove_flow(live[i]);
        live.erase(live.begin() + static_cast<long>(i));
      } else {
        std::vector<int> ls;
        for (int k = len(rng); k > 0; --k) ls.push_back(pick(rng));
        const double w = wt(rng);
        live.push_back(s.add_flow(ls, w));
        weight[live.back()] = w;
      }
      if (step % 5 == 0) s.solve();
    }
    s.solve();
    MaxMinSolver fresh(caps);
    for (int f : live) {
      const int g = fresh.add_flow(s.flow_links(f), weight[f]);
      fresh.solve();  // solving as we go exercises the incremental path once more
      (void)g;
    }
    fresh.solve();
    std::vector<double> load(static_cast<size_t>(links), 0.0);
    for (int f : live)
      for (int l : s.flow_links(f)) load[static_cast<size_t>(l)] += s.rate(f);
    for (int l = 0; l < links; ++l) {
      const size_t li = static_cast<size_t>(l);
      EXPECT_LE(load[li], caps[li] * (1 + 1e-9));
      EXPECT_NEAR(load[li], fresh.link_load(l), 1e-9 * caps[li]);
    }
    for (int f : live) {
      const double share = s.rate(f) / weight[f];
      bool bottlenecked = false;
      for (int l : s.flow_links(f)) {
        const size_t li = static_cast<size_t>(l);
        if (load[li] < caps[li] * (1 - 1e-9)) continue;
        bool max_on_link = true;
        for (int g : live) {
          const auto& gl = s.flow_links(g);
          if (std::find(gl.begin(), gl.end(), l) != gl.end() &&
              s.rate(g) / weight[g] > share * (1 + 1e-9))
            max_on_link = false;
        }
        bottlenecked = bottlenecked || max_on_link;
      }
      EXPECT_TRUE(bottlenecked) << "flow " << f << " trial " << trial;
    }
  }
}

}  // namespace
}  // namespace stepcast
