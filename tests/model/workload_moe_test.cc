// Per-layer ops of MoE layers (expert parallelism, expert tensor parallelism, shared experts)
// and properties over random shapes: TP splits FLOPs exactly, expert slots conserve tokens.
#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "model/arch.h"
#include "model/error.h"
#include "model/params.h"
#include "model/workload.h"
#include "tests/model/workload_test_util.h"

namespace stepcast {
namespace {

using namespace test_workload;  // NOLINT: the shared helpers of these tests

// ---- MoE

TEST(Workload, MoeExpertParallelOrderAndTokens) {
  const ModelArch& a = *find_builtin_model("mixtral-8x7b");
  // tp 2 + sp, ep 4: each rank routes T/tp = 4096/2 = 2048 tokens, 2 copies each (top-2)
  // = 4096 copies sent; 2 local experts each receive 1.0 * 2048 * 4 * 2 / 8 = 2048 slots.
  const LayerOps o = layer_ops(a, 0, shard(1, 4096, 2, true, 1, 4));
  // The dispatcher's kernels in Megatron-Core's order (model/moe.cc; tested in moe_test.cc).
  const std::vector<std::string> fwd = {"ln1",
                                        "G:attn.in",
                                        "qkv",
                                        "attn",
                                        "proj",
                                        "R:attn.out",
                                        "ln2",
                                        "router",
                                        "moe.topk",
                                        "moe.route_stats",
                                        "AG:moe.counts",
                                        "moe.permute_map",
                                        "moe.permute",
                                        "moe.host_sync",
                                        "D:moe.dispatch",
                                        "D:moe.dispatch_probs",
                                        "moe.sort",
                                        "moe.fc1",
                                        "moe.act",
                                        "moe.fc2",
                                        "moe.unsort",
                                        "C:moe.combine",
                                        "moe.unpermute",
                                        "residual"};
  EXPECT_EQ(names(o.fwd), fwd);
  const std::vector<std::string> bwd = {"residual",
                                        "moe.unpermute",
                                        "D:moe.dispatch",
                                        "moe.unsort",
                                        "moe.fc2",
                                        "moe.act",
                                        "moe.fc1",
                                        "moe.sort",
                                        "C:moe.combine_probs",
                                        "C:moe.combine",
                                        "moe.permute",
                                        "moe.route_stats",
                                        "moe.topk",
                                        "router",
                                        "ln2",
                                        "G:attn.out",
                                        "proj",
                                        "attn",
                                        "G:qkv.in.wgrad",
                                        "qkv",
                                        "R:attn.in",
                                        "ln1"};
  EXPECT_EQ(names(o.bwd_input), bwd);
  const Op& fc1 = find_op(o.fwd, "moe.fc1");
  EXPECT_EQ(fc1.gemm.batch, 2);
  EXPECT_EQ(fc1.gemm.m, 2048);
  EXPECT_EQ(fc1.gemm.n, 2 * 14336);  // unsplit by tp when ep > 1
  for (const Step& s : o.fwd) {
    if (s.is_comm && s.comm.name == "moe.dispatch") {
      EXPECT_DOUBLE_EQ(s.comm.bytes, 2048.0 * 2 * 4096 * 2);  // tokens*top_k*h*2 B
    }
  }
  // Parameters on this rank: 2 local experts of 3 * 4096 * 14336, router 8 * 4096,
  // attention split over tp: (4096*(2048 + 2*512) + 2048*4096), 2 norms 2 * 4096.
  const double expected =
      2 * 3 * 4096.0 * 14336 + 8 * 4096.0 + 4096.0 * (2048 + 1024) + 2048.0 * 4096 + 2 * 4096.0;
  EXPECT_DOUBLE_EQ(o.param_count, expected);
}

TEST(Workload, MoeWithoutEpSplitsExpertsOverTp) {
  const ModelArch& a = *find_builtin_model("mixtral-8x7b");
  const LayerOps o = layer_ops(a, 0, shard(1, 4096, 4, true));
  // All 8 experts local, each over 4096 * 2 / 8 = 1024 tokens, ffn split 14336/4 = 3584.
  const Op& fc1 = find_op(o.fwd, "moe.fc1");
  EXPECT_EQ(fc1.gemm.batch, 8);
  EXPECT_EQ(fc1.gemm.m, 1024);
  EXPECT_EQ(fc1.gemm.n, 2 * 3584);
  const std::vector<std::string> mid = {
      "ln2",         "G:mlp.in",      "router",  "moe.topk", "moe.route_stats", "moe.permute_map",
      "moe.permute", "moe.host_sync", "moe.fc1", "moe.act",  "moe.fc2",         "moe.unpermute",
      "R:mlp.out",   "residual"};
  const auto all = names(o.fwd);
  EXPECT_EQ(std::vector<std::string>(all.end() - 14, all.end()), mid);
}

TEST(Workload, MoeActiveFlopsEqualTopKDenseMlps) {
  // With tp = ep = 1 and capacity 1, a Mixtral layer's forward GEMM FLOPs are attention
  // + router 2*T*h*8 + top_k (2) dense SwiGLU MLPs 2 * 6*T*h*ffn.
  const ModelArch& a = *find_builtin_model("mixtral-8x7b");
  const double T = 4096, h = 4096, ffn = 14336;
  const LayerOps o = layer_ops(a, 0, shard(1, 4096));
  const double attn_gemm = 2 * T * h * (4096 + 2 * 1024) + 2 * T * 4096 * h;
  EXPECT_DOUBLE_EQ(flops(o.fwd, kGemm), attn_gemm + 2 * T * h * 8 + 2 * 6 * T * h * ffn);
}

TEST(Workload, DeepseekSharedExpertAndDenseLayers) {
  const ModelArch& a = *find_builtin_model("deepseek-v3-like");
  const LayerOps dense = layer_ops(a, 2, shard(1, 4096, 1));
  EXPECT_EQ(find_op(dense.fwd, "fc1").gemm.n, 2 * 18432);
  const LayerOps moe = layer_ops(a, 3, shard(1, 4096, 1, false, 1, 64));
  // 256 / 64 = 4 local experts, each 4096 * 64 * 8 / 256 = 8192 slots; shared expert on
  // the 4096 local tokens, width 2048.
  EXPECT_EQ(find_op(moe.fwd, "moe.fc1").gemm.batch, 4);
  EXPECT_EQ(find_op(moe.fwd, "moe.fc1").gemm.m, 8192);
  EXPECT_EQ(find_op(moe.fwd, "shared.fc1").gemm.m, 4096);
  EXPECT_EQ(find_op(moe.fwd, "shared.fc2").gemm.k, 2048);
}

// Experts split over tp with ep (expert_tp = tp): Mixtral layer 0 at tp 2, ep 4, sp, T = 4096.
// Each rank routes its 2048-token shard: it sends 2048 x 2 copies; after the dispatch
// all-to-all the copies of the 2 tp ranks are gathered, so each of its 8/4 = 2 local experts
// gets 2048 x 4 x 2 / 8 x 2 = 4096 slots, with ffn 14336/2 (gate and up: n = 14336). The
// gather and the reduce-scatter move the gathered copies, 4096 x 2 x 4096 x 2 B each, and
// the experts' FLOPs x tp equal the unsplit layer's.
TEST(Workload, ExpertTensorParallelWithEpGathersTheDispatchedTokens) {
  const ModelArch& a = *find_builtin_model("mixtral-8x7b");
  ShardSpec sh = shard(1, 4096, 2, true, 1, 4);
  sh.expert_tp = 2;
  const LayerOps o = layer_ops(a, 0, sh);
  const Op& fc1 = find_op(o.fwd, "moe.fc1");
  EXPECT_EQ(fc1.gemm.batch, 2);
  EXPECT_EQ(fc1.gemm.m, 4096);
  EXPECT_EQ(fc1.gemm.n, 14336);
  const auto fwd = names(o.fwd);
  const std::vector<std::string> mid = {"D:moe.dispatch", "D:moe.dispatch_probs",
                                        "G:moe.tp_in",    "moe.sort",
                                        "moe.fc1",        "moe.act",
                                        "moe.fc2",        "moe.unsort",
                                        "R:moe.tp_out",   "C:moe.combine"};
  EXPECT_NE(std::search(fwd.begin(), fwd.end(), mid.begin(), mid.end()), fwd.end());
  const auto bwd = names(o.bwd_input);
  // Backward mirrors it (the combine's backward is a dispatch-shaped all-to-all).
  const std::vector<std::string> back = {
      "D:moe.dispatch", "G:moe.tp_out", "moe.unsort",          "moe.fc2",      "moe.act", "moe.fc1",
      "moe.sort",       "R:moe.tp_in",  "C:moe.combine_probs", "C:moe.combine"};
  EXPECT_NE(std::search(bwd.begin(), bwd.end(), back.begin(), back.end()), bwd.end());
  for (const Step& st : o.fwd) {
    if (st.is_comm && st.comm.name.rfind("moe.tp_", 0) == 0) {
      EXPECT_DOUBLE_EQ(st.comm.bytes, 4096.0 * 2 * 4096 * 2) << st.comm.name;
    }
  }
  auto expert_flops = [](const LayerOps& lo) {
    double f = 0;
    for (const Step& st : lo.fwd)
      if (!st.is_comm && st.op.name.rfind("moe.fc", 0) == 0) f += st.op.flops;
    return f;
  };
  EXPECT_DOUBLE_EQ(expert_flops(o) * 2,
                   expert_flops(layer_ops(a, 0, shard(1, 4096, 1, false, 1, 4))));
  EXPECT_DOUBLE_EQ(o.expert_param_count, 2.0 * 3 * 4096 * 7168);
}

// Shared experts are Megatron-Core's SharedExpertMLP: a dense MLP split over the attention's
// tp whatever ep is, on all T tokens, with its own sp gather/reduction. DeepSeek-V3-like
// layer 3 (MoE; h 7168, one shared expert of ffn 2048, SwiGLU) at tp 4, ep 8, sp, T = 4096:
//   shared.fc1: m = 4096 tokens, n = 2 x 2048/4 = 1024 (gate and up), k = 7168;
//   shared.fc2: m = 4096, n = 7168, k = 512;
//   params per rank: 3 x 7168 x 2048 / 4 = 11,010,048 (of 44,040,192);
//   forward:  G:shared.in before shared.fc1, R:shared.out after shared.fc2;
//   backward: G:shared.out, fc2 dgrad, act, fc1 dgrad, R:shared.in, and the re-gather of
//             fc1's input for its weight gradient (shared.fc1.in.wgrad) — last, after the
//             routed experts' backward (they run first in forward: MoELayer.forward).
TEST(Workload, SharedExpertsAreATpSplitDenseMlp) {
  const ModelArch& a = *find_builtin_model("deepseek-v3-like");
  const LayerOps o = layer_ops(a, 3, shard(1, 4096, 4, true, 1, 8));
  const Op& fc1 = find_op(o.fwd, "shared.fc1");
  EXPECT_EQ(fc1.gemm.m, 4096);
  EXPECT_EQ(fc1.gemm.n, 1024);
  EXPECT_EQ(fc1.gemm.k, 7168);
  const Op& fc2 = find_op(o.fwd, "shared.fc2");
  EXPECT_EQ(fc2.gemm.n, 7168);
  EXPECT_EQ(fc2.gemm.k, 512);
  const auto fwd = names(o.fwd);
  const std::vector<std::string> shared_fwd = {"G:shared.in", "shared.fc1", "shared.act",
                                               "shared.fc2", "R:shared.out"};
  EXPECT_NE(std::search(fwd.begin(), fwd.end(), shared_fwd.begin(), shared_fwd.end()), fwd.end());
  const auto bwd = names(o.bwd_input);
  const std::vector<std::string> shared_bwd = {"G:shared.out", "shared.fc2",
                                               "shared.act",   "G:shared.fc1.in.wgrad",
                                               "shared.fc1",   "R:shared.in"};
  const auto at = std::search(bwd.begin(), bwd.end(), shared_bwd.begin(), shared_bwd.end());
  ASSERT_NE(at, bwd.end());
  EXPECT_GT(at - bwd.begin(), std::find(bwd.begin(), bwd.end(), "moe.fc2") - bwd.begin());
  // The shared experts' FLOPs split exactly by tp; the rest of the parameters as before.
  auto shared_flops = [](const LayerOps& lo) {
    double f = 0;
    for (const auto* list : {&lo.fwd, &lo.bwd_input, &lo.bwd_weight})
      for (const Step& st : *list)
        if (!st.is_comm && st.op.name.rfind("shared.fc", 0) == 0) f += st.op.flops;
    return f;
  };
  const LayerOps whole = layer_ops(a, 3, shard(1, 4096, 1, false, 1, 8));
  EXPECT_DOUBLE_EQ(shared_flops(o) * 4, shared_flops(whole));
  ModelArch none = a;
  none.moe->shared_experts = 0;
  EXPECT_DOUBLE_EQ(o.param_count - layer_ops(none, 3, shard(1, 4096, 4, true, 1, 8)).param_count,
                   44040192.0 / 4);
  EXPECT_DOUBLE_EQ(
      whole.param_count - layer_ops(none, 3, shard(1, 4096, 1, false, 1, 8)).param_count,
      44040192.0);
}

// ---- properties over random shapes

struct RandomCase {
  ModelArch arch;
  ShardSpec sh;
};

RandomCase random_dense(std::mt19937& rng) {
  auto pick = [&](std::initializer_list<int> v) {
    return *(v.begin() + std::uniform_int_distribution<int>(0, int(v.size()) - 1)(rng));
  };
  RandomCase c;
  ModelArch& a = c.arch;
  a.name = "random";
  a.layers = 2;
  a.heads = pick({8, 16, 32, 64});
  a.kv_heads = a.heads / pick({1, 2, 4, 8});
  const int d = pick({64, 128});
  a.hidden = std::int64_t(a.heads) * d;
  a.ffn_hidden = a.hidden * pick({2, 3, 4}) + 256 * pick({0, 1});
  a.vocab = 32000;
  const bool llama = pick({0, 1}) == 1;
  a.activation = llama ? Activation::kSwiglu : Activation::kGelu;
  a.norm = llama ? Norm::kRmsNorm : Norm::kLayerNorm;
  a.dropout = !llama;
  c.sh = shard(pick({1, 2, 3}), 256 * pick({1, 2, 4, 8}), 1, pick({0, 1}) == 1, pick({1, 2}));
  c.sh.tp = pick({1, 2, 4, 8});
  while (a.kv_heads % c.sh.tp != 0) c.sh.tp /= 2;  // kv heads not replicated
  return c;
}

TEST(WorkloadProperty, TpSplitsFlopsExactlyAndBytesArePositive) {
  std::mt19937 rng(20221205);
  for (int i = 0; i < 300; ++i) {
    RandomCase c = random_dense(rng);
    const int t = c.sh.tp;
    ShardSpec one = c.sh;
    one.tp = 1;
    one.sequence_parallel = false;
    const LayerOps split = layer_ops(c.arch, 1, c.sh);
    const LayerOps whole = layer_ops(c.arch, 1, one);
    ASSERT_NEAR(total_flops(split) * t, total_flops(whole), 1e-9 * total_flops(whole))
        << "case " << i << " tp " << t << " heads " << c.arch.heads;
    ASSERT_NEAR(flops(split.fwd) * t, flops(whole.fwd), 1e-9 * flops(whole.fwd));
    // Sequence parallel moves no FLOPs.
    ShardSpec nosp = c.sh;
    nosp.sequence_parallel = false;
    ASSERT_DOUBLE_EQ(total_flops(layer_ops(c.arch, 1, nosp)), total_flops(split));
    // Backward GEMMs: input and weight gradients each equal the forward GEMMs.
    ASSERT_DOUBLE_EQ(flops(split.bwd_input, kGemm), flops(split.fwd, kGemm));
    ASSERT_DOUBLE_EQ(flops(split.bwd_weight, kGemm), flops(split.fwd, kGemm));
    for (const auto* list : {&split.fwd, &split.bwd_input, &split.bwd_weight}) {
      for (const Step& s : *list) {
        if (s.is_comm) {
          ASSERT_GT(s.comm.bytes, 0);
          continue;
        }
        ASSERT_GE(s.op.flops, 0) << s.op.name;
        ASSERT_GT(s.op.bytes_read, 0) << s.op.name;
        ASSERT_GT(s.op.bytes_written, 0) << s.op.name;
      }
    }
    // Two TP reductions each way (Megatron), plus two gathers each way under sp.
    int reduces = 0, gathers = 0;
    for (const Step& s : split.fwd) {
      reduces += s.is_comm && s.comm.kind == CommPointKind::kTpReduce;
      gathers += s.is_comm && s.comm.kind == CommPointKind::kTpGather;
    }
    ASSERT_EQ(reduces, t > 1 ? 2 : 0);
    ASSERT_EQ(gathers, t > 1 && c.sh.sequence_parallel ? 2 : 0);
  }
}

TEST(WorkloadProperty, MoeExpertSlotsConserveTokenCopies) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    ModelArch a = *find_builtin_model("mixtral-8x7b");
    const int experts_choice[] = {8, 16, 32, 64};
    a.moe->experts = experts_choice[rng() % 4];
    a.moe->top_k = 1 + int(rng() % 4);
    a.moe->ffn_hidden = 1024 * (1 + int(rng() % 4));
    a.moe->shared_experts = int(rng() % 2);
    const int ep = 1 << (rng() % 4);  // 1..8, divides experts
    const int tp = 1 << (rng() % 3);  // 1..4
    const std::int64_t b = 1 + rng() % 2, s = 1024 << (rng() % 3);
    const LayerOps o = layer_ops(a, 0, shard(b, s, tp, true, 1, ep));
    // Tokens this rank routes: all T = b*s with ep == 1 (experts split over tp); T/tp
    // with ep > 1. Over the ep group the slots of all experts hold every token copy:
    // experts * slots_per_expert == ep * routed_tokens * top_k (capacity factor 1).
    const std::int64_t routed = ep == 1 ? b * s : b * s / tp;
    const Op& fc1 = find_op(o.fwd, "moe.fc1");
    ASSERT_EQ(fc1.gemm.batch, a.moe->experts / ep);
    ASSERT_EQ(std::int64_t(a.moe->experts) * fc1.gemm.m, std::int64_t(ep) * routed * a.moe->top_k);
    // Each rank of an EP group routes its own tokens (layout.h), so one
    // rank's expert FLOPs are the unsplit layer's over its tokens divided by tp alone
    // (ep == 1: ffn split by tp; ep > 1: tokens split by tp).
    const LayerOps whole = layer_ops(a, 0, shard(b, s));
    const double ex = [&](const LayerOps& lo) {
      double f = 0;
      for (const Step& st : lo.fwd) {
        if (!st.is_comm && st.op.name.rfind("moe.fc", 0) == 0) f += st.op.flops;
      }
      return f;
    }(o);
    const double ex_whole = [&](const LayerOps& lo) {
      double f = 0;
      for (const Step& st : lo.fwd) {
        if (!st.is_comm && st.op.name.rfind("moe.fc", 0) == 0) f += st.op.flops;
      }
      return f;
    }(whole);
    ASSERT_NEAR(ex * tp, ex_whole, 1e-9 * ex_whole) << "ep " << ep << " tp " << tp;
    // The dispatch all-to-all carries every routed copy: routed * top_k * h * e bytes.
    const double h = double(a.hidden), e = 2.0;  // bf16 activations
    const auto dispatch_bytes = [](const LayerOps& lo) {
      for (const Step& st : lo.fwd)
        if (st.is_comm && st.comm.kind == CommPointKind::kEpDispatch) return st.comm.bytes;
      return 0.0;
    };
    const double want_dispatch = ep > 1 ? double(routed) * a.moe->top_k * h * e : 0.0;
    ASSERT_DOUBLE_EQ(dispatch_bytes(o), want_dispatch);
    // Capacity factor scales the slots, and the copies sent with them (dropped beyond
    // capacity, padded up to it): at 1.25, 1.25x the slots and the dispatch bytes.
    a.moe->capacity_factor = 1.25;
    const LayerOps oc = layer_ops(a, 0, shard(b, s, tp, true, 1, ep));
    const Op& fc1c = find_op(oc.fwd, "moe.fc1");
    ASSERT_GE(double(fc1c.gemm.m), 1.25 * double(fc1.gemm.m) - 1e-9);
    ASSERT_LT(double(fc1c.gemm.m), 1.25 * double(fc1.gemm.m) + 1);
    ASSERT_DOUBLE_EQ(dispatch_bytes(oc), 1.25 * want_dispatch);
  }
}

}  // namespace
}  // namespace stepcast
