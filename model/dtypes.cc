// The number formats (DType): their element and storage bytes, names and the activation dtype
// under a narrow GEMM format; and the memory-bound kernels Transformer Engine runs to feed
// the narrow GEMMs: the block-scaled quantize of each operand, and the amax and scale
// kernels of per-tensor current scaling (workload_parts.h, used by workload.cc and moe.cc).
#include <algorithm>
#include <cmath>
#include <string>

#include "model/error.h"
#include "model/workload.h"
#include "model/workload_parts.h"

namespace stepcast {

const char* moe_dispatcher_name(MoeDispatcher d) {
  switch (d) {
    case MoeDispatcher::kAllToAll: return "alltoall";
    case MoeDispatcher::kAllGather: return "allgather";
    case MoeDispatcher::kDeepEp: return "deepep";
  }
  return "alltoall";
}

int dtype_bytes(DType t) {
  switch (t) {
    case DType::kBf16: return 2;
    case DType::kFp16: return 2;
    case DType::kFp8: return 1;
    case DType::kFp32: return 4;
    case DType::kMxfp8: return 1;
    case DType::kNvfp4: break;
  }
  STEPCAST_CHECK(false, std::string("dtype_bytes: ") + dtype_name(t) + " has no whole byte count");
  return 0;
}

double dtype_element_bytes(DType t) { return t == DType::kNvfp4 ? 0.5 : dtype_bytes(t); }

double dtype_storage_bytes(DType t) {
  switch (t) {
    case DType::kMxfp8: return 1.0 + 1.0 / 32.0;
    case DType::kNvfp4: return 0.5 + 1.0 / 16.0;
    default: return dtype_element_bytes(t);
  }
}

bool block_scaled(DType t) { return t == DType::kMxfp8 || t == DType::kNvfp4; }

bool narrow_gemm_dtype(DType t) { return t == DType::kFp8 || block_scaled(t); }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBf16: return "bf16";
    case DType::kFp16: return "fp16";
    case DType::kFp8: return "fp8";
    case DType::kFp32: return "fp32";
    case DType::kMxfp8: return "mxfp8";
    case DType::kNvfp4: return "nvfp4";
  }
  return "bf16";
}

const char* gemm_layout_name(GemmLayout l) {
  switch (l) {
    case GemmLayout::kNN: return "NN";
    case GemmLayout::kNT: return "NT";
    case GemmLayout::kTN: return "TN";
    case GemmLayout::kTT: return "TT";
  }
  return "NN";
}

DType activation_dtype(DType compute) {
  return narrow_gemm_dtype(compute) ? DType::kBf16 : compute;
}

namespace workload_parts {

// Block-scaled GEMM inputs (mxfp8, nvfp4) are quantized by a memory-bound kernel of their
// own (Transformer Engine's MXFP8Quantizer / NVFP4Quantizer): the tensor core scales along
// the reduction dimension only, so each activation or gradient operand is written twice,
// row-wise for the GEMM that consumes it as is and column-wise for the weight gradient that
// consumes it transposed (TE's "rowwise" and "columnwise" usages). One kernel per forward
// and input-gradient GEMM, on its A operand (m x k: the layer input x, or the output gradient
// dy): reads it in bf16, writes 2 x its quantized size with the scales. The weight gradient's
// operands are those two column-wise copies: no kernel of its own. Weights are quantized once
// per step and kept over the microbatches (TE's is_first_microbatch cache): not modelled.
// Each kernel goes before the collectives that feed its GEMM (a sequence-parallel gather), so
// the lowering still finds each collective next to its GEMM; it is costed on the GEMM's whole
// operand (quantized after the bf16 gather).
void add_quantize_ops(std::vector<Step>& steps, const Local& l) {
  if (!block_scaled(l.dt)) return;
  std::vector<Step> out;
  out.reserve(steps.size() * 2);
  for (Step& s : steps) {
    if (!s.is_comm && s.op.kind == OpKind::kGemm) {
      const GemmShape& g = s.op.gemm;
      const double elems = d(g.m) * d(g.k) * d(g.batch);
      std::size_t at = out.size();
      while (at > 0 && out[at - 1].is_comm) --at;
      Op quant =
          memory_op(s.op.name + ".quant", elems * l.e, 2.0 * elems * dtype_storage_bytes(l.dt));
      // A grouped GEMM's operand is quantized expert by expert: split_quantize fuses the
      // experts' casts only for delayed-scaling fp8 (quantize_expert_operands, model/moe.cc).
      quant.launches = static_cast<int>(g.batch);
      out.insert(out.begin() + static_cast<std::ptrdiff_t>(at),
                 op_step(std::move(quant), s.recompute_selective));
    }
    out.push_back(std::move(s));
  }
  steps = std::move(out);
}

// The kernels of one current-scaling quantize besides its cast (Transformer Engine 2.x
// Float8CurrentScalingQuantizer::quantize, pytorch/csrc/quantizer.cpp): a memset of the amax
// (compute_amax zeroes it with cudaMemsetAsync before its atomic-max kernel), the amax
// reduction, and nvte_compute_scale_from_amax, a kernel of its own. A grouped GEMM's operand
// is quantized expert by expert (quantize_expert_operands, model/moe.cc): that many times.
int amax_launches(std::int64_t batch) {
  return 3 * static_cast<int>(std::max<std::int64_t>(batch, 1));
}

// Per-tensor fp8 under current scaling (Transformer Engine Float8CurrentScalingQuantizer,
// `pytorch/tensor/float8_tensor.py`): the scale of each GEMM operand it casts comes from
// that operand's own amax, taken by a reduction kernel that reads the bf16 tensor once
// before the cast (delayed scaling takes the amax inside the cast, from the last steps'
// history). One read pass of the A operand (m x k: the layer input, or the output gradient)
// before each fp8 forward and input-gradient GEMM; the weight gradient's operands are the
// casts' transposed copies. A sequence-parallel input is cast before its all-gather (TE
// gathers it in fp8 under a per-tensor recipe), so its amax reads this rank's 1/tp share;
// the tensor-parallel all-reduce of the amax (a few bytes) is not emitted. Weights are cast
// once a step (the cache) and their amax with them: not modelled.

void add_amax_ops(std::vector<Step>& steps, const Local& l) {
  if (!l.current_scaling) return;
  std::vector<Step> out;
  out.reserve(steps.size() * 2);
  for (Step& s : steps) {
    if (!s.is_comm && s.op.kind == OpKind::kGemm && s.op.gemm.dtype == DType::kFp8) {
      const GemmShape& g = s.op.gemm;
      double elems = d(g.m) * d(g.k) * d(g.batch);
      // Before the GEMM's own quantize kernel (MoE experts) and the collectives feeding it.
      std::size_t at = out.size();
      while (at > 0 && (out[at - 1].is_comm || out[at - 1].op.name == s.op.name + ".quant")) {
        const Step& before = out[at - 1];
        if (before.is_comm && before.comm.kind == CommPointKind::kTpGather &&
            before.comm.feeds_wgrad.empty())
          elems /= l.tp;
        --at;
      }
      Op amax = memory_op(s.op.name + ".amax", elems * l.e, 0.0);
      amax.launches = amax_launches(g.batch);
      out.insert(out.begin() + static_cast<std::ptrdiff_t>(at),
                 op_step(std::move(amax), s.recompute_selective));
    }
    out.push_back(std::move(s));
  }
  steps = std::move(out);
}

}  // namespace workload_parts

}  // namespace stepcast
