// Lowering tests: Megatron-Core's defer_embedding_wgrad_compute (FrameworkRules; the output
// layer's weight gradients of the first wgrad_deferral_limit calls left to a drain after the
// stage's last backward, schedules.py finish_embedding_wgrad_compute). Each test fails on
// the lowering without the rule.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/lower/lower.h"
#include "tests/sim/lower/lower_test_helpers.h"
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast {
namespace {

using testing::alloc_bytes;
using testing::make_scenario;
using testing::Plan;
using testing::run;
using testing::tiny_gpt;

int index_of(const RankProgram& rp, const std::string& label) {
  for (size_t i = 0; i < rp.tasks.size(); ++i)
    if (rp.tasks[i].label == label) return static_cast<int>(i);
  return -1;
}

bool depends_on(const Task& t, int id) {
  for (const int d : t.deps)
    if (d == id) return true;
  return false;
}

// tp 2 with sequence parallel, pp 2, 4 microbatches; the last stage's first rank.
Scenario deferred_plan(int limit, bool defer = true) {
  Plan p;
  p.tp = 2;
  p.pp = 2;
  p.sp = true;
  p.microbatches = 4;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.framework.defer_embedding_wgrad_compute = defer;
  sc.framework.wgrad_deferral_limit = limit;
  return sc;
}

const RankProgram& last_stage(const Program& prog) {
  for (const RankProgram& rp : prog.ranks)
    if (rp.pp_stage == 1) return rp;
  return prog.ranks.back();
}

// With limit L (0: every call), microbatch k < L computes no output-layer weight gradient
// in its backward and no re-gather of the layer's input for it; after the stage's last
// backward task come, in microbatch order, each deferred call's input all-gather over tp and
// its weight-gradient GEMM waiting for it, the gather of call i issued after the GEMM of call
// i - 2 (two buffers). Microbatches k >= L run as without the rule.
TEST(LowerDeferWgrad, DeferredCallsRunAfterTheLastBackward) {
  for (const int limit : {0, 1, 3, 9}) {
    const int m = 4;
    const int deferred = limit == 0 ? m : std::min(limit, m);
    const Program prog = lower(deferred_plan(limit));
    validate_program(prog);
    const RankProgram& rp = last_stage(prog);
    int last_bwd = -1;
    for (size_t i = 0; i < rp.tasks.size(); ++i)
      if (rp.tasks[i].label.rfind("bwd.", 0) == 0) last_bwd = static_cast<int>(i);
    ASSERT_GE(last_bwd, 0);
    std::vector<int> gemms;
    for (int k = 0; k < m; ++k) {
      const std::string mb = ".mb" + std::to_string(k);
      const int gemm = index_of(rp, "wgt.head.logits" + mb);
      const int inline_gather = index_of(rp, "bwd.head.logits.in.wgrad" + mb);
      const int drain_gather = index_of(rp, "drain.head.logits.in.wgrad" + mb);
      ASSERT_GE(gemm, 0) << limit << " " << k;
      if (k < deferred) {
        EXPECT_GT(gemm, last_bwd) << limit << " " << k;
        EXPECT_EQ(inline_gather, -1) << limit << " " << k;
        ASSERT_GT(drain_gather, last_bwd) << limit << " " << k;
        EXPECT_TRUE(depends_on(rp.tasks[static_cast<size_t>(gemm)], drain_gather));
        if (k >= 2) {
          EXPECT_TRUE(depends_on(rp.tasks[static_cast<size_t>(drain_gather)], gemms[k - 2]));
        }
        if (!gemms.empty()) {
          EXPECT_GT(gemm, gemms.back());
        }
        gemms.push_back(gemm);
      } else {
        EXPECT_LT(gemm, last_bwd) << limit << " " << k;
        EXPECT_GE(inline_gather, 0) << limit << " " << k;
        EXPECT_EQ(drain_gather, -1) << limit << " " << k;
      }
    }
    // The first stage has no output layer: nothing changes there.
    EXPECT_EQ(prog.ranks[0].tasks.size(), lower(deferred_plan(limit, false)).ranks[0].tasks.size());
  }
  // Off: every weight gradient in its backward, no drain.
  const Program off = lower(deferred_plan(0, false));
  const RankProgram& rp = last_stage(off);
  for (const Task& t : rp.tasks) EXPECT_EQ(t.label.rfind("drain.", 0), std::string::npos);
  EXPECT_EQ(alloc_bytes(rp, "dwo.head.mb0"), 0.0);
}

// Each deferred call holds its output gradient [T, V/tp] and its input shard [T/tp, h] (bf16)
// from its backward to its drain GEMM: T = 512 tokens, V/tp = ceil(2048 / 256) x 128 = 1024
// rows, h = 256: 512 x 1024 x 2 + 256 x 256 x 2 = 1,179,648 bytes. Without sequence parallel
// the input is whole: 512 x 1024 x 2 + 512 x 256 x 2 = 1,310,720.
TEST(LowerDeferWgrad, DeferredCallsHoldTheirOutputGradientAndInput) {
  const Program prog = lower(deferred_plan(2));
  const RankProgram& rp = last_stage(prog);
  EXPECT_EQ(alloc_bytes(rp, "dwo.head.mb0"), 1179648.0);
  EXPECT_EQ(alloc_bytes(rp, "dwo.head.mb1"), 1179648.0);
  EXPECT_EQ(alloc_bytes(rp, "dwo.head.mb2"), 0.0);
  Scenario no_sp = deferred_plan(1);
  no_sp.parallel.sequence_parallel = false;
  const Program whole = lower(no_sp);
  EXPECT_EQ(alloc_bytes(last_stage(whole), "dwo.head.mb0"), 1310720.0);
  // Without sequence parallel there is no gather: the drain's GEMMs only.
  for (const Task& t : last_stage(whole).tasks)
    EXPECT_EQ(t.label.rfind("drain.", 0), std::string::npos) << t.label;
  // The held bytes raise the last stage's peak: the engine's peak grows by at most their sum.
  const Program prog_off = lower(deferred_plan(2, false));
  const Timeline on = run(prog), off = run(prog_off);
  size_t r = 0;
  while (prog.ranks[r].pp_stage != 1) ++r;
  EXPECT_GT(on.ranks[r].peak_bytes, off.ranks[r].peak_bytes);
  EXPECT_LE(on.ranks[r].peak_bytes, off.ranks[r].peak_bytes + 2 * 1179648.0);
}

// With multi-token prediction the MTP module's call of the output layer comes first in each
// microbatch's forward and the buffers count calls: limit 3 defers mb 0's two calls and mb
// 1's MTP call, not mb 1's own.
TEST(LowerDeferWgrad, MtpCallsCountTowardTheLimit) {
  Scenario sc = deferred_plan(3);
  sc.model.mtp_layers = 1;
  const Program prog = lower(sc);
  const RankProgram& rp = last_stage(prog);
  EXPECT_GT(alloc_bytes(rp, "dwo.mtp0.head.mb0"), 0.0);
  EXPECT_GT(alloc_bytes(rp, "dwo.head.mb0"), 0.0);
  EXPECT_GT(alloc_bytes(rp, "dwo.mtp0.head.mb1"), 0.0);
  EXPECT_EQ(alloc_bytes(rp, "dwo.head.mb1"), 0.0);
  // Drained in the order they were buffered.
  EXPECT_LT(index_of(rp, "drain.mtp0.head.logits.in.wgrad.mb0"),
            index_of(rp, "drain.head.logits.in.wgrad.mb0"));
  EXPECT_LT(index_of(rp, "drain.head.logits.in.wgrad.mb0"),
            index_of(rp, "drain.mtp0.head.logits.in.wgrad.mb1"));
}

}  // namespace
}  // namespace stepcast
