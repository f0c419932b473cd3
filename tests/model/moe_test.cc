// The MoE block kernel by kernel (model/moe.cc): router and permutation kernels with their
// bytes, dropless vs token drop, load imbalance, the three dispatchers, the shared-expert
// overlap, MoE memory terms; and the architecture features of the new built-in models.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/arch.h"
#include "model/memory.h"
#include "model/params.h"
#include "model/workload.h"

namespace stepcast {
namespace {

const ModelArch& builtin(const char* n) {
  const ModelArch* a = find_builtin_model(n);
  EXPECT_NE(a, nullptr) << n;
  return *a;
}

// A small MoE model: 8 experts of ffn 1024, top-2, hidden 1024, every layer MoE.
ModelArch small_moe() {
  ModelArch a = builtin("mixtral-8x7b");
  a.hidden = 1024;
  a.heads = 8;
  a.kv_heads = 8;
  a.moe->ffn_hidden = 1024;
  return a;
}

ShardSpec shard(int ep, std::int64_t seq = 4096) {
  ShardSpec s;
  s.microbatch = 1;
  s.seq_len = seq;
  s.ep = ep;
  return s;
}

const Step* find(const std::vector<Step>& steps, const std::string& name, bool comm = false) {
  for (const Step& s : steps)
    if (s.is_comm == comm && (comm ? s.comm.name : s.op.name) == name) return &s;
  return nullptr;
}

double comm_bytes(const std::vector<Step>& steps, const std::string& name) {
  const Step* s = find(steps, name, true);
  return s ? s->comm.bytes : -1.0;
}

std::vector<std::string> names(const std::vector<Step>& steps) {
  std::vector<std::string> v;
  for (const Step& s : steps) v.push_back(s.is_comm ? "@" + s.comm.name : s.op.name);
  return v;
}

TEST(Moe, RouterAndPermuteKernelsCarryTheirBytes) {
  // T = 4096 tokens, E = 8, k = 2, h = 1024, bf16 (e = 2), ep 4 (2 local experts).
  const ModelArch a = small_moe();
  const LayerOps o = layer_ops(a, 0, shard(4));
  const double T = 4096, E = 8, h = 1024, R = T * 2;
  // Score + top-k: reads fp32 logits [T,E], writes fp32 probs and the bool map: 4 + 5.
  const Op& topk = find(o.fwd, "moe.topk")->op;
  EXPECT_DOUBLE_EQ(topk.bytes_read, T * E * 4);
  EXPECT_DOUBLE_EQ(topk.bytes_written, T * E * 5);
  // Permute: every one of the T*k copies read and written with its fp32 probability, the
  // row-id map [T,E] int32 read.
  const Op& perm = find(o.fwd, "moe.permute")->op;
  EXPECT_DOUBLE_EQ(perm.bytes_read, R * h * 2 + T * E * 4);
  EXPECT_DOUBLE_EQ(perm.bytes_written, R * h * 2 + R * 4);
  // Order: router, top-k, stats, counts all-gather, permute, host sync, token and prob
  // all-to-alls, sort into local-expert order, experts, unsort, combine, unpermute.
  const std::vector<std::string> want = {
      "router",       "moe.topk",      "moe.route_stats", "@moe.counts",         "moe.permute_map",
      "moe.permute",  "moe.host_sync", "@moe.dispatch",   "@moe.dispatch_probs", "moe.sort",
      "moe.fc1",      "moe.act",       "moe.fc2",         "moe.unsort",          "@moe.combine",
      "moe.unpermute"};
  const std::vector<std::string> got = names(o.fwd);
  auto it = std::find(got.begin(), got.end(), "router");
  ASSERT_NE(it, got.end());
  EXPECT_EQ(std::vector<std::string>(it, it + static_cast<long>(want.size())), want);
  EXPECT_DOUBLE_EQ(comm_bytes(o.fwd, "moe.dispatch"), R * h * 2);
  EXPECT_DOUBLE_EQ(comm_bytes(o.fwd, "moe.dispatch_probs"), R * 4);
  // One local expert: no sort / unsort.
  const LayerOps one = layer_ops(a, 0, shard(8));
  EXPECT_EQ(find(one.fwd, "moe.sort"), nullptr);
  EXPECT_EQ(find(one.fwd, "moe.unsort"), nullptr);
}

TEST(Moe, DroplessSyncsTheHostTokenDropPadsToCapacity) {
  ModelArch a = small_moe();
  EXPECT_NE(find(layer_ops(a, 0, shard(4)).fwd, "moe.host_sync"), nullptr);
  // Token drop, capacity 1.25: ceil(4096 * 2 / 8 * 1.25) = 1280 rows per expert from each
  // of the 4 sources = 5120 rows per local expert; 1280 x 8 = 10240 copies sent; no sync.
  a.moe->capacity_factor = 1.25;
  const LayerOps o = layer_ops(a, 0, shard(4));
  EXPECT_EQ(find(o.fwd, "moe.host_sync"), nullptr);
  EXPECT_EQ(find(o.fwd, "moe.fc1")->op.gemm.m, 5120);
  EXPECT_DOUBLE_EQ(comm_bytes(o.fwd, "moe.dispatch"), 10240.0 * 1024 * 2);
  // A capacity of 1 pads nothing under balanced routing: the dropless rows.
  a.moe->capacity_factor = 1.0;
  EXPECT_EQ(find(layer_ops(a, 0, shard(4)).fwd, "moe.fc1")->op.gemm.m, 4096);
}

TEST(Moe, ImbalanceLoadsTheBusiestRank) {
  // ep 4, 2 local experts, mean 4096 rows each; imbalance 2 puts one at 8192: the busiest
  // rank has 12288 rows (1.5x), receives 1.5x the mean and runs 1.5x the expert FLOPs.
  ModelArch a = small_moe();
  const LayerOps even = layer_ops(a, 0, shard(4));
  a.moe->imbalance = 2.0;
  const LayerOps hot = layer_ops(a, 0, shard(4));
  EXPECT_EQ(find(hot.fwd, "moe.fc1")->op.gemm.m, 6144);
  EXPECT_DOUBLE_EQ(comm_bytes(hot.fwd, "moe.dispatch"), 1.5 * comm_bytes(even.fwd, "moe.dispatch"));
  EXPECT_DOUBLE_EQ(find(hot.fwd, "moe.fc2")->op.flops, 1.5 * find(even.fwd, "moe.fc2")->op.flops);
  const MoeLoad ld = moe_load(a, shard(4));
  EXPECT_DOUBLE_EQ(ld.recv_factor, 1.5);
  EXPECT_DOUBLE_EQ(ld.rows, 12288);
}

TEST(Moe, ExpectedDistinctBinsClosedForms) {
  // One expert per bin: k distinct experts hit exactly k bins.
  EXPECT_NEAR(expected_distinct_bins(8, 8, 2), 2.0, 1e-12);
  // 2 bins of 4 experts, k = 2: both in one bin with probability 2 C(4,2)/C(8,2) = 12/28.
  EXPECT_NEAR(expected_distinct_bins(8, 2, 2), 2.0 - 12.0 / 28.0, 1e-12);
  EXPECT_DOUBLE_EQ(expected_distinct_bins(256, 1, 8), 1.0);
}

TEST(Moe, DeepEpSendsATokenOncePerNode) {
  // DeepSeek-V3-like, T = 4096, ep 64 over 8 nodes, 8 router groups top-4: a token's 8
  // experts lie in 4 nodes' 128 experts; it reaches 4 (1 - C(96,8)/C(128,8)) nodes, sent
  // once each: bytes T x that x h x 2, against T x 8 x h x 2 for the all-to-all.
  const ModelArch& a = builtin("deepseek-v3-like");
  ShardSpec s = shard(64);
  s.ep_nodes = 8;
  s.dispatcher = MoeDispatcher::kDeepEp;
  const LayerOps o = layer_ops(a, 3, s);
  double miss = 1;
  for (int i = 0; i < 8; ++i) miss *= (96.0 - i) / (128.0 - i);
  EXPECT_NEAR(comm_bytes(o.fwd, "moe.dispatch"), 4096.0 * 4 * (1 - miss) * 7168 * 2, 1.0);
  EXPECT_EQ(find(o.fwd, "moe.dispatch_probs", true), nullptr);  // fused
  EXPECT_EQ(find(o.fwd, "moe.sort"), nullptr);
  // Its notify kernel exchanges the 256 per-expert counts (int32) among the 64 ranks before
  // the host reads them: permute, notify, host sync, dispatch; no NCCL count all-gather.
  const std::vector<std::string> got = names(o.fwd);
  const auto at = std::find(got.begin(), got.end(), "moe.permute");
  ASSERT_NE(at, got.end());
  EXPECT_EQ(
      std::vector<std::string>(at, at + 4),
      (std::vector<std::string>{"moe.permute", "@moe.notify", "moe.host_sync", "@moe.dispatch"}));
  EXPECT_DOUBLE_EQ(comm_bytes(o.fwd, "moe.notify"), 256.0 * 4 * 64);
  EXPECT_TRUE(find(o.fwd, "moe.notify", true)->comm.ep_kernels);
  EXPECT_EQ(find(o.fwd, "moe.counts", true), nullptr);
  // DeepEP's own kernels move them, not NCCL's all-to-all (costed at the NIC's ring rate).
  for (const char* n : {"moe.dispatch", "moe.combine"}) {
    EXPECT_TRUE(find(o.fwd, n, true)->comm.ep_kernels) << n;
    EXPECT_TRUE(find(o.bwd_input, n, true)->comm.ep_kernels) << n;
  }
  s.dispatcher = MoeDispatcher::kAllToAll;
  const LayerOps t = layer_ops(a, 3, s);
  EXPECT_DOUBLE_EQ(comm_bytes(t.fwd, "moe.dispatch"), 4096.0 * 8 * 7168 * 2);
  EXPECT_FALSE(find(t.fwd, "moe.dispatch", true)->comm.ep_kernels);
  EXPECT_EQ(find(t.fwd, "moe.notify", true), nullptr);  // NCCL's count all-gather instead
}

TEST(Moe, AllGatherDispatcherGathersEveryToken) {
  ModelArch a = small_moe();
  ShardSpec s = shard(4);
  s.dispatcher = MoeDispatcher::kAllGather;
  const LayerOps o = layer_ops(a, 0, s);
  const Step* g = find(o.fwd, "moe.dispatch", true);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->comm.kind, CommPointKind::kEpGather);
  EXPECT_DOUBLE_EQ(g->comm.bytes, 4096.0 * 1024 * 2 * 4);
  EXPECT_EQ(find(o.fwd, "moe.combine", true)->comm.kind, CommPointKind::kEpScatter);
  EXPECT_EQ(find(o.fwd, "moe.host_sync"), nullptr);
}

TEST(Moe, SharedExpertsFirstOrBesideTheDispatch) {
  const ModelArch& a = builtin("deepseek-v3-like");
  ShardSpec s = shard(8);
  const std::vector<std::string> plain = names(layer_ops(a, 3, s).fwd);
  // Megatron's order without overlap: shared experts before the router.
  EXPECT_LT(std::find(plain.begin(), plain.end(), "shared.fc2") - plain.begin(),
            std::find(plain.begin(), plain.end(), "router") - plain.begin());
  s.shared_expert_overlap = true;
  const LayerOps o = layer_ops(a, 3, s);
  const std::vector<std::string> ov = names(o.fwd);
  const auto at = [&](const char* n) { return std::find(ov.begin(), ov.end(), n) - ov.begin(); };
  EXPECT_LT(at("@moe.dispatch"), at("shared.fc1"));
  EXPECT_LT(at("shared.fc2"), at("moe.fc1"));
  EXPECT_TRUE(find(o.fwd, "shared.fc1")->beside_comm);
  EXPECT_FALSE(find(o.fwd, "moe.fc1")->beside_comm);
  EXPECT_TRUE(find(o.bwd_input, "shared.fc1")->beside_comm);
}

TEST(Moe, MemoryKeepsNoExpertOutputAndFp8GemmInputs) {
  // bf16 -> fp8 halves the kept fc1 and fc2 inputs of the expert rows: R (h + f) bytes.
  const ModelArch a = small_moe();
  ShardSpec s = shard(4);
  const double bf16 = layer_activation_bytes(a, 0, s, Recompute::kNone, true);
  s.dtype = DType::kFp8;
  const double fp8 = layer_activation_bytes(a, 0, s, Recompute::kNone, true);
  const double R = 4096.0 * 2;
  EXPECT_DOUBLE_EQ(bf16 - fp8, R * (1024 + 1024));
  // Per row at bf16: fc1 input 2h, act input 2 x 2f, fc2 input 2f, prob 4 = 8196 B; per
  // token the router input 2h and the [T,E] logits, probs, map, ids (13 B each).
  const double tn = 4096, h = 1024;
  const double attn = tn * h * 2 * 2 + tn * (8 * 128 * 3) * 2 + tn * h * 2;  // ln1, QKV, proj in
  const double want = attn + tn * h * 2 /*ln2 in*/ + tn * h * 2 + tn * 8 * 13 + R * 8196;
  EXPECT_DOUBLE_EQ(bf16, want);
}

// The experts' narrow copies are Transformer Engine's (FrameworkRules::te_fp8_storage): a
// stack that does not save them (every preset but megatron-core) keeps the fc1 and fc2
// inputs in 16 bits under fp8 too, R (h + f) bytes more; and so under mxfp8, where they
// are 1 + 1/32 bytes with it.
TEST(Moe, ExpertInputsAreNarrowOnlyWhereTheStackSavesThem) {
  const ModelArch a = small_moe();
  ShardSpec s = shard(4);
  const double bf16 = layer_activation_bytes(a, 0, s, Recompute::kNone, true);
  const double R = 4096.0 * 2, hf = 1024 + 1024;
  for (DType dt : {DType::kFp8, DType::kMxfp8}) {
    s.dtype = dt;
    s.te_fp8_storage = true;
    const double te = layer_activation_bytes(a, 0, s, Recompute::kNone, true);
    s.te_fp8_storage = false;
    const double plain = layer_activation_bytes(a, 0, s, Recompute::kNone, true);
    EXPECT_DOUBLE_EQ(plain, bf16);
    EXPECT_DOUBLE_EQ(plain - te, R * hf * (2 - dtype_storage_bytes(dt)));
  }
}

// Shared experts under fp8 are stored as the dense MLP is (sim/lower/fp8.cc): the fc2 input
// as its 1-byte copy (T f_s bytes less than bf16) and the fc1's fp8 copy of its input beside
// the router's bf16 one (T h more). One shared expert of f_s = 1024 on small_moe at tp 1
// (T = 4096 tokens, h = 1024): +4096 * 1024 - 4096 * 1024 * (2 - 1) = 0 net in bytes, so
// give it f_s = 2048: +T h - T f_s = -T (f_s - h). Without TE's storage, bf16 throughout.
TEST(Moe, SharedExpertsUnderFp8AreStoredAsADenseMlp) {
  ModelArch a = small_moe();
  a.moe->shared_experts = 2;  // f_s = 2 x 1024
  ShardSpec s = shard(4);
  s.dtype = DType::kFp8;
  const double with = layer_activation_bytes(a, 0, s, Recompute::kNone, true);
  a.moe->shared_experts = 0;
  const double without = layer_activation_bytes(a, 0, s, Recompute::kNone, true);
  const double T = 4096, h = 1024, fs = 2048, gate = 2;
  // With shared experts the router input is the whole [T, h] (as here, tp 1: the same).
  EXPECT_DOUBLE_EQ(with - without, T * fs * gate * 2 + T * fs * 1 + T * h * 1);
  s.te_fp8_storage = false;
  a.moe->shared_experts = 2;
  const double plain_with = layer_activation_bytes(a, 0, s, Recompute::kNone, true);
  a.moe->shared_experts = 0;
  const double plain_without = layer_activation_bytes(a, 0, s, Recompute::kNone, true);
  EXPECT_DOUBLE_EQ(plain_with - plain_without, T * fs * (gate + 1) * 2);
}

// The router GEMM runs in the activation dtype whatever the experts' GEMM dtype (Megatron-
// Core's RouterGatingLinearFunction, outside the fp8 autocast): bf16 under fp8, no quantize
// kernel; the experts' GEMMs in fp8.
TEST(Moe, RouterGemmStaysBf16UnderFp8) {
  const ModelArch a = small_moe();
  ShardSpec s = shard(4);
  s.dtype = DType::kFp8;
  const LayerOps o = layer_ops(a, 0, s);
  const Step* r = find(o.fwd, "router");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->op.gemm.dtype, DType::kBf16);
  EXPECT_DOUBLE_EQ(r->op.bytes_read, (4096.0 * 1024 + 1024.0 * 8) * 2);
  EXPECT_EQ(find(o.bwd_input, "router")->op.gemm.dtype, DType::kBf16);
  EXPECT_EQ(find(o.fwd, "router.quant"), nullptr);
  EXPECT_EQ(find(o.fwd, "moe.fc1")->op.gemm.dtype, DType::kFp8);
}

TEST(Moe, Fp8ExpertGemmOperandsAreQuantizedByTheirOwnKernels) {
  // small_moe at ep 4, T = 4096, k = 2, capacity 1: 2 local experts of 4096 * 2 / 8 * 4 =
  // 4096 rows, R = 8192 rows, h = 1024, f = 1024 (SwiGLU: fc1 out 2f). Per-tensor fp8: each
  // GEMM's A operand read in bf16 (2 B), written row-wise and transposed (2 x 1 B), before
  // the GEMM: forward fc1 [R, h], fc2 [R, f]; backward fc2 dgrad dy [R, h], fc1 dgrad [R, 2f].
  const ModelArch a = small_moe();
  ShardSpec s = shard(4);
  s.dtype = DType::kFp8;
  const LayerOps o = layer_ops(a, 0, s);
  const double R = 8192, h = 1024, f = 1024;
  const std::pair<const char*, double> fwd[] = {{"moe.fc1.quant", R * h}, {"moe.fc2.quant", R * f}};
  for (const auto& [n, elems] : fwd) {
    const Step* q = find(o.fwd, n);
    ASSERT_NE(q, nullptr) << n;
    EXPECT_DOUBLE_EQ(q->op.bytes_read, elems * 2) << n;
    EXPECT_DOUBLE_EQ(q->op.bytes_written, elems * 2) << n;
  }
  const std::pair<const char*, double> bwd[] = {{"moe.fc2.quant", R * h},
                                                {"moe.fc1.quant", R * 2 * f}};
  for (const auto& [n, elems] : bwd) {
    const Step* q = find(o.bwd_input, n);
    ASSERT_NE(q, nullptr) << n;
    EXPECT_DOUBLE_EQ(q->op.bytes_read, elems * 2) << n;
  }
  // Each quantize kernel runs right before its GEMM, in both passes.
  for (const auto* steps : {&o.fwd, &o.bwd_input}) {
    const std::vector<std::string> v = names(*steps);
    for (const char* g : {"moe.fc1", "moe.fc2"}) {
      const auto it = std::find(v.begin(), v.end(), g);
      ASSERT_NE(it, v.end()) << g;
      ASSERT_NE(it, v.begin());
      EXPECT_EQ(*(it - 1), std::string(g) + ".quant");
    }
  }
  // bf16 GEMMs have no quantize kernel; nor do the dense (non-expert) fp8 linears here.
  s.dtype = DType::kBf16;
  for (const std::string& n : names(layer_ops(a, 0, s).fwd))
    EXPECT_EQ(n.find(".quant"), std::string::npos) << n;
  for (const std::string& n : names(o.fwd)) {
    if (n.find(".quant") != std::string::npos) {
      EXPECT_EQ(n.rfind("moe.", 0), 0u) << n;
    }
  }
}

TEST(Arch, QkNormSinksAndSlidingWindow) {
  const ModelArch& q = builtin("qwen3-30b-a3b");
  ShardSpec s = shard(1);
  const LayerOps o = layer_ops(q, 0, s);
  // qk-norm reads and writes Q (32 heads) and K (4 heads) of 128: T x 36 x 128 x 2 bytes.
  const Step* qn = find(o.fwd, "qk_norm");
  ASSERT_NE(qn, nullptr);
  EXPECT_DOUBLE_EQ(qn->op.bytes_read, 4096.0 * 36 * 128 * 2);
  ModelArch no = q;
  no.qk_norm = false;
  EXPECT_DOUBLE_EQ(layer_ops(q, 0, s).param_count - layer_ops(no, 0, s).param_count, 256.0);
  // GPT-OSS: even layers see 128 keys: s*w - w(w-1)/2 scores of 2 (64 + 64) FLOPs per head.
  const ModelArch& g = builtin("gpt-oss-120b");
  const Op wnd = attention_op(g, s, 4096, 4096, true, false, g.window);
  EXPECT_DOUBLE_EQ(wnd.flops, 2.0 * 64 * (4096.0 * 128 - 128.0 * 127 / 2) * 128);
  EXPECT_TRUE(g.windowed_layer(0));
  EXPECT_FALSE(g.windowed_layer(1));
  double f0 = 0, f1 = 0;
  for (const Step& st : layer_ops(g, 0, s).fwd) f0 += st.is_comm ? 0 : st.op.flops;
  for (const Step& st : layer_ops(g, 1, s).fwd) f1 += st.is_comm ? 0 : st.op.flops;
  EXPECT_LT(f0, f1);
  // Sinks: one logit per head; biases on every linear layer (RMSNorm model).
  ModelArch plain = g;
  plain.attention_sinks = false;
  EXPECT_DOUBLE_EQ(count_params(g).per_layer[0] - count_params(plain).per_layer[0], 64.0);
  EXPECT_TRUE(g.has_bias());
}

}  // namespace
}  // namespace stepcast
