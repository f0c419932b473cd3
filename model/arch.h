// Model architectures as data (DESIGN.md, model/). GPT-style (GeLU MLP, LayerNorm, MHA,
// optionally tied embeddings), Llama-style (SwiGLU, RMSNorm, GQA) and MoE variants.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stepcast {

enum class Activation { kGelu, kSwiglu };
enum class Norm { kLayerNorm, kRmsNorm };

struct MoeSpec {
  int experts = 0;             // routed experts
  int top_k = 0;               // experts per token
  std::int64_t ffn_hidden = 0; // each expert's FFN size
  int every = 1;               // a MoE layer every `every` layers (layer l is MoE when
                               // (l + 1) % every == 0, counting from 0), others dense
  double capacity_factor = 1.0;  // tokens per expert = capacity_factor * tokens*top_k/experts
  int shared_experts = 0;      // always-on experts of the same ffn size (DeepSeek)
  int first_dense_layers = 0;  // leading dense layers (DeepSeek-V3: 3)
};

struct ModelArch {
  std::string name;
  int layers = 0;
  std::int64_t hidden = 0;
  std::int64_t ffn_hidden = 0;   // dense MLP size
  int heads = 0;
  int kv_heads = 0;              // == heads for MHA
  std::int64_t head_dim = 0;     // 0: hidden / heads
  std::int64_t vocab = 0;
  Activation activation = Activation::kGelu;
  Norm norm = Norm::kLayerNorm;
  bool tied_embeddings = false;
  // GPT-2/3 style learned position embeddings of this many positions (0: rotary, none).
  std::int64_t max_positions = 0;
  std::optional<MoeSpec> moe;
  std::string approximation;     // how the model is approximated, if it is (MLA, ...)

  std::int64_t dim_per_head() const { return head_dim > 0 ? head_dim : hidden / heads; }
  bool is_moe_layer(int layer) const;  // layer index 0-based
};

// Built-in architectures (gpt3-175b, llama2-7b, llama2-13b, llama2-70b, llama3-8b,
// llama3-70b, llama3-405b, mixtral-8x7b, mixtral-8x22b, deepseek-v3-like, ...).
// Returns nullptr when unknown.
const ModelArch* find_builtin_model(const std::string& name);
std::vector<std::string> builtin_model_names();

}  // namespace stepcast
