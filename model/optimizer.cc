// The optimizer's ops: the update over a rank's parameter shard (fused or torch.optim's
// foreach form, with Megatron's gradient norm, main-gradient copies and fp16 unscaling),
// its temporary memory, the gradient buffer's memset and the gradient copy.
#include "model/error.h"
#include "model/workload.h"
#include "model/workload_parts.h"

namespace stepcast {

using workload_parts::memory_op;

Op optimizer_op(double params, const OptimizerSpec& spec) {
  STEPCAST_CHECK(params >= 0, "optimizer_op: negative parameter count");
  const bool adam = spec.adam;
  // Adam (fp32): reads master, m, v, grad (16 B), writes master, m, v (12 B). SGD with
  // momentum: reads master, momentum, grad (12 B), writes master, momentum (8 B). Around
  // the update, as Megatron's optimizers do it: the fp32 gradient is read once more for its
  // norm (4 B; --clip-grad 1.0 is the default, clip_grad_norm_fp32 runs multi_tensor_l2norm
  // over the local shard), and the 16-bit weights are refreshed from the updated master in a
  // separate pass (_copy_main_params_to_model_params: read 4 B, write 2 B).
  double read = (adam ? 16.0 : 12.0) + 4.0 + 4.0;
  double written = adam ? 14.0 : 10.0;
  if (spec.fp32_params) {
    // The fp32 parameters are updated in place: no 16-bit copy to refresh (FSDP2 casts to
    // bf16 when it next gathers them), and their gradients are fp32 (the reduce-scatter's
    // output is cast to the parameter's dtype).
    read -= 4.0;
    written -= 2.0;
  }
  if (!spec.fused) {
    // torch.optim's foreach update (torch/optim/adamw.py _multi_tensor_adamw, sgd.py
    // _multi_tensor_sgd), fp32, bytes read / written per parameter by each _foreach_ op:
    //   AdamW: mul_(params, 1 - lr wd) 4/4; lerp_(m, g) 8/4; mul_(v, beta2) 4/4;
    //   addcmul_(v, g, g) 8/4; t = sqrt(v) 4/4; div_(t, bc2) 4/4; add_(t, eps) 4/4;
    //   addcdiv_(params, m, t) 12/4: 48 / 32 where the fused kernel reads 16 and writes 12.
    //   SGD with momentum: mul_(buf, momentum) 4/4; add_(buf, g) 8/4; add_(params, buf)
    //   8/4: 20 / 12 where the fused one reads 12 and writes 8.
    read += adam ? 48.0 - 16.0 : 20.0 - 12.0;
    written += adam ? 32.0 - 12.0 : 12.0 - 8.0;
  }
  if (!spec.fp32_params && dtype_bytes(spec.grads) < 4.0) {
    // 16-bit gradients are first copied to fp32 main gradients (_copy_model_grads_to_main
    // _grads: read 2 B, write 4 B).
    read += dtype_bytes(spec.grads);
    written += 4.0;
  }
  if (spec.loss_scaling) {
    // fp16 training (Megatron's Float16OptimizerWithFloat16Params): the fp32 main
    // gradients are unscaled in place with the loss scaler's inf/nan check (read 4 B,
    // write 4 B).
    read += 4.0;
    written += 4.0;
  }
  return memory_op(adam ? "adam" : "sgd", read * params, written * params);
}

double optimizer_temp_bytes(double params, bool adam, bool fused) {
  STEPCAST_CHECK(params >= 0, "optimizer_temp_bytes: negative parameter count");
  return adam && !fused ? 4.0 * params : 0.0;
}

Op zero_grad_op(double grad_buffer_bytes) {
  STEPCAST_CHECK(grad_buffer_bytes >= 0, "zero_grad_op: negative buffer size");
  // A memset: writes every byte of the buffer once, reads nothing.
  return memory_op("zero_grad", 0.0, grad_buffer_bytes);
}

Op grad_copy_op(double grad_bytes) {
  STEPCAST_CHECK(grad_bytes >= 0, "grad_copy_op: negative size");
  return memory_op("grad_copy", grad_bytes, grad_bytes);
}

}  // namespace stepcast
