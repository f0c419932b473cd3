#include "sim/program/program.h"

#include <gtest/gtest.h>

#include "model/error.h"
#include "sim/program/matching.h"
#include "tests/sim/program/program_builder.h"

namespace stepcast {
namespace {

using testing::Builder;

std::string validate_message(const Program& p) {
  try {
    validate_program(p);
  } catch (const InvariantError& e) {
    return e.what();
  }
  return "";
}

TEST(Program, NamesMatchTheSchema) {
  EXPECT_STREQ(stream_name(StreamKind::kPpRecv), "pp_recv");
  EXPECT_STREQ(task_kind_name(TaskKind::kMemoryBound), "memory_bound");
  EXPECT_STREQ(phase_name(Phase::kBwdWeight), "bwd_weight");
  EXPECT_STREQ(category_name(Category::kDpComm), "dp_comm");
  EXPECT_STREQ(coll_op_name(CollOp::kReduceScatter), "reduce_scatter");
  EXPECT_STREQ(group_kind_name(GroupKind::kDpCp), "dp_cp");
}

// TaskList is copy-on-write: copies share storage until one of them is written to, and
// writing to one never changes the other.
TEST(TaskList, CopiesShareStorageUntilWritten) {
  RankProgram a;
  Task t;
  t.label = "x";
  add_task(a, t);
  add_task(a, t);
  RankProgram b = a;
  EXPECT_TRUE(b.tasks.shares_storage_with(a.tasks));
  EXPECT_EQ(&b.tasks[0], &a.tasks[0]);
  b.tasks.mut(1).label = "changed";
  EXPECT_FALSE(b.tasks.shares_storage_with(a.tasks));
  EXPECT_EQ(a.tasks[1].label, "x");
  EXPECT_EQ(b.tasks[1].label, "changed");
  add_task(a, t);
  EXPECT_EQ(a.tasks.size(), 3u);
  EXPECT_EQ(b.tasks.size(), 2u);
  TaskList empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.begin(), empty.end());
}

// A rank sharing another's list sees its own groups and peers through the remap tables;
// values not listed stay as they are.
TEST(TaskList, GroupAndPeerGoThroughTheRankRemap) {
  RankProgram a;
  Task c;
  c.kind = TaskKind::kCollective;
  c.group = 3;
  add_task(a, c);
  Task s;
  s.kind = TaskKind::kSend;
  s.peer = 8;
  add_task(a, s);
  RankProgram b = a;
  b.rank = 1;
  b.group_remap = {{3, 5}};
  b.peer_remap = {{8, 9}};
  EXPECT_EQ(a.group_of(a.tasks[0]), 3);
  EXPECT_EQ(b.group_of(b.tasks[0]), 5);
  EXPECT_EQ(a.peer_of(a.tasks[1]), 8);
  EXPECT_EQ(b.peer_of(b.tasks[1]), 9);
  EXPECT_EQ(b.group_of_id(7), 7);
  EXPECT_EQ(b.peer_of_id(2), 2);
}

TEST(Program, AddTaskSetsDenseIds) {
  RankProgram rp;
  Task t;
  t.id = 42;  // overwritten
  EXPECT_EQ(add_task(rp, t), 0);
  EXPECT_EQ(add_task(rp, t), 1);
  EXPECT_EQ(rp.tasks[1].id, 1);
}

TEST(Program, ValidProgramPasses) {
  Builder b;
  const int r0 = b.rank(0), r1 = b.rank(1);
  const int g = b.group(GroupKind::kTp, {0, 1});
  const int a = b.mem(r0, true, "act", 10);
  b.coll(r0, "ar", g, 1, {a});
  b.mem(r0, false, "act", 10, {1});
  b.mem(r0, true, "weights", 99);  // resident: never freed, allowed
  b.coll(r1, "ar", g, 1);
  b.p2p(r0, true, "s", 1, 1, 1);
  b.p2p(r1, false, "r", 0, 1, 1);
  EXPECT_EQ(validate_message(b.p), "");
}

TEST(Program, CycleIsReportedByName) {
  // b waits for a, c for b, a for c: the edges a -> b -> c -> a form a cycle, which the
  // message walks with labels.
  Builder b;
  const int r = b.rank(3);
  b.compute(r, "a", 1, {2});
  b.compute(r, "b", 1, {0}, Category::kCompute, StreamKind::kTp);
  b.compute(r, "c", 1, {1}, Category::kCompute, StreamKind::kCp);
  const std::string msg = validate_message(b.p);
  EXPECT_NE(msg.find("rank 3: dependency cycle (deps and stream order): 'a' (rank 3 task 0) -> "
                     "'b' (rank 3 task 1) -> 'c' (rank 3 task 2) -> 'a' (rank 3 task 0)"),
            std::string::npos)
      << msg;
}

TEST(Program, CycleThroughStreamOrderIsFound) {
  // x then y on the compute stream (stream order x -> y), but x depends on y.
  Builder b;
  const int r = b.rank(0);
  b.compute(r, "x", 1, {1});
  b.compute(r, "y", 1);
  const std::string msg = validate_message(b.p);
  EXPECT_NE(msg.find("'x' (rank 0 task 0) -> 'y' (rank 0 task 1) -> 'x'"), std::string::npos)
      << msg;
}

TEST(Program, DepOutOfRangeAndNonDenseIds) {
  Builder b;
  const int r = b.rank(0);
  b.compute(r, "a", 1, {5});
  b.compute(r, "b", 1);
  b.p.ranks[0].tasks.mut(1).id = 7;
  const std::string msg = validate_message(b.p);
  EXPECT_NE(msg.find("task 'a' (rank 0 task 0) depends on 5, which is not another task of this "
                     "rank (0..1)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("task at index 1 ('b') has id 7"), std::string::npos) << msg;
}

TEST(Program, SendWithoutRecvAndByteMismatch) {
  Builder b;
  const int r0 = b.rank(0), r1 = b.rank(1);
  b.p2p(r0, true, "s1", 1, 1, 1, {}, 100);
  b.p2p(r1, false, "r1", 0, 1, 1, {}, 200);
  b.p2p(r0, true, "s2", 1, 2, 1);
  const std::string msg = validate_message(b.p);
  EXPECT_NE(msg.find("send 's1' (rank 0 task 0) carries 100 bytes but its recv 'r1' (rank 1 "
                     "task 0) expects 200"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("send 's2' (rank 0 task 1) (tag 2, to rank 1) has no matching recv"),
            std::string::npos)
      << msg;
}

TEST(Program, SendToSelfOnSameStreamIsRejected) {
  Builder b;
  const int r = b.rank(0, {0, 1});
  b.p2p(r, true, "s", 1, 4, 1);
  b.p2p(r, false, "r", 0, 4, 1);
  b.p.ranks[0].tasks.mut(1).stream = StreamKind::kPpSend;  // same stream as the send
  EXPECT_NE(validate_message(b.p).find("are on the same rank and stream"), std::string::npos);
}

TEST(Program, CollectiveGroupMustExistAndIncludeTheRank) {
  Builder b;
  const int r0 = b.rank(0);
  b.rank(1);
  const int g = b.group(GroupKind::kTp, {1});
  b.coll(r0, "ar.missing", 5, 1);
  b.coll(r0, "ar.foreign", g, 1);
  const std::string msg = validate_message(b.p);
  EXPECT_NE(msg.find("collective 'ar.missing' (rank 0 task 0) names group 5, which does not "
                     "exist (1 groups)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("collective 'ar.foreign' (rank 0 task 1) names group 0, but rank 0 stands "
                     "for no member of it"),
            std::string::npos)
      << msg;
}

TEST(Program, CollectiveCountsMustAgree) {
  Builder b;
  const int r0 = b.rank(0), r1 = b.rank(1);
  const int g = b.group(GroupKind::kDp, {0, 1});
  b.coll(r0, "ar0", g, 1);
  b.coll(r0, "ar1", g, 1);
  b.coll(r1, "ar0", g, 1);
  EXPECT_NE(validate_message(b.p).find("group 0 (dp): members issue different numbers of "
                                       "collectives, so some never meet: rank 0: 2 (last 'ar1' "
                                       "(rank 0 task 1)), rank 1: 1"),
            std::string::npos)
      << validate_message(b.p);
}

TEST(Program, MemberNobodyStandsFor) {
  Builder b;
  const int r0 = b.rank(0);
  const int g = b.group(GroupKind::kDp, {0, 9});
  b.coll(r0, "ar", g, 1);
  EXPECT_NE(validate_message(b.p).find("group 0 (dp) has member 9, which no simulated rank "
                                       "stands for"),
            std::string::npos);
}

TEST(Program, FreesMayNotExceedAllocs) {
  Builder b;
  const int r = b.rank(0);
  b.mem(r, true, "act.mb0", 100);
  b.mem(r, false, "act.mb0", 100, {0});
  b.mem(r, false, "act.mb0", 50, {1});
  b.mem(r, false, "grads", 10);
  const std::string msg = validate_message(b.p);
  EXPECT_NE(msg.find("rank 0: frees of 'act.mb0' total 150 bytes but only 100 bytes were "
                     "allocated"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("frees of 'grads' total 10 bytes but only 0 bytes"), std::string::npos);
}

TEST(Matching, FoldedMembersDedupe) {
  // Globals 0..3 on sim rank 0, 4..7 on sim rank 1: group {0..7} has two participants.
  Builder b;
  const int r0 = b.rank(0, {0, 1, 2, 3}), r1 = b.rank(4, {4, 5, 6, 7});
  const int g = b.group(GroupKind::kDp, {0, 1, 2, 3, 4, 5, 6, 7});
  b.coll(r0, "ar", g, 1);
  b.coll(r1, "ar", g, 1);
  const RendezvousMatching m = match_rendezvous(b.p);
  ASSERT_TRUE(m.problems.empty());
  ASSERT_EQ(m.instance_count(), 1);
  EXPECT_EQ(m.offsets[1] - m.offsets[0], 2);
  EXPECT_EQ(m.sim_of_global[6], 1);
}

}  // namespace
}  // namespace stepcast
