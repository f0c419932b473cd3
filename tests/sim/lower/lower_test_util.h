// Helpers for lowering tests: small in-memory scenarios and synthetic task durations
// (compute = (FLOPs + HBM bytes) / 1e3 ns, communication free or proportional to bytes), so
// pipeline formulas can be checked with exact integer arithmetic.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

#include "model/arch.h"
#include "sim/engine/engine.h"
#include "sim/lower/lower.h"
#include "sim/program/program.h"
#include "sim/scenario/scenario.h"

namespace stepcast::testing {

inline ModelArch tiny_gpt(int layers = 8) {
  ModelArch a;
  a.name = "tiny-gpt";
  a.layers = layers;
  a.hidden = 256;
  a.ffn_hidden = 1024;
  a.heads = 8;
  a.kv_heads = 8;
  a.vocab = 2048;
  a.activation = Activation::kGelu;
  a.norm = Norm::kLayerNorm;
  a.dropout = false;
  return a;
}

inline ModelArch tiny_moe(int layers = 4) {
  ModelArch a = tiny_gpt(layers);
  a.name = "tiny-moe";
  a.activation = Activation::kSwiglu;
  a.norm = Norm::kRmsNorm;
  a.kv_heads = 4;
  MoeSpec m;
  m.experts = 8;
  m.top_k = 2;
  m.ffn_hidden = 512;
  m.every = 1;
  m.capacity_factor = 1.0;
  a.moe = m;
  return a;
}

struct Plan {
  int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vpp = 1;
  int microbatches = 4;  // per dp rank
  std::int64_t microbatch = 1;
  std::int64_t seq_len = 512;
  Schedule schedule = Schedule::k1F1B;
  int zero = 0;
  bool sp = false;
  Recompute recompute = Recompute::kNone;
  bool overlap_grad = true, overlap_param = true;
  bool overlap_tp = false;  // overlap.tp_comm (needs sp)
  int expert_tp = 0;        // parallel.expert_tp (0: default)
  double bucket_bytes = 40e6;
  CpKind cp_kind = CpKind::kRing;
  std::vector<int> pipeline_layers;
  bool overlap_ep = false;  // overlap.moe_ep_comm (ep > 1; interleaved or pp 1)
};

inline Scenario make_scenario(const ModelArch& arch, const Plan& p) {
  Scenario sc;
  sc.name = "test";
  sc.model = arch;
  sc.profile.name = "test";
  sc.profile.node.gpus = 8;
  sc.gpus = p.tp * p.pp * p.dp * p.cp;
  sc.nodes = (sc.gpus + 7) / 8;
  sc.training.seq_len = p.seq_len;
  sc.training.global_batch = static_cast<std::int64_t>(p.microbatches) * p.dp * p.microbatch;
  sc.parallel.tp = p.tp;
  sc.parallel.pp = p.pp;
  sc.parallel.dp = p.dp;
  sc.parallel.cp = p.cp;
  sc.parallel.ep = p.ep;
  sc.parallel.vpp = p.vpp;
  sc.parallel.microbatch = p.microbatch;
  sc.parallel.schedule = p.schedule;
  sc.parallel.zero = p.zero;
  sc.parallel.sequence_parallel = p.sp;
  sc.parallel.recompute = p.recompute;
  sc.parallel.overlap_grad_reduce = p.overlap_grad;
  sc.parallel.overlap_param_gather = p.overlap_param;
  sc.parallel.overlap_tp_comm = p.overlap_tp && p.sp;
  sc.parallel.expert_tp = p.expert_tp;
  sc.parallel.bucket_bytes = p.bucket_bytes;
  sc.parallel.cp_kind = p.cp_kind;
  sc.parallel.pipeline_layers = p.pipeline_layers;
  sc.parallel.overlap_moe_ep = p.overlap_ep;
  return sc;
}

// A random valid plan: tp <= 2, pp <= 4, cp <= 2, dp <= 4 (up to 64 GPUs), any schedule;
// use tiny_moe when ep > 1.
inline Plan random_plan(std::mt19937& rng) {
  auto pick = [&](std::initializer_list<int> v) {
    return *(v.begin() + static_cast<long>(rng() % v.size()));
  };
  Plan p;
  p.tp = pick({1, 2});
  p.pp = pick({1, 2, 4});
  p.cp = pick({1, 1, 2});
  p.ep = pick({1, 1, 2});
  p.dp = p.ep * pick({1, 2});
  const int sched = static_cast<int>(rng() % 5);
  p.schedule = static_cast<Schedule>(sched);
  if (p.schedule == Schedule::kDualPipeV && p.pp == 1) p.schedule = Schedule::k1F1B;
  if (p.schedule == Schedule::kInterleaved) {
    p.vpp = 2;
    p.microbatches = p.pp * pick({1, 2});
  } else if (p.schedule == Schedule::kDualPipeV) {
    p.vpp = 2;
    p.microbatches = 2 * p.pp + pick({0, 1, 3});
  } else {
    p.microbatches = pick({1, 3, 4});
  }
  p.zero = pick({0, 1, 2, 3});
  p.sp = p.tp > 1 && rng() % 2;
  p.recompute = static_cast<Recompute>(rng() % 3);
  if (p.schedule == Schedule::kDualPipeV) {  // its pairs' conditions (scenario rules)
    p.zero = std::min(p.zero, 1);
    if (p.recompute == Recompute::kFull) p.recompute = Recompute::kSelective;
  }
  p.overlap_grad = rng() % 2;
  p.overlap_param = rng() % 2;
  p.bucket_bytes = pick({1, 4}) * 1e6;
  p.cp_kind = rng() % 2 ? CpKind::kRing : CpKind::kAllGather;
  p.overlap_tp = p.sp && rng() % 2;
  // Experts split over tp with ep (needs sp, and ep dividing cp*dp), or whole.
  if (p.ep > 1 && p.sp && rng() % 2) p.expert_tp = p.tp;
  // The MoE all-to-all overlap where Megatron-Core runs it (scenario rules).
  if (p.ep > 1 &&
      (p.schedule == Schedule::kInterleaved || (p.schedule == Schedule::k1F1B && p.pp == 1)) &&
      p.recompute != Recompute::kFull && p.zero <= 1)
    p.overlap_ep = rng() % 2;
  return p;
}

// Sets ZeRO stage `zero` (2 or 3) on a random plan; DualPipeV runs with ZeRO 0/1 only (its
// pairs), so such a plan takes 1F1B instead.
inline void set_sharded_zero(Plan& p, int zero) {
  p.zero = zero;
  if (p.schedule == Schedule::kDualPipeV) {
    p.schedule = Schedule::k1F1B;
    p.vpp = 1;
  }
}

inline bool is_compute(TaskKind k) {
  return k == TaskKind::kGemm || k == TaskKind::kAttention || k == TaskKind::kMemoryBound;
}

struct Synth {
  bool aux_free = false;        // embedding, head and optimizer take no time
  double comm_ns_per_byte = 0;  // 0: communication is free
};

inline Durations synth_durations(const Program& prog, const Synth& s = {}) {
  Durations d(prog.ranks.size());
  for (size_t r = 0; r < prog.ranks.size(); ++r) {
    const auto& tasks = prog.ranks[r].tasks;
    d[r].resize(tasks.size(), 0);
    for (size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      if (is_compute(t.kind)) {
        if (s.aux_free && t.layer < 0) continue;
        d[r][i] = std::llround((t.flops + t.bytes_read + t.bytes_written) / 1e3);
      } else if (t.kind == TaskKind::kCollective || t.kind == TaskKind::kSend ||
                 t.kind == TaskKind::kRecv) {
        d[r][i] = std::llround(t.bytes * s.comm_ns_per_byte);
      }
    }
  }
  return d;
}

}  // namespace stepcast::testing
