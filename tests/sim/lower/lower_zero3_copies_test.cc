// Lowering tests: the GPU copies each stack makes around its ZeRO-3 / FSDP collectives
// (framework rule zero3_copies, sim/plan/framework.h; docs/frameworks.md).
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "sim/engine/engine.h"
#include "sim/lower/lower.h"
#include "tests/sim/lower/lower_test_helpers.h"
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast {
namespace {

using testing::make_scenario;
using testing::Plan;
using testing::tiny_gpt;

Scenario zero3(Framework f, int dp) {
  Plan p;
  p.dp = dp;
  p.zero = 3;
  p.microbatches = 2;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.framework = framework_preset(f);
  return sc;
}

bool is_ag(const Task& t) { return testing::is_coll(t, CollOp::kAllGather); }
bool is_rs(const Task& t) { return testing::is_coll(t, CollOp::kReduceScatter); }

// The copies a task waits for directly, by `what`.
int waits_for(const TaskList& tasks, const Task& t, const std::string& what) {
  int n = 0;
  for (int d : t.deps) n += tasks[static_cast<size_t>(d)].what == what;
  return n;
}

TEST(LowerZero3Copies, DeepSpeedRebuildsEveryFetchBeforeItsModule) {
  // DeepSpeed (AllGatherCoalescedHandle.wait): each fetch waited for is rebuilt by a
  // torch.cat of its dp slices on the compute stream: one copy per all-gather, reading and
  // writing the gathered bytes, ceil(4 / 128) = 1 launch, and the next compute task (the
  // GEMM the fetch is for) comes after it on the same stream. Each reduce-scatter waits for
  // the bucket copy, interleave cat and divide of its bytes on the reduce stream: 3 reads
  // and 3 writes of them, 3 launches.
  const Scenario sc = zero3(Framework::kDeepSpeed, 4);
  const Program prog = lower(sc);
  const TaskList& tasks = prog.ranks[0].tasks;
  int ag = 0, rs = 0, cats = 0, preps = 0, gemms_after = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    // The persistent parameters' gathers after the step are used as gathered, not rebuilt.
    ag += is_ag(t) && t.label.find("persist") == std::string::npos;
    if (is_rs(t)) {
      ++rs;
      ASSERT_EQ(waits_for(tasks, t, "z3_bucket_cat_div"), 1) << t.label;
      for (int d : t.deps) {
        const Task& p = tasks[static_cast<size_t>(d)];
        if (p.what != "z3_bucket_cat_div") continue;
        EXPECT_EQ(p.stream, StreamKind::kDp);
        EXPECT_DOUBLE_EQ(p.bytes_read, 3 * t.bytes);
        EXPECT_DOUBLE_EQ(p.bytes_written, 3 * t.bytes);
        EXPECT_EQ(p.launches, 3);
        ++preps;
      }
    }
    if (t.what != "z3_cat") continue;
    ++cats;
    EXPECT_EQ(t.stream, StreamKind::kCompute);
    EXPECT_EQ(t.kind, TaskKind::kMemoryBound);
    EXPECT_EQ(t.launches, 1);
    EXPECT_EQ(t.category, Category::kDpComm);
    int gathers = 0;
    for (int d : t.deps)
      if (is_ag(tasks[static_cast<size_t>(d)])) {
        EXPECT_DOUBLE_EQ(tasks[static_cast<size_t>(d)].bytes, t.bytes_read) << t.label;
        ++gathers;
      }
    EXPECT_EQ(gathers, 1) << t.label;
    // The next compute-stream task is the module whose parameters were rebuilt: a kernel
    // of the same layer and microbatch (a Linear's GEMM, or the embedding's lookup for its
    // unit fetch), not another copy.
    size_t j = i + 1;
    while (j < tasks.size() && tasks[j].stream != StreamKind::kCompute) ++j;
    ASSERT_LT(j, tasks.size());
    EXPECT_NE(tasks[j].what, "z3_cat") << t.label;
    EXPECT_EQ(tasks[j].layer, t.layer) << t.label << " then " << tasks[j].label;
    EXPECT_EQ(tasks[j].microbatch, t.microbatch) << t.label << " then " << tasks[j].label;
    gemms_after += tasks[j].kind == TaskKind::kGemm;
  }
  EXPECT_GT(ag, 0);
  EXPECT_GT(rs, 0);
  EXPECT_EQ(cats, ag);
  EXPECT_EQ(preps, rs);
  EXPECT_GT(gemms_after, cats / 2);  // most fetches are a Linear's weight
  // Without the rule the same collectives and no copies.
  Scenario none = sc;
  none.framework.zero3_copies = Zero3Copies::kNone;
  int ag_none = 0, rs_none = 0;
  const Program none_prog = lower(none);
  for (const Task& t : none_prog.ranks[0].tasks) {
    ag_none += is_ag(t) && t.label.find("persist") == std::string::npos;
    rs_none += is_rs(t);
    EXPECT_EQ(t.what.rfind("z3_", 0), std::string::npos) << t.label;
  }
  EXPECT_EQ(ag_none, ag);
  EXPECT_EQ(rs_none, rs);
}

TEST(LowerZero3Copies, TheCatLaunchesOneKernelPer128Slices) {
  // PyTorch's cat copies at most 128 inputs a kernel (Shape.cu CAT_ARRAY_BATCH_SIZE):
  // dp 128 -> 1, 129 -> 2, 256 -> 2, 384 -> 3.
  for (const auto& [dp, launches] : {std::pair{128, 1}, {129, 2}, {256, 2}, {384, 3}}) {
    Scenario sc = zero3(Framework::kDeepSpeed, dp);
    sc.training.global_batch = dp * 2;
    int cats = 0;
    const Program prog = lower(sc);
    for (const Task& t : prog.ranks[0].tasks)
      if (t.what == "z3_cat") {
        EXPECT_EQ(t.launches, launches) << "dp " << dp;
        ++cats;
      }
    EXPECT_GT(cats, 0) << "dp " << dp;
  }
}

TEST(LowerZero3Copies, Fsdp2CopiesOutEachGroupAndChunkCatsItsGradients) {
  // FSDP2 (_fsdp_collectives.py): after each group's all-gather, the copy-out of the
  // gathered bytes into the parameters on the compute stream before the group's compute
  // (one kernel); before each reduce-scatter, foreach_reduce's chunk-cat of its bytes on the
  // compute stream.
  const Scenario sc = zero3(Framework::kFsdp2, 4);
  const Program prog = lower(sc);
  const TaskList& tasks = prog.ranks[0].tasks;
  int ag = 0, rs = 0, outs = 0;
  for (const Task& t : tasks) {
    ag += is_ag(t);
    if (is_rs(t)) {
      ++rs;
      ASSERT_EQ(waits_for(tasks, t, "z3_chunk_cat"), 1) << t.label;
      for (int d : t.deps) {
        const Task& p = tasks[static_cast<size_t>(d)];
        if (p.what != "z3_chunk_cat") continue;
        EXPECT_EQ(p.stream, StreamKind::kCompute);
        EXPECT_DOUBLE_EQ(p.bytes_read, t.bytes);
      }
    }
    if (t.what != "z3_copy_out") continue;
    ++outs;
    EXPECT_EQ(t.stream, StreamKind::kCompute);
    EXPECT_EQ(t.launches, 1);
    double gathered = 0;
    for (int d : t.deps)
      if (is_ag(tasks[static_cast<size_t>(d)])) gathered += tasks[static_cast<size_t>(d)].bytes;
    EXPECT_DOUBLE_EQ(gathered, t.bytes_read) << t.label;
  }
  EXPECT_GT(ag, 0);
  EXPECT_EQ(outs, ag);  // dense blocks: one gather a group
  EXPECT_GT(rs, 0);
  // Megatron-FSDP gathers into the buffers the parameters view: no copies.
  Scenario mc = sc;
  mc.framework = framework_preset(Framework::kMegatronCore);
  const Program mc_prog = lower(mc);
  for (const Task& t : mc_prog.ranks[0].tasks)
    EXPECT_EQ(t.what.rfind("z3_", 0), std::string::npos) << t.label;
}

TEST(LowerZero3Copies, RandomPlansOnlyGetSlower) {
  // Over random ZeRO-3 plans under each copying stack: the copies only add work, so the
  // step (synthetic durations, all ranks) is never shorter than without them, and strictly
  // longer when compute-stream copies exist; the plan never deadlocks.
  std::mt19937 rng(3);
  int longer = 0;
  for (int trial = 0; trial < 24; ++trial) {
    std::string what;
    Scenario sc = testing::random_zero3_scenario(
        rng, trial % 2 ? Framework::kDeepSpeed : Framework::kFsdp2, &what);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << what);
    const testing::Synth synth{.aux_free = false, .comm_ns_per_byte = 1.0};
    const Program with = lower(sc);
    Scenario none = sc;
    none.framework.zero3_copies = Zero3Copies::kNone;
    const Program without = lower(none);
    const TimeNs a = simulate(with, testing::synth_durations(with, synth)).step_ns;
    const TimeNs b = simulate(without, testing::synth_durations(without, synth)).step_ns;
    EXPECT_GE(a, b);
    longer += a > b;
  }
  EXPECT_GT(longer, 12);
}

TEST(LowerZero3Copies, PresetsChooseTheirCopies) {
  EXPECT_EQ(framework_preset(Framework::kDeepSpeed).zero3_copies, Zero3Copies::kDeepSpeed);
  EXPECT_EQ(framework_preset(Framework::kFsdp2).zero3_copies, Zero3Copies::kFsdp2);
  EXPECT_EQ(framework_preset(Framework::kMegatronCore).zero3_copies, Zero3Copies::kNone);
  EXPECT_STREQ(zero3_copies_name(Zero3Copies::kFsdp2), "fsdp2");
}

}  // namespace
}  // namespace stepcast
