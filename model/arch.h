// Model architectures as data (docs/model.md, "Workload"). GPT-style (GeLU MLP, LayerNorm, MHA,
// optionally tied embeddings), Llama-style (SwiGLU, RMSNorm, GQA) and MoE variants.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stepcast {

enum class Activation { kGelu, kSwiglu };
enum class Norm { kLayerNorm, kRmsNorm };

struct MoeSpec {
  int experts = 0;              // routed experts
  int top_k = 0;                // experts per token
  std::int64_t ffn_hidden = 0;  // each expert's FFN size
  int every = 1;                // a MoE layer every `every` layers (layer l is MoE when
                                // (l + 1) % every == 0, counting from 0), others dense
  // Token drop (Megatron --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity):
  // every expert takes exactly ceil(capacity_factor * T*top_k/experts) rows from each source
  // rank. 0 (not given): dropless, as DeepSeek-V3 trained (paper section 2.1.2).
  double capacity_factor = 0;
  // Dropless load imbalance: the most loaded expert's rows over the mean (1 = balanced, as
  // Megatron's --moe-router-force-load-balancing benchmarks run). The busiest ep rank sets
  // the pace (model/moe.cc).
  double imbalance = 1.0;
  // Node-limited routing (Megatron --moe-router-num-groups / --moe-router-group-topk;
  // DeepSeek-V3: 8 groups, top 4): a token's experts lie in group_topk of the groups.
  int router_groups = 0;
  int router_group_topk = 0;
  int shared_experts = 0;      // always-on experts of the same ffn size (DeepSeek)
  int first_dense_layers = 0;  // leading dense layers (DeepSeek-V3: 3)
};

struct ModelArch {
  std::string name;
  int layers = 0;
  std::int64_t hidden = 0;
  std::int64_t ffn_hidden = 0;  // dense MLP size
  int heads = 0;
  int kv_heads = 0;           // == heads for MHA
  std::int64_t head_dim = 0;  // 0: hidden / heads
  std::int64_t vocab = 0;
  Activation activation = Activation::kGelu;
  Norm norm = Norm::kLayerNorm;
  bool tied_embeddings = false;
  // GPT-2/3 style learned position embeddings of this many positions (0: rotary, none).
  std::int64_t max_positions = 0;
  std::optional<MoeSpec> moe;
  std::string approximation;  // how the model is approximated, if it is (MLA, ...)
  // Dropout after attention softmax, attention output and MLP output (GPT-3 / Megatron
  // GPT: true; Llama, Mixtral, DeepSeek train without: false). Decides whether the 1-byte
  // dropout masks of Korthikanti et al. 2022 (section 4.1) are stored.
  bool dropout = true;
  // Biases on the linear layers when they differ from the norm's convention (has_bias):
  // GPT-OSS has RMSNorm and biased projections, experts and router.
  std::optional<bool> linear_bias;
  // RMSNorm of each query and key head before attention (Qwen3, Megatron
  // --qk-layernorm): head_dim gains for q and for k per layer, and a memory-bound kernel
  // reading and writing Q and K.
  bool qk_norm = false;
  // One learned logit per head that joins every softmax (GPT-OSS attention sinks): `heads`
  // parameters per layer; the kernel's FLOPs and bytes are unchanged.
  bool attention_sinks = false;
  // Sliding-window attention: each query sees the last `window` keys (0: full causal);
  // with window_every = 2 only even layers (0, 2, ...) are windowed (GPT-OSS alternates
  // 128-token windows with full attention), 1: every layer.
  std::int64_t window = 0;
  int window_every = 1;
  // Query/key head size when it differs from the value head size (DeepSeek MLA: 128 nope +
  // 64 rope = 192 vs 128 for values). 0: dim_per_head().
  std::int64_t qk_head_dim = 0;
  // Output features of the fused QKV projection when it is not (heads + 2 kv_heads) x head
  // size: an approximation of low-rank projections (MLA) by one GEMM [h, qkv_features] with
  // the same parameter count and FLOPs per token. 0: the standard fused QKV.
  std::int64_t qkv_features = 0;
  // Multi-head latent attention (DeepSeek-V2/V3; Megatron-Core MLASelfAttention), the keys as
  // the HF config spells them. kv_lora_rank > 0 turns it on: per layer a down-projection
  // [h -> q_lora_rank] (0: none, queries straight from [h -> heads x qk_head_dim]) and
  // [h -> kv_lora_rank + qk_rope_head_dim], replicated on every tp rank, RMSNorms of the
  // q and kv latents, and the column-parallel up-projections [q_lora_rank -> heads x
  // qk_head_dim] and [kv_lora_rank -> heads x (qk_head_dim - qk_rope_head_dim + head_dim)]
  // (the keys' no-position part and the values). The rope part of the key (qk_rope_head_dim)
  // is one head shared by all heads.
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_rope_head_dim = 0;
  // Multi-token prediction modules (DeepSeek-V3 section 2.2; Megatron-Core
  // multi_token_prediction.py, --mtp-num-layers): each predicts one more token ahead from
  // the previous depth's hidden states and the shifted tokens' embeddings, through two
  // norms, a projection [2h -> h] (eh_proj), one transformer layer like the model's last,
  // a final norm and the shared output layer with its own loss. They run on the last pipeline
  // stage, after its transformer layers. Their parameters are not in the model's published total
  // (DeepSeek-V3: 671B + 14B of MTP with its own embedding and head copies).
  int mtp_layers = 0;

  std::int64_t dim_per_head() const { return head_dim > 0 ? head_dim : hidden / heads; }
  std::int64_t dim_qk() const { return qk_head_dim > 0 ? qk_head_dim : dim_per_head(); }
  // Fused QKV output features of the whole (unsplit) layer.
  std::int64_t qkv_out_features() const {
    return qkv_features > 0 ? qkv_features
                            : heads * dim_qk() + kv_heads * (dim_qk() + dim_per_head());
  }
  bool mla() const { return kv_lora_rank > 0; }
  // MLA: output features of the q and kv up-projections of the whole layer.
  std::int64_t mla_q_up_features() const { return heads * dim_qk(); }
  std::int64_t mla_kv_up_features() const {
    return heads * (dim_qk() - qk_rope_head_dim + dim_per_head());
  }
  // MLA: parameters of the down-projections and latent norms, whole on every tp rank.
  std::int64_t mla_replicated_params() const {
    if (!mla()) return 0;
    const std::int64_t q = q_lora_rank > 0 ? hidden * q_lora_rank + q_lora_rank : 0;
    return q + hidden * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank;
  }
  bool is_moe_layer(int layer) const;  // layer index 0-based
  // SwiGLU's fc1 holds gate and up projections: twice the output features of GeLU's.
  bool gated_mlp() const { return activation == Activation::kSwiglu; }
  // GPT-style layers (LayerNorm) carry biases on every linear layer; Llama-style (RMSNorm)
  // carry none. Narayanan et al. 2021 eq. 2's 13h term per layer counts those biases.
  bool has_bias() const { return linear_bias.value_or(norm == Norm::kLayerNorm); }
  // Whether layer `layer` (0-based) attends through the sliding window.
  bool windowed_layer(int layer) const {
    return window > 0 && layer % std::max(1, window_every) == 0;
  }
  // Parameters of one norm: LayerNorm gain + bias, RMSNorm gain only.
  std::int64_t norm_params() const { return norm == Norm::kLayerNorm ? 2 * hidden : hidden; }
};

// Structural checks of an architecture (positive sizes, heads divisible by kv_heads, MoE
// sizes). Returns one message per problem, empty when the arch is sound; the scenario
// loader turns them into InputErrors with the file position of the model key.
std::vector<std::string> validate_arch(const ModelArch& arch);

// Built-in architectures (gpt3-175b, llama2-7b, llama2-13b, llama2-70b, llama3-8b,
// llama3-70b, llama3-405b, mixtral-8x7b, mixtral-8x22b, deepseek-v3-like, ...).
// Returns nullptr when unknown.
const ModelArch* find_builtin_model(const std::string& name);
std::vector<std::string> builtin_model_names();

}  // namespace stepcast
