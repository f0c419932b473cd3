// Memory terms (bytes per GPU), from published formulas (see docs/model.md,
// "Workload"): training state per parameter by precision and ZeRO stage; activation
// bytes per layer per microbatch under tp / sp / recompute (Korthikanti et al. 2022,
// Table 2), adjusted for flash attention, which stores no score matrix.
#pragma once

#include <cstdint>

#include "model/arch.h"
#include "model/workload.h"

namespace stepcast {

enum class Recompute { kNone, kSelective, kFull };

struct StateBytesPerParam {
  double weights = 0;    // compute-precision copy (bf16/fp16: 2)
  double grads = 0;      // fp32 main grads (Megatron: 4)
  double optimizer = 0;  // fp32 master + Adam m, v (12), SGD momentum (8)
};

// Megatron mixed precision: 2 + 4 + 12 = 18 bytes per param without sharding; ZeRO stage z
// over d ranks divides: z>=1 the optimizer, z>=2 the grads, z==3 the weights by d.
// grad_bytes: bytes of one gradient (Megatron fp32 main grads: 4; the ZeRO paper's fp16
// gradients: 2). With fp32 compute the weights are the master copy (optimizer 8 / 4 B).
// fp32_shards (FSDP2's ZeRO-3, FrameworkRules::zero3_fp32_shards): the fp32 shard is the
// parameter and the master at once (counted under optimizer), no 16-bit shard beside it,
// and the gradient shard is fp32: (0 + 4 + 12) / d bytes with Adam.
// master_remainders (FrameworkRules::master_weight_remainders, bf16 weights): a sharded
// optimizer (zero >= 1) keeps the low 16 bits of the fp32 master beside the bf16 weight,
// 2 bytes instead of 4: 2 + g + (2 + 8) / d with Adam.
StateBytesPerParam state_bytes_per_param(DType dtype, bool adam, int zero_stage, int dp,
                                         int grad_bytes = 4, bool fp32_shards = false,
                                         bool master_remainders = false);
inline double total_bytes(const StateBytesPerParam& s) { return s.weights + s.grads + s.optimizer; }

// Stored activation bytes of one transformer layer for one microbatch on one rank.
// flash_attention: the 5*a*s^2*b score terms are not stored (they are recomputed in the
// backward kernel), so "no recompute" and "selective" coincide for attention.
// For a model whose layers differ (MoE every k layers, leading dense layers) this is the
// largest over its layers; the overload below takes the layer index (0-based).
double layer_activation_bytes(const ModelArch& arch, const ShardSpec& shard, Recompute rc,
                              bool flash_attention);
double layer_activation_bytes(const ModelArch& arch, int layer, const ShardSpec& shard,
                              Recompute rc, bool flash_attention);

// What the output layer's loss saves for its backward, one microbatch on one rank: Megatron's
// vocab-parallel cross entropy (tensor_parallel/cross_entropy.py) the fp32 softmax of the
// rank's vocabulary slice, b x s/cp x V/tp x 4 bytes; Transformer Engine's fused kernel
// (ShardSpec::fused_cross_entropy) the 16-bit logits buffer instead, which its forward
// overwrote with the gradient.
double head_activation_bytes(const ModelArch& arch, const ShardSpec& shard);

}  // namespace stepcast
