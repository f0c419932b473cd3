// Lowering tests: data parallel and ZeRO collectives (gradient buckets, sharded gradients,
// parameter gathers, expert data parallel, dp x cp groups) and what lower() refuses.
#include "sim/lower/lower.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "model/error.h"
#include "model/memory.h"
#include "model/params.h"
#include "sim/cluster/profile.h"
#include "sim/cost/coster.h"
#include "sim/engine/engine.h"
#include "sim/lower/schedule.h"
#include "sim/program/matching.h"
#include "sim/program/program_json.h"
#include "tests/sim/lower/lower_test_helpers.h"
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast {
namespace {

using testing::alloc_bytes;
using testing::make_scenario;
using testing::Plan;
using testing::run;
using testing::state_bytes;
using testing::Synth;
using testing::synth_durations;
using testing::tiny_gpt;
using testing::tiny_moe;

// ---- collective structure ----------------------------------------------------------------

struct CollTotals {
  double elements = 0;
  int count = 0;
};

CollTotals dp_collectives(const RankProgram& rp) {
  CollTotals c;
  for (const Task& t : rp.tasks)
    if (t.kind == TaskKind::kCollective && t.category == Category::kDpComm) {
      c.elements += t.bytes / dtype_bytes(t.dtype);
      ++c.count;
    }
  return c;
}

TEST(Lower, Zero3MovesOneAndAHalfTimesTheElementsOfZero1) {
  // ZeRO paper section 7: stages 1/2 move 2 Psi per step (reduce-scatter grads + allgather
  // params), stage 3 moves 3 Psi (allgather in forward and again in backward + reduce-scatter).
  // One microbatch so that per-microbatch collectives happen once. Counted in elements: grads
  // travel as fp32, parameters as bf16.
  Plan p;
  p.dp = 4;
  p.microbatches = 1;
  p.zero = 1;
  const CollTotals z1 = dp_collectives(lower(make_scenario(tiny_gpt(), p)).ranks[0]);
  p.zero = 3;
  const CollTotals z3 = dp_collectives(lower(make_scenario(tiny_gpt(), p)).ranks[0]);
  ASSERT_GT(z1.elements, 0);
  EXPECT_NEAR(z3.elements / z1.elements, 1.5, 1e-12);
}

TEST(Lower, Zero3ReduceScattersPerUnitOrInBucketsAndSyncWithoutOverlap) {
  // tiny_gpt (8 layers) at dp 4, ZeRO-3, 2 microbatches: gradients are reduce-scattered
  // every microbatch.
  //  - bucket_mb not given: one reduce-scatter per unit with gradients (embedding, 8 layers,
  //    head = 10) per microbatch, each of that unit's bytes (FSDP's per-unit hook);
  //  - bucket_mb given: whole units merged in backward order until they hold at least that
  //    much (FSDP's size-based wrap). fp32 gradients: head 524,800 x 4 = 2.10 MB, a layer
  //    789,760 x 4 = 3.16 MB, embedding 2.10 MB; with 4 MB: head+L7, L6+L5, L4+L3, L2+L1,
  //    L0+embedding (the last at the end of the backward): 5 per microbatch;
  //  - overlap.grad_reduce false: the next compute waits for each reduce-scatter.
  Plan p;
  p.dp = 4;
  p.zero = 3;
  p.microbatches = 2;
  const auto grad_rs = [](const Program& prog) {
    std::vector<const Task*> out;
    for (const Task& t : prog.ranks[0].tasks)
      if (testing::is_coll(t, CollOp::kReduceScatter)) out.push_back(&t);
    return out;
  };
  p.bucket_bytes = 0;
  const Program per_unit = lower(make_scenario(tiny_gpt(), p));
  const auto units = grad_rs(per_unit);
  ASSERT_EQ(units.size(), 2u * 10);
  double total = 0;
  for (const Task* t : units) total += t->microbatch == 0 ? t->bytes : 0.0;

  p.bucket_bytes = 4e6;
  const Program bucketed = lower(make_scenario(tiny_gpt(), p));
  const auto buckets = grad_rs(bucketed);
  ASSERT_EQ(buckets.size(), 2u * 5);
  double sum = 0;
  for (const Task* t : buckets) {
    sum += t->bytes;
    EXPECT_GE(t->bytes, 4e6);  // here every merged bucket, the last included, reaches 4 MB
  }
  EXPECT_DOUBLE_EQ(sum, 2 * total);
  EXPECT_DOUBLE_EQ(buckets[0]->bytes, 2099200.0 + 3159040.0);  // head + L7
  // A bucket smaller than a layer never cuts it: one reduce-scatter per unit, as by default.
  p.bucket_bytes = 1e6;
  EXPECT_EQ(grad_rs(lower(make_scenario(tiny_gpt(), p))).size(), units.size());

  // A reduce-scatter is waited for by the work that follows it (the next compute, or the
  // next unit's parameter gather the compute waits for) only without overlap. (The frees of
  // the unsharded gradients behind each reduce-scatter are bookkeeping, not work.)
  for (const bool overlap : {true, false}) {
    p.bucket_bytes = 0;
    p.overlap_grad = overlap;
    const Program prog = lower(make_scenario(tiny_gpt(), p));
    std::set<int> waited;
    for (const Task& t : prog.ranks[0].tasks)
      if (t.phase != Phase::kOptimizer && t.kind != TaskKind::kFree)
        waited.insert(t.deps.begin(), t.deps.end());
    int n_waited = 0;
    for (const Task* t : grad_rs(prog)) n_waited += waited.count(t->id) > 0;
    // Without overlap every reduce-scatter holds back the work after it, except the last
    // microbatch's last two (layer 0's and the embedding's), which only the optimizer step
    // waits for: the embedding's weight gradient, its only backward compute, does not wait
    // for collectives issued before it (as every weight gradient in the lowering).
    EXPECT_EQ(n_waited, overlap ? 0 : 2 * 10 - 2) << "overlap " << overlap;
  }
  p.overlap_grad = true;
  const TimeNs t_overlap = run(lower(make_scenario(tiny_gpt(), p))).step_ns;
  p.overlap_grad = false;
  EXPECT_GE(run(lower(make_scenario(tiny_gpt(), p))).step_ns, t_overlap);
}

TEST(Lower, Zero2ReduceScattersEveryMicrobatchZero1Once) {
  // ZeRO-2 holds 1/dp of the gradients, so each microbatch's gradients are reduce-scattered
  // and added to the shard (DeepSpeed ZeRO-2); ZeRO-1 accumulates them whole and
  // reduce-scatters once, in the last microbatch (Megatron's distributed optimizer). tiny_gpt
  // at dp 4 with 3 microbatches: ZeRO-2 moves 3x ZeRO-1's gradient bytes, in buckets of the
  // same size; the parameter all-gather stays once per step.
  Plan p;
  p.dp = 4;
  p.microbatches = 3;
  p.bucket_bytes = 4e6;
  const auto rs_bytes = [](const Program& prog, int* count) {
    double b = 0;
    *count = 0;
    for (const Task& t : prog.ranks[0].tasks)
      if (testing::is_coll(t, CollOp::kReduceScatter)) {
        b += t.bytes;
        ++*count;
      }
    return b;
  };
  int n1 = 0, n2 = 0;
  p.zero = 1;
  const double z1 = rs_bytes(lower(make_scenario(tiny_gpt(), p)), &n1);
  p.zero = 2;
  const Program prog2 = lower(make_scenario(tiny_gpt(), p));
  const double z2 = rs_bytes(prog2, &n2);
  ASSERT_GT(z1, 0);
  EXPECT_DOUBLE_EQ(z2, 3 * z1);
  EXPECT_EQ(n2, 3 * n1);
  const int gathers = testing::count_colls(prog2, CollOp::kAllGather);
  EXPECT_EQ(gathers, static_cast<int>(std::ceil(z1 / 4e6)));  // one per bucket, once
  run(prog2);
}

TEST(Lower, ShardedGradientsAreHeldWholeUntilTheirReduceScatter) {
  // ZeRO-2/3 keep a 1/dp shard of the gradients as training state. On random plans:
  //  - ZeRO-3 (FSDP): a unit's whole gradients exist from its weight-gradient pass until its
  //    reduce-scatter ends. Every "zg"/"zgx" allocation is on the compute stream and freed
  //    exactly once, on the dp stream, right behind (and depending on) a gradient
  //    reduce-scatter of the same microbatch and chunk that carries it: the reduce-scatters of
  //    that microbatch and chunk up to and including it carry at least the bytes allocated up
  //    to the unit, those before it less. (Dense models) each microbatch allocates the whole
  //    gradients: m x the "grads" shard x the dense dp size (dp x cp), when above 1.
  //  - ZeRO-2 (DeepSpeed): the reduce buckets, allocated for the step: min(whole gradients,
  //    buffers x bucket), two buffers with overlap.grad_reduce, one without; no per-unit
  //    allocations.
  std::mt19937 rng(2026);
  int checked3 = 0, checked2 = 0;
  for (int trial = 0; trial < 60; ++trial) {
    Plan p = testing::random_plan(rng);
    if (p.zero < 2) p.zero = 2 + static_cast<int>(rng() % 2);
    testing::set_sharded_zero(p, p.zero);
    p.overlap_ep = false;  // runs with zero 0 or 1 only
    const bool moe = p.ep > 1;
    const Program prog = lower(make_scenario(moe ? tiny_moe(8) : tiny_gpt(8), p));
    const int dense_dp = p.dp * p.cp;
    for (const RankProgram& rp : prog.ranks) {
      // (mb, chunk, expert) -> bytes allocated / reduce-scattered so far, and before the last
      std::map<std::tuple<int, int, int>, double> alloc_cum, rs_cum, prev_rs;
      std::map<std::string, double> need;  // what -> allocated bytes of its key up to it
      std::map<std::string, int> frees;
      double dense_total = 0;
      for (const Task& t : rp.tasks) {
        const bool zg = t.what.rfind("zg.", 0) == 0, zgx = t.what.rfind("zgx.", 0) == 0;
        const int x = zgx ? 1 : 0;
        if (t.kind == TaskKind::kAlloc && (zg || zgx)) {
          EXPECT_EQ(p.zero, 3) << t.label;
          EXPECT_EQ(t.stream, StreamKind::kCompute) << t.label;
          ASSERT_EQ(need.count(t.what), 0u) << "allocated twice: " << t.what;
          need[t.what] = alloc_cum[{t.microbatch, t.chunk, x}] += t.bytes;
          if (zg) dense_total += t.bytes;
        } else if (testing::is_coll(t, CollOp::kReduceScatter) && t.category == Category::kDpComm) {
          const std::tuple<int, int, int> key{t.microbatch, t.chunk,
                                              t.label.rfind("rsx.", 0) == 0 ? 1 : 0};
          prev_rs[key] = rs_cum[key];
          rs_cum[key] += t.bytes;
        } else if (t.kind == TaskKind::kFree && (zg || zgx)) {
          ++frees[t.what];
          EXPECT_EQ(t.stream, StreamKind::kDp) << t.label;
          ASSERT_EQ(t.deps.size(), 1u) << t.label;
          const Task& rs = rp.tasks[static_cast<size_t>(t.deps[0])];
          EXPECT_EQ(rs.coll, CollOp::kReduceScatter) << t.label;
          EXPECT_EQ(rs.microbatch, t.microbatch) << t.label;
          EXPECT_EQ(rs.chunk, t.chunk) << t.label;
          ASSERT_EQ(need.count(t.what), 1u) << "freed before allocated: " << t.what;
          const std::tuple<int, int, int> key{t.microbatch, t.chunk, x};
          EXPECT_GE(rs_cum[key], need[t.what] * (1 - 1e-12)) << t.label;
          EXPECT_LT(prev_rs[key], need[t.what] * (1 - 1e-12)) << t.label;
        }
      }
      EXPECT_EQ(frees.size(), need.size());
      for (const auto& [what, n] : frees) EXPECT_EQ(n, 1) << what;
      if (moe) continue;
      const double whole = alloc_bytes(rp, "grads") * dense_dp;  // the stage's gradients
      if (p.zero == 3) {
        EXPECT_NEAR(dense_total, dense_dp > 1 ? p.microbatches * whole : 0.0,
                    1e-6 * (1 + dense_total))
            << "trial " << trial;
        checked3 += dense_dp > 1;
      } else {
        const double buffers = p.overlap_grad ? 2 : 1;
        EXPECT_NEAR(alloc_bytes(rp, "grad_buckets"),
                    dense_dp > 1 ? std::min(whole, buffers * p.bucket_bytes) : 0.0,
                    1e-6 * (1 + whole))
            << "trial " << trial;
        checked2 += dense_dp > 1;
      }
    }
    run(prog);
  }
  EXPECT_GT(checked3, 5);
  EXPECT_GT(checked2, 5);
}

TEST(Lower, ZeroTwoWithoutOverlapHoldsTheWholeGradients) {
  // tiny_gpt at dp 4, ZeRO-2, one microbatch, overlap.grad_reduce off and no bucket_mb: one
  // bucket of everything, reduce-scattered after the backward, so the bucket buffer is the
  // whole gradients on top of the state: peak >= weights + G/4 (shard) + optimizer + G, G the
  // stage's whole fp32 gradients (4 x the "grads" shard). With overlap and 1 MB buckets the
  // two buffers hold 2 MB: the peak is lower.
  Plan p;
  p.dp = 4;
  p.zero = 2;
  p.microbatches = 1;
  p.seq_len = 64;      // activations well below the gradients
  p.bucket_bytes = 0;  // Megatron-Core's default: no bucketing without overlap
  p.overlap_grad = false;
  const Program sync = lower(make_scenario(tiny_gpt(), p));
  const RankProgram& rp = sync.ranks[0];
  const double g = 4 * alloc_bytes(rp, "grads");
  EXPECT_DOUBLE_EQ(alloc_bytes(rp, "grad_buckets"), g);
  const double peak_sync = run(sync).ranks[0].peak_bytes;
  EXPECT_GE(peak_sync, state_bytes(rp) + g);
  p.overlap_grad = true;
  p.bucket_bytes = 1e6;
  const Program overlap = lower(make_scenario(tiny_gpt(), p));
  EXPECT_DOUBLE_EQ(alloc_bytes(overlap.ranks[0], "grad_buckets"), 2e6);
  EXPECT_LT(run(overlap).ranks[0].peak_bytes, state_bytes(rp) + g);
}

TEST(Lower, Zero2BackwardWaitsForItsTwoBucketBuffers) {
  // DeepSpeed ZeRO-2 with overlap_comm reduces from two alternating bucket buffers: the
  // gradients of bucket j+1 go into the buffer bucket j-1 was reduced from, so the backward
  // cannot run ahead of the reductions by more than a bucket. stepcast applies it per unit
  // (a unit issues its buckets when its weight-gradient pass ends): the buckets issued at
  // one point must be reduced before the compute after the next issuing point starts. On
  // random zero-2 plans with slow communication (1 ns per byte against (FLOPs + bytes) /
  // 1e3 ns of compute, so the reductions lag), for each group (dense, expert) and each
  // issuing point k >= 2: the first compute task after point k starts no earlier than the
  // end of every reduce-scatter of point k-1. Without the wait the reductions of several
  // microbatches queue behind the backward and this fails (434 of the checks did).
  std::mt19937 rng(77);
  int checked = 0;
  for (int trial = 0; trial < 40; ++trial) {
    Plan p = testing::random_plan(rng);
    testing::set_sharded_zero(p, 2);
    p.overlap_grad = true;
    p.overlap_ep = false;  // runs with zero 0 or 1 only
    const bool moe = p.ep > 1;
    const Program prog = lower(make_scenario(moe ? tiny_moe(8) : tiny_gpt(8), p));
    const Timeline tl = run(prog, Synth{.aux_free = false, .comm_ns_per_byte = 1.0});
    for (size_t r = 0; r < prog.ranks.size(); ++r) {
      const auto& tasks = prog.ranks[r].tasks;
      const auto& timing = tl.ranks[r].tasks;
      // Per group: the end of the latest reduce-scatter of the issuing point before the
      // current one, and of the current one; a point ends at the next compute task.
      TimeNs before[2] = {-1, -1}, current[2] = {-1, -1};
      bool open[2] = {false, false};
      for (size_t i = 0; i < tasks.size(); ++i) {
        const Task& t = tasks[i];
        if (testing::is_coll(t, CollOp::kReduceScatter) && t.category == Category::kDpComm) {
          const int x = t.label.rfind("rsx.", 0) == 0 ? 1 : 0;
          current[x] = std::max(current[x], timing[i].end);
          open[x] = true;
        } else if (testing::is_compute(t.kind)) {
          for (int x = 0; x < 2; ++x) {
            if (!open[x]) continue;
            if (before[x] >= 0) {
              EXPECT_GE(timing[i].start, before[x]) << "trial " << trial << " " << t.label;
              ++checked;
            }
            before[x] = current[x];
            open[x] = false;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(Lower, ExpertGradientsAreReducedOverTheExpertDataParallelGroupWhole) {
  // tiny_moe (8 MoE layers, 8 experts of ffn 512, h 256, SwiGLU) at tp 2, ep 2, dp 4, ZeRO-1,
  // one microbatch. With ep > 1 each rank holds its 8/2 = 4 local experts whole (expert tp 1,
  // model/workload.cc), 4 x 3 x 256 x 512 = 1,572,864 parameters per layer, and their fp32
  // gradients are reduce-scattered over the expert data-parallel group (dp / ep = 2 ranks):
  // 8 x 1,572,864 elements. The rest of each layer (attention, norms, router) goes over the
  // dense dp group. (The expert share was taken as 1/tp of the experts, the other half
  // counted dense.)
  Plan p;
  p.tp = 2;
  p.ep = 2;
  p.dp = 4;
  p.zero = 1;
  p.microbatches = 1;
  const Program prog = lower(make_scenario(tiny_moe(8), p));
  double expert_rs = 0, dense_rs = 0;
  for (const Task& t : prog.ranks[0].tasks) {
    if (t.kind != TaskKind::kCollective || t.coll != CollOp::kReduceScatter ||
        t.category != Category::kDpComm)
      continue;
    const GroupKind k = prog.groups[static_cast<size_t>(prog.ranks[0].group_of(t))].kind;
    (k == GroupKind::kEdp ? expert_rs : dense_rs) += t.bytes / dtype_bytes(t.dtype);
  }
  EXPECT_DOUBLE_EQ(expert_rs, 8.0 * 4 * 3 * 256 * 512);
  EXPECT_GT(dense_rs, 0);
  run(prog);
}

TEST(Lower, Zero3GathersAllocateWhatTheyGather) {
  // tiny_moe under ZeRO-3 at dp 4: each unit's gathered copy is the parameters its
  // all-gathers bring, dense over dp and experts over the expert data-parallel group. At
  // ep 4 that group is dp / ep = 1 rank: the experts are whole in the rank's weights, not
  // gathered, and no copy of them is allocated (it was, 2 bytes a local expert parameter).
  for (int ep : {2, 4}) {
    Plan p;
    p.dp = 4;
    p.ep = ep;
    p.zero = 3;
    p.microbatches = 1;
    const Program prog = lower(make_scenario(tiny_moe(8), p));
    double allocated = 0, freed = 0, gathered = 0, expert_gathered = 0;
    for (const Task& t : prog.ranks[0].tasks) {
      if (t.what.rfind("zp.", 0) == 0) (t.kind == TaskKind::kAlloc ? allocated : freed) += t.bytes;
      if (t.kind == TaskKind::kCollective && t.coll == CollOp::kAllGather &&
          t.category == Category::kDpComm) {
        gathered += t.bytes;
        const GroupKind k = prog.groups[static_cast<size_t>(prog.ranks[0].group_of(t))].kind;
        if (k == GroupKind::kEdp) expert_gathered += t.bytes;
      }
    }
    EXPECT_GT(gathered, 0) << "ep " << ep;
    EXPECT_DOUBLE_EQ(allocated, gathered) << "ep " << ep;
    EXPECT_DOUBLE_EQ(freed, allocated) << "ep " << ep;
    if (ep == 4)
      EXPECT_EQ(expert_gathered, 0);
    else
      EXPECT_GT(expert_gathered, 0);
    run(prog);
  }
}

TEST(Lower, ExpertGroupsFollowTheExpertTensorParallelSize) {
  // tiny_moe at tp 2, dp 4 (8 ranks a stage). The expert-gradient group of rank 0:
  //   ep 1 (experts split over tp by default): its dp group at tp 0, ranks {0, 2, 4, 6};
  //   ep 2, expert_tp 1 (default): the ranks with its ep index, {0, 2, 4, 6} too (li % 2);
  //   ep 2, expert_tp 2: same tp index and ep index: dp {0, 2}, ranks {0, 4}.
  // Per rank the expert gradients reduce-scattered: 8 layers x local experts x 3 x 256 x
  // (512 / etp): ep 1: 8 experts, 512/2; ep 2, etp 1: 4 experts, 512; ep 2, etp 2: 4, 256.
  struct Case {
    int ep, expert_tp;
    std::vector<int> group;
    double elements;
  };
  const Case cases[] = {{1, 0, {0, 2, 4, 6}, 8.0 * 8 * 3 * 256 * 256},
                        {2, 0, {0, 2, 4, 6}, 8.0 * 4 * 3 * 256 * 512},
                        {2, 2, {0, 4}, 8.0 * 4 * 3 * 256 * 256}};
  for (const Case& c : cases) {
    Plan p;
    p.tp = 2;
    p.dp = 4;
    p.ep = c.ep;
    p.expert_tp = c.expert_tp;
    p.sp = true;
    p.zero = 1;
    p.microbatches = 1;
    const Program prog = lower(make_scenario(tiny_moe(8), p));
    double expert_rs = 0;
    for (const Task& t : prog.ranks[0].tasks) {
      if (t.kind != TaskKind::kCollective || t.coll != CollOp::kReduceScatter ||
          t.category != Category::kDpComm)
        continue;
      const Group& g = prog.groups[static_cast<size_t>(prog.ranks[0].group_of(t))];
      if (g.kind != GroupKind::kEdp) continue;
      EXPECT_EQ(g.ranks, c.group) << "ep " << c.ep << " etp " << c.expert_tp;
      expert_rs += t.bytes / dtype_bytes(t.dtype);
    }
    EXPECT_DOUBLE_EQ(expert_rs, c.elements) << "ep " << c.ep << " etp " << c.expert_tp;
    run(prog);
  }
}

TEST(Lower, DpBucketCountIsCeilGradBytesOverBucket) {
  // Plain DP: gradients (4 bytes x params of the rank) in buckets of bucket_bytes -> ceil(G/B)
  // allreduces, all on the dp stream during the last microbatch's backward.
  Plan p;
  p.dp = 2;
  p.bucket_bytes = 3e6;
  const Scenario sc = make_scenario(tiny_gpt(), p);
  const Program prog = lower(sc);
  const double grad_bytes = 4.0 * count_params(sc.model).total;
  int n = 0;
  for (const Task& t : prog.ranks[0].tasks)
    if (t.kind == TaskKind::kCollective) {
      EXPECT_EQ(t.coll, CollOp::kAllReduce);
      EXPECT_EQ(t.stream, StreamKind::kDp);
      ++n;
    }
  EXPECT_EQ(n, static_cast<int>(std::ceil(grad_bytes / 3e6)));
}

// The one issue lower() refuses `sc` with; a test failure when it accepts it or reports more
// than one.
std::optional<InputIssue> refusal(const Scenario& sc, const LowerOptions& opt = {}) {
  try {
    lower(sc, opt);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.issues().size(), 1u);
    if (e.issues().size() == 1) return e.issues()[0];
  }
  return std::nullopt;
}

TEST(Lower, MoreThanAMillionBucketsPerStageIsBadInput) {
  // tiny_gpt has ~6.9 M parameters: 4-byte gradients in 16-byte buckets make ~1.7 M
  // collectives per step (> 2^20), in 32-byte buckets ~0.86 M (simulated).
  Plan p;
  p.dp = 2;
  p.bucket_bytes = 16;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.file = "big.yaml";
  sc.source = YAML::Load("name: t\nparallel:\n  dp: 2\n  bucket_mb: 0.000016\n");  // its line: 4
  ASSERT_GT(count_params(sc.model).total * 4 / 16, double{1 << 20});
  ASSERT_LT(count_params(sc.model).total * 4 / 32, double{1 << 20});
  const std::optional<InputIssue> i = refusal(sc);
  ASSERT_TRUE(i);
  EXPECT_EQ(i->file, "big.yaml");
  EXPECT_EQ(i->key, "parallel.bucket_mb");
  EXPECT_EQ(i->line, 4);
}

// lower() itself refuses a full-fidelity plan too large to hold (check_simulation_size; only
// predict() and the `lower` command checked, so a library caller could lower it): dp 8 with
// 65,536 microbatches per rank of tiny_gpt's 8 layers is 65,536 x 8 x 8 GPUs / pp 1 =
// 4,194,304 rank layer passes > kMaxRankLayerPasses = 2^21 = 2,097,152. Refused before
// any task is made, at cluster.nodes (its line: 3, column: 10).
TEST(Lower, FullFidelityPlansTooLargeToHoldAreBadInput) {
  Plan p;
  p.dp = 8;
  p.microbatches = 65536;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.file = "big.yaml";
  sc.source = YAML::Load("name: t\ncluster:\n  nodes: 1\n");
  ASSERT_EQ(simulated_layer_passes(sc, false), 4194304);
  LowerOptions full;
  full.folded = false;
  const std::optional<InputIssue> i = refusal(sc, full);
  ASSERT_TRUE(i);
  EXPECT_EQ(i->str(),
            "big.yaml:3:10: cluster.nodes: simulating every rank (full fidelity) "
            "holds 65536 microbatches x 8 layers x 8 GPUs / pp 1 = 4194304 layer "
            "passes, more than the 2097152 one simulation can hold: give a larger "
            "microbatch or a smaller global_batch, or run folded");
}

TEST(Lower, DpBucketDefaultIsMegatronCores) {
  // bucket_mb not given (bucket_bytes 0): Megatron-Core's DDP default bucket of
  // max(40M, 1M x dp) parameters of fp32 gradients. tiny_gpt widened to hidden 2048,
  // ffn 8192, 8 layers, vocab 2048: 8 x (12 x 2048^2 + 13 x 2048) + 2 x 2048 x 2048 + ...
  // (count_params) ~ 411M parameters, G = 4 x P bytes.
  //   dp 2:  bucket = max(40M, 2M)  = 40M params = 160 MB -> ceil(G / 160e6) allreduces;
  //   dp 64: bucket = max(40M, 64M) = 64M params = 256 MB -> ceil(G / 256e6);
  //   overlap.grad_reduce off: bucket_size None in Megatron-Core, one allreduce.
  ModelArch a = tiny_gpt();
  a.hidden = 2048;
  a.ffn_hidden = 8192;
  a.heads = 16;
  a.kv_heads = 16;
  auto count = [&](int dp, bool overlap) {
    Plan p;
    p.dp = dp;
    p.bucket_bytes = 0;
    p.overlap_grad = overlap;
    p.microbatches = 1;
    const Program prog = lower(make_scenario(a, p));
    int n = 0;
    for (const Task& t : prog.ranks[0].tasks)
      if (t.kind == TaskKind::kCollective && t.category == Category::kDpComm) ++n;
    return n;
  };
  Plan p;
  const double grad_bytes = 4.0 * count_params(make_scenario(a, p).model).total;
  ASSERT_GT(grad_bytes, 256e6);
  EXPECT_EQ(count(2, true), static_cast<int>(std::ceil(grad_bytes / 160e6)));
  EXPECT_EQ(count(64, true), static_cast<int>(std::ceil(grad_bytes / 256e6)));
  EXPECT_EQ(count(2, false), 1);
}

TEST(Lower, GradientReductionDtypeFollowsMegatronDefaults) {
  // Megatron (arguments.py): bf16 forces --accumulate-allreduce-grads-in-fp32, fp16 leaves it
  // off; training.grad_reduce_dtype states it (Megatron-Core grad_reduce_in_fp32,
  // --grad-reduce-in-bf16). Plain DP over 2 ranks, one bucket (overlap off, bucket_mb not
  // given): the allreduce carries dtype_bytes(grads) x P, and the gradient buffer allocated
  // at t = 0 is the same size (zero 0: not sharded). The optimizer step on P parameters
  // (Adam) reads 24 B + 2 B for 16-bit gradients (their copy to fp32) + 4 B under fp16 loss
  // scaling (the unscale), and writes 14 + 4 + 4 B likewise (workload.cc optimizer_op).
  struct Case {
    DType train;
    std::optional<DType> stated;
    DType grads;
  };
  for (const Case c : {Case{DType::kBf16, std::nullopt, DType::kFp32},
                       Case{DType::kFp16, std::nullopt, DType::kFp16},
                       Case{DType::kBf16, DType::kBf16, DType::kBf16},
                       Case{DType::kFp8, DType::kBf16, DType::kBf16},
                       Case{DType::kFp16, DType::kFp32, DType::kFp32}}) {
    SCOPED_TRACE(std::string(dtype_name(c.train)) + " training, " + dtype_name(c.grads) +
                 " gradients");
    Plan p;
    p.dp = 2;
    p.bucket_bytes = 0;
    p.overlap_grad = false;
    Scenario sc = make_scenario(tiny_gpt(), p);
    sc.training.dtype = c.train;
    sc.training.grad_reduce_dtype = c.stated;
    const double params = count_params(sc.model).total;
    const double grad_bytes = dtype_bytes(c.grads) * params;
    const bool half = c.grads != DType::kFp32, scaled = c.train == DType::kFp16;
    const Program prog = lower(sc);
    int n = 0, allocs = 0, steps = 0;
    for (const Task& t : prog.ranks[0].tasks) {
      if (t.kind == TaskKind::kCollective && t.category == Category::kDpComm) {
        EXPECT_EQ(t.dtype, c.grads);
        EXPECT_DOUBLE_EQ(t.bytes, grad_bytes);
        ++n;
      }
      if (t.kind == TaskKind::kAlloc && t.label == "alloc.grads") {
        EXPECT_DOUBLE_EQ(t.bytes, grad_bytes);
        ++allocs;
      }
      if (t.label == "opt.step") {
        EXPECT_DOUBLE_EQ(t.bytes_read, params * (24.0 + (half ? 2.0 : 0.0) + (scaled ? 4.0 : 0.0)));
        EXPECT_DOUBLE_EQ(t.bytes_written,
                         params * (14.0 + (half ? 4.0 : 0.0) + (scaled ? 4.0 : 0.0)));
        ++steps;
      }
    }
    EXPECT_EQ(n, 1);
    EXPECT_EQ(allocs, 1);
    EXPECT_EQ(steps, 1);
  }
}

TEST(Lower, ContextParallelGradientsSyncOverDpTimesCp) {
  // cp > 1: every cp rank holds a full replica of the weights, so gradients are reduced over
  // the dp x cp group (Megatron: data parallel group with context parallel): dp 2 x cp 2 = 4
  // ranks, here {0, 1, 2, 3} for rank 0 (tp 1).
  Plan p;
  p.dp = 2;
  p.cp = 2;
  const Program prog = lower(make_scenario(tiny_gpt(), p));
  int n = 0;
  for (const Task& t : prog.ranks[0].tasks)
    if (t.kind == TaskKind::kCollective && t.category == Category::kDpComm) {
      const Group& g = prog.groups[static_cast<size_t>(t.group)];
      EXPECT_EQ(g.kind, GroupKind::kDpCp);
      EXPECT_EQ(g.ranks, (std::vector<int>{0, 1, 2, 3}));
      ++n;
    }
  EXPECT_GT(n, 0);
}

}  // namespace
}  // namespace stepcast
