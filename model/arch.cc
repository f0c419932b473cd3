// Built-in architectures. Sizes are the published configurations (Hugging Face config.json
// of each release, GPT-3 paper Table 2.1, Megatron-LM papers); see README.md for sources.
#include "model/arch.h"

#include <fmt/format.h>

#include <algorithm>

namespace stepcast {

bool ModelArch::is_moe_layer(int layer) const {
  if (!moe.has_value()) return false;
  if (layer < moe->first_dense_layers) return false;
  const int every = std::max(1, moe->every);
  return (layer + 1) % every == 0;
}

namespace {

// MLA keys (model/arch.h): kv_lora_rank and qk_rope_head_dim come together, with a
// qk_head_dim above the rope part; not with the fused-GEMM approximation (qkv_features).
void validate_mla(const ModelArch& a, std::vector<std::string>& out) {
  if (a.q_lora_rank < 0 || a.kv_lora_rank < 0 || a.qk_rope_head_dim < 0) {
    out.push_back("q_lora_rank, kv_lora_rank, qk_rope_head_dim: expected >= 0");
    return;
  }
  if (!a.mla()) {
    if (a.q_lora_rank > 0 || a.qk_rope_head_dim > 0)
      out.push_back("kv_lora_rank: q_lora_rank and qk_rope_head_dim need kv_lora_rank (MLA)");
    return;
  }
  if (a.qk_rope_head_dim <= 0)
    out.push_back("qk_rope_head_dim: MLA (kv_lora_rank) needs a positive qk_rope_head_dim");
  if (a.heads > 0 && a.dim_qk() <= a.qk_rope_head_dim)
    out.push_back(
        fmt::format("qk_head_dim: MLA needs qk_head_dim (nope + rope) above "
                    "qk_rope_head_dim ({}), got {}",
                    a.qk_rope_head_dim, a.dim_qk()));
  if (a.qkv_features > 0)
    out.push_back("qkv_features: the fused-QKV approximation cannot go with kv_lora_rank (MLA)");
  if (a.kv_heads != a.heads)
    out.push_back(fmt::format("kv_heads: MLA has one key/value head per query head ({}), got {}",
                              a.heads, a.kv_heads));
}

}  // namespace

std::vector<std::string> validate_arch(const ModelArch& a) {
  std::vector<std::string> out;
  auto need_positive = [&](const char* key, std::int64_t v) {
    if (v <= 0) out.push_back(fmt::format("{}: expected a positive integer, got {}", key, v));
  };
  need_positive("layers", a.layers);
  need_positive("hidden", a.hidden);
  need_positive("ffn_hidden", a.ffn_hidden);
  need_positive("heads", a.heads);
  need_positive("kv_heads", a.kv_heads);
  need_positive("vocab", a.vocab);
  if (a.window < 0) out.push_back(fmt::format("window: expected >= 0, got {}", a.window));
  if (a.window_every < 1)
    out.push_back(fmt::format("window_every: expected >= 1, got {}", a.window_every));
  if (a.head_dim < 0) out.push_back(fmt::format("head_dim: expected >= 0, got {}", a.head_dim));
  if (a.heads > 0 && a.kv_heads > 0 && a.heads % a.kv_heads != 0) {
    out.push_back(fmt::format("kv_heads: {} does not divide heads ({})", a.kv_heads, a.heads));
  }
  if (a.heads > 0 && a.hidden > 0 && a.head_dim == 0 && a.hidden % a.heads != 0) {
    out.push_back(
        fmt::format("heads: {} does not divide hidden ({}); give head_dim", a.heads, a.hidden));
  }
  validate_mla(a, out);
  if (a.moe.has_value()) {
    const MoeSpec& m = *a.moe;
    need_positive("moe.experts", m.experts);
    need_positive("moe.top_k", m.top_k);
    need_positive("moe.ffn_hidden", m.ffn_hidden);
    need_positive("moe.every", m.every);
    if (m.experts > 0 && m.top_k > m.experts) {
      out.push_back(fmt::format("moe.top_k: {} exceeds moe.experts ({})", m.top_k, m.experts));
    }
    if (m.capacity_factor < 0) {
      out.push_back(fmt::format("moe.capacity_factor: expected a positive number, got {}",
                                m.capacity_factor));
    }
    if (m.experts > 0 && m.top_k > 0 && m.top_k <= m.experts &&
        !(m.imbalance >= 1.0 && m.imbalance <= static_cast<double>(m.experts) / m.top_k)) {
      out.push_back(fmt::format("moe.imbalance: expected 1..experts/top_k ({}), got {}",
                                static_cast<double>(m.experts) / m.top_k, m.imbalance));
    }
    if ((m.router_groups > 0) != (m.router_group_topk > 0) ||
        (m.router_groups > 0 &&
         (m.experts % m.router_groups != 0 || m.router_group_topk > m.router_groups))) {
      out.push_back(
          fmt::format("moe.router_groups: {} groups (top {}) must divide the "
                      "experts ({}) and come with router_group_topk <= groups",
                      m.router_groups, m.router_group_topk, m.experts));
    }
    if (m.shared_experts < 0) {
      out.push_back(fmt::format("moe.shared_experts: expected >= 0, got {}", m.shared_experts));
    }
    if (m.first_dense_layers < 0 || m.first_dense_layers > a.layers) {
      out.push_back(fmt::format("moe.first_dense_layers: expected 0..{}, got {}", a.layers,
                                m.first_dense_layers));
    }
  }
  return out;
}

namespace {

ModelArch gpt(std::string name, int layers, std::int64_t hidden, int heads, std::int64_t vocab,
              std::int64_t positions) {
  ModelArch a;
  a.name = std::move(name);
  a.layers = layers;
  a.hidden = hidden;
  a.ffn_hidden = 4 * hidden;
  a.heads = heads;
  a.kv_heads = heads;
  a.vocab = vocab;
  a.activation = Activation::kGelu;
  a.norm = Norm::kLayerNorm;
  a.tied_embeddings = true;
  a.max_positions = positions;
  a.dropout = true;
  return a;
}

ModelArch llama(std::string name, int layers, std::int64_t hidden, std::int64_t ffn, int heads,
                int kv_heads, std::int64_t vocab) {
  ModelArch a;
  a.name = std::move(name);
  a.layers = layers;
  a.hidden = hidden;
  a.ffn_hidden = ffn;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.vocab = vocab;
  a.activation = Activation::kSwiglu;
  a.norm = Norm::kRmsNorm;
  a.tied_embeddings = false;
  a.max_positions = 0;  // rotary
  a.dropout = false;
  return a;
}

ModelArch mixtral(std::string name, int layers, std::int64_t hidden, std::int64_t ffn, int heads,
                  int kv_heads, std::int64_t vocab) {
  ModelArch a = llama(std::move(name), layers, hidden, ffn, heads, kv_heads, vocab);
  MoeSpec m;
  m.experts = 8;
  m.top_k = 2;
  m.ffn_hidden = ffn;
  a.moe = m;
  return a;
}

// DeepSeek-V3 (arXiv 2412.19437, config.json): 61 layers, hidden 7168, 128 heads, MLA with
// q_lora_rank 1536, kv_lora_rank 512, qk_nope 128 + qk_rope 64, v_head_dim 128; first 3
// layers dense (ffn 18432), then 256 routed experts (ffn 2048) top-8 + 1 shared; vocab
// 129280; untied embeddings. The multi-token-prediction module is not part of the 671B.
ModelArch deepseek_v3_like() {
  ModelArch a = llama("deepseek-v3-like", 61, 7168, 18432, 128, 128, 129280);
  a.head_dim = 128;     // value head size
  a.qk_head_dim = 192;  // 128 nope + 64 rope
  // MLA projections per layer: q_a 7168x1536 + q_b 1536x(128*192) + kv_a 7168x(512+64)
  // + kv_b 512x(128*(128+128)) = 69,664,768 parameters, + 1536 + 512 latent-norm gains.
  a.q_lora_rank = 1536;
  a.kv_lora_rank = 512;
  a.qk_rope_head_dim = 64;
  MoeSpec m;
  m.experts = 256;
  m.top_k = 8;
  m.ffn_hidden = 2048;
  m.every = 1;
  m.shared_experts = 1;
  m.first_dense_layers = 3;
  m.router_groups = 8;  // n_group 8, topk_group 4: a token reaches at most 4 nodes
  m.router_group_topk = 4;
  a.moe = m;
  a.approximation =
      "the KV cache compression (inference only), the router bias and the absorbed "
      "(inference) form of MLA are not modelled";
  return a;
}

// Kimi K2 (MoonshotAI/Kimi-K2 README, config.json; Megatron-Bridge KimiK2Provider): the
// DeepSeek-V3 architecture with 64 MLA heads, 1 leading dense layer, 384 routed experts
// (ffn 2048) top-8 + 1 shared, one router group, vocab 163840. MLA q/kv projections:
// q_a 7168x1536 + q_b 1536x(64*192) + kv_a 7168x576 + kv_b 512x(64*256) = 42,401,792.
ModelArch kimi_k2_like() {
  ModelArch a = llama("kimi-k2-like", 61, 7168, 18432, 64, 64, 163840);
  a.head_dim = 128;
  a.qk_head_dim = 192;
  a.q_lora_rank = 1536;
  a.kv_lora_rank = 512;
  a.qk_rope_head_dim = 64;
  MoeSpec m;
  m.experts = 384;
  m.top_k = 8;
  m.ffn_hidden = 2048;
  m.shared_experts = 1;
  m.first_dense_layers = 1;
  a.moe = m;
  a.approximation = "as deepseek-v3-like: MLA's inference-only KV cache form not modelled";
  return a;
}

// DeepSeek-V3 as trained and as Megatron-Bridge runs it (DeepSeekV3ModelProvider,
// mtp_num_layers 1): deepseek-v3-like with its one multi-token-prediction module
// (num_nextn_predict_layers 1 in config.json). MLA stays approximated as there.
ModelArch deepseek_v3() {
  ModelArch a = deepseek_v3_like();
  a.name = "deepseek-v3";
  a.mtp_layers = 1;
  return a;
}

// Kimi K2 (MoonshotAI/Kimi-K2 config.json: num_nextn_predict_layers 0): kimi-k2-like.
ModelArch kimi_k2() {
  ModelArch a = kimi_k2_like();
  a.name = "kimi-k2";
  return a;
}

// Qwen3 MoE (Qwen3 model cards, config.json; Megatron-Bridge Qwen3MoEModelProvider): GQA
// with 4 KV heads of 128, qk-norm, 128 routed experts top-8 with no shared expert, every
// layer MoE, softmax router with top-k renormalised, vocab 151936, untied.
ModelArch qwen3_moe(std::string name, int layers, std::int64_t hidden, int heads,
                    std::int64_t expert_ffn) {
  ModelArch a = llama(std::move(name), layers, hidden, expert_ffn * 8, heads, 4, 151936);
  a.head_dim = 128;
  a.qk_norm = true;
  MoeSpec m;
  m.experts = 128;
  m.top_k = 8;
  m.ffn_hidden = expert_ffn;
  a.moe = m;
  return a;
}

// GPT-OSS-120B (openai/gpt-oss README and gpt_oss/torch/model.py ModelConfig): 36 layers,
// hidden 2880, 64 query / 8 KV heads of 64, 128 experts (ffn 2880) top-4, biases on every
// linear layer (RMSNorm), learned attention sinks, 128-token sliding windows on even
// layers, vocab 201088, untied. The SwiGLU clamp and the MXFP4 expert weights of the
// release are not modelled (training here runs in the scenario's dtype).
ModelArch gpt_oss_120b() {
  ModelArch a = llama("gpt-oss-120b", 36, 2880, 2880, 64, 8, 201088);
  a.head_dim = 64;
  a.linear_bias = true;
  a.attention_sinks = true;
  a.window = 128;
  a.window_every = 2;
  MoeSpec m;
  m.experts = 128;
  m.top_k = 4;
  m.ffn_hidden = 2880;
  a.moe = m;
  return a;
}

const std::vector<ModelArch>& builtins() {
  static const std::vector<ModelArch> all = [] {
    std::vector<ModelArch> v;
    // GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12288, 96 heads,
    // context 2048, GPT-2 BPE vocabulary 50257, learned positions, tied embeddings.
    v.push_back(gpt("gpt3-175b", 96, 12288, 96, 50257, 2048));
    // Korthikanti et al. 2022, Table 3 (Megatron GPT, vocab padded to 51200, s 2048).
    v.push_back(gpt("gpt-22b", 48, 6144, 64, 51200, 2048));
    v.push_back(gpt("gpt-530b", 105, 20480, 128, 51200, 2048));
    v.push_back(gpt("gpt-1t", 128, 25600, 160, 51200, 2048));
    // Llama 2 (Touvron et al. 2023; HF config.json).
    v.push_back(llama("llama2-7b", 32, 4096, 11008, 32, 32, 32000));
    v.push_back(llama("llama2-13b", 40, 5120, 13824, 40, 40, 32000));
    v.push_back(llama("llama2-70b", 80, 8192, 28672, 64, 8, 32000));
    // Llama 3 / 3.1 (Dubey et al. 2024, Table 3; HF config.json).
    v.push_back(llama("llama3-8b", 32, 4096, 14336, 32, 8, 128256));
    v.push_back(llama("llama3-70b", 80, 8192, 28672, 64, 8, 128256));
    v.push_back(llama("llama3-405b", 126, 16384, 53248, 128, 8, 128256));
    // Mixtral (Jiang et al. 2024; HF config.json): 8 experts, top-2, every layer.
    v.push_back(mixtral("mixtral-8x7b", 32, 4096, 14336, 32, 8, 32000));
    v.push_back(mixtral("mixtral-8x22b", 56, 6144, 16384, 48, 8, 32768));
    v.push_back(deepseek_v3_like());
    v.push_back(kimi_k2_like());
    v.push_back(deepseek_v3());
    v.push_back(kimi_k2());
    v.push_back(qwen3_moe("qwen3-30b-a3b", 48, 2048, 32, 768));
    v.push_back(qwen3_moe("qwen3-235b-a22b", 94, 4096, 64, 1536));
    v.push_back(gpt_oss_120b());
    return v;
  }();
  return all;
}

}  // namespace

const ModelArch* find_builtin_model(const std::string& name) {
  for (const ModelArch& a : builtins()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::vector<std::string> builtin_model_names() {
  std::vector<std::string> names;
  for (const ModelArch& a : builtins()) names.push_back(a.name);
  return names;
}

}  // namespace stepcast
