// Lowering tests: ZeRO-3 fetches per submodule (framework zero3_gather: submodule, DeepSpeed
// stage 3; sim/lower/zero3_fetch.cc).
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/lower/lower.h"
#include "tests/sim/lower/lower_test_helpers.h"
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast {
namespace {

using testing::make_scenario;
using testing::Plan;
using testing::tiny_gpt;

// tiny_gpt: hidden 256, ffn 1024, 8 heads (MHA), layernorm with biases. A layer's weights:
// qkv 256 x 768 = 196,608, proj 256 x 256 = 65,536, fc1 256 x 1024 = 262,144, fc2 1024 x 256
// = 262,144 (786,432 in all); its norms and biases (2 x 2 x 256 + 768 + 256 + 1024 + 256 =
// 3,328 elements, each below 1e5) are persistent under the deepspeed preset.
constexpr double kQkv = 196608, kProj = 65536, kFc = 262144;

// The dense all-gathers of layer L3 in microbatch 0, by label, in elements (bf16 params).
std::vector<std::pair<std::string, double>> layer_gathers(const Program& prog) {
  std::vector<std::pair<std::string, double>> out;
  for (const Task& t : prog.ranks[0].tasks)
    if (testing::is_coll(t, CollOp::kAllGather) && t.layer == 3 && t.microbatch == 0)
      out.emplace_back(t.label, t.bytes / 2);
  return out;
}

Scenario deepspeed_scenario(Recompute rc) {
  Plan p;
  p.dp = 4;
  p.zero = 3;
  p.microbatches = 1;
  p.recompute = rc;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.framework = framework_preset(Framework::kDeepSpeed);
  return sc;
}

TEST(LowerZero3Submodule, OneGatherPerLinearForwardAndAgainInBackward) {
  // Without recompute: 4 fetches in forward (qkv, proj, fc1, fc2) and the same 4 again in
  // backward, in the backward's order (fc2, fc1, proj, qkv). The block presets gather the
  // layer's 789,760 elements at once, twice.
  const auto g = layer_gathers(lower(deepspeed_scenario(Recompute::kNone)));
  const std::vector<double> want = {kQkv, kProj, kFc, kFc, kFc, kFc, kProj, kQkv};
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_DOUBLE_EQ(g[i].second, want[i]) << g[i].first;

  Plan p;
  p.dp = 4;
  p.zero = 3;
  p.microbatches = 1;
  const auto block = layer_gathers(lower(make_scenario(tiny_gpt(), p)));
  ASSERT_EQ(block.size(), 2u);
  EXPECT_DOUBLE_EQ(block[0].second, kQkv + kProj + 2 * kFc + 3328);  // 789,760
}

TEST(LowerZero3Submodule, PersistentParametersAreGatheredAgainAfterTheStep) {
  // DeepSpeed's _post_step gathers each persistent parameter again, one all-gather each,
  // after the optimizer step: per layer its 8 vectors (2 LayerNorms of 2 x 256, the qkv and
  // proj biases 768 and 256, fc1's and fc2's 1024 and 256: 3,328 elements), and the final
  // LayerNorm's 2 x 256; 8 x 8 + 2 = 66 gathers, then the host's device synchronize.
  const auto persistent = [](const Program& prog) {
    const TaskList& tasks = prog.ranks[0].tasks;
    int step = -1;
    std::vector<size_t> out;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (tasks[i].label == "opt.step") step = static_cast<int>(i);
      if (testing::is_coll(tasks[i], CollOp::kAllGather) &&
          tasks[i].label.find("persist") != std::string::npos) {
        EXPECT_GE(step, 0) << tasks[i].label << " before the step";
        out.push_back(i);
      }
    }
    return out;
  };
  Scenario sc = deepspeed_scenario(Recompute::kNone);
  Program prog = lower(sc);
  const std::vector<size_t> ids = persistent(prog);
  ASSERT_EQ(ids.size(), 66u);
  double l3 = 0;
  for (size_t i : ids)
    if (prog.ranks[0].tasks[i].layer == 3) l3 += prog.ranks[0].tasks[i].bytes / 2;
  EXPECT_DOUBLE_EQ(l3, 3328);
  // Issued one after the other by the host: each depends on the one before.
  for (size_t k = 1; k < ids.size(); ++k) {
    const auto& deps = prog.ranks[0].tasks[ids[k]].deps;
    EXPECT_NE(std::find(deps.begin(), deps.end(), static_cast<int>(ids[k - 1])), deps.end());
  }
  const auto sync = std::find_if(prog.ranks[0].tasks.begin(), prog.ranks[0].tasks.end(),
                                 [](const Task& t) { return t.label == "sync.persistent"; });
  ASSERT_NE(sync, prog.ranks[0].tasks.end());
  EXPECT_TRUE(sync->host_sync);
  // The list form: each gather's copies (one per rank) follow it.
  sc.framework.list_collectives = true;
  prog = lower(sc);
  for (size_t i : persistent(prog)) {
    EXPECT_EQ(prog.ranks[0].tasks[i].host_ops, 4);
    const Task& copy = prog.ranks[0].tasks[i + 1];
    EXPECT_EQ(copy.what, "list_copy");
    EXPECT_EQ(copy.launches, 4);
  }
  // Without persistence the vectors are fetched with each use (a unit-start fetch of 3,328
  // elements) and nothing is gathered after the step; nor by the block presets.
  sc.framework.zero3_persistence_elements = 0;
  EXPECT_TRUE(persistent(lower(sc)).empty());
  EXPECT_DOUBLE_EQ(layer_gathers(lower(sc)).front().second, 3328);
  Plan p;
  p.dp = 4;
  p.zero = 3;
  p.microbatches = 1;
  EXPECT_TRUE(persistent(lower(make_scenario(tiny_gpt(), p))).empty());
}

TEST(LowerZero3Submodule, RecomputeFetchesKeptWithinTheReuseDistance) {
  // Full recompute: the recomputed forward fetches all four again. A fetch is kept for its
  // backward when the later fetches' elements, used twice in between (recompute, then
  // backward), sum to at most the reuse distance:
  //  - 1e9 (the preset): all kept; the backward fetches nothing more: 4 + 4 gathers;
  //  - 6e5: fc2 (0) and fc1 (2 x 262,144 = 524,288) kept; proj (2 x 524,288 = 1,048,576) and
  //    qkv released and fetched again before their input-gradient GEMMs: 4 + 4 + 2.
  Scenario sc = deepspeed_scenario(Recompute::kFull);
  const auto kept = layer_gathers(lower(sc));
  EXPECT_EQ(kept.size(), 8u);
  sc.framework.zero3_reuse_distance_elements = 6e5;
  const auto g = layer_gathers(lower(sc));
  const std::vector<double> want = {kQkv, kProj, kFc, kFc, kQkv, kProj, kFc, kFc, kProj, kQkv};
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_DOUBLE_EQ(g[i].second, want[i]) << g[i].first;
}

TEST(LowerZero3Submodule, HostWaitsForTheFetchTwoBack) {
  // __max_ongoing_fetch_events = 2: the gathers issued when fetch i is reached wait for the
  // compute task before fetch i-2 (the event recorded there). Without the limit they wait
  // for the compute task just before fetch i.
  // The tiny model fits in one 5e7-element prefetch bucket (the whole pass would be issued at
  // its first fetch), so the prefetch is cut to one fetch ahead here.
  Scenario sc = deepspeed_scenario(Recompute::kNone);
  sc.framework.zero3_prefetch_elements = 1;
  // The forward prefetch of L3's fc1 is issued when L3's proj is reached; fetch i-2 from
  // there is L2's fc2, so it depends on the compute just before L2.fc2 (L2's act). Without
  // the limit, on the last compute the host launched before it: the rebuild of L3's proj
  // fetch (zero3_copies), which the wait for that fetch runs before the prefetch.
  const auto dep_of_fc1_gather = [](const Program& prog) {
    const TaskList& tasks = prog.ranks[0].tasks;
    std::string out;
    for (size_t i = 0; i < tasks.size(); ++i)
      if (tasks[i].kind == TaskKind::kCollective &&
          tasks[i].label.find("L3.f.fc1") != std::string::npos)
        for (int d : tasks[i].deps)
          if (tasks[static_cast<size_t>(d)].kind != TaskKind::kCollective)
            out += tasks[static_cast<size_t>(d)].label;
    return out;
  };
  EXPECT_EQ(dep_of_fc1_gather(lower(sc)), "fwd.L2.act.mb0");
  sc.framework.zero3_max_inflight_fetches = 0;
  EXPECT_EQ(dep_of_fc1_gather(lower(sc)), "z3copy.L3.f.proj.mb0");
  sc.framework.zero3_copies = Zero3Copies::kNone;  // then L3's attention core
  EXPECT_EQ(dep_of_fc1_gather(lower(sc)), "fwd.L3.attn.mb0");
}

TEST(LowerZero3Submodule, RandomPlansBalanceMemoryAndFoldLikeFullFidelity) {
  // Over random plans (pipelines, interleaving, ZB-H1's split, TP overlap, recompute, MoE)
  // under the deepspeed preset with zero 3 and random rule values: every fetch's gathered
  // copy is freed (validate_program balances allocs and frees per name), and simulating one
  // rank per stage gives the step of simulating all.
  std::mt19937 rng(2603);
  for (int trial = 0; trial < 24; ++trial) {
    Plan p = testing::random_plan(rng);
    testing::set_sharded_zero(p, 3);
    ModelArch arch = p.ep > 1 ? testing::tiny_moe(8) : tiny_gpt(8);
    arch.tied_embeddings = trial % 3 == 0;
    Scenario sc = make_scenario(arch, p);
    sc.framework = framework_preset(Framework::kDeepSpeed);
    sc.framework.zero3_prefetch_elements = trial % 2 ? 1 : 5e7;
    sc.framework.zero3_reuse_distance_elements = trial % 4 < 2 ? 6e5 : 1e9;
    sc.framework.zero3_persistence_elements = trial % 5 == 0 ? 0 : 1e5;
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << ": tp" << p.tp << " pp" << p.pp << " dp" << p.dp << " vpp"
                 << p.vpp << " " << schedule_name(p.schedule) << " rc"
                 << static_cast<int>(p.recompute));
    const Program folded = lower(sc, LowerOptions{true, {}});
    const Program full = lower(sc, LowerOptions{false, {}});
    EXPECT_NO_THROW(validate_program(full));
    const testing::Synth s{.aux_free = false, .comm_ns_per_byte = 1.0};
    EXPECT_EQ(testing::run(folded, s).step_ns, testing::run(full, s).step_ns);
  }
}

}  // namespace
}  // namespace stepcast

namespace stepcast {
namespace {

// The reduce-scatters on rank 0 in issue order, and for each compute task the
// reduce-scatters it waits for directly.
struct Reduces {
  std::vector<int> ids;
  std::map<int, std::vector<int>> waited_by;  // compute task -> reduce-scatters
};

Reduces reduces_of(const Program& prog) {
  Reduces r;
  const TaskList& tasks = prog.ranks[0].tasks;
  for (const Task& t : tasks) {
    if (testing::is_coll(t, CollOp::kReduceScatter)) r.ids.push_back(t.id);
    // The optimizer waits for every gradient reduction anyway.
    if (t.stream != StreamKind::kCompute || t.category == Category::kOptimizer) continue;
    for (int d : t.deps)
      if (tasks[static_cast<size_t>(d)].kind == TaskKind::kCollective &&
          tasks[static_cast<size_t>(d)].coll == CollOp::kReduceScatter)
        r.waited_by[t.id].push_back(d);
  }
  return r;
}

TEST(LowerZero3Reduce, HostBlocksOnTheThirdOutstandingReduce) {
  // DeepSpeed's host keeps at most 2 reduce events outstanding: before it launches
  // reduce-scatter j it waits for j - 3, so the next compute task waits for reduce j - 3, for
  // every j >= 3 of a backward; with the limit off, no compute task waits for a
  // reduce-scatter except at the end of each backward (the epilogue's sync).
  Plan p;
  p.dp = 4;
  p.zero = 3;
  p.microbatches = 2;
  p.bucket_bytes = 0;  // one reduce-scatter a unit
  Scenario sc = make_scenario(tiny_gpt(8), p);
  sc.framework = framework_preset(Framework::kDeepSpeed);
  const Program prog = lower(sc);
  const Reduces r = reduces_of(prog);
  ASSERT_GE(r.ids.size(), 8u);  // >= 4 units a backward, 2 microbatches
  std::vector<int> waited;
  for (const auto& [task, rs] : r.waited_by) waited.insert(waited.end(), rs.begin(), rs.end());
  // Each reduce j - 3 is waited for by some compute task (j from 3 on; for the step's last
  // reduce-scatter that task is the optimizer, which waits for them all anyway).
  for (size_t j = 3; j + 1 < r.ids.size(); ++j)
    EXPECT_NE(std::find(waited.begin(), waited.end(), r.ids[j - 3]), waited.end()) << j;
  Scenario off = sc;
  off.framework.zero3_max_inflight_reduces = -1;
  const Reduces r_off = reduces_of(lower(off));
  // Only the epilogue's wait remains between the two microbatches (the second backward's
  // is the optimizer's, which waits for every reduction anyway).
  size_t n = 0;
  for (const auto& [task, rs] : r_off.waited_by) n += rs.size();
  EXPECT_EQ(n, 1u);
}

TEST(LowerZero3Reduce, EachBackwardEndsWithTheReducesDone) {
  // The epilogue syncs the reduce stream after every backward: microbatch 1's first forward
  // kernel waits for microbatch 0's last reduce-scatter; without the rule nothing does
  // (with the in-flight limit off too).
  Plan p;
  p.dp = 4;
  p.zero = 3;
  p.microbatches = 2;
  p.bucket_bytes = 0;  // one reduce-scatter a unit
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.framework = framework_preset(Framework::kDeepSpeed);
  sc.framework.zero3_max_inflight_reduces = -1;
  auto first_fwd_of_mb1_waits = [](const Program& prog) {
    const TaskList& tasks = prog.ranks[0].tasks;
    int last_rs_mb0 = -1;
    for (const Task& t : tasks)
      if (testing::is_coll(t, CollOp::kReduceScatter) && t.microbatch == 0) last_rs_mb0 = t.id;
    for (const Task& t : tasks)
      if (t.stream == StreamKind::kCompute && t.microbatch == 1 && t.phase == Phase::kFwd)
        return std::find(t.deps.begin(), t.deps.end(), last_rs_mb0) != t.deps.end();
    return false;
  };
  EXPECT_TRUE(first_fwd_of_mb1_waits(lower(sc)));
  sc.framework.sync_reduces_each_backward = false;
  EXPECT_FALSE(first_fwd_of_mb1_waits(lower(sc)));
}

}  // namespace
}  // namespace stepcast
