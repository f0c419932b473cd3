// Helpers shared by the executor's host-core tests (exec_test.cc, exec_measured_test.cc): the
// exec test data, its scenarios with YAML edits, Programs lowered and read back as the
// executor reads them, the issue-order property every plan must hold, and a hand-written
// two-rank Program.
#pragma once

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "calibrate/exec/plan.h"
#include "calibrate/exec/program.h"
#include "sim/lower/lower.h"
#include "sim/program/program_json.h"
#include "sim/scenario/scenario.h"

namespace stepcast::exec_test {

namespace ex = stepcast::exec;
namespace sc = stepcast;

inline std::string data(const std::string& name) {
  return std::string(STEPCAST_SOURCE_DIR) + "/tests/data/exec/" + name;
}

// The scenario file, with `edits` (text -> replacement) applied to its YAML.
inline sc::Scenario scenario(const std::string& file,
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

inline sc::Program lowered(const sc::Scenario& s, bool folded) {
  sc::LowerOptions lo;
  lo.folded = folded;
  return sc::lower(s, lo);
}

inline ex::Program to_exec(const sc::Program& p, const std::string& name) {
  return ex::parse_program(sc::write_program_json(p, -1), name);
}

// tp = 2 only (2 GPUs: both tp ranks fold onto one) and tp = 2 x pp = 2 (4 GPUs), from the
// 8-GPU scenario: dp = gpus / (tp*pp) = 1, so every group a folded Program needs is listed.
inline const std::map<std::string, std::string> kTp2 = {{"  pp: 2", "  pp: 1"},
                                                        {"  nodes: 1", "  gpus: 2"}};
inline const std::map<std::string, std::string> kTp2Pp2 = {{"  nodes: 1", "  gpus: 4"}};

// Where each task of each rank went in the issue order: (step index).
inline std::vector<std::vector<int>> step_of(const ex::Plan& plan) {
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
inline void expect_valid_order(const ex::Plan& plan) {
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

inline std::string rank_text(int r) {
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
inline std::string hand_program() {
  return R"({"schema":"stepcast.program/1","world_size":2,"folded":false,"scenario_name":"hand","gpus_per_node":8,)"
         R"("groups":[{"id":0,"kind":"tp","ranks":[0,1]}],"ranks":[)" +
         rank_text(0) + "," + rank_text(1) + "]}";
}

}  // namespace stepcast::exec_test
