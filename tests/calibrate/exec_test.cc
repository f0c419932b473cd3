// The executor's host core (calibrate/exec: program.h, plan.h, measured.h) on CPU: Programs
// lowered by the simulator from tests/data/exec/*.yaml, every bad-Program rule, folded
// expansion against full fidelity, the issue order, and a synthetic recorded timeline
// through write_measured (the GPU layer's path) that `validate PREDICTED MEASURED` reads.
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

namespace ex = stepcast::exec;
namespace sc = stepcast;

namespace {

std::string data(const std::string& name) {
  return std::string(STEPCAST_SOURCE_DIR) + "/tests/data/exec/" + name;
}

// The scenario file, with `edits` (text -> replacement) applied to its YAML.
sc::Scenario scenario(const std::string& file,
                      const std::map<std::string, std::string>& edits = {}) {
  std::ifstream f(data(file));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  for (const auto& [from, to] : edits) {
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  }
  return sc::load_scenario_node(YAML::Load(text), data(file));
}

sc::Program lowered(const sc::Scenario& s, bool folded) {
  sc::LowerOptions lo;
  lo.folded = folded;
  return sc::lower(s, lo);
}

ex::Program to_exec(const sc::Program& p, const std::string& name) {
  return ex::parse_program(sc::write_program_json(p, -1), name);
}

// tp = 2 only (2 GPUs: both tp ranks fold onto one) and tp = 2 x pp = 2 (4 GPUs), from the
// 8-GPU scenario: dp = gpus / (tp*pp) = 1, so every group a folded Program needs is listed.
const std::map<std::string, std::string> kTp2 = {{"  pp: 2", "  pp: 1"},
                                                 {"  nodes: 1", "  gpus: 2"}};
const std::map<std::string, std::string> kTp2Pp2 = {{"  nodes: 1", "  gpus: 4"}};

// Where each task of each rank went in the issue order: (step index).
std::vector<std::vector<int>> step_of(const ex::Plan& plan) {
  std::vector<std::vector<int>> at(static_cast<size_t>(plan.world_size()));
  for (int r = 0; r < plan.world_size(); ++r)
    at[static_cast<size_t>(r)].assign(plan.tasks_of(r).size(), -1);
  for (size_t s = 0; s < plan.steps.size(); ++s)
    for (const ex::RankTask& rt : plan.steps[s].tasks) {
      EXPECT_EQ(at[static_cast<size_t>(rt.rank)][static_cast<size_t>(rt.task)], -1)
          << "issued twice";
      at[static_cast<size_t>(rt.rank)][static_cast<size_t>(rt.task)] = static_cast<int>(s);
    }
  return at;
}

// Property of any plan: every task issued once; per stream in id order; deps before; the
// members of a rendezvous in one step, and only they.
void expect_valid_order(const ex::Plan& plan) {
  const auto at = step_of(plan);
  for (int r = 0; r < plan.world_size(); ++r) {
    const auto& tasks = plan.tasks_of(r);
    std::map<int, int> last_on_stream;
    for (const ex::Task& t : tasks) {
      const int s = at[static_cast<size_t>(r)][static_cast<size_t>(t.id)];
      ASSERT_GE(s, 0) << "rank " << r << " task " << t.id << " never issued";
      auto it = last_on_stream.find(t.stream);
      if (it != last_on_stream.end()) {
        EXPECT_LT(it->second, s) << "rank " << r << " task " << t.id;
      }
      last_on_stream[t.stream] = s;
      for (int d : t.deps) EXPECT_LT(at[static_cast<size_t>(r)][static_cast<size_t>(d)], s);
    }
  }
  for (const ex::IssueStep& st : plan.steps) {
    if (st.rendezvous < 0) {
      EXPECT_EQ(st.tasks.size(), 1u);
      continue;
    }
    EXPECT_EQ(st.tasks.size(), plan.rendezvous[static_cast<size_t>(st.rendezvous)].members.size());
  }
}

}  // namespace

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

std::string rank_text(int r) {
  const std::string p2p =
      r == 0
          ? R"({"id":4,"kind":"send","stream":"pp_send","phase":"fwd","category":"pp_comm","label":"send.act","deps":[2],"send":{"peer":1,"bytes":4096,"tag":7}})"
          : R"({"id":4,"kind":"recv","stream":"pp_recv","phase":"fwd","category":"pp_comm","label":"recv.act","deps":[],"recv":{"peer":0,"bytes":4096,"tag":7}})";
  const std::string ps = r == 0 ? R"("pp_send":[4])" : R"("pp_recv":[4])";
  return R"({"rank":)" + std::to_string(r) + R"(,"pp_stage":0,"stands_for":[)" + std::to_string(r) +
         R"(],"streams":{"compute":[0,1,3],"tp":[2],)" + ps + R"(},"tasks":[)" +
         R"({"id":0,"kind":"alloc","stream":"compute","phase":"fwd","category":"compute","label":"alloc.act","deps":[],"alloc":{"bytes":1024,"what":"act"}},)" +
         R"({"id":1,"kind":"gemm","stream":"compute","phase":"fwd","category":"compute","label":"fwd.gemm","deps":[0],"gemm":{"m":128,"n":256,"k":64,"batch":1,"dtype":"bf16","layout":"NN"}},)" +
         R"({"id":2,"kind":"collective","stream":"tp","phase":"fwd","category":"tp_comm","label":"fwd.ar","deps":[1],"collective":{"op":"allreduce","group":0,"bytes":65536,"dtype":"bf16"}},)" +
         R"({"id":3,"kind":"free","stream":"compute","phase":"fwd","category":"compute","label":"free.act","deps":[2],"free":{"bytes":1024,"what":"act"}},)" +
         p2p + "]}";
}

// Two ranks: alloc, gemm, a tp allreduce, free, and a send 0 -> 1 (recv on 1).
std::string hand_program() {
  return R"({"schema":"stepcast.program/1","world_size":2,"folded":false,"scenario_name":"hand","gpus_per_node":8,)"
         R"("groups":[{"id":0,"kind":"tp","ranks":[0,1]}],"ranks":[)" +
         rank_text(0) + "," + rank_text(1) + "]}";
}

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

// --- measured timeline ------------------------------------------------------------------

// Synthetic recorded times for the hand Program (microseconds; zero = each rank's start):
//   rank 0: alloc [0,0]  gemm [0,10]  allreduce [10,25]  free [25,25]  send [25,30]
//   rank 1: alloc [0,0]  gemm [0,12]  allreduce [12,25]  free [25,25]  recv [25,31]
// Rank 0's allreduce starts when rank 1 reaches it: [12,25]. The step ends at 31 us on
// rank 1, the critical rank. Its busy time: gemm 12, collective 13, recv 6 (alloc/free
// left out); phase fwd 12 + 13 + 6 = 31. Exposed: compute [0,12] = 12, tp_comm [12,25] =
// 13, pp_comm [25,31] = 6, bubble 0; sum 31 = step.
TEST(ExecMeasured, HandTimelineGivesTheDerivedNumbers) {
  const ex::Program p = ex::parse_program(hand_program(), "hand.json");
  const ex::Plan plan = ex::make_plan(p);
  ex::Recorded rec;
  const double us = 1e-6;
  rec.times = {{{0, 0}, {0, 10 * us}, {10 * us, 25 * us}, {25 * us, 25 * us}, {25 * us, 30 * us}},
               {{0, 0}, {0, 12 * us}, {12 * us, 25 * us}, {25 * us, 25 * us}, {25 * us, 31 * us}}};
  rec.peak_bytes = {1024, 2048};
  const ex::MeasuredSummary s = ex::summarize(plan, rec);
  EXPECT_DOUBLE_EQ(s.step_time_s, 31 * us);
  EXPECT_EQ(s.critical_rank, 1);
  EXPECT_DOUBLE_EQ(s.busy_by_kind_s.at("gemm"), 12 * us);
  EXPECT_NEAR(s.busy_by_kind_s.at("collective"), 13 * us, 1e-15);
  EXPECT_NEAR(s.busy_by_kind_s.at("recv"), 6 * us, 1e-15);
  EXPECT_EQ(s.busy_by_kind_s.count("alloc"), 0u);
  EXPECT_NEAR(s.busy_by_phase_s.at("fwd"), 31 * us, 1e-15);
  EXPECT_NEAR(s.breakdown_s.at("compute"), 12 * us, 1e-15);
  EXPECT_NEAR(s.breakdown_s.at("tp_comm"), 13 * us, 1e-15);
  EXPECT_NEAR(s.breakdown_s.at("pp_comm"), 6 * us, 1e-15);
  EXPECT_NEAR(s.breakdown_s.at("bubble"), 0, 1e-15);

  std::ostringstream out;
  ex::write_measured(plan, rec, {{"gpu", "synthetic"}}, true, out);
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["schema"], "stepcast.result/1");
  EXPECT_DOUBLE_EQ(j["memory_peak_gib"].get<double>(), 2048.0 / (1024.0 * 1024 * 1024));
  EXPECT_EQ(j["timeline"][1]["tasks_s"][4][1].get<double>(), 31 * us);
  // Bad recorded times are refused.
  rec.times[0][1] = {10 * us, 5 * us};
  EXPECT_THROW(ex::summarize(plan, rec), ex::ProgramError);
}

// The 1-GPU Program run back to back in issue order with a fixed time per kind: gemm 10 us,
// attention 40 us, memory_bound 5 us, alloc/free 0 (tasks per kind from the Program:
// 54 gemm, 8 attention, 46 memory_bound, so the step is 54*10 + 8*40 + 46*5 = 1090 us).
// `validate PREDICTED MEASURED` accepts the file and reports these numbers as measured.
TEST(ExecMeasured, SyntheticRunIsAcceptedByValidate) {
  const sc::Scenario s = scenario("tiny_1gpu.yaml");
  const sc::Prediction pred = sc::predict(s);
  const ex::Program p = to_exec(pred.program, "tiny_1gpu");
  const ex::Plan plan = ex::make_plan(p);
  const std::map<ex::Kind, double> us_of = {
      {ex::Kind::kGemm, 10}, {ex::Kind::kAttention, 40}, {ex::Kind::kMemoryBound, 5}};
  ex::Recorded rec;
  rec.times.resize(1);
  rec.times[0].resize(p.ranks[0].tasks.size());
  rec.peak_bytes = {-1};
  double t = 0;
  std::map<std::string, int> per_kind;
  std::map<std::string, double> per_phase_us;
  for (const ex::IssueStep& st : plan.steps) {
    const ex::Task& task = plan.task(st.tasks[0]);
    const auto it = us_of.find(task.kind);
    const double d = it == us_of.end() ? 0.0 : it->second;
    rec.times[0][static_cast<size_t>(task.id)] = {t * 1e-6, (t + d) * 1e-6};
    t += d;
    ++per_kind[ex::kind_name(task.kind)];
    if (d > 0) per_phase_us[ex::kPhases[static_cast<size_t>(task.phase)]] += d;
  }
  ASSERT_EQ(per_kind["gemm"], 54);
  ASSERT_EQ(per_kind["attention"], 8);
  ASSERT_EQ(per_kind["memory_bound"], 46);
  std::ostringstream out;
  ex::write_measured(plan, rec, {}, false, out);
  const nlohmann::json meas = nlohmann::json::parse(out.str());
  nlohmann::json cmp;
  const std::string table = sc::compare_results(sc::result_to_json(pred.result).dump(1),
                                                "predicted.json", out.str(), "measured.json", &cmp);
  std::map<std::string, double> measured;
  for (const auto& row : cmp["rows"])
    measured[row["what"].get<std::string>()] = row["measured_s"].get<double>();
  EXPECT_NEAR(measured.at("step"), 1090e-6, 1e-12) << table;
  EXPECT_NEAR(measured.at("busy_by_kind.gemm"), 540e-6, 1e-12) << table;
  EXPECT_NEAR(measured.at("busy_by_kind.attention"), 320e-6, 1e-12) << table;
  EXPECT_NEAR(measured.at("busy_by_kind.memory_bound"), 230e-6, 1e-12) << table;
  for (const auto& [phase, v] : per_phase_us)
    EXPECT_NEAR(measured.at("busy_by_phase." + phase), v * 1e-6, 1e-12) << phase << "\n" << table;
  // One GPU, one stream: the exposed time is all compute (no recompute, no optimizer
  // category tasks unless the Program has them), nothing is bubble.
  double exposed = 0;
  for (const auto& [k, v] : meas["breakdown_s"].items()) exposed += v.get<double>();
  EXPECT_NEAR(exposed, 1090e-6, 1e-12);
  EXPECT_NEAR(measured.at("breakdown.bubble"), 0, 1e-12) << table;
  // The untimed step (--graph --untimed) is written only when measured, beside the timed
  // one, and the document still compares.
  EXPECT_FALSE(meas.contains("step_time_untimed_s"));
  rec.untimed_step_s = 1050e-6;
  std::ostringstream untimed;
  ex::write_measured(plan, rec, {}, false, untimed);
  const nlohmann::json u = nlohmann::json::parse(untimed.str());
  EXPECT_DOUBLE_EQ(u["step_time_untimed_s"].get<double>(), 1050e-6);
  EXPECT_DOUBLE_EQ(u["step_time_s"].get<double>(), 1090e-6);
  // validate sets the prediction beside it: 1090 us less the events' 40 us in this made-up
  // run, so the untimed row's error is (p - 1050) / 1050 where the timed one's is (p - 1090)
  // / 1090.
  nlohmann::json cmp_u;
  sc::compare_results(sc::result_to_json(pred.result).dump(1), "predicted.json", untimed.str(),
                      "measured.json", &cmp_u);
  const double p_step = pred.result.step_time_s;
  bool found = false;
  for (const auto& row : cmp_u["rows"])
    if (row["what"] == "step, untimed") {
      found = true;
      EXPECT_DOUBLE_EQ(row["measured_s"].get<double>(), 1050e-6);
      EXPECT_NEAR(row["error"].get<double>(), (p_step - 1050e-6) / 1050e-6, 1e-12);
    }
  EXPECT_TRUE(found);
  // A bad value is an input error at its key, like step_time_s.
  nlohmann::json bad = u;
  bad["step_time_untimed_s"] = -1;
  try {
    sc::compare_results(sc::result_to_json(pred.result).dump(1), "predicted.json", bad.dump(1),
                        "measured.json", nullptr);
    ADD_FAILURE() << "no InputError";
  } catch (const stepcast::InputError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].key, "step_time_untimed_s");
    EXPECT_GT(e.issues()[0].line, 0);
  }
}

// Property over plan shapes (schedules, DualPipeV too, ZeRO stages, recompute, cp) of the
// 8-GPU scenario at full fidelity: the plan builds without deadlock, its issue order is
// valid, it finds the simulator's rendezvous; and "recording" the engine's own schedule
// (sc::simulate with a fixed duration per kind) through summarize gives the engine's step
// time, critical rank and exposed-time breakdown. Earliest-start times are the same in any
// topological order, so the executor's list schedule below, in its issue order, must
// reproduce the engine's.
TEST(ExecMeasured, EngineScheduleRecordedGivesTheEngineNumbers) {
  const std::map<ex::Kind, std::int64_t> ns_of = {
      {ex::Kind::kGemm, 10000},      {ex::Kind::kAttention, 40000}, {ex::Kind::kMemoryBound, 5000},
      {ex::Kind::kCollective, 7000}, {ex::Kind::kSend, 3000},       {ex::Kind::kRecv, 3000}};
  std::vector<std::map<std::string, std::string>> variants;
  for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zb-h1"})
    for (const char* zero : {"0", "1", "3"})
      for (const char* recompute : {"none", "full"}) {
        std::map<std::string, std::string> e = {
            {"  schedule: 1f1b", std::string("  schedule: ") + schedule},
            {"  zero: 1", std::string("  zero: ") + zero},
            {"  recompute: none", std::string("  recompute: ") + recompute}};
        if (std::string(schedule) == "interleaved") e["  pp: 2"] = "  pp: 2\n  vpp: 2";
        variants.push_back(e);
      }
  for (const char* zero : {"0", "1"})  // DualPipeV: ZeRO 0/1, no full recompute
    variants.push_back({{"  schedule: 1f1b", "  schedule: dualpipev"},
                        {"  pp: 2", "  pp: 2\n  vpp: 2"},
                        {"  zero: 1", std::string("  zero: ") + zero}});
  variants.push_back({{"  cp: 1", "  cp: 2"}});  // tp 2 x cp 2 x pp 2, dp 1
  for (const auto& edits : variants) {
    std::string name;
    for (const auto& [k, v] : edits) name += v + ";";
    SCOPED_TRACE(name);
    const sc::Program sp = lowered(scenario("tiny_8gpu.yaml", edits), false);
    const ex::Program p = to_exec(sp, "variant");
    const ex::Plan plan = ex::make_plan(p);
    expect_valid_order(plan);
    EXPECT_EQ(static_cast<int>(plan.rendezvous.size()), sc::match_rendezvous(sp).instance_count());

    sc::Durations dur(sp.ranks.size());
    for (size_t r = 0; r < sp.ranks.size(); ++r) {
      auto& row = dur[r];
      for (const ex::Task& t : p.ranks[r].tasks) {
        const auto it = ns_of.find(t.kind);
        row.push_back(it == ns_of.end() ? 0 : it->second);
      }
    }
    const sc::Timeline tl = sc::simulate(sp, dur);

    // The executor's list schedule in issue order (integer ns, then seconds).
    ex::Recorded rec;
    rec.times.resize(8);
    std::vector<std::vector<std::int64_t>> start(8), end(8);
    std::vector<std::vector<std::int64_t>> stream_free(
        8, std::vector<std::int64_t>(ex::kStreams.size(), 0));
    for (int r = 0; r < 8; ++r) {
      start[static_cast<size_t>(r)].assign(plan.tasks_of(r).size(), 0);
      end[static_cast<size_t>(r)].assign(plan.tasks_of(r).size(), 0);
    }
    for (const ex::IssueStep& st : plan.steps) {
      std::int64_t t0 = 0, d = 0;
      for (const ex::RankTask& rt : st.tasks) {
        const ex::Task& t = plan.task(rt);
        t0 = std::max(t0, stream_free[static_cast<size_t>(rt.rank)][static_cast<size_t>(t.stream)]);
        for (int dep : t.deps)
          t0 = std::max(t0, end[static_cast<size_t>(rt.rank)][static_cast<size_t>(dep)]);
        d = std::max(d, dur[static_cast<size_t>(rt.rank)][static_cast<size_t>(t.id)]);
      }
      for (const ex::RankTask& rt : st.tasks) {
        const ex::Task& t = plan.task(rt);
        start[static_cast<size_t>(rt.rank)][static_cast<size_t>(t.id)] = t0;
        end[static_cast<size_t>(rt.rank)][static_cast<size_t>(t.id)] = t0 + d;
        stream_free[static_cast<size_t>(rt.rank)][static_cast<size_t>(t.stream)] = t0 + d;
      }
    }
    for (int r = 0; r < 8; ++r)
      for (size_t i = 0; i < start[static_cast<size_t>(r)].size(); ++i) {
        EXPECT_EQ(start[static_cast<size_t>(r)][i], tl.ranks[static_cast<size_t>(r)].tasks[i].start)
            << "rank " << r << " task " << i;
        rec.times[static_cast<size_t>(r)].push_back(
            {start[static_cast<size_t>(r)][i] * 1e-9, end[static_cast<size_t>(r)][i] * 1e-9});
      }
    rec.peak_bytes.assign(8, -1);
    const ex::MeasuredSummary s = ex::summarize(plan, rec);
    EXPECT_NEAR(s.step_time_s, tl.step_ns * 1e-9, 1e-12);
    EXPECT_EQ(s.critical_rank, sp.ranks[static_cast<size_t>(tl.critical_rank)].rank);
    for (int c = 0; c <= sc::kCategoryCount; ++c)
      EXPECT_NEAR(s.breakdown_s.at(sc::breakdown_name(c)),
                  tl.breakdown_ns[static_cast<size_t>(c)] * 1e-9, 1e-12)
          << sc::breakdown_name(c);
  }
}
