#include "sim/program/program_json.h"

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "model/error.h"
#include "tests/sim/program/program_builder.h"

namespace stepcast {
namespace {

// A program touching every task kind and argument.
Program every_kind() {
  testing::Builder b;
  const int r0 = b.rank(0, {0, 2}, 0), r1 = b.rank(1, {1, 3}, 1);
  const int g = b.group(GroupKind::kDpCp, {0, 1, 2, 3});
  b.p.scenario_name = "json round trip";
  b.p.gpus_per_node = 4;
  Task gemm;
  gemm.kind = TaskKind::kGemm;
  gemm.gemm = {4096, 8192, 1024, 8, DType::kFp8, GemmLayout::kNT};
  gemm.flops = 2.0 * 4096 * 8192 * 1024 * 8;
  gemm.bytes_read = 1.5e8;
  gemm.bytes_written = 0.1;  // shortest round-trip form keeps it exact
  gemm.label = "fwd.L3.fc1.mb2";
  gemm.layer = 3;
  gemm.microbatch = 2;
  gemm.chunk = 1;
  gemm.launches = 8;  // one per group
  b.add(r0, gemm, 1);
  Task attn;
  attn.kind = TaskKind::kAttention;
  attn.phase = Phase::kBwdInput;
  attn.attn = {2, 16, 4, 2048, 4096, 128, false, true, DType::kFp16};
  attn.flops = 1e12 / 3;
  attn.deps = {0};
  b.add(r0, attn, 1);
  Task mb;
  mb.kind = TaskKind::kMemoryBound;
  mb.phase = Phase::kOptimizer;
  mb.category = Category::kOptimizer;
  mb.bytes_read = 123;
  mb.bytes_written = 456;
  mb.what = "adam";
  mb.host_sync = true;
  b.add(r0, mb, 1);
  Task coll;
  coll.kind = TaskKind::kCollective;
  coll.stream = StreamKind::kDp;
  coll.category = Category::kDpComm;
  coll.coll = CollOp::kReduceScatter;
  coll.group = g;
  coll.bytes = 3.25e6;
  coll.dtype = DType::kFp32;
  coll.deps = {1, 2};
  coll.host_ops = 1536;  // a list all-gather's per-rank views
  b.add(r0, coll, 1);
  coll.host_ops = 0;
  coll.ep_kernels = true;  // "kernels": "deepep"
  b.add(r1, coll, 1);
  b.p2p(r0, true, "send", 1, (std::int64_t{1} << 40) + 5, 1);
  b.p2p(r1, false, "recv", 0, (std::int64_t{1} << 40) + 5, 1);
  b.mem(r1, true, "act.L1.mb0", 1e9);
  b.mem(r1, false, "act.L1.mb0", 1e9, {2}, StreamKind::kPpRecv);
  return b.p;
}

TEST(ProgramJson, RoundTripEveryKind) {
  const Program p = every_kind();
  const std::string text = write_program_json(p);
  const Program q = program_from_json(text, "p.json");
  EXPECT_EQ(write_program_json(q), text);
  // Spot checks beyond the text identity.
  const Task& g = q.ranks[0].tasks[0];
  EXPECT_EQ(g.gemm.m, 4096);
  EXPECT_EQ(g.gemm.dtype, DType::kFp8);
  EXPECT_EQ(g.gemm.layout, GemmLayout::kNT);
  EXPECT_EQ(g.bytes_written, 0.1);
  EXPECT_EQ(g.chunk, 1);
  EXPECT_EQ(g.launches, 8);
  EXPECT_FALSE(g.host_sync);
  EXPECT_TRUE(q.ranks[0].tasks[2].host_sync);
  EXPECT_EQ(q.ranks[0].tasks[2].launches, 1);
  const Task& a = q.ranks[0].tasks[1];
  EXPECT_TRUE(a.attn.backward);
  EXPECT_FALSE(a.attn.causal);
  EXPECT_EQ(a.attn.dtype, DType::kFp16);
  EXPECT_EQ(a.flops, 1e12 / 3);
  EXPECT_EQ(q.ranks[0].tasks[3].coll, CollOp::kReduceScatter);
  EXPECT_EQ(q.ranks[0].tasks[3].host_ops, 1536);
  EXPECT_EQ(q.ranks[1].tasks[0].host_ops, 0);
  EXPECT_FALSE(q.ranks[0].tasks[3].ep_kernels);
  EXPECT_TRUE(q.ranks[1].tasks[0].ep_kernels);
  EXPECT_EQ(q.ranks[0].tasks[4].tag, (std::int64_t{1} << 40) + 5);
  EXPECT_EQ(q.ranks[1].tasks[3].stream, StreamKind::kPpRecv);
  EXPECT_EQ(q.ranks[1].stands_for, (std::vector<int>{1, 3}));
  EXPECT_EQ(q.groups[0].kind, GroupKind::kDpCp);
  EXPECT_EQ(q.scenario_name, "json round trip");
  EXPECT_EQ(q.gpus_per_node, 4);
  validate_program(q);
}

TEST(ProgramJson, RoundTripRandomPrograms) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const auto tt = testing::random_template(rng, 40);
    const auto b = testing::build_replicated(tt, 4, trial % 2 == 0);
    const std::string text = write_program_json(b.p, -1);
    EXPECT_EQ(write_program_json(program_from_json(text, "x.json"), -1), text);
  }
}

// The streamed compact writer (what `stepcast lower` uses, no document in memory) writes
// the same bytes as nlohmann's dump of program_to_json: every task kind, labels that need
// escaping or are not ASCII, and random programs with shared lists, remaps and folding.
TEST(ProgramJson, StreamedCompactTextIsTheDocumentsDump) {
  Program p = every_kind();
  p.ranks[0].tasks.mut(0).label = "quote \" back\\slash\nnew line \x01 caf\xc3\xa9";
  p.scenario_name = "name with \"quotes\"";
  EXPECT_EQ(write_program_json(p, -1), program_to_json(p).dump() + "\n");
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const auto tt = testing::random_template(rng, 40);
    const auto b = testing::build_replicated(tt, 4, trial % 2 == 0);
    EXPECT_EQ(write_program_json(b.p, -1), program_to_json(b.p).dump() + "\n") << trial;
  }
}

// Ranks sharing one task list (program.h) are written with their own groups and peers
// (through the remap tables), so the file is the same as for separately built ranks and
// reads back into a program that runs identically.
TEST(ProgramJson, SharedTaskListsAreWrittenWithEachRanksGroupsAndPeers) {
  testing::Builder b;
  const int r0 = b.rank(0);
  const int g0 = b.group(GroupKind::kTp, {0});
  const int g1 = b.group(GroupKind::kTp, {1});
  b.coll(r0, "ar", g0, 100);
  b.p2p(r0, true, "send", 1, 5, 50);
  b.p2p(r0, false, "recv", 1, 5, 50);
  RankProgram copy = b.p.ranks[0];
  copy.rank = 1;
  copy.stands_for = {1};
  copy.group_remap = {{g0, g1}};
  copy.peer_remap = {{1, 0}};
  b.p.ranks.push_back(copy);
  b.d.push_back(b.d[0]);
  b.p.world_size = 2;
  validate_program(b.p);
  ASSERT_TRUE(b.p.ranks[1].tasks.shares_storage_with(b.p.ranks[0].tasks));
  const Program q = program_from_json(write_program_json(b.p), "p.json");
  ASSERT_EQ(q.ranks.size(), 2u);
  EXPECT_EQ(q.ranks[1].tasks[0].group, g1);
  EXPECT_EQ(q.ranks[1].tasks[1].peer, 0);
  EXPECT_EQ(q.ranks[1].tasks[2].peer, 0);
  EXPECT_EQ(q.ranks[0].tasks[0].group, g0);
  EXPECT_EQ(q.ranks[0].tasks[1].peer, 1);
  validate_program(q);
  const Timeline a = simulate(b.p, b.d), c = simulate(q, b.d);
  EXPECT_EQ(a.step_ns, c.step_ns);
  for (size_t r = 0; r < 2; ++r)
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(a.ranks[r].tasks[i].end, c.ranks[r].tasks[i].end);
}

TEST(ProgramJson, SyntaxErrorHasLineAndColumn) {
  // Line 3 holds the stray comma before "}".
  const std::string text = "{\n  \"schema\": \"stepcast.program/1\",\n  \"world_size\": 1,}\n";
  try {
    program_from_json(text, "bad.json");
    FAIL();
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].file, "bad.json");
    EXPECT_EQ(e.issues()[0].line, 3);
    EXPECT_NE(e.issues()[0].message.find("invalid JSON"), std::string::npos);
  }
}

// A value nested 200,000 deep under an unknown key: placing the issue recursed once per
// level (a stack overflow, SIGSEGV) and built paths of O(depth) each; now values below
// JsonLocator::kMaxDepth are skipped and the issue is placed at the key's value.
TEST(ProgramJson, DeeplyNestedValueIsAnIssueNotACrash) {
  const std::string text =
      "{\"schema\": \"stepcast.program/1\", \"deep\": " + std::string(200000, '[') +
      std::string(200000, ']') + "}";
  try {
    program_from_json(text, "deep.json");
    FAIL();
  } catch (const InputError& e) {
    bool found = false;
    for (const InputIssue& i : e.issues())
      if (i.key == "deep") {
        found = true;
        EXPECT_EQ(i.line, 1);
        EXPECT_EQ(i.column,
                  42);  // after the 41 characters `{"schema": "stepcast.program/1", "deep": `
        EXPECT_NE(i.message.find("unknown key"), std::string::npos) << i.message;
      }
    EXPECT_TRUE(found) << e.what();
  }
}

TEST(ProgramJson, SchemaErrorsAreAllReportedWithKeyPaths) {
  nlohmann::json j = program_to_json(every_kind());
  j["schema"] = "stepcast.program/2";
  j["ranks"][0]["tasks"][0]["gemm"]["m"] = "big";
  j["ranks"][0]["tasks"][1]["kind"] = "attn";
  j["ranks"][0]["tasks"][2]["lable"] = "x";
  j["ranks"][1].erase("rank");
  j["groups"][0]["kind"] = "tensor";
  j["ranks"][0]["tasks"][0]["gemm"]["layout"] = "NX";
  try {
    program_from_json(j.dump(), "p.json");
    FAIL();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(": schema: expected \"stepcast.program/1\", got "
                       "\"stepcast.program/2\""),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(": ranks[0].tasks[0].gemm.m: expected an integer, got \"big\""),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(": ranks[0].tasks[1].kind: expected one of gemm, attention, "
                       "memory_bound, collective, send, recv, alloc, free, got \"attn\""),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(": ranks[0].tasks[2].lable: unknown key (did you mean 'label'?)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(": ranks[1].rank: missing required key"), std::string::npos) << msg;
    EXPECT_NE(msg.find(": groups[0].kind: expected one of tp, cp, ep, pp, dp, dp_cp, edp, "
                       "world, got \"tensor\""),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(": ranks[0].tasks[0].gemm.layout: expected one of NN, NT, TN, TT, got "
                       "\"NX\""),
              std::string::npos)
        << msg;
    EXPECT_EQ(e.issues().size(), 7u) << msg;
    for (const InputIssue& i : e.issues()) {
      EXPECT_EQ(i.file, "p.json");
      EXPECT_EQ(i.line, 1);  // dump() writes one line
      EXPECT_GT(i.column, 0);
    }
  }
}

TEST(ProgramJson, SchemaErrorsCarryLineAndColumn) {
  // Indented output puts each key on its own line; the expected line of a bad value is the
  // line its key is on (1 + newlines before it), a missing key points at its object.
  nlohmann::json j = program_to_json(every_kind());
  j["ranks"][0]["tasks"][2]["lable"] = "x";
  j["ranks"][1]["tasks"][0]["collective"]["group"] = -3;
  j["ranks"][1].erase("rank");
  const std::string text = j.dump(2);
  auto line_of = [&](size_t at) {
    return 1 +
           static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
  };
  try {
    program_from_json(text, "p.json");
    FAIL();
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 3u) << e.what();
    for (const InputIssue& i : e.issues()) {
      if (i.key == "ranks[0].tasks[2].lable") {
        EXPECT_EQ(i.line, line_of(text.find("\"lable\"")));
        // A task's keys sit five levels deep (root, "ranks" list, rank, "tasks" list, task),
        // indented 5 x 2 = 10: `"lable": "x"` puts the value at column 10 + 7 + 2 + 1 = 20.
        EXPECT_EQ(i.column, 20);
      } else if (i.key == "ranks[1].tasks[0].collective.group") {
        EXPECT_EQ(i.line, line_of(text.find("-3")));
        EXPECT_EQ(i.message, "expected an integer >= 0, got -3");
      } else {
        EXPECT_EQ(i.key, "ranks[1].rank");
        // ranks[1] is the second object in "ranks": its "{" is the line before its first key
        // "pp_stage" (keys are sorted), i.e. the second "pp_stage" in the text.
        const size_t second = text.find("\"pp_stage\"", text.find("\"pp_stage\"") + 1);
        EXPECT_EQ(i.line, line_of(second) - 1);
      }
    }
  }
}

TEST(ProgramJson, StreamListingMustMatchTaskOrder) {
  nlohmann::json j = program_to_json(every_kind());
  j["ranks"][0]["streams"]["compute"] = {2, 1, 0};
  try {
    program_from_json(j.dump(), "p.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(": ranks[0].streams.compute: lists 3 task ids but "
                                         "the tasks on stream 'compute' are"),
              std::string::npos)
        << e.what();
  }
}

TEST(ProgramJson, WrongKindArgumentsAndDenseIds) {
  nlohmann::json j = program_to_json(every_kind());
  j["ranks"][0]["tasks"][0]["send"] = {{"peer", 1}, {"bytes", 1}, {"tag", 1}};
  j["ranks"][0]["tasks"][1]["id"] = 5;
  try {
    program_from_json(j.dump(), "p.json");
    FAIL();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ranks[0].tasks[0].send: arguments of a send task given to a gemm task"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("ranks[0].tasks[1].id: expected 1 (ids are dense: tasks[i].id == i), got 5"),
              std::string::npos)
        << msg;
  }
}

// A collective's "kernels" names DeepEP or is absent (NCCL).
TEST(ProgramJson, CollectiveKernelsIsDeepEpOnly) {
  nlohmann::json j = program_to_json(every_kind());
  EXPECT_EQ(j["ranks"][1]["tasks"][0]["collective"]["kernels"], "deepep");
  j["ranks"][1]["tasks"][0]["collective"]["kernels"] = "nccl";
  try {
    program_from_json(j.dump(), "p.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks[1].tasks[0].collective.kernels"), std::string::npos)
        << e.what();
  }
}

// The host's keys: launches and host_ops counts >= 0; host_sync only on a kernel of the compute
// stream (the only waits the engine models, docs/model.md "The host").
TEST(ProgramJson, HostKeysAreChecked) {
  nlohmann::json j = program_to_json(every_kind());
  EXPECT_EQ(j["ranks"][0]["tasks"][0]["launches"], 8);
  EXPECT_TRUE(j["ranks"][0]["tasks"][2]["host_sync"]);
  EXPECT_FALSE(j["ranks"][0]["tasks"][1].contains("launches"));  // the default, 1, not written
  EXPECT_FALSE(j["ranks"][0]["tasks"][1].contains("host_sync"));
  EXPECT_EQ(j["ranks"][0]["tasks"][3]["host_ops"], 1536);
  EXPECT_FALSE(j["ranks"][0]["tasks"][1].contains("host_ops"));  // the default, 0
  j["ranks"][0]["tasks"][1]["host_ops"] = -1;
  j["ranks"][0]["tasks"][3]["host_sync"] = true;  // a reduce-scatter on the dp stream
  j["ranks"][0]["tasks"][0]["launches"] = -2;
  try {
    program_from_json(j.dump(), "p.json");
    FAIL();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ranks[0].tasks[3].host_sync: the host waits only for a kernel"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("ranks[0].tasks[0].launches: expected an integer >= 0"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("ranks[0].tasks[1].host_ops: expected an integer >= 0"), std::string::npos)
        << msg;
  }
}

TEST(ProgramJson, SaveAndLoadFile) {
  const Program p = every_kind();
  const std::string path = std::string(STEPCAST_BINARY_DIR) + "/program_json_test.json";
  save_program_json(p, path);
  EXPECT_EQ(write_program_json(load_program_json(path)), write_program_json(p));
}

TEST(ProgramJson, MissingFileIsInputError) {
  EXPECT_THROW(load_program_json("/nonexistent/program.json"), InputError);
}

}  // namespace
}  // namespace stepcast
