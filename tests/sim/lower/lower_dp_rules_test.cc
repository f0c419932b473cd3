// Lowering tests: data-parallel gradients and ZeRO-1/2 parameters as the stacks reduce and
// gather them: DeepSpeed's engine (framework rules dp_reduce_after_backward,
// zero12_all_reduce, zero12_gather_after_step, sync_reduces_each_backward,
// grad_bucket_elements) and Megatron-Core's buckets (buckets_first_chunk_only;
// sim/plan/framework.h).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "sim/lower/lower.h"
#include "tests/sim/lower/lower_test_helpers.h"
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast {
namespace {

using testing::make_scenario;
using testing::Plan;
using testing::tiny_gpt;

// dp 4, two microbatches, every overlap on, 1 MB buckets: several buckets per step.
Scenario dp_scenario(int zero, Framework f) {
  Plan p;
  p.dp = 4;
  p.zero = zero;
  p.microbatches = 2;
  p.bucket_bytes = 1e6;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.framework = framework_preset(f);
  return sc;
}

bool is_grad_reduction(const Task& t) {
  return t.kind == TaskKind::kCollective && t.category == Category::kDpComm &&
         t.coll != CollOp::kAllGather;
}

bool is_backward(const Task& t) {
  return testing::is_compute(t.kind) &&
         (t.phase == Phase::kBwdInput || t.phase == Phase::kBwdWeight);
}

TEST(LowerDpRules, DeepSpeedZero0And1ReduceOnlyAfterTheLastBackward) {
  // DeepSpeed's engine.allreduce_gradients runs after the backward of the accumulation
  // boundary: no gradient bucket starts before the last backward kernel ends. Megatron-Core's
  // DDP with overlap_grad_reduce starts the first buckets during it.
  const testing::Synth s{.aux_free = false, .comm_ns_per_byte = 1.0};
  for (const int zero : {0, 1}) {
    for (const Framework f : {Framework::kMegatronCore, Framework::kDeepSpeed}) {
      SCOPED_TRACE(::testing::Message() << "zero " << zero << " " << framework_name(f));
      const Program prog = lower(dp_scenario(zero, f));
      const Timeline tl = testing::run(prog, s);
      const TaskList& tasks = prog.ranks[0].tasks;
      TimeNs backward_end = 0;
      for (const Task& t : tasks)
        if (is_backward(t)) backward_end = std::max(backward_end, tl.ranks[0].tasks[t.id].end);
      int buckets = 0, early = 0;
      for (const Task& t : tasks) {
        if (!is_grad_reduction(t)) continue;
        ++buckets;
        early += tl.ranks[0].tasks[t.id].start < backward_end;
      }
      EXPECT_GT(buckets, 1);
      if (f == Framework::kDeepSpeed)
        EXPECT_EQ(early, 0);
      else
        EXPECT_GT(early, 0);
    }
  }
}

TEST(LowerDpRules, DeepSpeedZero1And2AllReduceEachBucket) {
  // DeepSpeed's average_tensor all-reduces each bucket (allreduce_and_scatter) where the
  // distributed optimizer reduce-scatters it: the same buckets, the same bytes, the other
  // collective. Without ZeRO both all-reduce.
  for (const int zero : {0, 1, 2}) {
    const Program mc = lower(dp_scenario(zero, Framework::kMegatronCore));
    Scenario ds_sc = dp_scenario(zero, Framework::kDeepSpeed);
    ds_sc.framework.dp_reduce_after_backward = false;  // the same buckets at the same points
    const Program ds = lower(ds_sc);
    std::vector<std::pair<CollOp, double>> a, b;
    for (const Task& t : mc.ranks[0].tasks)
      if (is_grad_reduction(t)) a.emplace_back(t.coll, t.bytes);
    for (const Task& t : ds.ranks[0].tasks)
      if (is_grad_reduction(t)) b.emplace_back(t.coll, t.bytes);
    ASSERT_EQ(a.size(), b.size()) << "zero " << zero;
    ASSERT_GT(a.size(), 1u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, zero == 0 ? CollOp::kAllReduce : CollOp::kReduceScatter);
      EXPECT_EQ(b[i].first, CollOp::kAllReduce);
      EXPECT_DOUBLE_EQ(a[i].second, b[i].second);
    }
  }
}

TEST(LowerDpRules, DeepSpeedZero2SynchronizesAtTheEndOfEveryBackward) {
  // ZeRO-2 with overlap_comm: the epilogue synchronizes the device, so the first kernel of
  // microbatch 1's forward waits for the last reduction microbatch 0's backward issued.
  auto first_fwd_of_mb1_waits = [](const Scenario& sc) {
    const Program prog = lower(sc);
    const TaskList& tasks = prog.ranks[0].tasks;
    int last = -1;
    for (const Task& t : tasks)
      if (is_grad_reduction(t) && t.microbatch == 0) last = t.id;
    EXPECT_GE(last, 0);
    for (const Task& t : tasks)
      if (testing::is_compute(t.kind) && t.microbatch == 1 && t.phase == Phase::kFwd)
        return std::find(t.deps.begin(), t.deps.end(), last) != t.deps.end();
    return false;
  };
  Scenario sc = dp_scenario(2, Framework::kDeepSpeed);
  EXPECT_TRUE(first_fwd_of_mb1_waits(sc));
  sc.framework.sync_reduces_each_backward = false;
  EXPECT_FALSE(first_fwd_of_mb1_waits(sc));
}

TEST(LowerDpRules, DeepSpeedZero1GathersTheWholeGroupAfterTheStep) {
  // DeepSpeed's all_gather_dp_groups: one all-gather of the whole flat group, after the
  // optimizer step, even with overlap.param_gather. Megatron's distributed optimizer gathers
  // bucket by bucket, beside the forward (before the step's first microbatch here).
  auto gathers = [](const Scenario& sc, int* after_step) {
    const Program prog = lower(sc);
    int step = -1, n = 0;
    *after_step = 0;
    for (const Task& t : prog.ranks[0].tasks) {
      if (t.label == "opt.step") step = t.id;
      if (t.kind != TaskKind::kCollective || t.coll != CollOp::kAllGather) continue;
      ++n;
      *after_step += step >= 0 && std::find(t.deps.begin(), t.deps.end(), step) != t.deps.end();
    }
    return n;
  };
  int after = 0;
  EXPECT_GT(gathers(dp_scenario(1, Framework::kMegatronCore), &after), 1);
  EXPECT_EQ(after, 0);
  EXPECT_EQ(gathers(dp_scenario(1, Framework::kDeepSpeed), &after), 1);
  EXPECT_EQ(after, 1);
}

TEST(LowerDpRules, DeepSpeedBucketsHoldGradBucketElements) {
  // Without parallel.bucket_mb a DeepSpeed bucket holds grad_bucket_elements (5e8: more than
  // tiny_gpt's ~7e6 parameters, so one bucket); set to 2e5, every bucket but the last holds
  // exactly 2e5 elements (fp32 gradients: 8e5 bytes) and the last at most that, so the count
  // is ceil(params / 2e5).
  Scenario sc = dp_scenario(0, Framework::kDeepSpeed);
  sc.parallel.bucket_bytes = 0;
  auto buckets = [](const Scenario& s) {
    std::vector<double> out;
    const Program prog = lower(s);
    for (const Task& t : prog.ranks[0].tasks)
      if (is_grad_reduction(t)) out.push_back(t.bytes);
    return out;
  };
  const std::vector<double> whole = buckets(sc);
  ASSERT_EQ(whole.size(), 1u);
  const double params = whole[0] / 4;  // fp32 gradients
  sc.framework.grad_bucket_elements = 2e5;
  const std::vector<double> cut = buckets(sc);
  ASSERT_EQ(cut.size(), static_cast<size_t>(std::ceil(params / 2e5)));
  for (size_t i = 0; i + 1 < cut.size(); ++i) EXPECT_DOUBLE_EQ(cut[i], 2e5 * 4);
  EXPECT_LE(cut.back(), 2e5 * 4);
}

TEST(LowerDpRules, DeepSpeedRandomPlansOnlyGetSlowerUnderTheEngineRules) {
  // Over random plans (zero 0-2, pipelines, MoE) under the deepspeed preset: its engine's
  // orderings (reduce after the backward, sync at each ZeRO-2 backward's end, parameters
  // gathered after the step) only delay work, so the step (synthetic durations,
  // communication by bytes) is never shorter than with those rules off and the same
  // buckets; the plan stays valid and folds like full fidelity.
  std::mt19937 rng(11);
  int longer = 0;
  for (int trial = 0; trial < 24; ++trial) {
    std::string what;
    Scenario sc = testing::random_dp_scenario(rng, Framework::kDeepSpeed, &what, [](Plan& p) {
      if (p.zero == 3) p.zero = 2;
      p.overlap_grad = p.overlap_param = true;
    });
    sc.framework.grad_bucket_elements = 0;  // the plan's buckets
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << what);
    const Program full = lower(sc, LowerOptions{false, {}});
    const Program folded = lower(sc, LowerOptions{true, {}});
    Scenario off = sc;
    off.framework.dp_reduce_after_backward = false;
    off.framework.sync_reduces_each_backward = false;
    off.framework.zero12_gather_after_step = false;
    const Program without = lower(off, LowerOptions{false, {}});
    const testing::Synth s{.aux_free = false, .comm_ns_per_byte = 1.0};
    const TimeNs with_ns = testing::run(full, s).step_ns;
    const TimeNs without_ns = testing::run(without, s).step_ns;
    EXPECT_GE(with_ns, without_ns);
    longer += with_ns > without_ns;
    EXPECT_EQ(testing::run(folded, s).step_ns, with_ns);
  }
  EXPECT_GT(longer, 12);
}

TEST(LowerDpRules, MegatronBucketsOnlyTheFirstStagesFirstChunk) {
  // Megatron-Core's DistributedDataParallel drops bucketing on pipeline ranks > 0 and for
  // model chunks after the first: with pp 2 and two virtual chunks, zero 1 and 1 MB buckets,
  // only stage 0's chunk 0 reduces (and gathers) in several buckets; each other chunk in
  // one gradient reduce-scatter and one parameter all-gather. Without the rule every chunk
  // is cut.
  Plan p;
  p.pp = 2;
  p.vpp = 2;
  p.dp = 2;
  p.zero = 1;
  p.schedule = Schedule::kInterleaved;
  p.microbatches = 4;
  p.bucket_bytes = 1e6;
  Scenario sc = make_scenario(tiny_gpt(8), p);
  auto per_chunk = [](const Program& prog, int stage, CollOp op) {
    std::vector<int> n(2, 0);
    for (const RankProgram& rp : prog.ranks)
      if (rp.pp_stage == stage) {
        for (const Task& t : rp.tasks)
          if (t.kind == TaskKind::kCollective && t.category == Category::kDpComm && t.coll == op &&
              t.chunk >= 0)
            ++n[static_cast<size_t>(t.chunk)];
        break;
      }
    return n;
  };
  const Program prog = lower(sc);
  for (const CollOp op : {CollOp::kReduceScatter, CollOp::kAllGather}) {
    SCOPED_TRACE(op == CollOp::kAllGather ? "all-gather" : "reduce-scatter");
    EXPECT_GT(per_chunk(prog, 0, op)[0], 1);
    EXPECT_EQ(per_chunk(prog, 0, op)[1], 1);
    EXPECT_EQ(per_chunk(prog, 1, op), (std::vector<int>{1, 1}));
  }
  sc.framework.buckets_first_chunk_only = false;
  const Program cut = lower(sc);
  for (const int stage : {0, 1})
    for (const int n : per_chunk(cut, stage, CollOp::kReduceScatter)) EXPECT_GT(n, 1);
}

TEST(LowerDpRules, MegatronChecksEachBucketOnTheHostBeforeItsCollective) {
  // Megatron-Core's check_for_nan_in_grad: every gradient bucket's collective waits for a
  // norm of exactly that bucket (its bytes read once) on the compute stream, which the host
  // waits for (host_sync); zero 0 and 1, with and without overlap.grad_reduce. Off: none.
  for (const int zero : {0, 1})
    for (const bool overlap : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "zero " << zero << " overlap " << overlap);
      Scenario sc = dp_scenario(zero, Framework::kMegatronCore);
      sc.parallel.overlap_grad_reduce = overlap;
      const Program prog = lower(sc);
      const TaskList& tasks = prog.ranks[0].tasks;
      int buckets = 0, checks = 0;
      for (const Task& t : tasks) {
        checks += t.what == "grad_norm_check";
        if (!is_grad_reduction(t)) continue;
        ++buckets;
        ASSERT_EQ(t.deps.size(), 1u) << t.label;
        const Task& c = tasks[static_cast<size_t>(t.deps[0])];
        EXPECT_EQ(c.what, "grad_norm_check") << t.label;
        EXPECT_TRUE(c.host_sync);
        EXPECT_EQ(c.stream, StreamKind::kCompute);
        EXPECT_DOUBLE_EQ(c.bytes_read, t.bytes);
      }
      EXPECT_GT(buckets, overlap ? 1 : 0);
      EXPECT_EQ(checks, buckets);
      sc.framework.grad_nan_check = false;
      const Program off = lower(sc);
      for (const Task& t : off.ranks[0].tasks) EXPECT_NE(t.what, "grad_norm_check");
    }
}

TEST(LowerDpRules, MegatronGradChecksOnlyAddTime) {
  // Over random plans (zero 0-1): the checks add kernels and host waits, never remove work,
  // so the step (synthetic durations) is never shorter with them; valid, folded = full.
  std::mt19937 rng(23);
  int longer = 0;
  for (int trial = 0; trial < 24; ++trial) {
    std::string what;
    Scenario sc = testing::random_dp_scenario(rng, Framework::kMegatronCore, &what,
                                              [](Plan& p) { p.zero = std::min(p.zero, 1); });
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << what);
    const testing::Synth s{.aux_free = false, .comm_ns_per_byte = 1.0};
    const Program full = lower(sc, LowerOptions{false, {}});
    const TimeNs with_ns = testing::run(full, s).step_ns;
    EXPECT_EQ(testing::run(lower(sc, LowerOptions{true, {}}), s).step_ns, with_ns);
    sc.framework.grad_nan_check = false;
    const TimeNs without_ns = testing::run(lower(sc, LowerOptions{false, {}}), s).step_ns;
    EXPECT_GE(with_ns, without_ns);
    longer += with_ns > without_ns;
  }
  EXPECT_GT(longer, 12);
}

}  // namespace
}  // namespace stepcast
