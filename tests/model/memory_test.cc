// Memory terms: training state per parameter (Megatron, ZeRO paper) and activation bytes
// per layer against Korthikanti et al. 2022, Table 2 (docs/model.md).
#include <gtest/gtest.h>

#include "model/arch.h"
#include "model/error.h"
#include "model/memory.h"

namespace stepcast {
namespace {

TEST(StateBytes, MegatronMixedPrecision) {
  // bf16 weights 2 + fp32 main grads 4 + fp32 master, m, v 12 = 18 B/param.
  EXPECT_DOUBLE_EQ(total_bytes(state_bytes_per_param(DType::kBf16, true, 0, 64)), 18.0);
  // Distributed optimizer (ZeRO-1 over d): 6 + 12/d.
  for (int d : {1, 2, 8, 64, 1000}) {
    EXPECT_DOUBLE_EQ(total_bytes(state_bytes_per_param(DType::kBf16, true, 1, d)), 6 + 12.0 / d);
  }
  const StateBytesPerParam s = state_bytes_per_param(DType::kBf16, true, 0, 1);
  EXPECT_DOUBLE_EQ(s.weights, 2);
  EXPECT_DOUBLE_EQ(s.grads, 4);
  EXPECT_DOUBLE_EQ(s.optimizer, 12);
  // fp8 compute keeps 16-bit weights; fp32 weights are the master copy: 4 + 4 + 8.
  EXPECT_DOUBLE_EQ(total_bytes(state_bytes_per_param(DType::kFp8, true, 0, 1)), 18.0);
  EXPECT_DOUBLE_EQ(total_bytes(state_bytes_per_param(DType::kFp32, true, 0, 1)), 16.0);
  // SGD with momentum: 2 + 4 + (master 4 + momentum 4) = 14.
  EXPECT_DOUBLE_EQ(total_bytes(state_bytes_per_param(DType::kBf16, false, 0, 1)), 14.0);
}

// Apex DistributedFusedAdam's store_param_remainders (master_remainders): the fp32 master's
// low half only, 2 bytes instead of 4, so Adam 2 + g + (2 + 8)/d and SGD 2 + g + (2 + 4)/d
// from zero 1 on; an unsharded optimizer (zero 0) keeps its fp32 masters: 18 with Adam.
// fp16 weights are no fp32 value's high half: refused.
TEST(StateBytes, MasterWeightRemaindersHalveTheMaster) {
  for (int d : {1, 2, 8, 64}) {
    EXPECT_DOUBLE_EQ(total_bytes(state_bytes_per_param(DType::kBf16, true, 1, d, 2, false, true)),
                     2 + 2 + 10.0 / d)
        << d;
    EXPECT_DOUBLE_EQ(state_bytes_per_param(DType::kFp8, true, 2, d, 4, false, true).optimizer,
                     10.0 / d)
        << d;
    EXPECT_DOUBLE_EQ(total_bytes(state_bytes_per_param(DType::kBf16, false, 1, d, 4, false, true)),
                     2 + 4 + 6.0 / d)
        << d;
  }
  EXPECT_DOUBLE_EQ(total_bytes(state_bytes_per_param(DType::kBf16, true, 0, 8, 4, false, true)),
                   18.0);
  EXPECT_THROW(state_bytes_per_param(DType::kFp16, true, 1, 8, 4, false, true), InvariantError);
}

// FSDP2's ZeRO-3 (fp32_shards): the fp32 shard is parameter and master at once, the
// gradient shard fp32 whatever the reduce dtype: (0 + 4 + 12) / d with Adam, (0 + 4 + 8) / d
// with SGD, against Megatron-FSDP's (2 + 4 + 12) / d. Below ZeRO-3 nothing changes.
TEST(StateBytes, Fsdp2ShardsAreTheFp32Parameters) {
  for (int d : {1, 8, 64}) {
    const StateBytesPerParam s = state_bytes_per_param(DType::kBf16, true, 3, d, 2, true);
    EXPECT_DOUBLE_EQ(s.weights, 0) << d;
    EXPECT_DOUBLE_EQ(s.grads, 4.0 / d) << d;
    EXPECT_DOUBLE_EQ(s.optimizer, 12.0 / d) << d;
    EXPECT_DOUBLE_EQ(total_bytes(state_bytes_per_param(DType::kBf16, false, 3, d, 4, true)),
                     12.0 / d);
    EXPECT_DOUBLE_EQ(total_bytes(state_bytes_per_param(DType::kBf16, true, 3, d, 4, false)),
                     18.0 / d);
    EXPECT_DOUBLE_EQ(total_bytes(state_bytes_per_param(DType::kBf16, true, 1, d, 4, true)),
                     6 + 12.0 / d);
    // fp32 compute: the weights were the master already, 4 + 4 + 8 = 16 / d either way.
    EXPECT_DOUBLE_EQ(total_bytes(state_bytes_per_param(DType::kFp32, true, 3, d, 4, true)),
                     16.0 / d);
  }
}

TEST(StateBytes, ZeroPaperStages) {
  // Rajbhandari et al. 2020, Fig. 1 with fp16 gradients (2 B) and K = 12 optimizer bytes:
  // plain DP 2 + 2 + 12 = 16; stage 1 shards K: 4 + 12/Nd; stage 2 also the gradients:
  // 2 + (2 + 12)/Nd; stage 3 also the weights: (2 + 2 + 12)/Nd = 16/Nd.
  for (int n : {1, 4, 64, 1024}) {
    auto z = [&](int stage) {
      return total_bytes(state_bytes_per_param(DType::kFp16, true, stage, n, 2));
    };
    EXPECT_DOUBLE_EQ(z(0), 16.0);
    EXPECT_DOUBLE_EQ(z(1), 4 + 12.0 / n);
    EXPECT_DOUBLE_EQ(z(2), 2 + 14.0 / n);
    EXPECT_DOUBLE_EQ(z(3), 16.0 / n);
  }
  // Paper example: 7.5B params, Nd = 64: 120 GB, 31.4 GB, 16.6 GB, 1.88 GB.
  const double psi = 7.5e9;
  auto gb = [&](int stage) {
    return psi * total_bytes(state_bytes_per_param(DType::kFp16, true, stage, 64, 2)) / 1e9;
  };
  EXPECT_NEAR(gb(0), 120.0, 0.05);
  EXPECT_NEAR(gb(1), 31.4, 0.05);
  EXPECT_NEAR(gb(2), 16.6, 0.05);
  EXPECT_NEAR(gb(3), 1.88, 0.01);
  EXPECT_THROW(state_bytes_per_param(DType::kBf16, true, 4, 8), InvariantError);
  EXPECT_THROW(state_bytes_per_param(DType::kBf16, true, 1, 0), InvariantError);
}

ShardSpec shard(std::int64_t b, std::int64_t s, int tp, bool sp) {
  ShardSpec sh;
  sh.microbatch = b;
  sh.seq_len = s;
  sh.tp = tp;
  sh.sequence_parallel = sp;
  return sh;
}

// Korthikanti Table 2 rows for GPT layers (MHA, ffn = 4h, 16-bit, dropout), no flash.
TEST(Activations, GptMatchesKorthikantiTable2) {
  for (const char* name : {"gpt-22b", "gpt3-175b", "gpt-530b"}) {
    const ModelArch& m = *find_builtin_model(name);
    const double s = 2048, h = double(m.hidden), a = m.heads;
    for (double b : {1.0, 4.0}) {
      const double sbh = s * b * h;
      auto act = [&](int t, bool sp, Recompute rc) {
        return layer_activation_bytes(m, shard(std::int64_t(b), 2048, t, sp), rc, false);
      };
      // no parallelism: sbh(34 + 5as/h)
      EXPECT_NEAR(act(1, false, Recompute::kNone), sbh * (34 + 5 * a * s / h), 1e-6 * sbh);
      // full recompute: 2sbh
      EXPECT_NEAR(act(1, false, Recompute::kFull), 2 * sbh, 1e-6 * sbh);
      for (double t : {2.0, 4.0, 8.0}) {
        const int ti = int(t);
        // tensor parallel: sbh(10 + 24/t + 5as/(ht))
        EXPECT_NEAR(act(ti, false, Recompute::kNone), sbh * (10 + 24 / t + 5 * a * s / (h * t)),
                    1e-6 * sbh);
        // tensor + sequence parallel: (sbh/t)(34 + 5as/h)
        EXPECT_NEAR(act(ti, true, Recompute::kNone), sbh / t * (34 + 5 * a * s / h), 1e-6 * sbh);
        // tensor parallel + selective recompute: sbh(10 + 24/t)
        EXPECT_NEAR(act(ti, false, Recompute::kSelective), sbh * (10 + 24 / t), 1e-6 * sbh);
        // tensor + sequence parallel + selective: 34sbh/t
        EXPECT_NEAR(act(ti, true, Recompute::kSelective), 34 * sbh / t, 1e-6 * sbh);
        // full recompute under sp keeps the sharded layer input: 2sbh/t
        EXPECT_NEAR(act(ti, true, Recompute::kFull), 2 * sbh / t, 1e-6 * sbh);
      }
    }
  }
}

TEST(Activations, FlashAttentionDropsScoreTerms) {
  // Flash attention stores no s x s scores: every row loses its 5as^2b/t term, so no
  // recompute equals selective recompute.
  const ModelArch& m = *find_builtin_model("gpt3-175b");
  const double s = 2048, h = 12288, a = 96, b = 1;
  for (int t : {1, 8}) {
    for (bool sp : {false, true}) {
      const ShardSpec sh = shard(1, 2048, t, sp);
      const double none = layer_activation_bytes(m, sh, Recompute::kNone, false);
      const double flash = layer_activation_bytes(m, sh, Recompute::kNone, true);
      EXPECT_NEAR(none - flash, 5 * a * s * s * b / t, 1e-6 * none);
      EXPECT_DOUBLE_EQ(flash, layer_activation_bytes(m, sh, Recompute::kSelective, true));
      EXPECT_DOUBLE_EQ(flash, layer_activation_bytes(m, sh, Recompute::kSelective, false));
    }
  }
  (void)h;
}

TEST(Activations, LlamaDerivedPerTensor) {
  // llama3-8b, b = 1, s = 8192, t = 8 with sp, selective; bf16, no dropout. Per token:
  //   ln1 input + QKV input 2 * 4096 * 2 / 8 = 2048
  //   Q (32/8 heads of 128) 4 * 128 * 2 = 1024; K, V (8/8 = 1 head) 2 * 128 * 2 = 512
  //   proj input 4 * 128 * 2 = 1024
  //   ln2 input + fc1 input 2048
  //   SwiGLU act input (gate, up) 2 * 14336/8 * 2 = 7168; fc2 input 14336/8 * 2 = 3584
  //   total 17408 B/token (GQA saves 3h/t, SwiGLU 3 x 3.5h instead of 2 x 4h, no masks).
  const ModelArch& m = *find_builtin_model("llama3-8b");
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, shard(1, 8192, 8, true), Recompute::kSelective, true),
                   17408.0 * 8192);
  // Without flash and without recompute, the softmax output (no dropout: 2 B per score)
  // of 4 heads: 4 * 8192 * 2 B per token more.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, shard(1, 8192, 8, true), Recompute::kNone, false),
                   (17408.0 + 4 * 8192 * 2) * 8192);
}

TEST(Activations, MoeLayerWithOneExpertIsDensePlusRouting) {
  // One expert, top-1, dropless: the dense MLP's tensors, plus the router input besides the
  // permuted copy of it that feeds fc1 (T * h * 2 B), the [T, E] fp32 logits and
  // probabilities, bool routing map and int32 row ids (13 B per token with E = 1) and the
  // fp32 probability of each row (4 B); no expert output (model/memory.cc).
  ModelArch dense = *find_builtin_model("llama2-7b");
  ModelArch moe = dense;
  MoeSpec spec;
  spec.experts = 1;
  spec.top_k = 1;
  spec.ffn_hidden = dense.ffn_hidden;
  moe.moe = spec;
  const double T = 4096, h = 4096;
  const ShardSpec sh = shard(1, 4096, 1, false);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(moe, 0, sh, Recompute::kSelective, true),
                   layer_activation_bytes(dense, 0, sh, Recompute::kSelective, true) + T * h * 2 +
                       T * 13 + T * 4);
  // The arch-level overload takes the largest layer: here all layers are MoE.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(moe, sh, Recompute::kSelective, true),
                   layer_activation_bytes(moe, 0, sh, Recompute::kSelective, true));
}

// llama2-7b with its MLP replaced by `experts` experts of the same ffn (11008), top-1.
ModelArch llama2_moe(int experts) {
  ModelArch a = *find_builtin_model("llama2-7b");
  MoeSpec spec;
  spec.experts = experts;
  spec.top_k = 1;
  spec.ffn_hidden = a.ffn_hidden;
  a.moe = spec;
  return a;
}

TEST(Activations, SharedExpertsStoreWhatATpSplitDenseMlpStores) {
  // llama2-7b with 4 experts of ffn 11008, top-1, at tp 4, ep 2, T = 4096 tokens, bf16,
  // SwiGLU. A shared expert is a dense MLP split over tp (workload.cc): its act input (gate
  // and up) and fc2 input, 3 x T x 11008/4 x 2 B, whether or not sp shards the rest. Its fc1
  // input is the router's input (the block input): without sp it is all T tokens, where the
  // router alone (ep > 1) keeps its T/4 slice: (T - T/4) x h x 2 B more.
  const ModelArch moe = llama2_moe(4);
  ModelArch shared = moe;
  shared.moe->shared_experts = 1;
  const double T = 4096, h = 4096, ffn = 11008;
  for (bool sp : {true, false}) {
    ShardSpec sh = shard(1, 4096, 4, sp);
    sh.ep = 2;
    const double extra = layer_activation_bytes(shared, 0, sh, Recompute::kSelective, true) -
                         layer_activation_bytes(moe, 0, sh, Recompute::kSelective, true);
    EXPECT_DOUBLE_EQ(extra, 3 * T * ffn / 4 * 2 + (sp ? 0.0 : (T - T / 4) * h * 2)) << sp;
  }
}

TEST(Activations, ExpertTensorParallelStoresTheGatheredSlots) {
  // llama2-7b with 4 experts of ffn 11008, top-1, tp 2, ep 2, sp, T = 4096, bf16, SwiGLU.
  // Experts whole (expert_tp 1): each rank's experts get its T/2 routed tokens: rows T/2,
  // each storing the fc1 input (h), act and fc2 inputs (3 x 11008) in bf16 and an fp32
  // probability: 2h + 6f + 4 bytes. Experts split (expert_tp 2): the dispatched tokens of
  // both tp ranks, T rows of 2h + 3f + 4. Difference: T (2h + 3f + 4) - T/2 (2h + 6f + 4)
  // = T h + 2 T bytes.
  const ModelArch moe = llama2_moe(4);
  ShardSpec whole = shard(1, 4096, 2, true);
  whole.ep = 2;
  ShardSpec split = whole;
  split.expert_tp = 2;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(moe, 0, split, Recompute::kSelective, true) -
                       layer_activation_bytes(moe, 0, whole, Recompute::kSelective, true),
                   4096.0 * 4096 + 2 * 4096.0);
}

TEST(Activations, NonNegativeAndMonotoneInRecompute) {
  for (const auto& n : builtin_model_names()) {
    const ModelArch& m = *find_builtin_model(n);
    for (int t : {1, 8}) {
      for (bool sp : {false, true}) {
        const ShardSpec sh = shard(2, 4096, t, sp);
        const double none = layer_activation_bytes(m, sh, Recompute::kNone, false);
        const double sel = layer_activation_bytes(m, sh, Recompute::kSelective, false);
        const double full = layer_activation_bytes(m, sh, Recompute::kFull, false);
        EXPECT_GT(full, 0) << n;
        EXPECT_LT(full, sel) << n;
        EXPECT_LE(sel, none) << n;
      }
    }
  }
}

}  // namespace
}  // namespace stepcast
