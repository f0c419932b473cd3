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
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast {
namespace {

using testing::make_scenario;
using testing::Plan;
using testing::Synth;
using testing::synth_durations;
using testing::tiny_gpt;
using testing::tiny_moe;

Timeline run(const Program& prog, const Synth& s = {}) {
  validate_program(prog);
  return simulate(prog, synth_durations(prog, s));
}

TimeNs bubble(const Timeline& t) { return t.breakdown_ns[kCategoryCount]; }

// Sum of the durations of the layer compute tasks of rank r (one stage's F+B+W work).
TimeNs layer_compute_ns(const Program& prog, const Durations& d, size_t r) {
  TimeNs sum = 0;
  for (size_t i = 0; i < prog.ranks[r].tasks.size(); ++i)
    if (testing::is_compute(prog.ranks[r].tasks[i].kind) && prog.ranks[r].tasks[i].layer >= 0)
      sum += d[r][i];
  return sum;
}

double alloc_bytes(const RankProgram& rp, const std::string& what) {
  double b = 0;
  for (const Task& t : rp.tasks)
    if (t.kind == TaskKind::kAlloc && t.what == what) b += t.bytes;
  return b;
}

double state_bytes(const RankProgram& rp) {
  return alloc_bytes(rp, "weights") + alloc_bytes(rp, "grads") + alloc_bytes(rp, "optimizer");
}

// ---- single GPU --------------------------------------------------------------------------

TEST(Lower, OneGpuStepIsTheSumOfItsTaskCosts) {
  // One rank, no communication: every task runs on the compute stream back to back, so
  // the step is exactly the sum of all task durations.
  Plan p;
  p.microbatches = 3;
  const Program prog = lower(make_scenario(tiny_gpt(), p));
  ASSERT_EQ(prog.ranks.size(), 1u);
  const Durations d = synth_durations(prog);
  const Timeline t = simulate(prog, d);
  const TimeNs sum = std::accumulate(d[0].begin(), d[0].end(), TimeNs{0});
  EXPECT_EQ(t.step_ns, sum);
  EXPECT_EQ(bubble(t), 0);
  EXPECT_EQ(prog.world_size, 1);
  EXPECT_EQ(prog.gpus_per_node, 8);
}

// ---- pipeline bubbles --------------------------------------------------------------------

class BubbleTest : public ::testing::TestWithParam<Schedule> {};

TEST_P(BubbleTest, GpipeAnd1F1BBubbleIsPMinus1OverMPlusPMinus1) {
  // p = 4, m = 8, uniform stages (2 layers each; embedding/head/optimizer take no time), free
  // communication: step = (m + p - 1)(F + B) and bubble = (p - 1)(F + B) on the critical
  // rank, i.e. the bubble is (p - 1)/(m + p - 1) = 3/11 of the step.
  Plan p;
  p.pp = 4;
  p.microbatches = 8;
  p.schedule = GetParam();
  const Program prog = lower(make_scenario(tiny_gpt(8), p));
  ASSERT_EQ(prog.ranks.size(), 4u);
  const Durations d = synth_durations(prog, {.aux_free = true});
  const Timeline t = simulate(prog, d);
  const TimeNs work = layer_compute_ns(prog, d, 1);  // m (F + B) on a middle stage
  ASSERT_EQ(work % 8, 0);
  const TimeNs fb = work / 8;
  EXPECT_EQ(t.step_ns, (8 + 4 - 1) * fb);
  EXPECT_EQ(bubble(t) * (8 + 4 - 1), t.step_ns * (4 - 1));
}

INSTANTIATE_TEST_SUITE_P(Schedules, BubbleTest,
                         ::testing::Values(Schedule::kGpipe, Schedule::k1F1B));

TEST(Lower, InterleavedBubbleShrinksByV) {
  // p = 4, v = 2, m = 8, 16 layers (2 per virtual stage), free communication. Narayanan et
  // al. 2021 section 2.2: bubble time = (p - 1)(F + B)/v with F, B the per-microbatch times of
  // a whole stage, i.e. (p - 1)/(v m) of the ideal time m (F + B) = 3/16.
  Plan p;
  p.pp = 4;
  p.vpp = 2;
  p.microbatches = 8;
  p.schedule = Schedule::kInterleaved;
  const Program prog = lower(make_scenario(tiny_gpt(16), p));
  const Durations d = synth_durations(prog, {.aux_free = true});
  const Timeline t = simulate(prog, d);
  const TimeNs ideal = layer_compute_ns(prog, d, 0);
  EXPECT_EQ(bubble(t) * 2 * 8, ideal * (4 - 1));
  EXPECT_EQ(t.step_ns, ideal + bubble(t));
}

TEST(Lower, InterleavedNeedsMicrobatchesDivisibleByPp) {
  Plan p;
  p.pp = 4;
  p.vpp = 2;
  p.microbatches = 6;
  p.schedule = Schedule::kInterleaved;
  try {
    lower(make_scenario(tiny_gpt(16), p));
    FAIL() << "expected InvariantError";
  } catch (const InvariantError& e) {
    EXPECT_NE(std::string(e.what()).find("microbatches (6) divisible by pp (4)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Lower, ZbH1BubbleIsPMinus1TimesFPlusBMinusW) {
  // ZB-H1 (Qi et al. 2023, section 3.1): with uniform stages and free communication the
  // bubble is (p-1)(T_F + T_B - T_W), against 1F1B's (p-1)(T_F + T_B + T_W) where B and W
  // run as one backward; stage 0 holds p microbatches in flight, as in 1F1B, so its peak
  // memory is 1F1B's. p = 4, m = 8; T_F, T_B, T_W per microbatch from a middle stage.
  Plan p;
  p.pp = 4;
  p.microbatches = 8;
  const Program one = lower(make_scenario(tiny_gpt(8), p));
  p.schedule = Schedule::kZbH1;
  const Program zb = lower(make_scenario(tiny_gpt(8), p));
  const Durations d = synth_durations(zb, {.aux_free = true});
  const Timeline tz = simulate(zb, d);
  const Timeline t1 = run(one, {.aux_free = true});
  validate_program(zb);
  TimeNs f = 0, b = 0, w = 0;
  for (size_t i = 0; i < zb.ranks[1].tasks.size(); ++i) {
    const Task& t = zb.ranks[1].tasks[i];
    if (!testing::is_compute(t.kind) || t.layer < 0) continue;
    (t.phase == Phase::kFwd ? f : t.phase == Phase::kBwdInput ? b : w) += d[1][i];
  }
  ASSERT_EQ(f % 8 + b % 8 + w % 8, 0);
  f /= 8, b /= 8, w /= 8;
  EXPECT_EQ(bubble(tz), 3 * (f + b - w));
  EXPECT_EQ(tz.step_ns, 8 * (f + b + w) + 3 * (f + b - w));
  EXPECT_EQ(bubble(t1), 3 * (f + b + w));
  EXPECT_EQ(tz.ranks[0].peak_bytes, t1.ranks[0].peak_bytes);
}

// ---- memory ------------------------------------------------------------------------------

struct MemCase {
  Schedule schedule;
  int vpp;
  int expected_layer_mbs;  // stage 0 peak, in layer-microbatches of activations
};

class PipelineMemoryTest : public ::testing::TestWithParam<MemCase> {};

TEST_P(PipelineMemoryTest, FirstStageHoldsTheScheduleInFlight) {
  // p = 4, m = 8, L = 16 layers. 1F1B: p microbatches x L/p layers = 16 layer-microbatches
  // (= L, Korthikanti 2022 section 4.2.3). GPipe: m x L/p = 32. Interleaved v = 2: stage 0 runs
  // (p-1)*2 + (v-1)*p + 1 = 11 virtual microbatches of L/(pv) = 2 layers before its first
  // backward = 22 = L (1 + (p-1)/(p v)) = 16 x 11/8.
  const MemCase c = GetParam();
  Plan p;
  p.pp = 4;
  p.vpp = c.vpp;
  p.microbatches = 8;
  p.schedule = c.schedule;
  const Scenario sc = make_scenario(tiny_gpt(16), p);
  const Program prog = lower(sc);
  const Timeline t = run(prog);
  ShardSpec sh;
  sh.seq_len = p.seq_len;
  const double act = layer_activation_bytes(sc.model, 0, sh, Recompute::kNone, true);
  EXPECT_DOUBLE_EQ(t.ranks[0].peak_bytes - state_bytes(prog.ranks[0]),
                   c.expected_layer_mbs * act);
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineMemoryTest,
                         ::testing::Values(MemCase{Schedule::k1F1B, 1, 16},
                                           MemCase{Schedule::kGpipe, 1, 32},
                                           MemCase{Schedule::kInterleaved, 2, 22},
                                           MemCase{Schedule::kZbH1, 1, 16}));

// tiny_gpt over dp = 4 with ZeRO stage z.
Scenario dp4_zero(int z) {
  Plan p;
  p.dp = 4;
  p.zero = z;
  return make_scenario(tiny_gpt(), p);
}

// NCCL's buffers (collectives.communicator_memory), held all step: one communicator per
// group a rank's collectives use and one two-rank communicator per peer of its sends and
// receives, each as the profile lists its shape. Entries: 2 ranks on 1 node 100 MiB, 4 on
// 1 node 200 MiB, 8 on 1 node 300 MiB.
TEST(Lower, CommunicatorMemoryPerGroupAndPeer) {
  const double mib = 1 << 20;
  auto with_entries = [&](Scenario sc) {
    sc.profile.collectives.communicator_memory = {
        {2, 1, 100 * mib, ""}, {4, 1, 200 * mib, ""}, {8, 1, 300 * mib, ""}};
    return sc;
  };
  // tp 2 x dp 4 on one node: the tp pair (100) and the dp group of 4 (200) = 300 MiB on
  // every rank, allocated first and freed last, so the simulated peak is 300 MiB higher.
  Plan a;
  a.tp = 2;
  a.dp = 4;
  const Scenario plain = make_scenario(tiny_gpt(), a);
  const Program p0 = lower(plain);
  const Program p1 = lower(with_entries(plain));
  EXPECT_EQ(alloc_bytes(p0.ranks[0], "nccl"), 0);
  for (const RankProgram& rp : p1.ranks) {
    EXPECT_EQ(alloc_bytes(rp, "nccl"), 300 * mib);
    // Among the allocations the program starts with (the training state's), before any work.
    size_t i = 0;
    while (i < rp.tasks.size() && rp.tasks[i].kind == TaskKind::kAlloc &&
           rp.tasks[i].what != "nccl")
      ++i;
    ASSERT_LT(i, rp.tasks.size());
    EXPECT_EQ(rp.tasks[i].what, "nccl");
    EXPECT_EQ(rp.tasks[i].kind, TaskKind::kAlloc);
  }
  const Timeline t0 = run(p0), t1 = run(p1);
  EXPECT_DOUBLE_EQ(t1.ranks[0].peak_bytes, t0.ranks[0].peak_bytes + 300 * mib);
  EXPECT_EQ(t1.step_ns, t0.step_ns);  // memory only
  // tp 8 x pp 2 over two nodes: the tp group of 8 on one node (300) and the peer across the
  // node boundary (a two-rank communicator over 2 nodes, not listed: the largest entry, as no
  // entry spans nodes: 300) = 600 MiB on each stage.
  Plan b;
  b.tp = 8;
  b.pp = 2;
  const Program p2 = lower(with_entries(make_scenario(tiny_gpt(), b)));
  for (const RankProgram& rp : p2.ranks) EXPECT_EQ(alloc_bytes(rp, "nccl"), 600 * mib);
  // pp 2 alone on one node: only the peer, on the same node (100 MiB).
  Plan c;
  c.pp = 2;
  const Program p3 = lower(with_entries(make_scenario(tiny_gpt(), c)));
  for (const RankProgram& rp : p3.ranks) EXPECT_EQ(alloc_bytes(rp, "nccl"), 100 * mib);
}

TEST(Lower, ZeroStateBytesPerParameter) {
  // Megatron mixed precision (MODEL_FACTS.md): bf16 weights 2 + fp32 grads 4 + fp32 master
  // and Adam m, v 12 bytes per parameter; over d = 4 ranks ZeRO-1 shards the 12 (6 + 12/4 = 9),
  // ZeRO-2 also the grads (2 + 16/4 = 6), ZeRO-3 everything (18/4 = 4.5). The ZeRO paper's
  // stage formulas with K = 12 and 4-byte grads.
  const double expected[] = {18.0, 9.0, 6.0, 4.5};
  for (int z = 0; z <= 3; ++z) {
    const Scenario sc = dp4_zero(z);
    const Program prog = lower(sc);
    const ParamCounts pc = count_params(sc.model);
    EXPECT_NEAR(state_bytes(prog.ranks[0]) / pc.total, expected[z], 1e-9) << "zero " << z;
  }
}

TEST(Lower, StepStartsByZeroingTheWholeGradientBuffer) {
  // Megatron's train_step zeroes the contiguous gradient buffer (4 B per parameter under
  // bf16) before the first forward: a memset writing exactly the "grads" allocation, the
  // first compute-stream task, charged to the optimizer. ZeRO-2/3 hold reduced shards that
  // are written, not accumulated: no memset.
  for (int z = 0; z <= 3; ++z) {
    const Scenario sc = dp4_zero(z);
    const Program prog = lower(sc);
    const RankProgram& rp = prog.ranks[0];
    int found = -1;
    for (size_t i = 0; i < rp.tasks.size(); ++i)
      if (rp.tasks[i].label == "opt.zero_grad") found = static_cast<int>(i);
    if (z >= 2) {
      EXPECT_EQ(found, -1) << "zero " << z;
      continue;
    }
    ASSERT_GE(found, 0) << "zero " << z;
    const Task& t = rp.tasks[static_cast<size_t>(found)];
    EXPECT_EQ(t.kind, TaskKind::kMemoryBound);
    EXPECT_EQ(t.category, Category::kOptimizer);
    EXPECT_DOUBLE_EQ(t.bytes_read, 0.0);
    EXPECT_DOUBLE_EQ(t.bytes_written, alloc_bytes(rp, "grads"));
    EXPECT_DOUBLE_EQ(t.bytes_written, 4.0 * count_params(sc.model).total);
    for (int i = 0; i < found; ++i)
      EXPECT_FALSE(testing::is_compute(rp.tasks[static_cast<size_t>(i)].kind) &&
                   rp.tasks[static_cast<size_t>(i)].stream == StreamKind::kCompute)
          << "compute task before the memset: " << rp.tasks[static_cast<size_t>(i)].label;
  }
}
TEST(Lower, Fp8TrainingRunsGemmsInFp8) {
  // training.dtype fp8: the model marks GEMMs fp8 (ShardSpec.dtype) and the lowering keeps
  // them; activations on the wire stay 16-bit (Transformer Engine).
  Plan p;
  p.pp = 2;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.training.dtype = DType::kFp8;
  const Program prog = lower(sc);
  int fp8 = 0;
  for (const Task& t : prog.ranks[0].tasks) {
    if (t.kind == TaskKind::kGemm && t.layer >= 0 && t.gemm.dtype == DType::kFp8) ++fp8;
    if (t.kind == TaskKind::kSend) {
      EXPECT_DOUBLE_EQ(t.bytes, 512.0 * 256 * 2);
    }
  }
  EXPECT_GT(fp8, 0);
}

TEST(Lower, UnevenStagesFollowPipelineLayers) {
  // pipeline_layers [1, 3]: stage 0 runs layer 0 (+ embedding), stage 1 layers 1..3 (+ head).
  Plan p;
  p.pp = 2;
  p.pipeline_layers = {1, 3};
  const Program prog = lower(make_scenario(tiny_gpt(4), p));
  std::set<int> layers[2];
  for (int s = 0; s < 2; ++s)
    for (const Task& t : prog.ranks[static_cast<size_t>(s)].tasks)
      if (t.layer >= 0) layers[s].insert(t.layer);
  EXPECT_EQ(layers[0], (std::set<int>{0}));
  EXPECT_EQ(layers[1], (std::set<int>{1, 2, 3}));
  p.pipeline_layers = {1, 2};  // adds up to 3, the model has 4
  EXPECT_THROW(lower(make_scenario(tiny_gpt(4), p)), InvariantError);
}

TEST(Lower, GradReduceWithoutOverlapWaitsForTheWholeBackward) {
  // overlap.grad_reduce off: every bucket starts after the last backward compute, so the dp
  // stream is idle during the backward and the reduction is fully exposed.
  Plan p;
  p.dp = 2;
  p.bucket_bytes = 1e6;
  p.overlap_grad = false;
  const Program prog = lower(make_scenario(tiny_gpt(), p));
  const auto& tasks = prog.ranks[0].tasks;
  int last_bwd = -1;
  for (const Task& t : tasks)
    if (testing::is_compute(t.kind) &&
        (t.phase == Phase::kBwdInput || t.phase == Phase::kBwdWeight))
      last_bwd = t.id;
  int buckets = 0;
  for (const Task& t : tasks)
    if (t.kind == TaskKind::kCollective) {
      ++buckets;
      EXPECT_EQ(t.deps, (std::vector<int>{last_bwd}));
    }
  EXPECT_GT(buckets, 1);
}

TEST(Lower, TiedEmbeddingsCountedOnceOnOneStage) {
  // pp = 1 with tied embeddings: the output layer reuses the input embedding, so the state
  // held is 18 bytes x the model's parameter count (count_params counts the tie once).
  Plan p;
  ModelArch a = tiny_gpt();
  a.tied_embeddings = true;
  const Scenario sc = make_scenario(a, p);
  const Program prog = lower(sc);
  EXPECT_NEAR(state_bytes(prog.ranks[0]) / count_params(a).total, 18.0, 1e-9);
}

TEST(Lower, TiedEmbeddingGradsAreSummedBetweenFirstAndLastStage) {
  // pp = 4 with tied embeddings: the first and last stage each allreduce the word-embedding
  // gradient, V x h / tp fp32 values = 2048 x 256 x 4 bytes, over {rank of stage 0, rank of
  // stage 3} (tp 1, dp 1: ranks 0 and 3); the middle stages do not take part.
  Plan p;
  p.pp = 4;
  ModelArch a = tiny_gpt();
  a.tied_embeddings = true;
  const Program prog = lower(make_scenario(a, p));
  for (const RankProgram& rp : prog.ranks) {
    int n = 0;
    for (const Task& t : rp.tasks)
      if (t.kind == TaskKind::kCollective && t.label == "grad.tied_emb") {
        ++n;
        EXPECT_DOUBLE_EQ(t.bytes, 2048.0 * 256 * 4);
        EXPECT_EQ(prog.groups[static_cast<size_t>(t.group)].ranks, (std::vector<int>{0, 3}));
      }
    EXPECT_EQ(n, rp.pp_stage == 0 || rp.pp_stage == 3 ? 1 : 0) << "stage " << rp.pp_stage;
  }
  run(prog);  // matches across the two simulated ranks, no deadlock
}

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
      if (t.kind == TaskKind::kCollective && t.coll == CollOp::kReduceScatter) out.push_back(&t);
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
      if (t.kind == TaskKind::kCollective && t.coll == CollOp::kReduceScatter) {
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
  int gathers = 0;
  for (const Task& t : prog2.ranks[0].tasks)
    gathers += t.kind == TaskKind::kCollective && t.coll == CollOp::kAllGather;
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
        } else if (t.kind == TaskKind::kCollective && t.coll == CollOp::kReduceScatter &&
                   t.category == Category::kDpComm) {
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
  p.seq_len = 64;  // activations well below the gradients
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
    p.zero = 2;
    p.overlap_grad = true;
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
        if (t.kind == TaskKind::kCollective && t.coll == CollOp::kReduceScatter &&
            t.category == Category::kDpComm) {
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

TEST(Lower, StoppingAfterAStageKeepsTheStagesLoweredSoFar) {
  // LowerOptions::stop_after_stage: on random pipelined plans, stopping after stage k gives
  // the first k + 1 stages' programs exactly as the whole lowering does (same tasks, labels,
  // dependencies), and the hook sees the stages in order.
  std::mt19937 rng(5);
  int checked = 0;
  for (int trial = 0; trial < 20; ++trial) {
    Plan p = testing::random_plan(rng);
    if (p.pp == 1) continue;
    const Scenario sc = make_scenario(p.ep > 1 ? tiny_moe(8) : tiny_gpt(8), p);
    const Program whole = lower(sc);
    const int stop = static_cast<int>(rng() % static_cast<unsigned>(p.pp));
    LowerOptions lo;
    int seen = 0;
    lo.stop_after_stage = [&](const Program& so_far) {
      EXPECT_EQ(so_far.ranks.size(), static_cast<size_t>(seen + 1));
      EXPECT_EQ(so_far.ranks.back().pp_stage, seen);
      return seen++ == stop;
    };
    const Program part = lower(sc, lo);
    ASSERT_EQ(part.ranks.size(), static_cast<size_t>(stop + 1)) << "trial " << trial;
    for (size_t r = 0; r < part.ranks.size(); ++r) {
      const TaskList& a = part.ranks[r].tasks;
      const TaskList& b = whole.ranks[r].tasks;
      ASSERT_EQ(a.size(), b.size()) << "trial " << trial << " rank " << r;
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].label, b[i].label);
        EXPECT_EQ(a[i].deps, b[i].deps);
      }
      EXPECT_EQ(memory_floor_bytes(part.ranks[r]), memory_floor_bytes(whole.ranks[r]));
    }
    ++checked;
  }
  EXPECT_GT(checked, 8);
}

TEST(Lower, StepFloorBoundsTheSimulatedStep) {
  // step_floor_ns (engine.h): the longest chain of a rank's dependent tasks bounds the step
  // from below, and is at least every rank's compute-stream total. On random plans with
  // communication at 0.05 ns per byte (so tensor-parallel collectives the compute stream
  // waits for count), with the engine's SM slowdown on: floor <= simulated step, floor >=
  // the busiest compute stream, and strictly above it on some plans.
  std::mt19937 rng(909);
  int above = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Plan p = testing::random_plan(rng);
    const Program prog = lower(make_scenario(p.ep > 1 ? tiny_moe(8) : tiny_gpt(8), p));
    const Durations d = synth_durations(prog, Synth{.aux_free = false, .comm_ns_per_byte = 0.05});
    EngineOptions eo;
    eo.compute_slowdown_when_comm = 0.2;
    const TimeNs step = simulate(prog, d, eo).step_ns;
    const TimeNs floor = step_floor_ns(prog, d);
    TimeNs busiest = 0;
    for (size_t r = 0; r < prog.ranks.size(); ++r) {
      TimeNs sum = 0;
      for (size_t i = 0; i < prog.ranks[r].tasks.size(); ++i)
        if (prog.ranks[r].tasks[i].stream == StreamKind::kCompute) sum += d[r][i];
      busiest = std::max(busiest, sum);
    }
    EXPECT_LE(floor, step) << "trial " << trial;
    EXPECT_GE(floor, busiest) << "trial " << trial;
    above += floor > busiest;
  }
  EXPECT_GT(above, 10);
}

TEST(Lower, StreamsAndKernelNamesAnExecutorCanUse) {
  // DESIGN.md, the Program: one stream per communication kind, and memory-bound kernels that
  // say what they are. tiny_gpt at cp 2 (ring attention), tp 2 with sp, 2 microbatches:
  // every ring-attention receive is on cp_recv (its sends on cp; nothing of cp on tp), and
  // every memory-bound kernel names itself.
  Plan p;
  p.cp = 2;
  p.tp = 2;
  p.sp = true;
  p.microbatches = 2;
  const Program prog = lower(make_scenario(tiny_gpt(), p));
  int recvs = 0, sends = 0;
  for (const Task& t : prog.ranks[0].tasks) {
    if (t.category == Category::kCpComm) {
      if (t.kind == TaskKind::kRecv) {
        ++recvs;
        EXPECT_EQ(t.stream, StreamKind::kCpRecv) << t.label;
      } else {
        ++sends;
        EXPECT_EQ(t.stream, StreamKind::kCp) << t.label;
      }
    }
    if (t.kind == TaskKind::kMemoryBound) {
      EXPECT_FALSE(t.what.empty()) << t.label;
    }
    if (t.stream == StreamKind::kTp) {
      EXPECT_EQ(t.category, Category::kTpComm) << t.label;
    }
  }
  // cp - 1 = 1 KV block received per attention pass: forward and backward of 8 layers x 2
  // microbatches = 32 receives, as many sends.
  EXPECT_EQ(recvs, 32);
  EXPECT_EQ(sends, 32);
  run(prog);
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
  EXPECT_EQ(i->str(), "big.yaml:3:10: cluster.nodes: simulating every rank (full fidelity) "
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
        EXPECT_DOUBLE_EQ(t.bytes_written, params * (14.0 + (half ? 4.0 : 0.0) + (scaled ? 4.0 : 0.0)));
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

TEST(Lower, TpCollectivesPerLayer) {
  // Megatron TP: per layer 2 allreduces forward (attention out, MLP out) and 2 backward (the
  // inputs of QKV and fc1); sequence parallel turns each into reduce-scatter + allgather,
  // and its backward all-gathers the inputs of QKV and fc1 again for their weight
  // gradients: 4 forward, 6 backward.
  for (bool sp : {false, true}) {
    Plan p;
    p.tp = 2;
    p.sp = sp;
    const Program prog = lower(make_scenario(tiny_gpt(), p));
    std::map<std::pair<int, Phase>, int> per;  // (layer, phase) for microbatch 0
    for (const Task& t : prog.ranks[0].tasks)
      if (t.kind == TaskKind::kCollective && t.category == Category::kTpComm && t.microbatch == 0 &&
          t.layer >= 0)
        ++per[{t.layer, t.phase}];
    for (int l = 0; l < 8; ++l) {
      EXPECT_EQ((per[{l, Phase::kFwd}]), sp ? 4 : 2) << "layer " << l;
      EXPECT_EQ((per[{l, Phase::kBwdInput}]), sp ? 6 : 2) << "layer " << l;
    }
  }
}

// The re-gather of a column-parallel input under sequence parallelism feeds only that
// GEMM's weight gradient: the qkv, fc1 and logits input-gradient GEMMs do not wait for it, their
// weight-gradient GEMMs do (directly), for every layer and microbatch; with and without TP
// communication overlap, and with the ZB-H1 split of the weight pass (it waits as well).
TEST(Lower, SequenceParallelWgradGatherFeedsOnlyTheWeightGradient) {
  for (int variant = 0; variant < 3; ++variant) {
    Plan p;
    p.tp = 2;
    p.sp = true;
    p.pp = variant == 2 ? 2 : 1;
    p.overlap_tp = variant == 1;
    if (variant == 2) p.schedule = Schedule::kZbH1;
    const Program prog = lower(make_scenario(tiny_gpt(), p));
    const auto& tasks = prog.ranks[0].tasks;
    int gathers = 0;
    for (const Task& g : tasks) {
      if (g.kind != TaskKind::kCollective || g.label.find(".in.wgrad") == std::string::npos) continue;
      ++gathers;
      EXPECT_EQ(g.coll, CollOp::kAllGather);
      // The GEMM it feeds: the label's word before ".in.wgrad" (qkv, fc1, logits).
      const size_t end = g.label.find(".in.wgrad"), begin = g.label.rfind('.', end - 1) + 1;
      const std::string gemm = g.label.substr(begin, end - begin);
      int waiting = 0;
      for (const Task& t : tasks) {
        if (t.kind != TaskKind::kGemm || t.layer != g.layer || t.microbatch != g.microbatch ||
            t.label.find("." + gemm + ".") == std::string::npos)
          continue;
        const bool waits = std::find(t.deps.begin(), t.deps.end(), g.id) != t.deps.end();
        EXPECT_EQ(waits, t.phase == Phase::kBwdWeight) << t.label << " / " << g.label;
        waiting += waits;
      }
      EXPECT_EQ(waiting, 1) << g.label;
    }
    EXPECT_GT(gathers, 0) << variant;
  }
}

TEST(Lower, EpAllToAllPerMoeLayer) {
  // Each MoE layer dispatches and combines its routed token copies: per rank T * top_k token
  // copies of h bf16 values each way, T = b*s tokens: 512 * 2 * 256 * 2 = 524288 bytes;
  // forward dispatch + combine, backward the same two in reverse.
  Plan p;
  p.dp = 4;
  p.ep = 4;
  const Program prog = lower(make_scenario(tiny_moe(), p));
  std::map<std::pair<int, Phase>, int> per;
  for (const Task& t : prog.ranks[0].tasks)
    if (t.kind == TaskKind::kCollective && t.coll == CollOp::kAllToAll && t.microbatch == 0) {
      EXPECT_EQ(t.stream, StreamKind::kEp);
      EXPECT_EQ(t.category, Category::kEpComm);
      EXPECT_DOUBLE_EQ(t.bytes, 512.0 * 2 * 256 * 2);
      ++per[{t.layer, t.phase}];
    }
  for (int l = 0; l < 4; ++l) {
    EXPECT_EQ((per[{l, Phase::kFwd}]), 2);
    EXPECT_EQ((per[{l, Phase::kBwdInput}]), 2);
  }
}

TEST(Lower, RingAttentionSplitsAttentionIntoCpSteps) {
  // cp = 4 ring: per layer forward, 4 attention steps whose FLOPs add up to the model's
  // single attention op, and cp - 1 = 3 KV sends of b * (s/cp) * kv_heads * 2d * 2 bytes =
  // 1 * 128 * 8 * 64 * 2 = 131072 bytes.
  Plan p;
  p.cp = 4;
  const Scenario sc = make_scenario(tiny_gpt(), p);
  const Program prog = lower(sc);
  ShardSpec sh;
  sh.seq_len = p.seq_len;
  sh.cp = 4;
  const LayerOps ops = layer_ops(sc.model, 0, sh);
  double attn_flops = 0;
  for (const Step& s : ops.fwd)
    if (!s.is_comm && s.op.kind == OpKind::kAttention) attn_flops += s.op.flops;
  double got = 0;
  int steps = 0, sends = 0;
  for (const Task& t : prog.ranks[0].tasks) {
    if (t.layer != 0 || t.microbatch != 0 || t.phase != Phase::kFwd) continue;
    if (t.kind == TaskKind::kAttention) {
      got += t.flops;
      ++steps;
    }
    if (t.kind == TaskKind::kSend) {
      ++sends;
      EXPECT_EQ(t.stream, StreamKind::kCp);
      EXPECT_DOUBLE_EQ(t.bytes, 131072.0);
    }
  }
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(sends, 3);
  EXPECT_NEAR(got, attn_flops, attn_flops * 1e-12);
}

TEST(Lower, AllGatherCpGathersKvAndReduceScattersGrads) {
  // Llama 3 all-gather CP: per layer one allgather of K,V before attention (S = cp x the
  // rank's KV = 4 x 131072 bytes) and one reduce-scatter of dK,dV after attention backward.
  Plan p;
  p.cp = 4;
  p.cp_kind = CpKind::kAllGather;
  const Program prog = lower(make_scenario(tiny_gpt(), p));
  int ag = 0, rs = 0;
  for (const Task& t : prog.ranks[0].tasks) {
    if (t.kind != TaskKind::kCollective || t.category != Category::kCpComm) continue;
    EXPECT_DOUBLE_EQ(t.bytes, 4 * 131072.0);
    if (t.coll == CollOp::kAllGather) ++ag;
    if (t.coll == CollOp::kReduceScatter) ++rs;
  }
  EXPECT_EQ(ag, 8 * 4);  // 8 layers x 4 microbatches
  EXPECT_EQ(rs, 8 * 4);
}

TEST(Lower, RecomputeAddsTheRerunForwardWork) {
  // Full recompute re-runs every layer's forward before its backward (its FLOPs equal the
  // forward FLOPs, TP collectives included); selective re-runs only the attention core.
  Plan p;
  p.tp = 2;
  auto totals = [&](Recompute rc) {
    p.recompute = rc;
    const Program prog = lower(make_scenario(tiny_gpt(), p));
    double fwd = 0, re = 0, attn = 0;
    int rc_coll = 0, fwd_coll = 0;
    for (const Task& t : prog.ranks[0].tasks) {
      if (t.layer < 0) continue;
      if (t.kind == TaskKind::kCollective) {
        if (t.phase == Phase::kRecompute) ++rc_coll;
        if (t.phase == Phase::kFwd) ++fwd_coll;
      }
      if (!testing::is_compute(t.kind)) continue;
      if (t.phase == Phase::kFwd) fwd += t.flops;
      if (t.phase == Phase::kFwd && t.kind == TaskKind::kAttention) attn += t.flops;
      if (t.phase == Phase::kRecompute) {
        re += t.flops;
        EXPECT_EQ(t.category, Category::kRecompute);
      }
    }
    return std::make_tuple(fwd, re, attn, rc_coll, fwd_coll);
  };
  auto [f0, r0, a0, c0, fc0] = totals(Recompute::kNone);
  EXPECT_EQ(r0, 0);
  auto [f1, r1, a1, c1, fc1] = totals(Recompute::kFull);
  EXPECT_DOUBLE_EQ(r1, f1);
  EXPECT_EQ(c1, fc1);
  auto [f2, r2, a2, c2, fc2] = totals(Recompute::kSelective);
  EXPECT_DOUBLE_EQ(r2, a2);
  EXPECT_EQ(c2, 0);
}

TEST(Lower, PipelineMessagesCarryShardedActivations) {
  // Megatron p2p with sequence parallel sends the tp-sharded activation:
  // b * s * h * 2 / tp = 1 * 512 * 256 * 2 / 2 = 131072 bytes; without sp 262144.
  for (bool sp : {false, true}) {
    Plan p;
    p.pp = 2;
    p.tp = 2;
    p.sp = sp;
    const Program prog = lower(make_scenario(tiny_gpt(), p));
    int sends = 0;
    for (const Task& t : prog.ranks[0].tasks)
      if (t.kind == TaskKind::kSend) {
        EXPECT_DOUBLE_EQ(t.bytes, sp ? 131072.0 : 262144.0);
        EXPECT_EQ(t.peer, 2);  // same tp coordinate on stage 1: rank 0 + TP*CP*DP = 2
        ++sends;
      }
    EXPECT_EQ(sends, 4);  // one activation per microbatch forward
  }
}

// ---- folded == full fidelity -------------------------------------------------------------

// A random plan (testing::random_plan) of tiny_gpt, tiny_moe when it has ep > 1, with tied
// embeddings every third trial.
Scenario random_tiny_scenario(std::mt19937& rng, int trial, Plan& p) {
  p = testing::random_plan(rng);
  ModelArch arch = p.ep > 1 ? tiny_moe(8) : tiny_gpt(8);
  arch.tied_embeddings = trial % 3 == 0;
  return make_scenario(arch, p);
}

TEST(Lower, LabelsChangeNothingButLabels) {
  // Sweeps and the search lower without the per-microbatch task labels
  // (LowerOptions::labels; a few fixed ones such as "opt.step" stay): over random plans,
  // folded and full, the labels must be the only difference — same tasks, streams,
  // dependencies, sizes, groups, peers, tags and allocation names (the `what` that pairs
  // frees with allocations stays) — so every prediction is the same.
  std::mt19937 rng(4321);
  for (int trial = 0; trial < 20; ++trial) {
    Plan p;
    const Scenario sc = random_tiny_scenario(rng, trial, p);
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    for (const bool folded : {true, false}) {
      Program with = lower(sc, LowerOptions{folded, {}, true});
      Program without = lower(sc, LowerOptions{folded, {}, false});
      auto unlabel = [](Program& prog) {
        size_t labelled = 0;
        for (RankProgram& rp : prog.ranks)
          for (size_t i = 0; i < rp.tasks.size(); ++i) {
            labelled += !rp.tasks[i].label.empty();
            rp.tasks.mut(i).label.clear();
          }
        return labelled;
      };
      const size_t labelled = unlabel(with), left = unlabel(without);
      EXPECT_LT(left, labelled) << "the per-microbatch labels are gone";
      const std::string a = write_program_json(with), b = write_program_json(without);
      // Compared as a whole; on a difference, show where (not both documents).
      const auto diff = std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin();
      EXPECT_EQ(static_cast<size_t>(diff), a.size())
          << "folded " << folded << ": first difference at byte " << diff << ": ..."
          << a.substr(static_cast<size_t>(std::max<std::ptrdiff_t>(0, diff - 200)), 300)
          << "... vs ..."
          << b.substr(static_cast<size_t>(std::max<std::ptrdiff_t>(0, diff - 200)), 300);
      EXPECT_EQ(a.size(), b.size());
    }
  }
}

TEST(Lower, FoldedEqualsFullFidelityOnRandomPlans) {
  // Ranks of a stage run the same program (uniform routing), so simulating one per stage
  // must give the same step time, breakdown and per-stage peak memory as simulating all.
  // Communication costs bytes / 1 GB/s so that it matters for the comparison.
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 40; ++trial) {
    Plan p;
    const Scenario sc = random_tiny_scenario(rng, trial, p);
    SCOPED_TRACE(::testing::Message()
                 << "trial " << trial << ": tp" << p.tp << " pp" << p.pp << " dp" << p.dp << " cp"
                 << p.cp << " ep" << p.ep << " vpp" << p.vpp << " m" << p.microbatches << " "
                 << schedule_name(p.schedule) << " zero" << p.zero << " sp" << p.sp << " rc"
                 << static_cast<int>(p.recompute) << " og" << p.overlap_grad << " opg"
                 << p.overlap_param << " cp_kind" << static_cast<int>(p.cp_kind) << " otp"
                 << p.overlap_tp << " etp" << p.expert_tp);
    const Program folded = lower(sc, LowerOptions{true, {}});
    const Program full = lower(sc, LowerOptions{false, {}});
    ASSERT_EQ(static_cast<int>(folded.ranks.size()), p.pp);
    ASSERT_EQ(static_cast<int>(full.ranks.size()), p.tp * p.pp * p.dp * p.cp);
    // Full fidelity shares one task list per (stage, cp index) (program.h); through the
    // remap tables every collective still names a group holding the rank itself.
    std::set<const Task*> lists;
    for (const RankProgram& rp : full.ranks) {
      if (!rp.tasks.empty()) lists.insert(&rp.tasks[0]);
      for (const Task& t : rp.tasks) {
        if (t.kind != TaskKind::kCollective) continue;
        const auto& members = full.groups[static_cast<size_t>(rp.group_of(t))].ranks;
        ASSERT_NE(std::find(members.begin(), members.end(), rp.rank), members.end())
            << task_ref(rp, t.id);
      }
    }
    EXPECT_EQ(static_cast<int>(lists.size()), p.pp * p.cp);
    EXPECT_NO_THROW(validate_program(full));
    const Synth s{.aux_free = false, .comm_ns_per_byte = 1.0};
    const Timeline tf = run(folded, s);
    const Timeline tu = run(full, s);
    EXPECT_EQ(tf.step_ns, tu.step_ns);
    EXPECT_EQ(tf.breakdown_ns, tu.breakdown_ns);
    for (const RankProgram& rp : full.ranks) {
      const size_t r = static_cast<size_t>(&rp - full.ranks.data());
      EXPECT_DOUBLE_EQ(tu.ranks[r].peak_bytes, tf.ranks[static_cast<size_t>(rp.pp_stage)].peak_bytes)
          << "rank " << rp.rank;
    }
  }
}

TEST(Lower, MemoryFloorIsALowerBoundOfTheSimulatedPeak) {
  // memory_floor_bytes (program.h) reads the program alone; on random plans (with ZeRO-3,
  // recompute, pipelines, MoE) it never exceeds any rank's simulated peak, is at least the
  // training state, and is more than the state somewhere (it counts activations).
  std::mt19937 rng(99);
  bool above_state = false;
  for (int trial = 0; trial < 40; ++trial) {
    const Plan p = testing::random_plan(rng);
    const Program prog = lower(make_scenario(p.ep > 1 ? tiny_moe(8) : tiny_gpt(8), p),
                               LowerOptions{false, {}});
    const std::vector<double> floor = memory_floor_bytes(prog);
    const Timeline tl = run(prog, Synth{.aux_free = false, .comm_ns_per_byte = 1.0});
    ASSERT_EQ(floor.size(), prog.ranks.size());
    for (size_t r = 0; r < prog.ranks.size(); ++r) {
      EXPECT_LE(floor[r], tl.ranks[r].peak_bytes) << "trial " << trial << " rank " << r;
      EXPECT_GE(floor[r], state_bytes(prog.ranks[r]) * (1 - 1e-12)) << "trial " << trial;
      above_state = above_state || floor[r] > state_bytes(prog.ranks[r]) * 1.01;
    }
  }
  EXPECT_TRUE(above_state);
}

TEST(Lower, FoldedProgramStandsForEveryRankOfItsStage) {
  Plan p;
  p.tp = 2;
  p.pp = 2;
  p.dp = 2;
  const Program prog = lower(make_scenario(tiny_gpt(), p));
  ASSERT_EQ(prog.ranks.size(), 2u);
  EXPECT_EQ(prog.ranks[1].rank, 4);
  EXPECT_EQ(prog.ranks[1].pp_stage, 1);
  EXPECT_EQ(prog.ranks[1].stands_for, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(prog.world_size, 8);
  // Groups list their full membership: the dp group of rank 0 is {0, 2}.
  bool saw_dp = false;
  for (const Group& g : prog.groups)
    if (g.kind == GroupKind::kDp && g.ranks.front() == 0) {
      saw_dp = true;
      EXPECT_EQ(g.ranks, (std::vector<int>{0, 2}));
    }
  EXPECT_TRUE(saw_dp);
}

// ---- schedules ---------------------------------------------------------------------------

TEST(Schedule, EveryStageRunsEveryPassOnce) {
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1}) {
    const int p = 4, v = s == Schedule::kInterleaved ? 3 : 1, m = 8;
    NominalCosts c;
    c.f.assign(static_cast<size_t>(p * v), 1.0);
    c.b.assign(static_cast<size_t>(p * v), 1.0);
    c.w.assign(static_cast<size_t>(p * v), 1.0);
    const auto orders = pipeline_schedule(s, p, v, m);
    for (const auto& o : orders) {
      std::map<std::tuple<int, int, int>, int> seen;
      for (const PassOp& op : o) ++seen[{static_cast<int>(op.kind), op.chunk, op.mb}];
      const int kinds = s == Schedule::kZbH1 ? 3 : 2;
      EXPECT_EQ(seen.size(), static_cast<size_t>(kinds * v * m));
      for (const auto& [k, n] : seen) EXPECT_EQ(n, 1);
    }
    if (s != Schedule::kZbH1) c.w.clear();
    EXPECT_NO_THROW(nominal_start_times(orders, p, v, m, c));
  }
}

TEST(Schedule, OneFOneBWarmupIsPMinusStageMinusOne) {
  // Stage s of 1F1B runs p - s - 1 forwards before its first backward... then alternates.
  const auto o = pipeline_schedule(Schedule::k1F1B, 4, 1, 8);
  for (int s = 0; s < 4; ++s) {
    int warm = 0;
    while (o[static_cast<size_t>(s)][static_cast<size_t>(warm)].kind == PassKind::kF) ++warm;
    EXPECT_EQ(warm, 4 - s) << "stage " << s;  // p - s - 1 warm-up + the first steady forward
  }
}

}  // namespace
}  // namespace stepcast

namespace stepcast {
namespace {

// TP communication overlap (overlap.tp_comm, Transformer Engine userbuffers): each
// sequence-parallel reduce-scatter is split into (tp-1)/tp that runs alongside the GEMM
// producing it and a last chunk of bytes/tp after it; each all-gather is one ring exchange
// that its GEMM does not wait for. Bytes are conserved, the collectives per layer forward go
// 4 -> 6, and the exposed TP time and the step shrink; compute can only grow (SM
// interference slows GEMMs that now overlap communication).
TEST(Lower, TpCommOverlapLeavesTheMoeDispatcherCollectivesWhole) {
  // Transformer Engine's userbuffers pipeline a linear layer's sp gather / reduce-scatter
  // with its GEMM; the MoE token dispatcher's tp collectives are plain NCCL calls. tiny_moe
  // at tp 2 with sp and overlap.tp_comm: attention's reduce-scatters are split in two
  // (".c0", ".c1"), the experts' "mlp.in" / "mlp.out" (no ep) and "moe.tp_in" /
  // "moe.tp_out" (ep 2 with expert_tp 2) are one collective each.
  for (int ep : {1, 2}) {
    Plan p;
    p.tp = 2;
    p.sp = true;
    p.overlap_tp = true;
    p.ep = ep;
    p.dp = ep;
    p.expert_tp = 2;
    const Program prog = lower(make_scenario(tiny_moe(8), p));
    int split_attn = 0, whole_moe = 0;
    for (const Task& t : prog.ranks[0].tasks) {
      if (t.kind != TaskKind::kCollective || t.category != Category::kTpComm) continue;
      const bool moe = t.label.find(".mlp.") != std::string::npos ||
                       t.label.find(".moe.tp_") != std::string::npos;
      const bool split = t.label.find(".c0") != std::string::npos ||
                         t.label.find(".c1") != std::string::npos;
      if (moe) {
        EXPECT_FALSE(split) << t.label;
        ++whole_moe;
      } else if (split) {
        ++split_attn;
      }
    }
    EXPECT_GT(split_attn, 0) << "ep " << ep;
    EXPECT_GT(whole_moe, 0) << "ep " << ep;
  }
}

TEST(Lower, TpCommOverlapChunksCollectivesAndHidesThem) {
  Plan p;
  p.tp = 8;
  p.sp = true;
  p.seq_len = 4096;
  ModelArch a = tiny_gpt();
  a.hidden = 4096;
  a.ffn_hidden = 16384;
  a.heads = 32;
  a.kv_heads = 32;
  Scenario sc = make_scenario(a, p);
  sc.profile = load_profile("h100-sxm", default_profiles_dir());
  auto run = [&](bool overlap, double* tp_bytes, int* per_layer) {
    sc.parallel.overlap_tp_comm = overlap;
    const Program prog = lower(sc);
    *tp_bytes = 0;
    *per_layer = 0;
    for (const Task& t : prog.ranks[0].tasks) {
      if (t.kind != TaskKind::kCollective || t.category != Category::kTpComm) continue;
      *tp_bytes += t.bytes;
      if (t.layer == 3 && t.microbatch == 0 && t.phase == Phase::kFwd) ++*per_layer;
    }
    return simulate(prog, task_durations(prog, sc.profile));
  };
  double b_off = 0, b_on = 0;
  int n_off = 0, n_on = 0;
  const Timeline off = run(false, &b_off, &n_off);
  const Timeline on = run(true, &b_on, &n_on);
  EXPECT_DOUBLE_EQ(b_on, b_off);
  // Per layer forward: two all-gathers and two reduce-scatters without the overlap; with it
  // each reduce-scatter in two chunks and each all-gather one ring exchange: 2 + 2 x 2.
  EXPECT_EQ(n_off, 4);
  EXPECT_EQ(n_on, 6);
  const auto tp = static_cast<size_t>(Category::kTpComm);
  const auto comp = static_cast<size_t>(Category::kCompute);
  // Only the part of each collective that fits under its GEMM is hidden (here the 33.5 MB
  // all-gathers take longer than the 26 GFLOP GEMMs they overlap), so less than all of it.
  EXPECT_LT(on.breakdown_ns[tp], off.breakdown_ns[tp]);
  EXPECT_GT(on.breakdown_ns[tp], 0);
  EXPECT_LT(on.step_ns, off.step_ns);
  EXPECT_GE(on.breakdown_ns[comp], off.breakdown_ns[comp]);
}

// tiny_gpt at tp 4 with sequence parallelism and the TP overlap on, 2 microbatches.
Plan tp4_overlap_plan() {
  Plan p;
  p.tp = 4;
  p.sp = true;
  p.overlap_tp = true;
  p.microbatches = 2;
  return p;
}

// A kernel on the compute stream.
bool is_compute_task(const Task& t) {
  return t.stream == StreamKind::kCompute &&
         (t.kind == TaskKind::kGemm || t.kind == TaskKind::kAttention ||
          t.kind == TaskKind::kMemoryBound);
}

// Transformer Engine's ring exchange: the GEMM after an overlapped all-gather starts on the
// rank's own chunk, so it does not wait for the all-gather (on the tp_ring stream); the
// compute task after that GEMM does. The all-gather carries the full gathered size
// (nccl-tests' S), so it costs (tp-1)/tp of the bytes over the link, as the tp-1 steps of
// the exchange do.
TEST(Lower, TpOverlapAllGatherIsARingExchangeTheGemmDoesNotWaitFor) {
  const Plan p = tp4_overlap_plan();
  const ModelArch a = tiny_gpt();
  const Scenario sc = make_scenario(a, p);
  const Program prog = lower(sc);
  const TaskList& tasks = prog.ranks[0].tasks;
  // S of the gathered [T, h] activation: b x s x h x 2 bytes.
  const double full = static_cast<double>(sc.parallel.microbatch) *
                      static_cast<double>(sc.training.seq_len) *
                      static_cast<double>(a.hidden) * 2.0;
  int checked = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& ag = tasks[i];
    if (ag.kind != TaskKind::kCollective || ag.coll != CollOp::kAllGather ||
        ag.category != Category::kTpComm)
      continue;
    // The gathers for weight gradients run alongside an input-gradient GEMM instead.
    if (ag.label.ends_with(".wgrad.mb" + std::to_string(ag.microbatch))) continue;
    // The next two compute tasks on the compute stream: the GEMM, then the op after it.
    std::vector<const Task*> next;
    for (size_t j = i + 1; j < tasks.size() && next.size() < 2; ++j)
      if (is_compute_task(tasks[j])) next.push_back(&tasks[j]);
    ASSERT_EQ(next.size(), 2u) << ag.label;
    auto waits = [&](const Task& t) {
      return std::find(t.deps.begin(), t.deps.end(), ag.id) != t.deps.end();
    };
    // Only a gather before a GEMM is overlapped (not the embedding's output gradient, which
    // a memory-bound op takes), and the old lowering had that GEMM wait for its first chunk;
    // the count below says that every overlapped one was seen.
    if (next[0]->kind != TaskKind::kGemm || waits(*next[0])) continue;
    EXPECT_TRUE(waits(*next[1])) << ag.label << " -> " << next[1]->label;
    EXPECT_DOUBLE_EQ(ag.bytes, full) << ag.label;
    // On its own stream (TE's, apart from NCCL's), where it holds no SMs.
    EXPECT_EQ(ag.stream, StreamKind::kTpRing) << ag.label;
    ++checked;
  }
  // Per layer and microbatch: the forward's two (before qkv and fc1) and the input
  // gradient's two (before proj and fc2); per microbatch one more before the logits GEMM;
  // over 2 microbatches.
  EXPECT_EQ(checked, (4 * a.layers + 1) * 2);
}

// Transformer Engine's backward (with the TP overlap on): each linear's weight-gradient GEMM
// right after its input-gradient GEMM, as a TE module's backward runs them. After qkv and
// fc1 (column-parallel) the reduce-scatter of the input gradient comes whole between the
// two and runs beside the weight gradient (TE's bulk overlap): the weight gradient does not
// wait for it, the compute after does. proj and fc2 (row-parallel) gathered their output
// gradient by ring exchange, which both GEMMs use: the weight gradient waits for it. With
// W split from B (ZB-H1) the weight gradients stay in their W pass.
TEST(Lower, TpOverlapBackwardRunsEachWeightGradientAfterItsInputGradient) {
  Plan p = tp4_overlap_plan();
  const ModelArch a = tiny_gpt();
  const Program prog = lower(make_scenario(a, p));
  const TaskList& tasks = prog.ranks[0].tasks;
  const double full = 512.0 * static_cast<double>(a.hidden) * 2.0;  // S of [T, h], bf16
  auto waits = [](const Task& t, int id) {
    return std::find(t.deps.begin(), t.deps.end(), id) != t.deps.end();
  };
  auto next_compute = [&](size_t i) {
    for (size_t j = i + 1; j < tasks.size(); ++j)
      if (is_compute_task(tasks[j])) return j;
    return tasks.size();
  };
  int column = 0, row = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& dg = tasks[i];
    if (dg.kind != TaskKind::kGemm || dg.phase != Phase::kBwdInput || dg.layer < 0) continue;
    const std::string name = dg.label.substr(0, dg.label.rfind(".mb"));  // bwd.L3.qkv
    const std::string op = name.substr(name.rfind('.') + 1);
    if (op != "qkv" && op != "fc1" && op != "proj" && op != "fc2") continue;
    const size_t w = next_compute(i);
    ASSERT_LT(w, tasks.size());
    EXPECT_EQ(tasks[w].phase, Phase::kBwdWeight) << dg.label << " -> " << tasks[w].label;
    EXPECT_EQ(tasks[w].label, "wgt" + dg.label.substr(3)) << dg.label;
    const size_t after = next_compute(w);
    ASSERT_LT(after, tasks.size());
    if (op == "qkv" || op == "fc1") {
      // The one task between them: the whole reduce-scatter, after the input gradient.
      ASSERT_EQ(w, i + 2) << dg.label;
      const Task& rs = tasks[i + 1];
      EXPECT_EQ(rs.coll, CollOp::kReduceScatter) << rs.label;
      EXPECT_DOUBLE_EQ(rs.bytes, full) << rs.label;
      EXPECT_TRUE(waits(rs, dg.id)) << rs.label;
      EXPECT_FALSE(waits(tasks[w], rs.id)) << tasks[w].label;
      EXPECT_TRUE(waits(tasks[after], rs.id)) << tasks[after].label;
      ++column;
    } else {
      // The ring exchange before the input gradient: the weight gradient waits for it.
      int ring = -1;
      for (size_t j = i; j-- > 0;)
        if (tasks[j].stream == StreamKind::kTpRing) {
          ring = tasks[j].id;
          break;
        }
      ASSERT_GE(ring, 0) << dg.label;
      EXPECT_FALSE(waits(dg, ring)) << dg.label;
      EXPECT_TRUE(waits(tasks[w], ring)) << tasks[w].label;
      ++row;
    }
  }
  // Two of each per layer and microbatch.
  EXPECT_EQ(column, 2 * a.layers * 2);
  EXPECT_EQ(row, 2 * a.layers * 2);

  // ZB-H1: the weight gradients wait for their W pass; no input gradient is followed by one.
  p.pp = 2;
  p.schedule = Schedule::kZbH1;
  const Program zb = lower(make_scenario(a, p));
  for (const RankProgram& rp : zb.ranks)
    for (size_t i = 0; i < rp.tasks.size(); ++i) {
      const Task& t = rp.tasks[i];
      if (t.kind != TaskKind::kGemm || t.phase != Phase::kBwdInput) continue;
      for (size_t j = i + 1; j < rp.tasks.size(); ++j) {
        if (rp.tasks[j].stream != StreamKind::kCompute || rp.tasks[j].kind == TaskKind::kAlloc ||
            rp.tasks[j].kind == TaskKind::kFree)
          continue;
        EXPECT_NE(rp.tasks[j].phase, Phase::kBwdWeight) << t.label << " -> " << rp.tasks[j].label;
        break;
      }
    }
}

}  // namespace
}  // namespace stepcast
