// Per-layer ops: FLOPs against Korthikanti / Narayanan closed forms, Megatron op order and
// communication points (MoE layers and the random-shape properties: workload_moe_test.cc).
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

// The lowering computes layer_ops once per kind of layer, dense or MoE and windowed or not,
// and shares it (sim/lower/lower.cc build_units), which holds only while layer_ops depends on
// the layer through is_moe_layer and windowed_layer alone (model/workload.h). Checked for
// every layer of every built-in model, without and with tp 8 and sequence parallelism: each
// layer's ops equal those of the first layer of its kind.
TEST(Workload, LayerOpsDependOnTheLayerOnlyThroughItsKind) {
  for (const std::string& name : builtin_model_names()) {
    const ModelArch& arch = *find_builtin_model(name);
    for (const ShardSpec& sh : {shard(1, 4096), shard(2, 4096, 8, true)}) {
      const auto kind = [&](int l) {
        return (arch.is_moe_layer(l) ? 1 : 0) + (arch.windowed_layer(l) ? 2 : 0);
      };
      for (int l = 0; l < arch.layers; ++l) {
        int first = 0;
        while (kind(first) != kind(l)) ++first;
        EXPECT_EQ(ops_difference(layer_ops(arch, l, sh), layer_ops(arch, first, sh)), "")
            << name << " layer " << l << " tp " << sh.tp;
      }
    }
  }
}

TEST(Workload, DtypeBytes) {
  EXPECT_EQ(dtype_bytes(DType::kBf16), 2);
  EXPECT_EQ(dtype_bytes(DType::kFp8), 1);
  EXPECT_EQ(dtype_bytes(DType::kFp32), 4);
  EXPECT_STREQ(dtype_name(DType::kFp16), "fp16");
  EXPECT_EQ(activation_dtype(DType::kFp8), DType::kBf16);
}

// Korthikanti 2022: 24bsh^2 + 4bs^2h per GPT layer forward, counting the full s x s score
// matrix. Our attention is causal and computes half of it: 24bsh^2 + 2bs^2h.
TEST(Workload, GptLayerForwardFlopsMatchClosedForm) {
  const ModelArch a = small_gpt();
  const double b = 2, s = 2048, h = 1024;
  const LayerOps o = layer_ops(a, 0, shard(2, 2048));
  EXPECT_DOUBLE_EQ(flops(o.fwd, kGemm), 24 * b * s * h * h);
  EXPECT_DOUBLE_EQ(flops(o.fwd, kAttn), 4 * b * s * s * h / 2);
  EXPECT_DOUBLE_EQ(flops(o.fwd), 24 * b * s * h * h + 2 * b * s * s * h);
  // Backward: each GEMM once for the input gradient and once for the weight gradient
  // (bwd = 2x fwd); the attention core 2.5x its forward (FlashAttention-2).
  EXPECT_DOUBLE_EQ(flops(o.bwd_input, kGemm), 24 * b * s * h * h);
  EXPECT_DOUBLE_EQ(flops(o.bwd_weight), 24 * b * s * h * h);
  EXPECT_DOUBLE_EQ(flops(o.bwd_input, kAttn), 2.5 * 2 * b * s * s * h);
  for (const Step& st : o.bwd_weight) {
    ASSERT_FALSE(st.is_comm);
    EXPECT_EQ(st.op.kind, OpKind::kGemm) << st.op.name;
  }
}

TEST(Workload, AttentionOpFlops) {
  const ModelArch a = small_gpt();  // 16 heads of 64
  const ShardSpec sh = shard(2, 4096, 4);
  // 4 heads per rank; non-causal 512 x 4096 block: 4 * b * h * sq * skv * d.
  const Op f = attention_op(a, sh, 512, 4096, false, false);
  EXPECT_DOUBLE_EQ(f.flops, 4.0 * 2 * 4 * 512 * 4096 * 64);
  EXPECT_EQ(f.attn.heads, 4);
  EXPECT_EQ(f.attn.head_dim, 64);
  EXPECT_EQ(f.kind, OpKind::kAttention);
  const Op c = attention_op(a, sh, 1024, 1024, true, false);
  EXPECT_DOUBLE_EQ(c.flops, 4.0 * 2 * 4 * 1024 * 1024 * 64 / 2);
  const Op cb = attention_op(a, sh, 1024, 1024, true, true);
  EXPECT_DOUBLE_EQ(cb.flops, 2.5 * c.flops);
  EXPECT_TRUE(cb.attn.backward);
  EXPECT_GT(cb.bytes_read, c.bytes_read);
}

TEST(Workload, MlaAttentionUsesMeanHeadDim) {
  // deepseek-v3-like: q/k head 192, v head 128: FLOPs 2*b*h*sq*skv*(192 + 128)
  // = 4*b*h*sq*skv*160, the kernel shape carries 160.
  const ModelArch& a = *find_builtin_model("deepseek-v3-like");
  const Op f = attention_op(a, shard(1, 4096, 8), 4096, 4096, false, false);
  EXPECT_EQ(f.attn.head_dim, 160);
  EXPECT_DOUBLE_EQ(f.flops, 4.0 * 16 * 4096.0 * 4096 * 160);
  // The projections are MLA's (tests/model/mla_test.cc); the output projection is standard.
  const LayerOps o = layer_ops(a, 0, shard(1, 4096, 8));
  EXPECT_EQ(find_op(o.fwd, "proj").gemm.k, 16 * 128);
}

TEST(Workload, MegatronOrderWithSequenceParallel) {
  const ModelArch a = small_gpt();
  const LayerOps o = layer_ops(a, 0, shard(1, 2048, 4, true));
  const std::vector<std::string> fwd = {"ln1",        "G:attn.in", "qkv",      "attn", "proj",
                                        "R:attn.out", "ln2",       "G:mlp.in", "fc1",  "act",
                                        "fc2",        "R:mlp.out", "residual"};
  EXPECT_EQ(names(o.fwd), fwd);
  // Sequence parallel backward re-gathers the inputs of the column-parallel fc1 and qkv for
  // their weight gradients, issued before their input-gradient GEMMs (feeds_wgrad: only the
  // weight gradient of that GEMM waits for it).
  const std::vector<std::string> bwd = {
      "residual", "G:mlp.out",      "fc2", "act",        "G:fc1.in.wgrad",
      "fc1",      "R:mlp.in",       "ln2", "G:attn.out", "proj",
      "attn",     "G:qkv.in.wgrad", "qkv", "R:attn.in",  "ln1"};
  EXPECT_EQ(names(o.bwd_input), bwd);
  for (const Step& s : o.bwd_input) {
    if (!s.is_comm) continue;
    EXPECT_EQ(s.comm.feeds_wgrad, s.comm.name == "fc1.in.wgrad"   ? "fc1"
                                  : s.comm.name == "qkv.in.wgrad" ? "qkv"
                                                                  : "")
        << s.comm.name;
  }
  const std::vector<std::string> bw = {"fc2", "fc1", "proj", "qkv"};
  EXPECT_EQ(names(o.bwd_weight), bw);
  // Comm points carry the full [b*s, h] bf16 tensor: 2048 * 1024 * 2 bytes.
  for (const Step& s : o.fwd) {
    if (s.is_comm) {
      EXPECT_DOUBLE_EQ(s.comm.bytes, 2048.0 * 1024 * 2) << s.comm.name;
    }
  }
  // Only the attention core is re-run under selective recompute.
  for (const Step& s : o.fwd) EXPECT_EQ(s.recompute_selective, !s.is_comm && s.op.name == "attn");
  // Norms run on the sequence shard: ln1 reads 2048/4 * 1024 * 2 bytes.
  EXPECT_DOUBLE_EQ(find_op(o.fwd, "ln1").bytes_read, 512.0 * 1024 * 2);
}

TEST(Workload, MegatronOrderWithoutSequenceParallel) {
  const ModelArch a = small_gpt();
  const LayerOps o = layer_ops(a, 0, shard(1, 2048, 2, false));
  const std::vector<std::string> fwd = {"ln1", "qkv", "attn", "proj",      "R:attn.out", "ln2",
                                        "fc1", "act", "fc2",  "R:mlp.out", "residual"};
  EXPECT_EQ(names(o.fwd), fwd);
  const std::vector<std::string> bwd = {"residual", "fc2",  "act", "fc1",       "R:mlp.in", "ln2",
                                        "proj",     "attn", "qkv", "R:attn.in", "ln1"};
  EXPECT_EQ(names(o.bwd_input), bwd);
  // tp = 1: no communication at all (sp is meaningless without tp).
  for (const Step& s : layer_ops(a, 0, shard(1, 2048, 1, true)).fwd) EXPECT_FALSE(s.is_comm);
}

TEST(Workload, Llama70bShapesAtTp8) {
  const ModelArch& a = *find_builtin_model("llama3-70b");
  const LayerOps o = layer_ops(a, 5, shard(1, 8192, 8, true));
  // 64/8 = 8 query heads, 8/8 = 1 KV head of 128 per rank: QKV n = (8 + 2) * 128.
  const Op& qkv = find_op(o.fwd, "qkv");
  EXPECT_EQ(qkv.gemm.m, 8192);
  EXPECT_EQ(qkv.gemm.k, 8192);
  EXPECT_EQ(qkv.gemm.n, 1280);
  // SwiGLU fc1 fuses gate and up: 2 * 28672 / 8; fc2 reads 28672 / 8.
  EXPECT_EQ(find_op(o.fwd, "fc1").gemm.n, 7168);
  EXPECT_EQ(find_op(o.fwd, "fc2").gemm.k, 3584);
  EXPECT_EQ(find_op(o.fwd, "fc2").gemm.n, 8192);
  // Backward shapes: dgrad of fc2 is [T, h] x [h, ffn/t]; wgrad is [ffn/t, T] x [T, h].
  const Op& dg = find_op(o.bwd_input, "fc2");
  EXPECT_EQ(dg.gemm.m, 8192);
  EXPECT_EQ(dg.gemm.n, 3584);
  EXPECT_EQ(dg.gemm.k, 8192);
  EXPECT_EQ(dg.gemm.layout, GemmLayout::kNT);
  const Op& wg = find_op(o.bwd_weight, "fc2");
  EXPECT_EQ(wg.gemm.m, 3584);
  EXPECT_EQ(wg.gemm.n, 8192);
  EXPECT_EQ(wg.gemm.k, 8192);
  EXPECT_EQ(wg.gemm.layout, GemmLayout::kTN);
  // Attention: 8 heads, 1 kv head per rank.
  const Op& at = find_op(o.fwd, "attn");
  EXPECT_EQ(at.attn.heads, 8);
  EXPECT_EQ(at.attn.kv_heads, 1);
  EXPECT_TRUE(at.attn.causal);
}

TEST(Workload, KvHeadsReplicatedWhenFewerThanTp) {
  ModelArch a = small_gpt(1024, 16);
  a.kv_heads = 2;
  // tp = 8: 2 query heads and one (replicated) KV head of 64 per rank: n = (2 + 2) * 64.
  const LayerOps o = layer_ops(a, 0, shard(1, 1024, 8));
  EXPECT_EQ(find_op(o.fwd, "qkv").gemm.n, 256);
  EXPECT_EQ(find_op(o.fwd, "attn").attn.kv_heads, 1);
}

TEST(Workload, ParamsPerRankSumToLayerPlusReplicas) {
  // GPT layer 12h^2 + 13h; split over t ranks, the two LayerNorms (4h) and the biases of
  // the row-parallel proj and fc2 (2h) are replicated on every rank: sum = layer + (t-1)6h.
  const ModelArch a = small_gpt();
  const double h = 1024, layer = count_params(a).per_layer[0];
  EXPECT_DOUBLE_EQ(layer, 12 * h * h + 13 * h);
  for (int t : {1, 2, 4, 8}) {
    const LayerOps o = layer_ops(a, 0, shard(1, 1024, t));
    EXPECT_DOUBLE_EQ(o.param_count * t, layer + (t - 1) * 6 * h) << t;
    EXPECT_DOUBLE_EQ(o.grad_bytes_fp32, 4 * o.param_count);
  }
}

// A layer's parameters are its weight matrices (each forward GEMM's k x n x batch) and its
// vectors (LayerOps::vectors: norm gains and biases, biases, qk-norm gains, sinks, MLA's
// latent-norm gains), for every built-in dense layer and the output layer at tp 1-8. GPT-3
// 175B's layer at tp 1 lists its 8 vectors: two LayerNorms (h, h), the qkv and proj biases
// (3h, h) and the fc1 and fc2 biases (4h, h).
TEST(Workload, LayerParamsAreMatricesAndVectors) {
  auto matrices = [](const LayerOps& o) {
    double m = 0;
    for (const Step& st : o.fwd)
      if (!st.is_comm && st.op.kind == OpKind::kGemm)
        m += static_cast<double>(st.op.gemm.k) * static_cast<double>(st.op.gemm.n) *
             static_cast<double>(st.op.gemm.batch);
    return m;
  };
  auto sum = [](const std::vector<double>& v) {
    double t = 0;
    for (double x : v) t += x;
    return t;
  };
  int checked = 0;
  for (const std::string& n : builtin_model_names()) {
    const ModelArch& a = *find_builtin_model(n);
    for (int t : {1, 2, 4, 8}) {
      if (a.heads % t != 0) continue;
      const ShardSpec sh = shard(1, 1024, t, t > 1);
      for (int l = 0; l < a.layers; ++l) {
        if (a.is_moe_layer(l)) continue;
        const LayerOps o = layer_ops(a, l, sh);
        EXPECT_NEAR(matrices(o) + sum(o.vectors), o.param_count, 1e-6 * o.param_count)
            << n << " tp" << t;
        ++checked;
        break;
      }
      const LayerOps head = logits_loss_ops(a, sh);
      EXPECT_DOUBLE_EQ(matrices(head) + sum(head.vectors), head.param_count) << n << " tp" << t;
    }
  }
  EXPECT_GT(checked, 20);
  const ModelArch& g = *find_builtin_model("gpt3-175b");
  const double h = 12288;
  EXPECT_EQ(layer_ops(g, 0, shard(1, 2048)).vectors,
            (std::vector<double>{h, h, 3 * h, h, h, h, 4 * h, h}));
}

TEST(Workload, ContextParallelSplitsTokensAndAttention) {
  const ModelArch a = small_gpt();
  const LayerOps full = layer_ops(a, 0, shard(1, 8192));
  const LayerOps cp4 = layer_ops(a, 0, shard(1, 8192, 1, false, 4));
  // Each rank: 2048 local queries against 8192 keys, causal (half on average).
  const Op& at = find_op(cp4.fwd, "attn");
  EXPECT_EQ(at.attn.seq_q, 2048);
  EXPECT_EQ(at.attn.seq_kv, 8192);
  EXPECT_DOUBLE_EQ(total_flops(cp4) * 4, total_flops(full));
  EXPECT_EQ(find_op(cp4.fwd, "qkv").gemm.m, 2048);
}

// Megatron pads the vocabulary to a multiple of 128 x tp (make_vocab_size_divisible_by):
// each rank holds ceil(V / (128 t)) x 128 rows, computes and stores them; model FLOPs keep
// the true V. GPT-2's 50257: 50304 rows at t = 1, 6400 at t = 8 (51200 / 8); Llama 3's
// 128256 at t = 8: 16128 (129024 / 8); 131072 is already a multiple (16384 at t = 8).
TEST(Workload, VocabularyIsPaddedAsMegatronDoes) {
  ModelArch a = small_gpt();
  for (const auto& [vocab, t, rows] :
       std::vector<std::tuple<std::int64_t, int, std::int64_t>>{{50257, 1, 50304},
                                                                {50257, 8, 6400},
                                                                {128256, 8, 16128},
                                                                {131072, 8, 16384},
                                                                {51200, 4, 12800}}) {
    a.vocab = vocab;
    const LayerOps o = logits_loss_ops(a, shard(2, 1024, t, t > 1));
    EXPECT_EQ(find_op(o.fwd, "logits").gemm.n, rows) << vocab << " t" << t;
    const LayerOps e = embedding_ops(a, shard(2, 1024, t, t > 1));
    EXPECT_DOUBLE_EQ(e.param_count, static_cast<double>(rows) * 1024 + 2048 * 1024) << vocab;
  }
  // MFU's model FLOPs: the logits term is 2shV with V = 50257, not the padded 50304.
  a.vocab = 50257;
  ModelArch b = a;
  b.vocab = 50304;
  EXPECT_DOUBLE_EQ(model_flops_per_sequence(b, 1024) - model_flops_per_sequence(a, 1024),
                   3.0 * 2 * 1024 * 1024 * (50304 - 50257));
}

TEST(Workload, LogitsAndEmbedding) {
  ModelArch a = small_gpt();
  a.vocab = 51200;
  const double b = 2, s = 1024, h = 1024, V = 51200;
  for (int t : {1, 4}) {
    const LayerOps o = logits_loss_ops(a, shard(2, 1024, t, t > 1));
    // Forward 2bshV/t; input and weight gradients the same each.
    EXPECT_DOUBLE_EQ(flops(o.fwd), 2 * b * s * h * V / t);
    EXPECT_DOUBLE_EQ(flops(o.bwd_input), 2 * b * s * h * V / t);
    EXPECT_DOUBLE_EQ(flops(o.bwd_weight), 2 * b * s * h * V / t);
    EXPECT_EQ(find_op(o.fwd, "logits").gemm.n, 51200 / t);
    EXPECT_DOUBLE_EQ(o.param_count, V / t * h + 2 * h);
  }
  {
    // Unfused fp32 cross entropy over [T, V/t] = [2048, 12800] (t = 4), bf16 logits (e = 2):
    // forward passes .float() 2+4, max 4, sub 4+4, exp 4+4, sum 4, div 4+4 -> read 22,
    // write 16 bytes per element; backward scale 4+4, cast 4+2 -> read 8, write 6.
    const LayerOps o = logits_loss_ops(a, shard(2, 1024, 4, true));
    const double lg = b * s * V / 4;
    EXPECT_DOUBLE_EQ(find_op(o.fwd, "softmax_ce").bytes_read, 22 * lg);
    EXPECT_DOUBLE_EQ(find_op(o.fwd, "softmax_ce").bytes_written, 16 * lg);
    EXPECT_DOUBLE_EQ(find_op(o.bwd_input, "softmax_ce").bytes_read, 8 * lg);
    EXPECT_DOUBLE_EQ(find_op(o.bwd_input, "softmax_ce").bytes_written, 6 * lg);
    // Transformer Engine's fused kernels on the bf16 logits (e = 2): forward reads them twice
    // (row max and sum of exponentials, then loss and gradient) and writes the gradient over
    // them once -> read 4, write 2; backward scales it in place -> read 2, write 2 bytes per
    // element; the GEMMs do not change.
    ShardSpec fs = shard(2, 1024, 4, true);
    fs.fused_cross_entropy = true;
    const LayerOps f = logits_loss_ops(a, fs);
    EXPECT_DOUBLE_EQ(find_op(f.fwd, "softmax_ce").bytes_read, 4 * lg);
    EXPECT_DOUBLE_EQ(find_op(f.fwd, "softmax_ce").bytes_written, 2 * lg);
    EXPECT_DOUBLE_EQ(find_op(f.bwd_input, "softmax_ce").bytes_read, 2 * lg);
    EXPECT_DOUBLE_EQ(find_op(f.bwd_input, "softmax_ce").bytes_written, 2 * lg);
    EXPECT_DOUBLE_EQ(flops(f.fwd) + flops(f.bwd_input), flops(o.fwd) + flops(o.bwd_input));
  }
  const LayerOps sp = logits_loss_ops(a, shard(2, 1024, 4, true));
  const std::vector<std::string> fwd = {"final_ln", "G:logits.in", "logits", "softmax_ce"};
  EXPECT_EQ(names(sp.fwd), fwd);
  const std::vector<std::string> bwd = {"softmax_ce", "G:logits.in.wgrad", "logits", "R:logits.in",
                                        "final_ln"};
  EXPECT_EQ(names(sp.bwd_input), bwd);

  const LayerOps e = embedding_ops(a, shard(2, 1024, 4, true));
  // Vocab-parallel table V/t * h plus the learned positions (replicated) 2048 * h.
  EXPECT_DOUBLE_EQ(e.param_count, V / 4 * h + 2048 * h);
  {
    // Dense embedding gradient, t = 4, T = b*s = 2048 tokens, e = 2, table V/t x h:
    // read [T, h] grads 2Th + ids 8T + table (grad 2 + main_grad 4) per element;
    // write table (zero-fill 2 + main_grad 4) + this shard's T/t rows 2Th/t.
    const double T = b * s, table = V / 4 * h;
    const Op& w = find_op(e.bwd_weight, "embed");
    EXPECT_DOUBLE_EQ(w.bytes_read, 2 * T * h + 8 * T + 6 * table);
    EXPECT_DOUBLE_EQ(w.bytes_written, 6 * table + 2 * T * h / 4);
  }
  EXPECT_EQ(names(e.fwd), (std::vector<std::string>{"embed", "R:embed.out", "pos_embed"}));
  EXPECT_DOUBLE_EQ(total_flops(e), 0.0);
}

TEST(Workload, OptimizerBytes) {
  // Adam: read 16 B (master, m, v, grad) + 4 B (the grad again, for the clipping norm) +
  // 4 B (the master again, for the 16-bit copy); write 12 B (master, m, v) + 2 B (copy).
  const Op o = optimizer_op(1e6);
  EXPECT_DOUBLE_EQ(o.bytes_read, 24e6);
  EXPECT_DOUBLE_EQ(o.bytes_written, 14e6);
  EXPECT_EQ(o.kind, OpKind::kMemoryBound);
  // SGD with momentum: 12 + 4 + 4 B read, 8 + 2 B written.
  const Op g = optimizer_op(1e6, {.adam = false});
  EXPECT_DOUBLE_EQ(g.bytes_read + g.bytes_written, 30e6);
  // fp16 gradients: + copy to fp32 (2 B read, 4 B written) + unscale (4 B read, 4 B written).
  const Op h = optimizer_op(1e6, {.grads = DType::kFp16, .loss_scaling = true});
  EXPECT_DOUBLE_EQ(h.bytes_read, 30e6);
  EXPECT_DOUBLE_EQ(h.bytes_written, 22e6);
  // bf16 gradients (no loss scaling): the copy only, 24 + 2 B read, 14 + 4 B written.
  const Op b = optimizer_op(1e6, {.grads = DType::kBf16});
  EXPECT_DOUBLE_EQ(b.bytes_read, 26e6);
  EXPECT_DOUBLE_EQ(b.bytes_written, 18e6);
  // fp16 training with fp32 gradients: the unscale only, 24 + 4 B read, 14 + 4 B written.
  const Op u = optimizer_op(1e6, {.loss_scaling = true});
  EXPECT_DOUBLE_EQ(u.bytes_read, 28e6);
  EXPECT_DOUBLE_EQ(u.bytes_written, 18e6);
  // torch.optim's foreach AdamW: 48 B read and 32 B written by its eight passes where the
  // fused kernel reads 16 and writes 12 (optimizer_op): 24 + 32 = 56 B read, 14 + 20 = 34 B
  // written, and sqrt(v) held (4 B a parameter); SGD 12 + 8 = 20 B read and 10 + 4 = 14 B
  // written, nothing held. The fused kernels hold nothing.
  const Op fa = optimizer_op(1e6, {.fused = false});
  EXPECT_DOUBLE_EQ(fa.bytes_read, 56e6);
  EXPECT_DOUBLE_EQ(fa.bytes_written, 34e6);
  const Op fs = optimizer_op(1e6, {.adam = false, .fused = false});
  EXPECT_DOUBLE_EQ(fs.bytes_read, 28e6);
  EXPECT_DOUBLE_EQ(fs.bytes_written, 14e6);
  // The fp32 parameters themselves (FSDP2's shards): no master read again for a 16-bit
  // copy and no copy written, gradients already fp32: Adam 16 + 4 = 20 B read, 12 written
  // (bf16 reduce dtype alike: the shard is fp32); SGD 12 + 4 = 16 read, 8 written; fp16
  // training still unscales (+4 / +4).
  for (const DType gd : {DType::kFp32, DType::kBf16}) {
    const Op pa = optimizer_op(1e6, {.grads = gd, .fp32_params = true});
    EXPECT_DOUBLE_EQ(pa.bytes_read, 20e6);
    EXPECT_DOUBLE_EQ(pa.bytes_written, 12e6);
  }
  const Op ps = optimizer_op(1e6, {.adam = false, .fp32_params = true});
  EXPECT_DOUBLE_EQ(ps.bytes_read, 16e6);
  EXPECT_DOUBLE_EQ(ps.bytes_written, 8e6);
  const Op pu = optimizer_op(1e6, {.loss_scaling = true, .fp32_params = true});
  EXPECT_DOUBLE_EQ(pu.bytes_read, 24e6);
  EXPECT_DOUBLE_EQ(pu.bytes_written, 16e6);
  EXPECT_DOUBLE_EQ(optimizer_temp_bytes(1e6, true, false), 4e6);
  EXPECT_DOUBLE_EQ(optimizer_temp_bytes(1e6, false, false), 0.0);
  EXPECT_DOUBLE_EQ(optimizer_temp_bytes(1e6, true, true), 0.0);
  // Zeroing a 4 MB gradient buffer writes 4 MB and reads nothing.
  const Op z = zero_grad_op(4e6);
  EXPECT_EQ(z.kind, OpKind::kMemoryBound);
  EXPECT_DOUBLE_EQ(z.bytes_read, 0.0);
  EXPECT_DOUBLE_EQ(z.bytes_written, 4e6);
  EXPECT_THROW(zero_grad_op(-1), InvariantError);
}

TEST(Workload, BrokenShardsAreInvariantErrors) {
  const ModelArch a = small_gpt(1024, 16);
  EXPECT_THROW(layer_ops(a, 0, shard(1, 1024, 3)), InvariantError);            // 16 % 3
  EXPECT_THROW(layer_ops(a, 4, shard(1, 1024)), InvariantError);               // layer 4 of 4
  EXPECT_THROW(layer_ops(a, 0, shard(1, 1000, 1, false, 3)), InvariantError);  // s % cp
  const ModelArch& mx = *find_builtin_model("mixtral-8x7b");
  EXPECT_THROW(layer_ops(mx, 0, shard(1, 1024, 1, false, 1, 3)), InvariantError);  // 8 % 3
}

// A weight gradient's way into the accumulated main grad (ShardSpec::grad_accumulation,
// model/workload.cc add_grad_accumulation). GPT h = 1024 at tp 2: the layer's four linears
// hold qkv h·3h/2 + proj (h/2)·h + fc1 h·4h/2 + fc2 (4h/2)·h = 6h² weights on the rank, the
// output layer h·V/tp (V = 51200 is a multiple of 128·tp, no padding). Per weight element P:
//  - fused (Megatron's wgrad_gemm_accum_fp32): the GEMM reads and writes the fp32 main grad,
//    4P more read and 4P written where the fresh bf16 gradient wrote 2P;
//  - hook (Megatron-LM 2021 main_grad.add_(grad)): the GEMM as it was, then one add kernel
//    reading the bf16 gradient and the main grad (2P + gP) and writing the main grad (gP),
//    g = 4 for fp32 main grads, 2 for fp16 ones;
//  - none (ZeRO-2/3: fresh gradients each microbatch): nothing.
TEST(Workload, WeightGradientsReachTheMainGradFusedOrByAHook) {
  const ModelArch a = small_gpt(1024, 16);
  const double h = 1024;
  ShardSpec none = shard(1, 512, 2);
  ShardSpec fused = none, hook = none, hook16 = none;
  fused.grad_accumulation = GradAccumulation::kFused;
  hook.grad_accumulation = GradAccumulation::kHook;
  hook16.grad_accumulation = GradAccumulation::kHook;
  hook16.main_grad_bytes = 2;
  for (int head = 0; head < 2; ++head) {
    auto ops = [&](const ShardSpec& s) {
      return head ? logits_loss_ops(a, s) : layer_ops(a, 0, s);
    };
    const LayerOps n = ops(none), f = ops(fused), k = ops(hook), k16 = ops(hook16);
    ASSERT_EQ(f.bwd_weight.size(), n.bwd_weight.size());
    ASSERT_EQ(k.bwd_weight.size(), 2 * n.bwd_weight.size());
    double weights = 0;
    for (size_t i = 0; i < n.bwd_weight.size(); ++i) {
      const Op& w = n.bwd_weight[i].op;
      ASSERT_EQ(w.kind, OpKind::kGemm) << w.name;
      const double p = static_cast<double>(w.gemm.m * w.gemm.n);
      weights += p;
      EXPECT_DOUBLE_EQ(w.bytes_written, 2 * p) << w.name;
      const Op& fw = f.bwd_weight[i].op;
      EXPECT_DOUBLE_EQ(fw.flops, w.flops);
      EXPECT_DOUBLE_EQ(fw.bytes_read, w.bytes_read + 4 * p) << w.name;
      EXPECT_DOUBLE_EQ(fw.bytes_written, 4 * p) << w.name;
      // The hook: the same GEMM, then its add kernel.
      const Op& kw = k.bwd_weight[2 * i].op;
      const Op& add = k.bwd_weight[2 * i + 1].op;
      EXPECT_DOUBLE_EQ(kw.bytes_written, w.bytes_written);
      EXPECT_EQ(add.name, w.name + ".gradacc");
      EXPECT_EQ(add.kind, OpKind::kMemoryBound);
      EXPECT_EQ(add.launches, 1);
      EXPECT_DOUBLE_EQ(add.bytes_read, 6 * p);
      EXPECT_DOUBLE_EQ(add.bytes_written, 4 * p);
      const Op& add16 = k16.bwd_weight[2 * i + 1].op;
      EXPECT_DOUBLE_EQ(add16.bytes_read, 4 * p);
      EXPECT_DOUBLE_EQ(add16.bytes_written, 2 * p);
    }
    EXPECT_DOUBLE_EQ(weights, head ? h * 51200 / 2 : 6 * h * h);
    // Nothing but the weight gradients changes.
    for (const LayerOps* o : {&f, &k}) {
      EXPECT_EQ(names(o->fwd), names(n.fwd));
      EXPECT_EQ(names(o->bwd_input), names(n.bwd_input));
      EXPECT_DOUBLE_EQ(total_flops(*o), total_flops(n));
    }
  }
  // A grouped expert GEMM's hook adds each local expert's weight: one kernel each.
  const ModelArch m = with_moe(a);
  ShardSpec ep = shard(1, 512, 1, false, 1, 2);
  ep.grad_accumulation = GradAccumulation::kHook;
  const LayerOps moe = layer_ops(m, 0, ep);
  const Op& fc1 = find_op(moe.bwd_weight, "moe.fc1");
  const Op& fc1_add = find_op(moe.bwd_weight, "moe.fc1.gradacc");
  ASSERT_EQ(fc1.gemm.batch, 4);
  EXPECT_EQ(fc1_add.launches, 4);
  EXPECT_DOUBLE_EQ(fc1_add.bytes_written,
                   4.0 * static_cast<double>(fc1.gemm.m * fc1.gemm.n * fc1.gemm.batch));
}

}  // namespace
}  // namespace stepcast

namespace stepcast {
namespace {

// Korthikanti et al. 2022 eq. 7 per sequence (B = 1): 72 L s h^2 (1 + s/(6h) + V/(12hL)).
TEST(ModelFlops, GptMatchesKorthikantiEq7) {
  for (const char* n : {"gpt3-175b", "gpt-22b", "gpt-1t"}) {
    const ModelArch& a = *find_builtin_model(n);
    const double L = a.layers, h = double(a.hidden), V = double(a.vocab), s = 2048;
    const double eq7 = 72 * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L));
    EXPECT_NEAR(model_flops_per_sequence(a, 2048), eq7, 1e-9 * eq7) << n;
  }
}

// Megatron-Core: 12 s L h^2 [(1 + g/a + s/h) q + (ffn/h) gated experts + V/(2Lh)] with
// g = kv_heads, q = heads*d/h = 1, gated = 1.5 for SwiGLU, experts = top_k (dense: 1);
// MoE layers add the router 2*s*h*E per layer forward (6shE over the step).
TEST(ModelFlops, LlamaAndMixtralMatchMegatronCore) {
  for (const char* n : {"llama3-8b", "llama3-70b", "llama2-13b", "mixtral-8x7b"}) {
    const ModelArch& a = *find_builtin_model(n);
    const double L = a.layers, h = double(a.hidden), V = double(a.vocab), s = 4096;
    const double g = a.kv_heads, heads = a.heads;
    const double ffn = a.moe ? double(a.moe->ffn_hidden) : double(a.ffn_hidden);
    const double k = a.moe ? a.moe->top_k : 1;
    double want =
        12 * s * L * h * h * ((1 + g / heads + s / h) + ffn / h * 1.5 * k + V / (2 * L * h));
    if (a.moe) want += 6 * s * h * a.moe->experts * L;
    EXPECT_NEAR(model_flops_per_sequence(a, 4096), want, 1e-9 * want) << n;
  }
}

}  // namespace
}  // namespace stepcast

namespace stepcast {
namespace {

// Unfused attention (Megatron-LM before FlashAttention): the full s x s block is computed
// whatever the mask, forward = 2 GEMMs, backward = 4 GEMMs (no recomputation of S).
// GPT-22B layer: h = 6144, a = 64 heads of d = 96, s = 2048, b = 1, t = 8 -> 8 heads/rank.
//   fwd = 2 (QK^T) + 2 (PV) = 4 * b * 8 * s^2 * 96 = 4 * 8 * 2048^2 * 96 = 12.885e9 FLOPs
//   bwd = 2 x fwd = 25.770e9 (flash: fwd halved by causality, bwd 2.5x the halved fwd).
TEST(Workload, UnfusedAttentionFlopsAndScoreTraffic) {
  ModelArch a;
  a.name = "gpt-22b";
  a.layers = 48;
  a.hidden = 6144;
  a.ffn_hidden = 24576;
  a.heads = 64;
  a.kv_heads = 64;
  a.vocab = 51200;
  ShardSpec s;
  s.seq_len = 2048;
  s.tp = 8;
  s.flash_attention = false;
  const double fwd = 4.0 * 8 * 2048.0 * 2048.0 * 96;
  Op f = attention_op(a, s, 2048, 2048, true, false);
  Op b = attention_op(a, s, 2048, 2048, true, true);
  EXPECT_DOUBLE_EQ(f.flops, fwd);
  EXPECT_DOUBLE_EQ(b.flops, 2 * fwd);
  EXPECT_FALSE(f.attn.flash);
  // Score traffic per element: 13 bytes forward, 15 backward (workload.cc); 8 heads x s^2
  // elements dominate the Q/K/V/O bytes.
  const double scores = 8 * 2048.0 * 2048.0;
  s.flash_attention = true;
  Op ff = attention_op(a, s, 2048, 2048, true, false);
  Op fb = attention_op(a, s, 2048, 2048, true, true);
  EXPECT_DOUBLE_EQ(f.bytes_read + f.bytes_written - ff.bytes_read - ff.bytes_written, 13 * scores);
  EXPECT_DOUBLE_EQ(b.bytes_read + b.bytes_written - fb.bytes_read - fb.bytes_written, 15 * scores);
  EXPECT_DOUBLE_EQ(ff.flops, fwd / 2);
  EXPECT_DOUBLE_EQ(fb.flops, 2.5 * fwd / 2);
}

}  // namespace
}  // namespace stepcast
