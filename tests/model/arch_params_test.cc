// Built-in architectures and parameter counts against published totals
// (docs/model.md, Parameters).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "model/arch.h"
#include "model/params.h"

namespace stepcast {
namespace {

const ModelArch& builtin(const std::string& name) {
  const ModelArch* a = find_builtin_model(name);
  EXPECT_NE(a, nullptr) << name;
  static ModelArch empty;
  return a ? *a : empty;
}

// |got / want - 1| <= tol
void expect_rel(double got, double want, double tol, const std::string& what) {
  EXPECT_LE(std::fabs(got / want - 1.0), tol) << what << ": got " << got << ", want " << want;
}

TEST(Arch, BuiltinsListedFoundAndSound) {
  const auto names = builtin_model_names();
  for (const char* n :
       {"gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b",
        "llama3-405b", "mixtral-8x7b", "mixtral-8x22b", "deepseek-v3-like"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
  for (const auto& n : names) {
    const ModelArch* a = find_builtin_model(n);
    ASSERT_NE(a, nullptr) << n;
    EXPECT_EQ(a->name, n);
    EXPECT_TRUE(validate_arch(*a).empty()) << n;
  }
  EXPECT_EQ(find_builtin_model("gpt5"), nullptr);
  EXPECT_FALSE(builtin("deepseek-v3-like").approximation.empty());
  EXPECT_TRUE(builtin("llama3-8b").approximation.empty());
}

TEST(Arch, MoeLayerPattern) {
  const ModelArch& ds = builtin("deepseek-v3-like");
  // first_dense_layers = 3: layers 0..2 dense, 3..60 MoE.
  EXPECT_FALSE(ds.is_moe_layer(0));
  EXPECT_FALSE(ds.is_moe_layer(2));
  EXPECT_TRUE(ds.is_moe_layer(3));
  EXPECT_TRUE(ds.is_moe_layer(60));
  ModelArch a = builtin("mixtral-8x7b");
  a.moe->every = 2;  // (l + 1) % 2 == 0: layers 1, 3, 5, ...
  EXPECT_FALSE(a.is_moe_layer(0));
  EXPECT_TRUE(a.is_moe_layer(1));
  EXPECT_FALSE(builtin("llama3-8b").is_moe_layer(0));
}

TEST(Arch, ValidateReportsEachProblem) {
  ModelArch a = builtin("llama3-8b");
  a.kv_heads = 5;
  a.hidden = 4100;  // 4100 / 32 heads is not an integer
  a.layers = 0;
  const auto msgs = validate_arch(a);
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[0], "layers: expected a positive integer, got 0");
  EXPECT_EQ(msgs[1], "kv_heads: 5 does not divide heads (32)");
  EXPECT_EQ(msgs[2], "heads: 32 does not divide hidden (4100); give head_dim");

  ModelArch m = builtin("mixtral-8x7b");
  m.moe->top_k = 9;
  m.moe->capacity_factor = -1;  // 0 is dropless
  const auto mm = validate_arch(m);
  ASSERT_EQ(mm.size(), 2u);
  EXPECT_EQ(mm[0], "moe.top_k: 9 exceeds moe.experts (8)");
  EXPECT_EQ(mm[1], "moe.capacity_factor: expected a positive number, got -1");
}

TEST(Arch, ValidateMlaRules) {
  ModelArch q = builtin("llama3-8b");
  q.q_lora_rank = 512;  // without kv_lora_rank
  EXPECT_EQ(validate_arch(q),
            (std::vector<std::string>{
                "kv_lora_rank: q_lora_rank and qk_rope_head_dim need kv_lora_rank (MLA)"}));
  ModelArch m = builtin("deepseek-v3-like");
  m.qk_head_dim = 64;     // not above the 64 rope dims
  m.qkv_features = 9728;  // the fused approximation with MLA
  m.kv_heads = 64;
  const auto mm = validate_arch(m);
  ASSERT_EQ(mm.size(), 3u) << ::testing::PrintToString(mm);
  EXPECT_EQ(mm[0],
            "qk_head_dim: MLA needs qk_head_dim (nope + rope) above qk_rope_head_dim (64), "
            "got 64");
}

// Narayanan et al. 2021 eq. 2: P = 12Lh^2 (1 + 13/(12h) + (V + s)/(12Lh)), which leaves
// out the final LayerNorm (2h); our count adds it.
TEST(Params, GptMatchesNarayananEq2Exactly) {
  for (const char* n : {"gpt3-175b", "gpt-22b", "gpt-530b", "gpt-1t"}) {
    const ModelArch& a = builtin(n);
    const double L = a.layers, h = a.hidden, V = a.vocab, s = a.max_positions;
    const double eq2 = 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h));
    const ParamCounts pc = count_params(a);
    EXPECT_NEAR(pc.total, eq2 + 2 * h, 1e-6 * eq2) << n;
    EXPECT_EQ(pc.total, pc.active);
    EXPECT_EQ(pc.output, 0.0);  // tied
  }
}

TEST(Params, PublishedTotalsWithinHalfPercent) {
  struct Case {
    const char* name;
    double total;
  };
  // docs/model.md; Llama-2 7B/13B: 6.74B / 13.02B (HF model cards); Mixtral-8x22B 141B
  // (Mistral AI release note); DeepSeek-V3 671B main model (arXiv 2412.19437).
  const Case cases[] = {{"gpt3-175b", 174.6e9},
                        {"llama2-7b", 6.74e9},
                        {"llama2-13b", 13.02e9},
                        {"llama2-70b", 69.0e9},
                        {"llama3-8b", 8.03e9},
                        {"llama3-70b", 70.6e9},
                        {"llama3-405b", 405.9e9},
                        {"mixtral-8x7b", 46.7e9},
                        {"mixtral-8x22b", 141e9},
                        {"deepseek-v3-like", 671e9},
                        // Qwen3 model cards: 30.5B and 235B; openai/gpt-oss model card:
                        // 116.83B.
                        {"qwen3-30b-a3b", 30.5e9},
                        {"qwen3-235b-a22b", 235e9},
                        {"gpt-oss-120b", 116.83e9}};
  for (const Case& c : cases)
    expect_rel(count_params(builtin(c.name)).total, c.total, 0.005, c.name);
  // Kimi K2 (README: "1T" total, rounded): its config counts 1,026.4B — 60 MoE layers of
  // 384 experts x 3 x 7168 x 2048 = 1,014.7B, attention 6.2B, embeddings 2.3B, shared
  // experts 2.6B.
  expect_rel(count_params(builtin("kimi-k2-like")).total, 1026.4e9, 0.001, "kimi-k2-like");
}

TEST(Params, MoeActive) {
  // Mixtral-8x7B: 12.9B active (docs/model.md), 8x22B: 39B (release note).
  expect_rel(count_params(builtin("mixtral-8x7b")).active, 12.9e9, 0.005, "8x7b active");
  expect_rel(count_params(builtin("mixtral-8x22b")).active, 39e9, 0.01, "8x22b active");
  // DeepSeek-V3 reports 37B activated; our count, which includes both embedding tables
  // (1.85B), gives 37.5B: within 2%.
  expect_rel(count_params(builtin("deepseek-v3-like")).active, 37e9, 0.02, "dsv3 active");
  // Qwen3 model cards: 3.3B and 22B activated; gpt-oss: 5.13B active; Kimi K2: 32B (each
  // published figure counts the embeddings as these counts do, within 2%).
  expect_rel(count_params(builtin("qwen3-30b-a3b")).active, 3.3e9, 0.02, "qwen3-30b active");
  expect_rel(count_params(builtin("qwen3-235b-a22b")).active, 22e9, 0.02, "qwen3-235b active");
  // gpt-oss's 5.13B active leaves out the input embedding (201088 x 2880 = 0.58B).
  const ParamCounts oss = count_params(builtin("gpt-oss-120b"));
  expect_rel(oss.active - oss.embedding, 5.13e9, 0.005, "gpt-oss active");
  // Kimi K2's "32B activated" is rounded; without the input embedding (1.17B) 31.7B.
  const ParamCounts kimi = count_params(builtin("kimi-k2-like"));
  expect_rel(kimi.active - kimi.embedding, 32e9, 0.02, "kimi active");
}

TEST(Params, DeepSeekV3AndKimiK2AsPublished) {
  // deepseek-v3: 671B main model, 37B activated (arXiv 2412.19437; README_WEIGHTS), and one
  // MTP module. README_WEIGHTS: 685B = 671B + 14B of MTP, whose checkpoint holds its own
  // copies of the embedding and the output head (129280 x 7168 each, 0.93B); in training
  // they are shared, so ParamCounts::mtp is 14B less those two, within 4% (the router
  // bias and norm rounding).
  const ParamCounts ds = count_params(builtin("deepseek-v3"));
  expect_rel(ds.total, 671e9, 0.005, "deepseek-v3");
  expect_rel(ds.active, 37e9, 0.02, "deepseek-v3 active");
  const double tables = 2.0 * 129280 * 7168;
  expect_rel(ds.mtp + tables, 14e9, 0.04, "deepseek-v3 mtp");
  // The MTP module: the last layer's parameters, eh_proj 2 x 7168^2, three RMSNorm gains.
  EXPECT_DOUBLE_EQ(ds.mtp, ds.per_layer.back() + 2.0 * 7168 * 7168 + 3.0 * 7168);
  EXPECT_EQ(count_params(builtin("deepseek-v3-like")).mtp, 0.0);
  // kimi-k2: "1T" (1.04T by its config) total, 32B activated; no MTP module.
  const ParamCounts k2 = count_params(builtin("kimi-k2"));
  expect_rel(k2.total, 1.04e12, 0.015, "kimi-k2");
  expect_rel(k2.active - k2.embedding, 32e9, 0.02, "kimi-k2 active");
  EXPECT_EQ(k2.mtp, 0.0);
}

TEST(Params, LlamaLayerTensorByTensor) {
  // llama3-8b layer: q 4096^2 + k, v 2 * 4096 * 1024 + o 4096^2 + MLP 3 * 4096 * 14336
  // + 2 RMSNorm gains 2 * 4096 = 218,112,000.
  const ParamCounts pc = count_params(builtin("llama3-8b"));
  const double layer = 4096.0 * 4096 * 2 + 2 * 4096.0 * 1024 + 3 * 4096.0 * 14336 + 2 * 4096;
  EXPECT_DOUBLE_EQ(pc.per_layer.at(0), layer);
  EXPECT_DOUBLE_EQ(pc.embedding, 128256.0 * 4096);
  EXPECT_DOUBLE_EQ(pc.output, 128256.0 * 4096);
  EXPECT_DOUBLE_EQ(pc.final_norm, 4096.0);
  EXPECT_DOUBLE_EQ(pc.total, 32 * layer + 2 * 128256.0 * 4096 + 4096);
}

TEST(Params, StagesAddUpToTotal) {
  for (const auto& n : builtin_model_names()) {
    const ModelArch& a = builtin(n);
    const ParamCounts pc = count_params(a);
    // One stage holds everything: the total.
    EXPECT_NEAR(stage_params(a, 0, a.layers, true, true), pc.total, 1e-9 * pc.total) << n;
    // Split in 4 uneven stages: the sum is the total plus, for tied embeddings, the copy of
    // the word embedding the last stage keeps (V*h).
    const int l1 = a.layers / 4, l2 = a.layers / 2, l3 = 3 * a.layers / 4 + 1;
    const double sum = stage_params(a, 0, l1, true, false) +
                       stage_params(a, l1, l2 - l1, false, false) +
                       stage_params(a, l2, l3 - l2, false, false) +
                       stage_params(a, l3, a.layers - l3, false, true);
    const double tied_copy = a.tied_embeddings ? double(a.vocab) * a.hidden : 0.0;
    EXPECT_NEAR(sum, pc.total + tied_copy, 1e-9 * pc.total) << n;
  }
}

}  // namespace
}  // namespace stepcast
