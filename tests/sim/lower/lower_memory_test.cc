// Lowering tests: memory (activations in flight per schedule, training state under ZeRO,
// NCCL communicator memory, the gradient buffer, tied embeddings, uneven stages).
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

// ---- memory ------------------------------------------------------------------------------

struct MemCase {
  Schedule schedule;
  int vpp;
  int expected_layer_mbs;  // stage 0 peak, in layer-microbatches of activations
  int held_dy_layers = 0;  // plus layers' output gradients held from B to W (ZB-H1)
};

class PipelineMemoryTest : public ::testing::TestWithParam<MemCase> {};

TEST_P(PipelineMemoryTest, FirstStageHoldsTheScheduleInFlight) {
  // p = 4, m = 8, L = 16 layers. 1F1B: p microbatches x L/p layers = 16 layer-microbatches
  // (= L, Korthikanti 2022 section 4.2.3). GPipe: m x L/p = 32. Interleaved v = 2: stage 0 runs
  // (p-1)*2 + (v-1)*p + 1 = 11 virtual microbatches of L/(pv) = 2 layers before its first
  // backward = 22 = L (1 + (p-1)/(p v)) = 16 x 11/8. ZB-H1: 1F1B's 16, and during a B pass
  // the output gradients of the stage's L/p = 4 layers, held until the W that follows it on
  // stage 0: per layer T (3h + h + ffn + h) x 2 = 512 x 2304 x 2 bytes.
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
                   c.expected_layer_mbs * act + c.held_dy_layers * 512.0 * 2304 * 2);
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineMemoryTest,
                         ::testing::Values(MemCase{Schedule::k1F1B, 1, 16},
                                           MemCase{Schedule::kGpipe, 1, 32},
                                           MemCase{Schedule::kInterleaved, 2, 22},
                                           MemCase{Schedule::kZbH1, 1, 16, 4}));

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
  // Megatron mixed precision (docs/model.md): bf16 weights 2 + fp32 grads 4 + fp32 master
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

TEST(Lower, EndStagesOfZeroLayersHoldOnlyTheEmbeddingOrTheHead) {
  // DeepSeek-V3's Megatron layout ends in a stage of loss (and MTP) only: pipeline_layers
  // [4, 0] leaves stage 1 the output layer and loss, [0, 4] stage 0 the embedding; an
  // interleaved [0, 2, 2, 0] both. Each lowers, its stages pass messages, and it runs.
  for (const std::vector<int>& split :
       {std::vector<int>{4, 0}, std::vector<int>{0, 4}, std::vector<int>{0, 2, 2, 0}}) {
    Plan p;
    p.pp = 2;
    p.pipeline_layers = split;
    if (split.size() == 4) {
      p.vpp = 2;
      p.schedule = Schedule::kInterleaved;
    }
    const Program prog = lower(make_scenario(tiny_gpt(4), p));
    validate_program(prog);
    std::set<int> layers[2];
    bool head[2] = {false, false}, embed[2] = {false, false};
    for (int s = 0; s < 2; ++s)
      for (const Task& t : prog.ranks[static_cast<size_t>(s)].tasks) {
        if (t.layer >= 0) layers[s].insert(t.layer);
        if (t.label.find(".head.") != std::string::npos) head[s] = true;
        if (t.label.find(".emb.") != std::string::npos) embed[s] = true;
      }
    EXPECT_TRUE(embed[0] && !embed[1] && head[1] && !head[0]) << split.size();
    const std::set<int> want0 = split == std::vector<int>{4, 0}   ? std::set<int>{0, 1, 2, 3}
                                : split == std::vector<int>{0, 4} ? std::set<int>{}
                                                                  : std::set<int>{2, 3};
    EXPECT_EQ(layers[0], want0) << split.size();
    EXPECT_EQ(layers[1].size(), 4 - want0.size()) << split.size();
    run(prog);  // no deadlock between the stages
  }
}

TEST(Lower, MtpModulesRunOnTheLastStageAfterItsLayers) {
  // tiny_moe (4 layers, all MoE) with one MTP module, pp 2: the last stage runs, after
  // layers 2 and 3, the module's input kernels (embedding lookup, enorm, hnorm, eh_proj
  // [T, 2h] x [2h, h]), a layer like layer 3 (task layer index 4) and the shared output
  // layer with its loss, then the model's own head. It holds the module's parameters:
  // the last layer's, eh_proj 2h^2 and three norms (ParamCounts::mtp), nothing for the
  // shared output layer; stage 0 does not change.
  Plan p;
  p.pp = 2;
  ModelArch a = tiny_moe();
  const Program before = lower(make_scenario(a, p));
  a.mtp_layers = 1;
  const Program prog = lower(make_scenario(a, p));
  validate_program(prog);
  std::vector<std::string> order;
  for (const Task& t : prog.ranks[1].tasks)
    if (t.phase == Phase::kFwd && t.microbatch == 0 && t.kind == TaskKind::kGemm) {
      const std::string unit = t.label.substr(4, t.label.find('.', 4) - 4);
      if (order.empty() || order.back() != unit) order.push_back(unit);
    }
  EXPECT_EQ(order, (std::vector<std::string>{"L2", "L3", "mtp0", "head"}));
  int layer4 = 0, eh = 0, heads = 0;
  for (const Task& t : prog.ranks[1].tasks) {
    if (t.microbatch != 0 || t.phase != Phase::kFwd) continue;
    if (t.layer == 4) ++layer4;
    if (t.label == "fwd.mtp0.in.eh_proj.mb0") {
      ++eh;
      EXPECT_EQ(t.gemm.k, 2 * a.hidden);
      EXPECT_EQ(t.gemm.n, a.hidden);
    }
    if (t.label.find(".logits.mb0") != std::string::npos) ++heads;
  }
  EXPECT_GT(layer4, 0);
  EXPECT_EQ(eh, 1);
  EXPECT_EQ(heads, 2);  // the module's loss and the model's
  const double mtp = count_params(a).mtp;
  EXPECT_GT(mtp, 0);
  // 18 bytes a parameter (bf16 weight, fp32 main grad, fp32 master and two Adam moments).
  EXPECT_NEAR(state_bytes(prog.ranks[1]) - state_bytes(before.ranks[1]), 18.0 * mtp, 1.0);
  EXPECT_DOUBLE_EQ(state_bytes(prog.ranks[0]), state_bytes(before.ranks[0]));
  run(prog);
}

TEST(Lower, GradReduceWithoutOverlapWaitsForTheWholeBackward) {
  // overlap.grad_reduce off: every bucket starts after the last backward compute, so the dp
  // stream is idle during the backward and the reduction is fully exposed.
  Plan p;
  p.dp = 2;
  p.bucket_bytes = 1e6;
  p.overlap_grad = false;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.framework.grad_nan_check = false;  // its per-bucket check: lower_dp_rules_test.cc
  const Program prog = lower(sc);
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

}  // namespace
}  // namespace stepcast
