// Parameter counts, tensor by tensor. For a GPT layer (ffn = 4h, MHA, biases) this gives
// 12h^2 + 13h per layer: Narayanan et al. 2021, eq. 2 (docs/model.md, "Workload").
#include "model/params.h"

#include "model/error.h"

namespace stepcast {
namespace {

// One feed-forward block of width `ffn` (fc1 [h, ffn or 2 ffn for SwiGLU], fc2 [ffn, h]).
double mlp_params(const ModelArch& a, double ffn) {
  const double h = static_cast<double>(a.hidden);
  const double fc1_out = a.gated_mlp() ? 2 * ffn : ffn;
  double p = h * fc1_out + ffn * h;
  if (a.has_bias()) p += fc1_out + h;
  return p;
}

double attention_params(const ModelArch& a) {
  const double h = static_cast<double>(a.hidden);
  // MLA (model/arch.h): the replicated down-projections and latent norms, then the
  // up-projections from the latents (queries from h when there is no q latent).
  const double qkv = a.mla() ? static_cast<double>(a.mla_q_up_features() + a.mla_kv_up_features())
                             : static_cast<double>(a.qkv_out_features());
  const double proj_in = static_cast<double>(a.heads) * static_cast<double>(a.dim_per_head());
  double p = proj_in * h;
  if (!a.mla()) {
    p += h * qkv;
  } else {
    const double q_in = a.q_lora_rank > 0 ? static_cast<double>(a.q_lora_rank) : h;
    p += q_in * static_cast<double>(a.mla_q_up_features()) +
         static_cast<double>(a.kv_lora_rank) * static_cast<double>(a.mla_kv_up_features()) +
         static_cast<double>(a.mla_replicated_params());
  }
  if (a.has_bias()) p += qkv + h;
  if (a.qk_norm) p += 2.0 * static_cast<double>(a.dim_qk());  // q and k RMSNorm gains
  if (a.attention_sinks) p += static_cast<double>(a.heads);   // one sink logit per head
  return p;
}

struct LayerCount {
  double total = 0;
  double active = 0;
};

LayerCount layer_params(const ModelArch& a, int layer) {
  const double norms = 2.0 * static_cast<double>(a.norm_params());
  const double attn = attention_params(a);
  LayerCount c;
  if (!a.is_moe_layer(layer)) {
    c.total = c.active = norms + attn + mlp_params(a, static_cast<double>(a.ffn_hidden));
    return c;
  }
  const MoeSpec& m = *a.moe;
  const double expert = mlp_params(a, static_cast<double>(m.ffn_hidden));
  const double router = static_cast<double>(a.hidden + (a.has_bias() ? 1 : 0)) * m.experts;
  const double shared = m.shared_experts * expert;
  c.total = norms + attn + router + shared + m.experts * expert;
  c.active = norms + attn + router + shared + m.top_k * expert;
  return c;
}

double embedding_params(const ModelArch& a) {
  return static_cast<double>(a.vocab + a.max_positions) * static_cast<double>(a.hidden);
}

double output_params(const ModelArch& a) {
  return static_cast<double>(a.vocab) * static_cast<double>(a.hidden);
}

}  // namespace

ParamCounts count_params(const ModelArch& arch) {
  STEPCAST_CHECK(arch.layers > 0 && arch.hidden > 0 && arch.heads > 0,
                 "count_params: architecture '" + arch.name + "' has no layers/hidden/heads");
  ParamCounts pc;
  pc.embedding = embedding_params(arch);
  pc.output = arch.tied_embeddings ? 0.0 : output_params(arch);
  pc.final_norm = static_cast<double>(arch.norm_params());
  pc.total = pc.embedding + pc.output + pc.final_norm;
  pc.active = pc.total;
  pc.per_layer.reserve(static_cast<std::size_t>(arch.layers));
  for (int l = 0; l < arch.layers; ++l) {
    const LayerCount c = layer_params(arch, l);
    pc.per_layer.push_back(c.total);
    pc.total += c.total;
    pc.active += c.active;
  }
  const double h = static_cast<double>(arch.hidden);
  pc.mtp = arch.mtp_layers * (layer_params(arch, arch.layers - 1).total + 2.0 * h * h +
                              3.0 * static_cast<double>(arch.norm_params()));
  return pc;
}

double stage_params(const ModelArch& arch, int first_layer, int layer_count, bool first_stage,
                    bool last_stage) {
  STEPCAST_CHECK(first_layer >= 0 && layer_count >= 0 && first_layer + layer_count <= arch.layers,
                 "stage_params: layers [" + std::to_string(first_layer) + ", " +
                     std::to_string(first_layer + layer_count) + ") outside 0.." +
                     std::to_string(arch.layers));
  double p = 0;
  for (int l = first_layer; l < first_layer + layer_count; ++l) p += layer_params(arch, l).total;
  if (first_stage) p += embedding_params(arch);
  if (last_stage) {
    p += static_cast<double>(arch.norm_params());
    // Untied: the output projection. Tied: Megatron keeps a copy of the word embedding on
    // the last stage (synchronised by an allreduce) unless it is also the first stage.
    if (!arch.tied_embeddings || !first_stage) p += output_params(arch);
  }
  return p;
}

}  // namespace stepcast
