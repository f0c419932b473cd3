// The executor's host core (calibrate/exec: program.h, plan.h) on CPU: Programs lowered by
// the simulator from tests/data/exec/*.yaml, every bad-Program rule, folded expansion against
// full fidelity and the issue order. The measured timeline: exec_measured_test.cc.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "calibrate/exec/measured.h"
#include "calibrate/exec/plan.h"
#include "calibrate/exec/program.h"
#include "model/error.h"
#include "sim/lower/lower.h"
#include "sim/program/matching.h"
#include "sim/program/program_json.h"
#include "sim/report/report.h"
#include "sim/report/validate.h"
#include "sim/scenario/scenario.h"
#include "tests/calibrate/exec_test_util.h"

namespace ex = stepcast::exec;
namespace sc = stepcast;
using namespace stepcast::exec_test;  // NOLINT(google-build-using-namespace)

TEST(ExecProgram, ReadsALoweredProgramTaskForTask) {
  const sc::Program sp = lowered(scenario("tiny_1gpu.yaml"), true);
  const ex::Program p = to_exec(sp, "tiny_1gpu");
  ASSERT_EQ(p.world_size, 1);
  ASSERT_EQ(p.ranks.size(), 1u);
  ASSERT_EQ(p.ranks[0].tasks.size(), sp.ranks[0].tasks.size());
  for (size_t i = 0; i < p.ranks[0].tasks.size(); ++i) {
    const ex::Task& e = p.ranks[0].tasks[i];
    const sc::Task& s = sp.ranks[0].tasks[i];
    EXPECT_EQ(e.label, s.label);
    EXPECT_STREQ(ex::kind_name(e.kind), sc::task_kind_name(s.kind));
    EXPECT_EQ(ex::kStreams[static_cast<size_t>(e.stream)], sc::stream_name(s.stream));
    EXPECT_EQ(ex::kPhases[static_cast<size_t>(e.phase)], sc::phase_name(s.phase));
    EXPECT_EQ(ex::kCategories[static_cast<size_t>(e.category)], sc::category_name(s.category));
    EXPECT_EQ(e.deps, s.deps);
    EXPECT_EQ(e.launches, s.launches);
    EXPECT_EQ(e.host_sync, s.host_sync);
    if (s.kind == sc::TaskKind::kGemm) {
      EXPECT_EQ(e.m, s.gemm.m);
      EXPECT_EQ(e.n, s.gemm.n);
      EXPECT_EQ(e.k, s.gemm.k);
      EXPECT_EQ(e.batch, s.gemm.batch);
    }
    if (s.kind == sc::TaskKind::kAttention) {
      EXPECT_EQ(e.seq_q, s.attn.seq_q);
      EXPECT_EQ(e.head_dim, s.attn.head_dim);
      EXPECT_EQ(e.backward, s.attn.backward);
    }
  }
  const ex::Plan plan = ex::make_plan(p);
  EXPECT_EQ(plan.steps.size(), p.ranks[0].tasks.size());  // no rendezvous on one GPU
  expect_valid_order(plan);
}

// With overlap.tp_comm the tensor-parallel all-gathers before GEMMs are Transformer Engine's
// ring exchange, on the tp_ring stream: the executor reads that stream (it runs them as
// NCCL all-gathers on a stream of their own) and orders them like the others.
TEST(ExecPlan, TheRingExchangeStreamIsReadAndOrdered) {
  const sc::Program sp =
      lowered(scenario("tiny_8gpu.yaml", {{"overlap: {grad_reduce: true, param_gather: true}",
                                           "overlap: {grad_reduce: true, param_gather: true, "
                                           "tp_comm: true}"}}),
              false);
  const ex::Program p = to_exec(sp, "tiny_8gpu_tp_overlap");
  const auto ring = static_cast<int>(
      std::find(ex::kStreams.begin(), ex::kStreams.end(), "tp_ring") - ex::kStreams.begin());
  ASSERT_LT(ring, static_cast<int>(ex::kStreams.size()));
  int on_ring = 0, want = 0;
  for (const auto& r : p.ranks)
    for (const ex::Task& t : r.tasks) on_ring += t.stream == ring;
  for (const auto& r : sp.ranks)
    for (const sc::Task& t : r.tasks) want += t.stream == sc::StreamKind::kTpRing;
  EXPECT_GT(want, 0);
  EXPECT_EQ(on_ring, want);
  expect_valid_order(ex::make_plan(p));
}

TEST(ExecPlan, FullFidelityKeepsEveryGroupAndPeerAndMatchesLikeTheSimulator) {
  const sc::Program sp = lowered(scenario("tiny_8gpu.yaml"), false);
  const ex::Program p = to_exec(sp, "tiny_8gpu_full");
  const ex::Plan plan = ex::make_plan(p);
  ASSERT_EQ(plan.world_size(), 8);
  for (const sc::RankProgram& rp : sp.ranks) {
    const ex::ExecRank& er = plan.ranks[static_cast<size_t>(rp.rank)];
    for (const sc::Task& t : rp.tasks) {
      if (t.kind == sc::TaskKind::kCollective) {
        EXPECT_EQ(er.group[static_cast<size_t>(t.id)], rp.group_of(t));
      }
      if (t.kind == sc::TaskKind::kSend || t.kind == sc::TaskKind::kRecv) {
        EXPECT_EQ(er.peer[static_cast<size_t>(t.id)], rp.peer_of(t));
      }
    }
  }
  // Unfolded, the simulator's rendezvous are the executor's: same count.
  EXPECT_EQ(static_cast<int>(plan.rendezvous.size()), sc::match_rendezvous(sp).instance_count());
  expect_valid_order(plan);
}

// Folded Programs expand to what full fidelity lowers: per global rank the same tasks, the
// same group members for each collective and the same peer for each send/recv.
TEST(ExecPlan, FoldedExpansionEqualsFullFidelity) {
  for (const auto* edits : {&kTp2, &kTp2Pp2}) {
    const sc::Scenario s = scenario("tiny_8gpu.yaml", *edits);
    const ex::Program folded = to_exec(lowered(s, true), "folded");
    const ex::Program full = to_exec(lowered(s, false), "full");
    ASSERT_LT(folded.ranks.size(), full.ranks.size());
    const ex::Plan a = ex::make_plan(folded);
    const ex::Plan b = ex::make_plan(full);
    ASSERT_EQ(a.world_size(), b.world_size());
    for (int r = 0; r < a.world_size(); ++r) {
      const auto& ta = a.tasks_of(r);
      const auto& tb = b.tasks_of(r);
      ASSERT_EQ(ta.size(), tb.size()) << "rank " << r;
      const ex::ExecRank& ea = a.ranks[static_cast<size_t>(r)];
      const ex::ExecRank& eb = b.ranks[static_cast<size_t>(r)];
      for (size_t i = 0; i < ta.size(); ++i) {
        EXPECT_EQ(ta[i].label, tb[i].label);
        EXPECT_EQ(ea.peer[i], eb.peer[i]) << "rank " << r << " " << ta[i].label;
        if (ea.group[i] >= 0 || eb.group[i] >= 0) {
          ASSERT_GE(ea.group[i], 0);
          ASSERT_GE(eb.group[i], 0);
          EXPECT_EQ(folded.groups[static_cast<size_t>(ea.group[i])].ranks,
                    full.groups[static_cast<size_t>(eb.group[i])].ranks);
        }
      }
    }
    EXPECT_EQ(a.rendezvous.size(), b.rendezvous.size());
    expect_valid_order(a);
  }
}

TEST(ExecPlan, FoldedProgramWhoseGroupsAreNotListedIsRefused) {
  // tp = 2 x dp = 2 per stage fold onto one simulated rank; rank 1's dp group {1, 3} is
  // not in the folded Program.
  const ex::Program p = to_exec(lowered(scenario("tiny_8gpu.yaml"), true), "tiny_8gpu_folded");
  try {
    ex::make_plan(p);
    FAIL() << "expected ProgramError";
  } catch (const ex::ProgramError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot expand the folded Program"), std::string::npos) << m;
    EXPECT_NE(
        m.find("rank 1 stands for rank 0 but no dp group contains it; lower with --fidelity full"),
        std::string::npos)
        << m;
  }
}

TEST(ExecPlan, PlacementRefusesMoreRanksThanGpus) {
  const ex::Program p = to_exec(lowered(scenario("tiny_8gpu.yaml"), false), "tiny_8gpu_full");
  ex::Plan plan = ex::make_plan(p);
  try {
    ex::place_single_process(plan, 4);
    FAIL();
  } catch (const ex::ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("the Program has 8 ranks but this process sees 4 GPU(s)"),
              std::string::npos)
        << e.what();
  }
  try {
    ex::place_one_per_process(plan, 2, 0, 0, 1, 8);
    FAIL();
  } catch (const ex::ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun started 2 processes"), std::string::npos)
        << e.what();
  }
  ex::place_single_process(plan, 8);
  for (const ex::ExecRank& er : plan.ranks) EXPECT_EQ(er.device, er.rank);
  const std::string d = ex::describe(plan);
  // 2584 tasks: 2576 before Megatron-Core's NaN check of each gradient bucket
  // (grad_nan_check), one memory-bound kernel per rank for its one bucket, 8 in all.
  EXPECT_NE(d.find("tasks      2584:"), std::string::npos) << d;
  EXPECT_NE(d.find("group 1 (tp [0, 1]): 88 collectives per member"), std::string::npos) << d;
}

// Under MPI, rank r runs on GPU r % gpus_per_node of node r / gpus_per_node (Megatron's
// order: tensor-parallel groups inside a node). tiny_8gpu is one node of 8: with
// gpus_per_node = 4 (edited below), rank 5 belongs on node 1, GPU 1, as process 1 of its node.
// A launcher that spread the processes round-robin over 2 nodes (mpirun --map-by node) makes
// rank 5 process 2 of node 1: refused, as is a node seeing fewer GPUs than gpus_per_node.
TEST(ExecPlan, MpiPlacementFollowsGpusPerNode) {
  ex::Program p = to_exec(lowered(scenario("tiny_8gpu.yaml"), false), "tiny_8gpu_full");
  p.gpus_per_node = 4;
  ex::Plan plan = ex::make_plan(p);
  ex::place_one_per_process(plan, 8, 5, 1, 4, 4);
  for (const ex::ExecRank& er : plan.ranks) EXPECT_EQ(er.device, er.rank == 5 ? 1 : -1) << er.rank;
  try {
    ex::place_one_per_process(plan, 8, 5, 2, 4, 8);  // --map-by node: ranks 1, 3, 5, 7 on node 1
    FAIL();
  } catch (const ex::ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("process 5 is process 2 of 4 on its node, expected 1"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--map-by ppr:4:node"), std::string::npos) << e.what();
  }
  try {
    ex::place_one_per_process(plan, 8, 5, 1, 5, 8);  // 5 processes on a node of 4
    FAIL();
  } catch (const ex::ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("of at most 4"), std::string::npos) << e.what();
  }
  try {
    ex::place_one_per_process(plan, 8, 5, 1, 4, 2);
    FAIL();
  } catch (const ex::ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("sees 2 GPU(s) but the Program has 4 per node"),
              std::string::npos)
        << e.what();
  }
}

// --- bad Programs -----------------------------------------------------------------------

namespace {

// `text` with the n-th (0-based) occurrence of `from` replaced.
std::string edit(std::string text, const std::string& from, const std::string& to, int nth = 0) {
  size_t at = text.find(from);
  for (int i = 0; i < nth && at != std::string::npos; ++i) at = text.find(from, at + 1);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string error_of(const std::string& text) {
  try {
    const ex::Program p = ex::parse_program(text, "hand.json");
    ex::make_plan(p);
  } catch (const ex::ProgramError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ExecProgram, HandProgramIsValid) {
  const ex::Program p = ex::parse_program(hand_program(), "hand.json");
  const ex::Plan plan = ex::make_plan(p);
  EXPECT_EQ(plan.rendezvous.size(), 2u);  // the allreduce and the send/recv pair
  expect_valid_order(plan);
}

// A collective the simulator costs as DeepEP's kernels ("kernels": "deepep") is read and run
// as NCCL's; any other value is refused with its key.
TEST(ExecProgram, CollectiveKernelsDeepEpIsReadAsNccl) {
  const std::string deepep =
      edit(hand_program(), "\"dtype\":\"bf16\"}},", "\"dtype\":\"bf16\",\"kernels\":\"deepep\"}},");
  const ex::Program p = ex::parse_program(deepep, "hand.json");
  EXPECT_EQ(ex::make_plan(p).rendezvous.size(), 2u);
  const std::string nccl =
      edit(hand_program(), "\"dtype\":\"bf16\"}},", "\"dtype\":\"bf16\",\"kernels\":\"nccl\"}},");
  EXPECT_NE(error_of(nccl).find("collective/kernels"), std::string::npos) << error_of(nccl);
}

TEST(ExecProgram, EveryBadProgramRuleNamesTheKey) {
  struct Case {
    std::string text, want;
  };
  const std::string h = hand_program();
  const std::vector<Case> cases = {
      {"{\"schema\": ", "hand.json"},  // JSON syntax error (json_io: line and column)
      {edit(h, "stepcast.program/1", "stepcast.program/2"),
       "/schema: expected \"stepcast.program/1\""},
      {edit(h, "\"world_size\":2,", "\"world_size\":2,\"colour\":1,"), "/colour: unknown key"},
      {edit(h, "\"world_size\":2,", ""), "/world_size: missing"},
      {edit(h, "\"m\":128", "\"m\":\"128\""), "/ranks/0/tasks/1/gemm/m: expected an integer"},
      {edit(h, "\"m\":128", "\"m\":0"), "/ranks/0/tasks/1/gemm/m: expected an integer >= 1"},
      {edit(h, "\"bytes\":65536", "\"bytes\":-1"),
       "/ranks/0/tasks/2/collective/bytes: expected a finite number >= 0"},
      {edit(h, "\"op\":\"allreduce\"", "\"op\":\"allsum\""),
       "/ranks/0/tasks/2/collective/op: expected one of"},
      {edit(h, "\"kind\":\"gemm\"", "\"kind\":\"attention\""),
       "/ranks/0/tasks/1/gemm: arguments of a gemm task given to a attention task"},
      {edit(h, "\"id\":0,\"kind\":\"alloc\"", "\"id\":5,\"kind\":\"alloc\""),
       "/ranks/0/tasks/0 ('alloc.act')/id: task ids must be dense: expected 0, got 5"},
      {edit(h, "\"deps\":[1]", "\"deps\":[9]"),
       "/ranks/0/tasks/2 ('fwd.ar')/deps: task 9 does not exist on this rank"},
      {edit(h, "\"deps\":[1]", "\"deps\":[2]"),
       "/ranks/0/tasks/2 ('fwd.ar')/deps: a task cannot wait for itself"},
      {edit(h, "\"compute\":[0,1,3]", "\"compute\":[1,0,3]"),
       "/ranks/0/streams/compute: must list the ids of the 3 tasks on stream compute in ascending "
       "order"},
      {edit(h, "\"group\":0", "\"group\":3"),
       "/ranks/0/tasks/2 ('fwd.ar')/collective/group: group 3 does not exist"},
      // 2^31 wrapped to a negative group and crashed the plan (found by json_fuzz_test.cc).
      {edit(h, "\"group\":0", "\"group\":2147483648"),
       "/ranks/0/tasks/2/collective/group: expected an integer <= 2147483647"},
      {edit(h, "\"ranks\":[0,1]", "\"ranks\":[1]"), "rank 0 is not a member of group 0"},
      {edit(h, "\"ranks\":[0,1]", "\"ranks\":[1,1]"), "/groups/0/ranks: rank 1 listed twice"},
      {edit(h, "\"peer\":1", "\"peer\":7"),
       "/ranks/0/tasks/4 ('send.act')/send/peer: rank 7 is outside the world"},
      {edit(h, "\"free\":{\"bytes\":1024,\"what\":\"act\"}",
            "\"free\":{\"bytes\":1024,\"what\":\"grads\"}"),
       "/ranks/0/tasks/3 ('free.act')/free/what: frees \"grads\" with no alloc of it before"},
      {edit(h, "\"stands_for\":[1]", "\"stands_for\":[0]"),
       "/ranks/1/stands_for: rank 0 is already simulated by /ranks/0"},
      {edit(h, "\"folded\":false", "\"folded\":\"no\""), "/folded: expected true or false"},
      // The host's keys (docs/model.md, "The host").
      {edit(h, "\"label\":\"fwd.ar\"", "\"label\":\"fwd.ar\",\"launches\":-1"),
       "/launches: expected an integer >= 0"},
      {edit(h, "\"label\":\"fwd.ar\"", "\"label\":\"fwd.ar\",\"host_sync\":1"),
       "/host_sync: expected true or false"},
      // Plan-level rules (after parsing):
      {edit(h, "\"op\":\"allreduce\"", "\"op\":\"allgather\"", 1),
       "collective #0 on group 0 (tp [0, 1]) is allgather of 65536.000000 bytes, but on rank 0 "
       "(fwd.ar) allreduce"},
      {edit(h, "\"collective\":{\"op\":\"allreduce\"",
            "\"memory_bound\":{\"bytes_read\":1,\"bytes_written\":1,\"what\":\"x\"},\"x\":{\"op\":"
            "\"allreduce\"",
            1),
       "unknown key"},
      {edit(h, "\"tag\":7", "\"tag\":8", 1), "send to rank 1 tag 7 has no matching recv on rank 1"},
      {edit(h, "\"bytes\":4096", "\"bytes\":2048", 1), "sends 4096.000000 bytes but its recv"},
      // Rank 0 sends only after its allreduce; rank 1 enters the allreduce only after its
      // recv: neither can ever start, nor what follows them (free, send, recv on each
      // rank): 3 + 3 = 6 of the 10 tasks.
      {edit(h, "\"label\":\"fwd.ar\",\"deps\":[1]", "\"label\":\"fwd.ar\",\"deps\":[1,4]", 1),
       "would deadlock: 6 of 10 tasks can never start"},
  };
  for (const Case& c : cases) {
    const std::string got = error_of(c.text);
    EXPECT_NE(got.find(c.want), std::string::npos) << "want: " << c.want << "\ngot: " << got;
  }
  // The deadlock names each stuck head and what it waits for.
  const std::string dl = error_of(
      edit(h, "\"label\":\"fwd.ar\",\"deps\":[1]", "\"label\":\"fwd.ar\",\"deps\":[1,4]", 1));
  EXPECT_NE(dl.find("rank 1 stream tp: /ranks/1/tasks/2 ('fwd.ar', rank 1) waits for dep 4 "
                    "('recv.act' on stream pp_recv)"),
            std::string::npos)
      << dl;
  EXPECT_NE(dl.find("rank 0 stream tp: /ranks/0/tasks/2 ('fwd.ar', rank 0) waits for group member "
                    "rank 1 task 2"),
            std::string::npos)
      << dl;
}
