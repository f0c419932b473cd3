// The pieces layer_ops is built from (model/workload.cc), shared with the MoE block
// (model/moe.cc). Internal to model/: nothing outside it includes this header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/workload.h"

namespace stepcast::workload_parts {

using I = std::int64_t;
inline double d(I v) { return static_cast<double>(v); }

// Per-rank sizes of one layer under a shard.
struct Local {
  I b = 1, s = 0;
  int tp = 1, cp = 1, ep = 1;
  int etp = 1;  // expert tensor parallel size (expert_tp_of)
  bool sp = false;
  DType dt = DType::kBf16;   // GEMM input dtype
  DType act = DType::kBf16;  // activation dtype
  double e = 2;              // activation bytes per element
  I tokens = 0;              // T = b*s/cp, tokens through the GEMMs on this rank
  I norm_tokens = 0;         // T/tp under sp, else T
  I heads = 0, kv_heads = 0, dqk = 0, dv = 0;
  I qkv_n = 0, proj_k = 0;
  MoeDispatcher dispatcher = MoeDispatcher::kAllToAll;
  int ep_nodes = 1;              // nodes the ep group spans
  bool shared_overlap = false;   // MoE shared experts beside the dispatcher
  bool current_scaling = false;  // fp8 GEMMs with Fp8Recipe::kCurrent (add_amax_ops)
  GradAccumulation grad_acc = GradAccumulation::kNone;  // ShardSpec::grad_accumulation
  double main_grad_bytes = 4;                           // ShardSpec::main_grad_bytes
};

Local make_local(const ModelArch& a, const ShardSpec& sh);
Step op_step(Op op, bool selective = false);
Step comm_step(CommPointKind kind, double bytes, std::string name);
// A comm step of the MoE token dispatcher (CommPoint::gemm_overlap false).
Step dispatcher_comm_step(CommPointKind kind, double bytes, std::string name);
void insert_wgrad_gather(std::vector<Step>& steps, const std::string& gemm, double bytes);
Op gemm(std::string name, I m, I n, I k, I batch, const Local& l, GemmLayout layout);
Op memory_op(std::string name, double bytes_read, double bytes_written);
// The weight gradients' way into the accumulated gradient buffer (Local::grad_acc), applied
// to a unit's bwd_weight list once it is built.
void add_grad_accumulation(std::vector<Step>& bwd_weight, const Local& l);
// The quantize kernels of block-scaled GEMM operands, and the amax and scale kernels of
// per-tensor current scaling, inserted before the GEMMs of a forward or input-gradient step
// list (model/dtypes.cc).
void add_quantize_ops(std::vector<Step>& steps, const Local& l);
void add_amax_ops(std::vector<Step>& steps, const Local& l);
// A norm's vectors (LayerOps::vectors): its gain of `hidden` elements, and its bias under
// LayerNorm.
void append_norm_vectors(std::vector<double>& vectors, const ModelArch& a);

// The three GEMMs of one linear layer y[T, out] = x[T, in] W[in, out] (Megatron stores W
// transposed; the shapes are the same): forward NN, input gradient dx = dy W^T (NT),
// weight gradient dW = x^T dy (TN). Each 2*T*in*out FLOPs.
struct Linear {
  std::string name;
  I tokens, in, out, batch = 1;
  Op fwd(const Local& l) const { return gemm(name, tokens, out, in, batch, l, GemmLayout::kNN); }
  Op dgrad(const Local& l) const { return gemm(name, tokens, in, out, batch, l, GemmLayout::kNT); }
  Op wgrad(const Local& l) const { return gemm(name, in, out, tokens, batch, l, GemmLayout::kTN); }
};

// The feed-forward part of a layer (dense MLP or MoE block), appended to the three lists
// in their own orders: fwd after ln2, bwd_input before ln2's backward, bwd_weight.
struct Block {
  std::vector<Step> fwd, bwd_input, bwd_weight;
  double params = 0;
  double expert_params = 0;     // of which routed experts'
  std::vector<double> vectors;  // of params, the biases (LayerOps::vectors)
};

void append_mlp(const ModelArch& a, const Local& l, const std::string& prefix, I tokens,
                I ffn_local, I batch, Block& blk, std::vector<Step>& bwd_in_rev);
Block tp_mlp_block(const ModelArch& a, const Local& l, const std::string& prefix,
                   const std::string& comm, I ffn);
Block moe_block(const ModelArch& a, const Local& l);  // model/moe.cc

// Multi-head latent attention between ln1 and the attention core (model/mla.cc): the
// forward steps, the backward input-gradient steps in order, the weight gradients, the
// parameters on this rank, and of those the replicated ones whose gradients are all-reduced
// over tp (LayerOps::tp_grad_params).
struct MlaFront {
  std::vector<Step> fwd, bwd_input, bwd_weight;
  double params = 0;
  double tp_grad_params = 0;
};
MlaFront mla_front(const ModelArch& a, const Local& l);

}  // namespace stepcast::workload_parts
