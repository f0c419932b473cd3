// The block-scaled GEMM dtypes (mxfp8, nvfp4): element and scale bytes, the quantize kernels
// the workload adds before each forward and input-gradient GEMM, and what stays in bf16.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/arch.h"
#include "model/error.h"
#include "model/workload.h"
#include "tests/model/workload_test_util.h"

namespace stepcast {
namespace {

TEST(DTypes, BytesWithTheirScales) {
  // mxfp8: 1 byte + one 1-byte E8M0 scale per 32 elements = 1 + 1/32 = 1.03125.
  EXPECT_DOUBLE_EQ(dtype_storage_bytes(DType::kMxfp8), 1.03125);
  // nvfp4: 4 bits + one 1-byte E4M3 scale per 16 elements = 0.5 + 1/16 = 0.5625.
  EXPECT_DOUBLE_EQ(dtype_storage_bytes(DType::kNvfp4), 0.5625);
  EXPECT_DOUBLE_EQ(dtype_element_bytes(DType::kNvfp4), 0.5);
  EXPECT_DOUBLE_EQ(dtype_storage_bytes(DType::kFp8), 1.0);  // one scale per tensor
  EXPECT_DOUBLE_EQ(dtype_storage_bytes(DType::kBf16), 2.0);
  EXPECT_THROW(dtype_bytes(DType::kNvfp4), InvariantError);  // no whole byte count
  EXPECT_STREQ(dtype_name(DType::kMxfp8), "mxfp8");
  EXPECT_STREQ(dtype_name(DType::kNvfp4), "nvfp4");
  for (DType d : {DType::kFp8, DType::kMxfp8, DType::kNvfp4}) {
    EXPECT_EQ(activation_dtype(d), DType::kBf16) << dtype_name(d);
    EXPECT_TRUE(narrow_gemm_dtype(d));
  }
  EXPECT_FALSE(block_scaled(DType::kFp8));
  EXPECT_TRUE(block_scaled(DType::kMxfp8) && block_scaled(DType::kNvfp4));
}

ModelArch small() {
  ModelArch a;
  a.name = "small";
  a.layers = 2;
  a.hidden = 1024;
  a.ffn_hidden = 4096;
  a.heads = 16;
  a.kv_heads = 16;
  a.vocab = 32000;
  return a;
}

ShardSpec shard(DType d, int tp = 2, bool sp = true) {
  ShardSpec s;
  s.microbatch = 1;
  s.seq_len = 2048;
  s.tp = tp;
  s.sequence_parallel = sp;
  s.dtype = d;
  return s;
}

std::vector<const Op*> ops_named(const std::vector<Step>& steps, const std::string& suffix) {
  std::vector<const Op*> v;
  for (const Step& s : steps)
    if (!s.is_comm && s.op.name.size() >= suffix.size() &&
        s.op.name.compare(s.op.name.size() - suffix.size(), suffix.size(), suffix) == 0)
      v.push_back(&s.op);
  return v;
}

int gemms(const std::vector<Step>& steps) {
  int n = 0;
  for (const Step& s : steps) n += !s.is_comm && s.op.kind == OpKind::kGemm;
  return n;
}

TEST(DTypes, BlockScaledGemmsGetAQuantizeKernelEach) {
  const ModelArch a = small();
  for (DType d : {DType::kMxfp8, DType::kNvfp4}) {
    SCOPED_TRACE(dtype_name(d));
    const LayerOps o = layer_ops(a, 0, shard(d));
    // One kernel per forward GEMM (qkv, proj, fc1, fc2) and per input-gradient GEMM; none
    // for the weight gradients, whose operands are the column-wise copies.
    EXPECT_EQ(ops_named(o.fwd, ".quant").size(), 4u);
    EXPECT_EQ(static_cast<int>(ops_named(o.fwd, ".quant").size()), gemms(o.fwd));
    EXPECT_EQ(static_cast<int>(ops_named(o.bwd_input, ".quant").size()), gemms(o.bwd_input));
    EXPECT_TRUE(ops_named(o.bwd_weight, ".quant").empty());
    // fc1 forward: A = the gathered input [T = 2048, h = 1024], read in bf16 (2 bytes),
    // written twice (row- and column-wise) with its scales.
    const Op* q = ops_named(o.fwd, "fc1.quant").at(0);
    const double elems = 2048.0 * 1024;
    EXPECT_EQ(q->kind, OpKind::kMemoryBound);
    EXPECT_DOUBLE_EQ(q->bytes_read, elems * 2);
    EXPECT_DOUBLE_EQ(q->bytes_written, 2 * elems * dtype_storage_bytes(d));
    // The GEMM reads its operands at the quantized size with scales: fc1 is [2048 x 1024] x
    // [1024 x 2 * 4096 / tp] (GeLU MLP: [1024 x 2048]).
    const Op* fc1 = nullptr;
    for (const Step& s : o.fwd)
      if (!s.is_comm && s.op.name == "fc1") fc1 = &s.op;
    ASSERT_NE(fc1, nullptr);
    const double n = static_cast<double>(fc1->gemm.n);
    EXPECT_DOUBLE_EQ(fc1->bytes_read, (elems + 1024.0 * n) * dtype_storage_bytes(d));
    // Attention, norms and activations stay in bf16.
    for (const Step& s : o.fwd)
      if (!s.is_comm && s.op.kind == OpKind::kAttention) {
        EXPECT_EQ(s.op.attn.dtype, DType::kBf16);
      }
    // Each kernel sits before the collectives feeding its GEMM: under sp, fc1's gather is
    // directly before fc1.
    for (size_t i = 1; i < o.fwd.size(); ++i)
      if (!o.fwd[i].is_comm && o.fwd[i].op.name == "fc1") {
        EXPECT_TRUE(o.fwd[i - 1].is_comm);
      }
  }
  // bf16 and per-tensor fp8: no quantize kernel (fp8's cast is left as it was).
  for (DType d : {DType::kBf16, DType::kFp8}) {
    const LayerOps o = layer_ops(a, 0, shard(d));
    EXPECT_TRUE(ops_named(o.fwd, ".quant").empty()) << dtype_name(d);
    EXPECT_TRUE(ops_named(o.bwd_input, ".quant").empty()) << dtype_name(d);
  }
}

// Per-tensor fp8 under current scaling (training.fp8_recipe: current): one amax kernel per
// fp8 forward and input-gradient GEMM, reading its A operand (m x k) once in bf16 before the
// cast; delayed scaling has none. small() at tp 2 with sequence parallelism, T = 2048:
// qkv and fc1 read their input before its all-gather, 2048 x 1024 / 2 x 2 B = 2097152 each;
// proj reads [2048 x 512] (8 local heads of 64) = 2097152, fc2 [2048 x 4096 / 2] = 8388608.
TEST(DTypes, CurrentScalingReadsEachFp8OperandOnceMore) {
  const ModelArch a = small();
  ShardSpec cs = shard(DType::kFp8);
  cs.fp8_recipe = Fp8Recipe::kCurrent;
  const LayerOps o = layer_ops(a, 0, cs);
  EXPECT_EQ(static_cast<int>(ops_named(o.fwd, ".amax").size()), gemms(o.fwd));
  EXPECT_EQ(static_cast<int>(ops_named(o.bwd_input, ".amax").size()), gemms(o.bwd_input));
  EXPECT_TRUE(ops_named(o.bwd_weight, ".amax").empty());
  EXPECT_DOUBLE_EQ(ops_named(o.fwd, "qkv.amax").at(0)->bytes_read, 2097152.0);
  EXPECT_DOUBLE_EQ(ops_named(o.fwd, "proj.amax").at(0)->bytes_read, 2097152.0);
  EXPECT_DOUBLE_EQ(ops_named(o.fwd, "fc1.amax").at(0)->bytes_read, 2097152.0);
  EXPECT_DOUBLE_EQ(ops_named(o.fwd, "fc2.amax").at(0)->bytes_read, 8388608.0);
  for (const Op* op : ops_named(o.fwd, ".amax")) EXPECT_DOUBLE_EQ(op->bytes_written, 0.0);
  // The amax runs before fc1's all-gather: amax, gather, fc1.
  for (size_t i = 2; i < o.fwd.size(); ++i)
    if (!o.fwd[i].is_comm && o.fwd[i].op.name == "fc1") {
      EXPECT_TRUE(o.fwd[i - 1].is_comm);
      EXPECT_EQ(o.fwd[i - 2].op.name, "fc1.amax");
    }
  // Delayed scaling (the default), and bf16 with the recipe set: none.
  EXPECT_TRUE(ops_named(layer_ops(a, 0, shard(DType::kFp8)).fwd, ".amax").empty());
  ShardSpec bf = shard(DType::kBf16);
  bf.fp8_recipe = Fp8Recipe::kCurrent;
  EXPECT_TRUE(ops_named(layer_ops(a, 0, bf).fwd, ".amax").empty());
  // MoE experts: the amax before each expert GEMM's own quantize kernel.
  const ModelArch m = test_workload::with_moe(a);
  ShardSpec me = cs;
  me.ep = 2;
  const LayerOps mo = layer_ops(m, 0, me);
  int before_quant = 0;
  for (size_t i = 1; i < mo.fwd.size(); ++i)
    if (!mo.fwd[i].is_comm && mo.fwd[i].op.name == "moe.fc1.quant") {
      EXPECT_EQ(mo.fwd[i - 1].op.name, "moe.fc1.amax");
      ++before_quant;
    }
  EXPECT_EQ(before_quant, 1);
}

// The kernels a quantize launches (Task::launches), as Transformer Engine 2.x runs them.
// Current scaling, per tensor: memset of the amax, the amax kernel, the scale kernel (the
// ".amax" task: 3) and the cast-transpose (".quant"). Grouped expert GEMMs quantize expert by
// expert (split_quantize fuses the experts' casts for delayed scaling only): with 8 experts
// over ep 2, 4 local experts, so 12 and 4; under delayed scaling one fused cast-transpose
// (1) and no amax task. A block-scaled recipe's grouped quantize is also one kernel per
// expert (4). Dense GEMMs keep one task per operand: amax 3, no separate cast.
TEST(DTypes, QuantizeKernelsAreCountedPerTensor) {
  const ModelArch m = test_workload::with_moe(small());
  auto launches = [](const std::vector<const Op*>& ops) {
    std::vector<int> v;
    for (const Op* op : ops) v.push_back(op->launches);
    return v;
  };
  ShardSpec cs = shard(DType::kFp8);
  cs.fp8_recipe = Fp8Recipe::kCurrent;
  cs.ep = 2;
  const LayerOps c = layer_ops(m, 0, cs);
  for (const auto* list : {&c.fwd, &c.bwd_input}) {
    const auto amax = ops_named(*list, ".amax");
    const auto quant = ops_named(*list, ".quant");
    ASSERT_FALSE(quant.empty());
    for (const Op* q : quant) EXPECT_EQ(q->launches, 4) << q->name;
    for (const Op* a : amax) {
      const bool expert = a->name.rfind("moe.", 0) == 0;
      EXPECT_EQ(a->launches, expert ? 12 : 3) << a->name;
    }
  }
  // Each expert GEMM itself: one cuBLAS GEMM per local expert.
  for (const Step& s : c.fwd) {
    if (!s.is_comm && s.op.name == "moe.fc1") {
      EXPECT_EQ(s.op.launches, 4);
    }
  }
  ShardSpec dl = cs;
  dl.fp8_recipe = Fp8Recipe::kDelayed;
  const LayerOps d = layer_ops(m, 0, dl);
  EXPECT_TRUE(ops_named(d.fwd, ".amax").empty());
  EXPECT_EQ(launches(ops_named(d.fwd, ".quant")), std::vector<int>({1, 1}));
  EXPECT_EQ(launches(ops_named(d.bwd_input, ".quant")), std::vector<int>({1, 1}));
  ShardSpec mx = shard(DType::kMxfp8);
  mx.ep = 2;
  const LayerOps x = layer_ops(m, 0, mx);
  for (const Op* q : ops_named(x.fwd, ".quant"))
    EXPECT_EQ(q->launches, q->name.rfind("moe.", 0) == 0 ? 4 : 1) << q->name;
}

TEST(DTypes, OutputLayerStaysBf16UnderNarrowRecipes) {
  // Megatron's output layer is a ColumnParallelLinear, outside Transformer Engine's fp8
  // autocast: its forward, input-gradient and weight-gradient GEMMs stay bf16 under fp8,
  // mxfp8 and nvfp4 alike, with no quantize kernel, and so cost what they cost under bf16.
  const ModelArch a = small();
  const LayerOps b = logits_loss_ops(a, shard(DType::kBf16));
  for (DType d : {DType::kFp8, DType::kMxfp8, DType::kNvfp4}) {
    const LayerOps o = logits_loss_ops(a, shard(d));
    int gemms = 0;
    for (const auto* list : {&o.fwd, &o.bwd_input, &o.bwd_weight})
      for (const Step& s : *list)
        if (!s.is_comm && s.op.kind == OpKind::kGemm) {
          EXPECT_EQ(s.op.gemm.dtype, DType::kBf16) << dtype_name(d);
          ++gemms;
        }
    EXPECT_EQ(gemms, 3) << dtype_name(d);
    EXPECT_TRUE(ops_named(o.fwd, ".quant").empty());
    ASSERT_EQ(o.fwd.size(), b.fwd.size());
    for (size_t i = 0; i < o.fwd.size(); ++i) {
      EXPECT_EQ(o.fwd[i].op.flops, b.fwd[i].op.flops);
      EXPECT_EQ(o.fwd[i].op.bytes_read, b.fwd[i].op.bytes_read);
    }
  }
}

TEST(DTypes, SameFlopsWhateverTheDtype) {
  // Quantize kernels are memory-bound (0 FLOPs): model and per-rank FLOPs do not move.
  const ModelArch a = small();
  auto total = [&](DType d) {
    const LayerOps o = layer_ops(a, 0, shard(d));
    double f = 0;
    for (const auto* list : {&o.fwd, &o.bwd_input, &o.bwd_weight})
      for (const Step& s : *list) f += s.is_comm ? 0 : s.op.flops;
    return f;
  };
  EXPECT_DOUBLE_EQ(total(DType::kMxfp8), total(DType::kBf16));
  EXPECT_DOUBLE_EQ(total(DType::kNvfp4), total(DType::kBf16));
}

}  // namespace
}  // namespace stepcast
