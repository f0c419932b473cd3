// The scenario's search: section (sim/scenario/search_space.h): each key a non-empty list of
// distinct values, each checked as the parallel: key it sets; every problem with its
// file:line:column and key path.
#include <gtest/gtest.h>

#include "sim/scenario/search_space.h"
#include "tests/sim/scenario/scenario_doc.h"

namespace stepcast::scenario_test {
namespace {

TEST(SearchSection, ListsAreRead) {
  const SearchSpace sp = search_space_of(load(base()
                                                  .insert(19, "search:")
                                                  .insert(20, "  tp: [2, 4]")
                                                  .insert(21, "  zero: [0, 3]")
                                                  .insert(22, "  recompute: [selective]")
                                                  .insert(23, "  schedule: [zb-h1, interleaved]")
                                                  .insert(24, "  cp_kind: [allgather]")
                                                  .insert(25, "  tp_overlap: [false]")
                                                  .insert(26, "  bucket_mb: [25, 100.5]")
                                                  .insert(27, "  vpp: [1, 2]")
                                                  .insert(28, "  moe_ep_comm: [true, false]")));
  EXPECT_EQ(sp.tp, (std::vector<int>{2, 4}));
  EXPECT_EQ(sp.zero, (std::vector<int>{0, 3}));
  EXPECT_EQ(sp.recompute, (std::vector<Recompute>{Recompute::kSelective}));
  EXPECT_EQ(sp.schedule, (std::vector<Schedule>{Schedule::kZbH1, Schedule::kInterleaved}));
  EXPECT_EQ(sp.cp_kind, (std::vector<CpKind>{CpKind::kAllGather}));
  EXPECT_EQ(sp.tp_overlap, (std::vector<bool>{false}));
  EXPECT_EQ(sp.bucket_mb, (std::vector<double>{25, 100.5}));
  EXPECT_EQ(sp.vpp, (std::vector<int>{1, 2}));
  EXPECT_EQ(sp.moe_ep_comm, (std::vector<bool>{true, false}));
  EXPECT_TRUE(sp.pp.empty());
  EXPECT_TRUE(search_space_of(load(base())).empty());
}

TEST(SearchSection, BadListsAreReportedWhereTheyAre) {
  expect_issue(base().insert(19, "search: [tp]"), "search", 19, "expected a mapping");
  expect_issue(base().insert(19, "search:").insert(20, "  tpp: [1]"), "search.tpp", 20,
               "did you mean 'tp'?");
  expect_issue(base().insert(19, "search:").insert(20, "  tp: 4"), "search.tp", 20,
               "expected a non-empty list");
  expect_issue(base().insert(19, "search:").insert(20, "  pp: []"), "search.pp", 20,
               "expected a non-empty list");
  expect_issue(base().insert(19, "search:").insert(20, "  zero: [1, 4]"), "search.zero[1]", 20,
               "expected an integer in [0, 3], got 4");
  expect_issue(base().insert(19, "search:").insert(20, "  cp: [0]"), "search.cp[0]", 20,
               "expected an integer in [1,");
  expect_issue(base().insert(19, "search:").insert(20, "  recompute: [some]"),
               "search.recompute[0]", 20, "none");
  expect_issue(base().insert(19, "search:").insert(20, "  schedule: [1f1b, 1f1b]"),
               "search.schedule[1]", 20, "duplicate value 1f1b");
  expect_issue(base().insert(19, "search:").insert(20, "  tp_overlap: [maybe]"),
               "search.tp_overlap[0]", 20, "");
  expect_issue(base().insert(19, "search:").insert(20, "  bucket_mb: [0]"), "search.bucket_mb[0]",
               20, "");
  expect_issue(base().insert(19, "search:").insert(20, "  moe_ep_comm: [maybe]"),
               "search.moe_ep_comm[0]", 20, "");
  expect_issue(base().insert(19, "search:").insert(20, "  moe_ep_comm: [true, true]"),
               "search.moe_ep_comm[1]", 20, "duplicate value true");
}

}  // namespace
}  // namespace stepcast::scenario_test
