// Parameter counts: totals and per layer / per pipeline stage.
#pragma once

#include <cstdint>
#include <vector>

#include "model/arch.h"

namespace stepcast {

struct ParamCounts {
  double total = 0;      // all parameters (tied embeddings counted once)
  double active = 0;     // per token (MoE: top_k routed + shared experts); == total if dense
  double embedding = 0;  // input embedding (+ learned positions)
  double output = 0;     // output projection (0 when tied)
  double final_norm = 0;
  std::vector<double> per_layer;  // each transformer layer
  // Multi-token prediction modules (ModelArch::mtp_layers), not in total / active: each a
  // transformer layer like the last, eh_proj (2h x h) and three norms; the embedding and the
  // output layer are shared.
  double mtp = 0;
};

ParamCounts count_params(const ModelArch& arch);

// Parameters held by one stage holding layers [first, first + count) (global indices),
// with the embedding on the first stage and final norm + output on the last (the tied
// embedding lives on both, as in Megatron).
double stage_params(const ModelArch& arch, int first_layer, int layer_count, bool first_stage,
                    bool last_stage);

}  // namespace stepcast
