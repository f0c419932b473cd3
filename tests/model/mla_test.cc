// Multi-head latent attention (model/mla.cc): per-rank GEMM shapes against tp, the layer's
// parameters in closed form, the sequence-parallel communication and the replicated
// parameters whose gradients are all-reduced over tp.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/arch.h"
#include "model/params.h"
#include "model/workload.h"

namespace stepcast {
namespace {

ShardSpec shard(int tp, bool sp) {
  ShardSpec sh;
  sh.microbatch = 1;
  sh.seq_len = 4096;
  sh.tp = tp;
  sh.sequence_parallel = sp;
  return sh;
}

const Op* find_gemm(const std::vector<Step>& steps, const std::string& name) {
  for (const Step& s : steps)
    if (!s.is_comm && s.op.kind == OpKind::kGemm && s.op.name == name) return &s.op;
  return nullptr;
}

std::vector<std::string> names(const std::vector<Step>& steps) {
  std::vector<std::string> v;
  for (const Step& s : steps) {
    if (!s.is_comm) {
      v.push_back(s.op.name);
      continue;
    }
    v.push_back((s.comm.kind == CommPointKind::kTpGather ? "G:" : "R:") + s.comm.name);
  }
  return v;
}

// DeepSeek-V3 (q_lora_rank 1536, kv_lora_rank 512, rope 64, nope 128, v 128, 128 heads).
const ModelArch& dsv3() { return *find_builtin_model("deepseek-v3-like"); }

TEST(Mla, DownProjectionsReplicatedUpProjectionsSplitByTp) {
  // [m, n, k] of each forward GEMM over T = 4096 tokens: the down-projections keep their
  // whole weight [7168 -> 1536] and [7168 -> 512 + 64] at any tp; the up-projections
  // [1536 -> 128 x 192] and [512 -> 128 x (128 + 128)] hold 1/tp of the heads. Under
  // sequence parallel the down-projections run on the rank's 4096 / tp tokens.
  for (const int tp : {1, 2}) {
    for (const bool sp : {false, true}) {
      const LayerOps o = layer_ops(dsv3(), 0, shard(tp, sp));
      const std::int64_t rows = sp && tp > 1 ? 4096 / tp : 4096;
      const Op* qd = find_gemm(o.fwd, "q_down");
      const Op* kvd = find_gemm(o.fwd, "kv_down");
      const Op* qu = find_gemm(o.fwd, "q_up");
      const Op* kvu = find_gemm(o.fwd, "kv_up");
      ASSERT_TRUE(qd && kvd && qu && kvu);
      EXPECT_EQ(find_gemm(o.fwd, "qkv"), nullptr);
      EXPECT_EQ(qd->gemm.m, rows);
      EXPECT_EQ(qd->gemm.n, 1536);
      EXPECT_EQ(qd->gemm.k, 7168);
      EXPECT_EQ(kvd->gemm.m, rows);
      EXPECT_EQ(kvd->gemm.n, 576);
      EXPECT_EQ(kvd->gemm.k, 7168);
      EXPECT_EQ(qu->gemm.m, 4096);
      EXPECT_EQ(qu->gemm.n, 128 * 192 / tp);
      EXPECT_EQ(qu->gemm.k, 1536);
      EXPECT_EQ(kvu->gemm.m, 4096);
      EXPECT_EQ(kvu->gemm.n, 128 * 256 / tp);
      EXPECT_EQ(kvu->gemm.k, 512);
      // Each forward GEMM has its input-gradient and weight-gradient GEMMs (2mnk each).
      for (const char* g : {"q_down", "kv_down", "q_up", "kv_up"}) {
        EXPECT_NE(find_gemm(o.bwd_input, g), nullptr) << g;
        EXPECT_DOUBLE_EQ(find_gemm(o.bwd_weight, g)->flops, find_gemm(o.fwd, g)->flops) << g;
      }
    }
  }
}

TEST(Mla, LayerParametersInClosedForm) {
  // Dense layer 0 of DeepSeek-V3: norms 2 x 7168; q_down 7168 x 1536 + q norm 1536; kv_down
  // 7168 x 576 + kv norm 512 (replicated: 15,140,864); q_up 1536 x 24576 + kv_up 512 x 32768
  // + proj 16384 x 7168 (split over tp); SwiGLU MLP 3 x 7168 x 18432 (split over tp).
  const double replicated = 7168.0 * 1536 + 1536 + 7168.0 * 576 + 512;
  EXPECT_DOUBLE_EQ(replicated, 15140864.0);
  EXPECT_DOUBLE_EQ(static_cast<double>(dsv3().mla_replicated_params()), replicated);
  const double split = 1536.0 * 24576 + 512.0 * 32768 + 16384.0 * 7168 + 3.0 * 7168 * 18432;
  for (const int tp : {1, 2, 8}) {
    const LayerOps o = layer_ops(dsv3(), 0, shard(tp, tp > 1));
    EXPECT_DOUBLE_EQ(o.param_count, 2.0 * 7168 + replicated + split / tp) << tp;
  }
  // The whole model's count agrees with the tp-1 layer; the attention projections are
  // those of the published configuration (69,664,768 + 2048 norm gains + o_proj).
  EXPECT_DOUBLE_EQ(count_params(dsv3()).per_layer[0], 2.0 * 7168 + replicated + split);
  const double attn = count_params(dsv3()).per_layer[0] - 2.0 * 7168 - 3.0 * 7168 * 18432;
  EXPECT_DOUBLE_EQ(attn, 69664768.0 + 2048 + 16384.0 * 7168);
  // 6 x params per token: the layer's GEMM FLOPs per token at tp 1 are 6 x its weights
  // (norm gains aside).
  const LayerOps o = layer_ops(dsv3(), 0, shard(1, false));
  double gemm = 0;
  for (const auto* list : {&o.fwd, &o.bwd_input, &o.bwd_weight})
    for (const Step& s : *list)
      if (!s.is_comm && s.op.kind == OpKind::kGemm) gemm += s.op.flops;
  EXPECT_DOUBLE_EQ(gemm / 4096, 6.0 * (o.param_count - 2.0 * 7168 - 1536 - 512));
}

TEST(Mla, SequenceParallelGathersTheLatentsNotTheHiddenStates) {
  // tp 2 with sequence parallel: the down-projections run on the rank's tokens; each
  // up-projection gathers its latent ([4096, 1536] and [4096, 512 + 64] bf16) and in
  // backward reduce-scatters its input gradient and re-gathers its input for the weight
  // gradient ([4096, 512] for kv_up: the rope key does not go through it).
  const LayerOps o = layer_ops(dsv3(), 0, shard(2, true));
  const std::vector<std::string> fwd = {"ln1",          "q_down",      "kv_down",
                                        "latent_norm",  "G:attn.q.in", "q_up",
                                        "G:attn.kv.in", "kv_up",       "attn"};
  const std::vector<std::string> got_fwd = names(o.fwd);
  EXPECT_EQ(std::vector<std::string>(got_fwd.begin(), got_fwd.begin() + 9), fwd);
  const std::vector<std::string> bwd = {
      "attn", "G:kv_up.in.wgrad", "kv_up",       "R:attn.kv.in", "G:q_up.in.wgrad",
      "q_up", "R:attn.q.in",      "latent_norm", "kv_down",      "q_down",
      "ln1"};
  const std::vector<std::string> got = names(o.bwd_input);
  EXPECT_EQ(std::vector<std::string>(got.end() - 11, got.end()), bwd);
  for (const Step& s : o.bwd_input) {
    if (!s.is_comm) continue;
    if (s.comm.name == "q_up.in.wgrad") {
      EXPECT_DOUBLE_EQ(s.comm.bytes, 4096.0 * 1536 * 2);
    } else if (s.comm.name == "kv_up.in.wgrad") {
      EXPECT_DOUBLE_EQ(s.comm.bytes, 4096.0 * 512 * 2);
    }
  }
  for (const auto* list : {&o.fwd, &o.bwd_input})
    for (const Step& s : *list) {
      if (!s.is_comm || s.comm.name.find("attn.") == std::string::npos) continue;
      if (s.comm.name == "attn.out") continue;  // standard attention's output projection
      const double cols = s.comm.name == "attn.q.in" ? 1536 : 576;
      EXPECT_DOUBLE_EQ(s.comm.bytes, 4096.0 * cols * 2) << s.comm.name;
    }
}

TEST(Mla, ReplicatedGradientsAllReducedOnlyWhenTpSplitsTheSequence) {
  // Under sequence parallel at tp > 1 each rank's down-projection and latent-norm gradients
  // cover its own tokens: all 15,140,864 of them are summed over tp. At tp 1, and at tp 2
  // without sequence parallel (every rank ran all tokens), there is nothing to sum.
  EXPECT_EQ(layer_ops(dsv3(), 0, shard(1, false)).tp_grad_params, 0.0);
  EXPECT_EQ(layer_ops(dsv3(), 0, shard(2, false)).tp_grad_params, 0.0);
  EXPECT_DOUBLE_EQ(layer_ops(dsv3(), 0, shard(2, true)).tp_grad_params, 15140864.0);
  EXPECT_DOUBLE_EQ(layer_ops(dsv3(), 5, shard(8, true)).tp_grad_params, 15140864.0);
  // Standard attention has no replicated projections.
  EXPECT_EQ(layer_ops(*find_builtin_model("llama3-8b"), 0, shard(2, true)).tp_grad_params, 0.0);
}

}  // namespace
}  // namespace stepcast
