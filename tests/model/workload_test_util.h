// Helpers shared by the per-layer op tests (workload_test.cc, workload_moe_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "model/arch.h"
#include "model/workload.h"

namespace stepcast::test_workload {

inline double flops(const std::vector<Step>& steps, int kind = -1) {
  double f = 0;
  for (const Step& s : steps) {
    if (s.is_comm) continue;
    if (kind >= 0 && static_cast<int>(s.op.kind) != kind) continue;
    f += s.op.flops;
  }
  return f;
}
constexpr int kGemm = static_cast<int>(OpKind::kGemm);
constexpr int kAttn = static_cast<int>(OpKind::kAttention);

inline double total_flops(const LayerOps& o) {
  return flops(o.fwd) + flops(o.bwd_input) + flops(o.bwd_weight);
}

// "qkv", "G:attn.in" (TpGather), "R:" TpReduce, "D:" EpDispatch, "C:" EpCombine.
inline std::vector<std::string> names(const std::vector<Step>& steps) {
  std::vector<std::string> v;
  for (const Step& s : steps) {
    if (!s.is_comm) {
      v.push_back(s.op.name);
      continue;
    }
    const char* k = s.comm.kind == CommPointKind::kTpGather     ? "G:"
                    : s.comm.kind == CommPointKind::kTpReduce   ? "R:"
                    : s.comm.kind == CommPointKind::kEpDispatch ? "D:"
                    : s.comm.kind == CommPointKind::kEpGather   ? "AG:"
                    : s.comm.kind == CommPointKind::kEpScatter  ? "RS:"
                                                                : "C:";
    v.push_back(k + s.comm.name);
  }
  return v;
}

inline const Op& find_op(const std::vector<Step>& steps, const std::string& name) {
  for (const Step& s : steps) {
    if (!s.is_comm && s.op.name == name) return s.op;
  }
  ADD_FAILURE() << "no op " << name;
  static Op none;
  return none;
}

inline ModelArch small_gpt(std::int64_t h = 1024, int heads = 16) {
  ModelArch a;
  a.name = "test-gpt";
  a.layers = 4;
  a.hidden = h;
  a.ffn_hidden = 4 * h;
  a.heads = heads;
  a.kv_heads = heads;
  a.vocab = 51200;
  a.max_positions = 2048;
  a.tied_embeddings = true;
  return a;
}

// `a` with a MoE block in every layer: `experts` experts of `ffn` each, top `top_k`.
inline ModelArch with_moe(ModelArch a, int experts = 8, int top_k = 2, std::int64_t ffn = 512) {
  a.moe = MoeSpec{};
  a.moe->experts = experts;
  a.moe->top_k = top_k;
  a.moe->ffn_hidden = ffn;
  a.moe->every = 1;
  return a;
}

inline ShardSpec shard(std::int64_t b, std::int64_t s, int tp = 1, bool sp = false, int cp = 1,
                       int ep = 1) {
  ShardSpec sh;
  sh.microbatch = b;
  sh.seq_len = s;
  sh.tp = tp;
  sh.cp = cp;
  sh.ep = ep;
  sh.sequence_parallel = sp;
  return sh;
}

// What two LayerOps differ in, "" when they are the same op for op.
inline std::string ops_difference(const LayerOps& a, const LayerOps& b) {
  if (a.param_count != b.param_count || a.expert_param_count != b.expert_param_count ||
      a.grad_bytes_fp32 != b.grad_bytes_fp32)
    return "parameters";
  const std::pair<const std::vector<Step>*, const std::vector<Step>*> lists[] = {
      {&a.fwd, &b.fwd}, {&a.bwd_input, &b.bwd_input}, {&a.bwd_weight, &b.bwd_weight}};
  for (const auto& [x, y] : lists) {
    if (names(*x) != names(*y)) return "op names";
    for (size_t i = 0; i < x->size(); ++i) {
      const Step &s = (*x)[i], &t = (*y)[i];
      const Op &o = s.op, &q = t.op;
      if (s.recompute_selective != t.recompute_selective || s.comm.bytes != t.comm.bytes ||
          s.comm.feeds_wgrad != t.comm.feeds_wgrad || o.kind != q.kind || o.flops != q.flops ||
          o.bytes_read != q.bytes_read || o.bytes_written != q.bytes_written ||
          std::tie(o.gemm.m, o.gemm.n, o.gemm.k, o.gemm.batch) !=
              std::tie(q.gemm.m, q.gemm.n, q.gemm.k, q.gemm.batch) ||
          std::tie(o.attn.batch, o.attn.heads, o.attn.kv_heads, o.attn.seq_q, o.attn.seq_kv,
                   o.attn.head_dim) != std::tie(q.attn.batch, q.attn.heads, q.attn.kv_heads,
                                                q.attn.seq_q, q.attn.seq_kv, q.attn.head_dim))
        return "step " + std::to_string(i) + " (" + o.name + s.comm.name + ")";
    }
  }
  return "";
}

}  // namespace stepcast::test_workload
