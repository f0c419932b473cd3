// Lowering tests: ZeRO-3 / FSDP blocks kept unsharded from their forward to their backward
// (framework rule zero3_reshard_after_forward, sim/plan/framework.h).
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

int gathers(const Program& prog) { return testing::count_colls(prog, CollOp::kAllGather); }

TEST(LowerReshard, KeptUnshardedABlockIsGatheredOncePerForwardAndBackward) {
  // One microbatch, no pipeline, tiny_gpt(4): 6 units (embedding, 4 layers, head). Resharded
  // after the forward, each is gathered for its forward and again for its backward: 12
  // gathers; kept unsharded, only for its forward: 6, and no more FSDP2 copy-outs than
  // gathers. The gathered copies are all freed (validate_program balances allocs and frees),
  // and the peak memory is higher by up to all but one unit's parameters.
  Plan p;
  p.dp = 4;
  p.zero = 3;
  p.microbatches = 1;
  Scenario sc = make_scenario(tiny_gpt(4), p);
  sc.framework = framework_preset(Framework::kFsdp2);
  const Program resharded = lower(sc);
  sc.framework.zero3_reshard_after_forward = false;
  const Program kept = lower(sc);
  EXPECT_EQ(gathers(resharded), 12);
  EXPECT_EQ(gathers(kept), 6);
  int copies = 0;
  for (const Task& t : kept.ranks[0].tasks) copies += t.what == "z3_copy_out";
  EXPECT_EQ(copies, 6);
  EXPECT_NO_THROW(validate_program(kept));
  const testing::Synth s{.aux_free = false, .comm_ns_per_byte = 1.0};
  const RankTimeline a = testing::run(resharded, s).ranks[0];
  const RankTimeline b = testing::run(kept, s).ranks[0];
  EXPECT_GT(b.peak_bytes, a.peak_bytes);
}

TEST(LowerReshard, RandomPipelinedPlansBalanceAndOnlyGetFaster) {
  // Over random plans (1F1B and interleaved pipelines with several microbatches in flight,
  // ZB-H1, recompute, MoE) under FSDP2 with the blocks kept unsharded: every gathered copy is
  // freed once, a forward of a later microbatch finds a block still unsharded and gathers
  // nothing, so there are never more gathers than with resharding, and the step
  // (synthetic durations) is never longer; folded equals full fidelity.
  std::mt19937 rng(77);
  int fewer = 0;
  for (int trial = 0; trial < 24; ++trial) {
    std::string what;
    Scenario sc = testing::random_zero3_scenario(
        rng, trial % 2 ? Framework::kFsdp2 : Framework::kMegatronCore, &what);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << what);
    const Program resharded = lower(sc, LowerOptions{false, {}});
    sc.framework.zero3_reshard_after_forward = false;
    const Program full = lower(sc, LowerOptions{false, {}});
    const Program folded = lower(sc, LowerOptions{true, {}});
    EXPECT_NO_THROW(validate_program(full));
    EXPECT_LE(gathers(full), gathers(resharded));
    fewer += gathers(full) < gathers(resharded);
    const testing::Synth s{.aux_free = false, .comm_ns_per_byte = 1.0};
    const TimeNs kept_ns = testing::run(full, s).step_ns;
    EXPECT_LE(kept_ns, testing::run(resharded, s).step_ns);
    EXPECT_EQ(testing::run(folded, s).step_ns, kept_ns);
  }
  EXPECT_EQ(fewer, 24);
}

int reduces(const Program& prog) { return testing::count_colls(prog, CollOp::kReduceScatter); }

// FSDP2 as torch.distributed.pipelining runs it: no reshard after the forward nor after
// each microbatch's backward, gradients reduce-scattered once.
void as_pipelining(Scenario& sc) {
  sc.framework.zero3_reshard_after_forward = false;
  sc.framework.zero3_reshard_after_backward = false;
  sc.framework.zero3_reduce_every_microbatch = false;
}

TEST(LowerReshard, PipeliningGathersOnceAndReducesOnce) {
  // tiny_gpt(4), 6 units, 4 microbatches, one reduce-scatter a unit (bucket_bytes 0). Each
  // microbatch resharding: 2 x 6 x 4 = 48 gathers and 6 x 4 = 24 reduce-scatters. As
  // pipelining runs FSDP2: each unit gathered once, at its first forward (6), and
  // reduce-scattered once, in the last microbatch (6), with the memory balanced.
  Plan p;
  p.dp = 4;
  p.zero = 3;
  p.microbatches = 4;
  p.bucket_bytes = 0;
  Scenario sc = make_scenario(tiny_gpt(4), p);
  sc.framework = framework_preset(Framework::kFsdp2);
  const Program each = lower(sc);
  EXPECT_EQ(gathers(each), 48);
  EXPECT_EQ(reduces(each), 24);
  as_pipelining(sc);
  const Program once = lower(sc);
  EXPECT_EQ(gathers(once), 6);
  EXPECT_EQ(reduces(once), 6);
  for (const Task& t : once.ranks[0].tasks) {
    if (t.kind == TaskKind::kCollective && t.coll == CollOp::kAllGather) {
      EXPECT_EQ(t.microbatch, 0) << t.label;
    }
    if (t.kind == TaskKind::kCollective && t.coll == CollOp::kReduceScatter) {
      EXPECT_EQ(t.microbatch, 3) << t.label;
    }
  }
  EXPECT_NO_THROW(validate_program(once));
  // Each rule alone: kept after the forward only halves the gathers (24); kept after the
  // backward only, a unit is gathered for its first forward and first backward (12).
  Scenario fwd = make_scenario(tiny_gpt(4), p);
  fwd.framework = framework_preset(Framework::kFsdp2);
  fwd.framework.zero3_reshard_after_forward = false;
  EXPECT_EQ(gathers(lower(fwd)), 24);
  Scenario bwd = make_scenario(tiny_gpt(4), p);
  bwd.framework = framework_preset(Framework::kFsdp2);
  bwd.framework.zero3_reshard_after_backward = false;
  const Program bwd_prog = lower(bwd);
  EXPECT_EQ(gathers(bwd_prog), 12);
  EXPECT_NO_THROW(validate_program(bwd_prog));
}

TEST(LowerReshard, RandomPlansAsPipeliningBalanceAndOnlyGetFaster) {
  // Over random ZeRO-3 plans under FSDP2's pipelining rules: memory balanced, never more
  // gathers or reduce-scatters than resharding and reducing every microbatch, the step never
  // longer, folded like full fidelity.
  std::mt19937 rng(5);
  for (int trial = 0; trial < 24; ++trial) {
    std::string what;
    Scenario sc = testing::random_zero3_scenario(rng, Framework::kFsdp2, &what);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << what);
    const Program each = lower(sc, LowerOptions{false, {}});
    as_pipelining(sc);
    const Program full = lower(sc, LowerOptions{false, {}});
    const Program folded = lower(sc, LowerOptions{true, {}});
    EXPECT_NO_THROW(validate_program(full));
    EXPECT_LE(gathers(full), gathers(each));
    EXPECT_LE(reduces(full), reduces(each));
    const testing::Synth s{.aux_free = false, .comm_ns_per_byte = 1.0};
    const TimeNs once_ns = testing::run(full, s).step_ns;
    EXPECT_LE(once_ns, testing::run(each, s).step_ns);
    EXPECT_EQ(testing::run(folded, s).step_ns, once_ns);
  }
}

TEST(LowerReshard, EveryPresetReshardsByDefault) {
  for (const Framework f :
       {Framework::kMegatronCore, Framework::kMegatronLm, Framework::kMegatronDeepSpeed,
        Framework::kDeepSpeed, Framework::kFsdp2})
    EXPECT_TRUE(framework_preset(f).zero3_reshard_after_forward &&
                framework_preset(f).zero3_reshard_after_backward &&
                framework_preset(f).zero3_reduce_every_microbatch)
        << framework_name(f);
}

}  // namespace
}  // namespace stepcast

namespace stepcast {
namespace {

TEST(LowerFsdp2Reduce, EachChunkCatWaitsForThePreviousReduceScatter) {
  // FSDP2's post-backward makes the compute stream wait for the previous group's
  // reduce-scatter before the next group's chunk-cat: the chunk-cat before reduce-scatter j
  // depends on j - 1 (for every j > 0 of the step); with no limit (-1) on none.
  Plan p;
  p.dp = 4;
  p.zero = 3;
  p.microbatches = 2;
  p.bucket_bytes = 0;
  Scenario sc = make_scenario(testing::tiny_gpt(4), p);
  sc.framework = framework_preset(Framework::kFsdp2);
  auto chained = [](const Program& prog) {
    const TaskList& tasks = prog.ranks[0].tasks;
    std::vector<int> rs;
    int waits = 0;
    for (const Task& t : tasks) {
      if (t.kind == TaskKind::kCollective && t.coll == CollOp::kReduceScatter) rs.push_back(t.id);
      if (t.what != "z3_chunk_cat" || rs.empty()) continue;
      for (int d : t.deps) waits += d == rs.back();
    }
    return std::pair{waits, static_cast<int>(rs.size())};
  };
  const auto [with, n] = chained(lower(sc));
  EXPECT_EQ(n, 12);  // 6 units x 2 microbatches
  EXPECT_EQ(with, n - 1);
  sc.framework.zero3_max_inflight_reduces = -1;
  EXPECT_EQ(chained(lower(sc)).first, 0);
}

}  // namespace
}  // namespace stepcast
