// Lowering tests: the execution rules of Megatron-Core and Transformer Engine (issue #26's
// review findings) — the asynchronous TP reduction of input gradients behind the weight
// gradient, the all-gather context parallelism's backward K/V re-gather, ZB-H1's held output
// gradients, Transformer Engine's fp8 saved inputs and weight cache, and the blocking batched
// p2p of non-interleaved 1F1B. Each test fails on the lowering without its rule.
#include <algorithm>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "sim/engine/engine.h"
#include "sim/lower/lower.h"
#include "tests/sim/lower/lower_test_helpers.h"
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast {
namespace {

using testing::alloc_bytes;
using testing::make_scenario;
using testing::Plan;
using testing::run;
using testing::synth_durations;
using testing::tiny_gpt;

bool depends_on(const Task& t, int id) {
  return std::find(t.deps.begin(), t.deps.end(), id) != t.deps.end();
}

const Task* find_label(const RankProgram& rp, const std::string& label) {
  for (const Task& t : rp.tasks)
    if (t.label == label) return &t;
  return nullptr;
}

// A tiny GPT on plan p lowered with one of the framework's rules on and off, and both
// programs' synthetic durations (aux ops free, communication at comm_ns_per_byte).
struct RuleOnOff {
  Program on, off;
  Durations d_on, d_off;
};
RuleOnOff lower_with_and_without(const Plan& p, bool FrameworkRules::*rule,
                                 double comm_ns_per_byte) {
  Scenario sc = make_scenario(tiny_gpt(), p);
  RuleOnOff r;
  sc.framework.*rule = true;
  r.on = lower(sc);
  sc.framework.*rule = false;
  r.off = lower(sc);
  const testing::Synth synth{.aux_free = true, .comm_ns_per_byte = comm_ns_per_byte};
  r.d_on = synth_durations(r.on, synth);
  r.d_off = synth_durations(r.off, synth);
  return r;
}

// ---- asynchronous TP reduction of input gradients ----------------------------------------

// tp 2 without sequence parallel or the TP overlap: the backward all-reduce of the qkv, fc1
// and logits input gradients runs beside that linear's weight-gradient GEMM, which is
// emitted right after it and does not wait for it; the next compute does. On one rank with
// free aux ops the step then shortens by exactly sum(min(all-reduce, weight-gradient GEMM))
// over those reductions: before, each all-reduce sat exposed between the input-gradient GEMM
// and the next op, the weight gradients running later.
TEST(LowerRules, AsyncTpDgradReduceRunsBehindTheWeightGradient) {
  Plan p;
  p.tp = 2;
  p.microbatches = 2;
  const auto [prog, old, d, d_old] =
      lower_with_and_without(p, &FrameworkRules::async_tp_dgrad_reduce, 0.002);
  const RankProgram& rp = prog.ranks[0];

  TimeNs hidden = 0;
  int reductions = 0;
  for (const Task& ar : rp.tasks) {
    if (ar.kind != TaskKind::kCollective || ar.phase != Phase::kBwdInput ||
        ar.category != Category::kTpComm)
      continue;
    ASSERT_EQ(ar.coll, CollOp::kAllReduce);
    // "bwd.L3.attn.in.mb1" -> the linear whose input it is: qkv, fc1 or logits.
    const std::string unit = ar.layer >= 0 ? "L" + std::to_string(ar.layer) : "head";
    const std::string what = ar.label.substr(4 + unit.size() + 1);
    const std::string gemm = what.rfind("attn.in", 0) == 0  ? "qkv"
                             : what.rfind("mlp.in", 0) == 0 ? "fc1"
                                                            : "logits";
    const Task* w =
        find_label(rp, "wgt." + unit + "." + gemm + ".mb" + std::to_string(ar.microbatch));
    ASSERT_NE(w, nullptr) << ar.label;
    EXPECT_GT(w->id, ar.id) << ar.label;
    EXPECT_FALSE(depends_on(*w, ar.id)) << ar.label;
    // The compute task after the weight gradient waits for the reduction.
    const Task* next = nullptr;
    for (int i = w->id + 1; i < static_cast<int>(rp.tasks.size()) && next == nullptr; ++i)
      if (testing::is_compute(rp.tasks[static_cast<size_t>(i)].kind))
        next = &rp.tasks[static_cast<size_t>(i)];
    ASSERT_NE(next, nullptr) << ar.label;
    EXPECT_TRUE(depends_on(*next, ar.id)) << ar.label;
    hidden += std::min(d[0][static_cast<size_t>(ar.id)], d[0][static_cast<size_t>(w->id)]);
    ++reductions;
  }
  EXPECT_EQ(reductions, (8 * 2 + 1) * 2);  // qkv, fc1 per layer and logits, 2 microbatches
  const TimeNs now = simulate(prog, d).step_ns;
  const TimeNs before = simulate(old, d_old).step_ns;
  EXPECT_GT(hidden, 0);
  EXPECT_EQ(before - now, hidden);
}

// ---- all-gather context parallelism ------------------------------------------------------

// cp 2, all-gather flavour: the backward all-gathers K and V again (only the local ones are
// saved) before the attention backward, which waits for it, and reduce-scatters dK, dV after
// it. Bytes of either: b * s * kv_heads * (d_qk + d_v) * 2 = 1 * 512 * 8 * 64 * 2 = 524288.
TEST(LowerRules, AllGatherCpRegathersKvInBackward) {
  Plan p;
  p.cp = 2;
  p.cp_kind = CpKind::kAllGather;
  const Program prog = lower(make_scenario(tiny_gpt(), p));
  const RankProgram& rp = prog.ranks[0];
  for (int l = 0; l < 8; ++l) {
    for (const char* prefix : {"fwd", "bwd"}) {
      const std::string u = std::string(prefix) + ".L" + std::to_string(l);
      const Task* ag = find_label(rp, u + ".cp_ag.mb0");
      const Task* attn = find_label(rp, u + ".attn.mb0");
      ASSERT_NE(ag, nullptr) << u;
      ASSERT_NE(attn, nullptr) << u;
      EXPECT_EQ(ag->coll, CollOp::kAllGather);
      EXPECT_DOUBLE_EQ(ag->bytes, 524288.0);
      EXPECT_TRUE(depends_on(*attn, ag->id)) << u;
    }
    const Task* rs = find_label(rp, "bwd.L" + std::to_string(l) + ".cp_rs.mb0");
    ASSERT_NE(rs, nullptr);
    EXPECT_DOUBLE_EQ(rs->bytes, 524288.0);
  }
}

// ---- ZB-H1 output gradients --------------------------------------------------------------

// ZB-H1 (pp 2): B allocates each unit's output gradients, W frees them after the unit's
// weight-gradient GEMMs. Per tiny-gpt layer (T = 512 tokens, tp 1) the linears' outputs are
// qkv 3h = 768, proj h = 256, fc1 ffn = 1024, fc2 h = 256 wide: 2304 * 512 * 2 bytes =
// 2359296; the head's logits V = 2048: 512 * 2048 * 2 = 2097152. 1F1B holds none.
TEST(LowerRules, ZbH1HoldsOutputGradientsFromBToW) {
  Plan p;
  p.pp = 2;
  p.schedule = Schedule::kZbH1;
  const Program prog = lower(make_scenario(tiny_gpt(), p));
  for (const RankProgram& rp : prog.ranks) {
    for (const Task& t : rp.tasks) {
      if (t.kind != TaskKind::kAlloc || t.what.rfind("dy.", 0) != 0) continue;
      EXPECT_EQ(t.phase, Phase::kBwdInput);
      EXPECT_DOUBLE_EQ(t.bytes, t.layer >= 0 ? 2359296.0 : 2097152.0) << t.what;
      // The free comes after the unit's last weight-gradient GEMM of this microbatch.
      int free_id = -1, last_w = -1;
      for (const Task& f : rp.tasks) {
        if (f.kind == TaskKind::kFree && f.what == t.what) free_id = f.id;
        if (f.kind == TaskKind::kGemm && f.phase == Phase::kBwdWeight && f.layer == t.layer &&
            f.microbatch == t.microbatch)
          last_w = f.id;
      }
      EXPECT_GT(free_id, last_w) << t.what;
      EXPECT_GT(last_w, t.id) << t.what;
    }
  }
  EXPECT_DOUBLE_EQ(alloc_bytes(prog.ranks[0], "dy.L0.mb0"), 2359296.0);
  EXPECT_DOUBLE_EQ(alloc_bytes(prog.ranks[1], "dy.head.mb3"), 2097152.0);
  p.schedule = Schedule::k1F1B;
  EXPECT_DOUBLE_EQ(alloc_bytes(lower(make_scenario(tiny_gpt(), p)).ranks[0], "dy.L0.mb0"), 0.0);
}

// ---- Transformer Engine fp8 --------------------------------------------------------------

// fp8 training, tp 1 (T = 512 tokens, h 256, ffn 1024, 8 heads of 32, e = 2 bytes): each
// layer saves fp8 copies of the qkv and fc1 inputs (-512 * 256 each), of the fc2 input
// (-512 * 1024) and, beside the attention's own 16-bit output, of the proj input
// (+512 * 256): -655360 bytes against the 16-bit count. The weight cache holds 2 bytes per
// linear weight: (256*768 + 256*256 + 256*1024 + 1024*256) * 8 layers * 2 = 12582912 bytes,
// filled by one cast per layer per step (on the first microbatch).
TEST(LowerRules, TeFp8SavesFp8InputsAndCachesFp8Weights) {
  Plan p;
  p.microbatches = 3;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.training.dtype = DType::kFp8;
  Scenario off = sc;
  sc.framework.te_fp8_storage = true;
  off.framework.te_fp8_storage = false;
  const Program prog = lower(sc);
  const Program old = lower(off);
  EXPECT_DOUBLE_EQ(
      alloc_bytes(prog.ranks[0], "act.L0.mb0") - alloc_bytes(old.ranks[0], "act.L0.mb0"),
      -655360.0);
  EXPECT_DOUBLE_EQ(alloc_bytes(prog.ranks[0], "fp8_weights"), 12582912.0);
  EXPECT_DOUBLE_EQ(alloc_bytes(old.ranks[0], "fp8_weights"), 0.0);
  std::map<int, int> casts;  // per microbatch
  for (const Task& t : prog.ranks[0].tasks)
    if (t.what == "fp8_weight_cast") {
      ++casts[t.microbatch];
      EXPECT_DOUBLE_EQ(t.bytes_written, 786432.0 * 2);
    }
  EXPECT_EQ(casts, (std::map<int, int>{{0, 8}}));
  // Full recompute keeps only the layer input: no change there.
  sc.parallel.recompute = Recompute::kFull;
  off.parallel.recompute = Recompute::kFull;
  EXPECT_DOUBLE_EQ(alloc_bytes(lower(sc).ranks[0], "act.L0.mb0"),
                   alloc_bytes(lower(off).ranks[0], "act.L0.mb0"));
}

// Apex DistributedFusedAdam's master-weight remainders, dp 2 with the sharded optimizer: the
// optimizer state drops from (4 + 8) / 2 = 6 to (2 + 8) / 2 = 5 bytes a parameter, weights
// and gradients unchanged; the optimizer step moves the same bytes (the bf16 weight and its
// remainder read and written where the fp32 master was).
TEST(LowerRules, MasterWeightRemaindersShrinkTheOptimizerState) {
  Plan p;
  p.dp = 2;
  p.zero = 1;
  Scenario sc = make_scenario(tiny_gpt(), p);
  Scenario rem = sc;
  rem.framework.master_weight_remainders = true;
  const Program full = lower(sc), half = lower(rem);
  const double opt = alloc_bytes(full.ranks[0], "optimizer");
  ASSERT_GT(opt, 0);
  EXPECT_DOUBLE_EQ(alloc_bytes(half.ranks[0], "optimizer"), opt * 5.0 / 6.0);
  EXPECT_DOUBLE_EQ(alloc_bytes(half.ranks[0], "weights"), alloc_bytes(full.ranks[0], "weights"));
  EXPECT_DOUBLE_EQ(alloc_bytes(half.ranks[0], "grads"), alloc_bytes(full.ranks[0], "grads"));
  EXPECT_DOUBLE_EQ(training_state_bytes(rem)[0][2], training_state_bytes(sc)[0][2] * 5.0 / 6.0);
}

// FP8 primary weights (fp8_param_gather), dp 2 with the distributed optimizer: the fp8 data
// and its transpose are the weight (the 16-bit "weights" allocation's 2 bytes a parameter),
// so no cache beside it; the first microbatch's pass only transposes (1 byte read, 1
// written a parameter: 786432 per layer); the parameter all-gathers carry the linears'
// 786432 weights a layer at 1 byte instead of 2: 8 * 786432 = 6291456 bytes less.
TEST(LowerRules, Fp8ParamGatherHoldsNoCacheAndGathersOneByte) {
  Plan p;
  p.dp = 2;
  p.zero = 1;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.training.dtype = DType::kFp8;
  Scenario primary = sc;
  primary.framework.fp8_param_gather = true;
  const Program cached = lower(sc);
  const Program prog = lower(primary);
  EXPECT_DOUBLE_EQ(alloc_bytes(cached.ranks[0], "fp8_weights"), 12582912.0);
  EXPECT_DOUBLE_EQ(alloc_bytes(prog.ranks[0], "fp8_weights"), 0.0);
  EXPECT_DOUBLE_EQ(alloc_bytes(prog.ranks[0], "weights"), alloc_bytes(cached.ranks[0], "weights"));
  int casts = 0;
  for (const Task& t : prog.ranks[0].tasks)
    if (t.what == "fp8_weight_cast") {
      ++casts;
      EXPECT_DOUBLE_EQ(t.bytes_written, 786432.0);
    }
  EXPECT_EQ(casts, 8);
  auto gathered = [](const Program& pr) {
    double b = 0;
    for (const Task& t : pr.ranks[0].tasks)
      if (t.kind == TaskKind::kCollective && t.coll == CollOp::kAllGather &&
          t.phase == Phase::kOptimizer)
        b += t.bytes;
    return b;
  };
  ASSERT_GT(gathered(cached), 0);
  EXPECT_DOUBLE_EQ(gathered(cached) - gathered(prog), 6291456.0);
}

// The fused loss (fused_cross_entropy) keeps the bf16 logits, overwritten with their
// gradient, where Megatron's unfused cross entropy keeps their fp32 softmax: one microbatch
// of 512 tokens over the 2048-word vocabulary (tp 1) holds 512 * 2048 * 2 = 2097152 bytes
// instead of 512 * 2048 * 4 = 4194304; the loss kernels move 10 bytes an element instead of
// 52 (model/workload.cc), so the step is shorter.
TEST(LowerRules, FusedCrossEntropyKeepsTheBf16Logits) {
  Scenario sc = make_scenario(tiny_gpt(), Plan{});
  Scenario fused = sc;
  fused.framework.fused_cross_entropy = true;
  EXPECT_DOUBLE_EQ(alloc_bytes(lower(sc).ranks[0], "act.head.mb0"), 4194304.0);
  EXPECT_DOUBLE_EQ(alloc_bytes(lower(fused).ranks[0], "act.head.mb0"), 2097152.0);
  EXPECT_LT(run(lower(fused)).step_ns, run(lower(sc)).step_ns);
}

// The optimizer as torch.optim's foreach AdamW (fused_optimizer false) against one fused
// kernel: per parameter of the shard P it reads 48 - 16 = 32 B and writes 32 - 12 = 20 B
// more (model/optimizer.cc optimizer_op) and holds sqrt(v), 4 B a parameter, for the
// step's update only; the step is longer.
TEST(LowerRules, ForeachOptimizerMakesMorePassesAndHoldsSqrtV) {
  Scenario sc = make_scenario(tiny_gpt(), Plan{});
  ASSERT_EQ(sc.training.optimizer, Optimizer::kAdam);
  Scenario foreach_ = sc;
  foreach_.framework.fused_optimizer = false;
  const Program fused = lower(sc), each = lower(foreach_);
  auto step_task = [](const RankProgram& rp) {
    for (const Task& t : rp.tasks)
      if (t.label == "opt.step") return t;
    return Task{};
  };
  const Task a = step_task(fused.ranks[0]), b = step_task(each.ranks[0]);
  const double params = (b.bytes_read - a.bytes_read) / 32.0;
  ASSERT_GT(params, 1e5);
  EXPECT_DOUBLE_EQ(b.bytes_written - a.bytes_written, 20.0 * params);
  EXPECT_DOUBLE_EQ(alloc_bytes(each.ranks[0], "optimizer_temp"), 4.0 * params);
  EXPECT_DOUBLE_EQ(alloc_bytes(fused.ranks[0], "optimizer_temp"), 0.0);
  EXPECT_GT(run(each).step_ns, run(fused).step_ns);
}

// FSDP2's fp32 shards (zero3_fp32_shards) on ZeRO-3 over dp 4: the stage's P parameters
// hold no 16-bit shard (2P/4 bytes less), their gradient shard is fp32 even with bf16
// reduction (4P/4 where 2P/4 was), and the step reads 4 B and writes 2 B a local parameter
// less (no 16-bit copy refreshed, model/optimizer.cc optimizer_op) and, with the bf16
// gradients, skips their copy to fp32 (2 B read, 4 written): 6 read and 6 written in all.
TEST(LowerRules, Fsdp2ShardsAreTheFp32Parameters) {
  Plan p;
  p.dp = 4;
  p.zero = 3;
  Scenario sc = make_scenario(tiny_gpt(), p);
  sc.training.grad_reduce_dtype = DType::kBf16;
  Scenario fsdp2 = sc;
  fsdp2.framework.zero3_fp32_shards = true;
  const Program mf = lower(sc), f2 = lower(fsdp2);
  const double w = alloc_bytes(mf.ranks[0], "weights");
  ASSERT_GT(w, 0);
  const double params = w * 4 / 2;  // 2 B a parameter over 4 shards
  EXPECT_DOUBLE_EQ(alloc_bytes(f2.ranks[0], "weights"), 0.0);
  EXPECT_DOUBLE_EQ(alloc_bytes(mf.ranks[0], "grads"), 2.0 * params / 4);
  EXPECT_DOUBLE_EQ(alloc_bytes(f2.ranks[0], "grads"), 4.0 * params / 4);
  EXPECT_DOUBLE_EQ(alloc_bytes(f2.ranks[0], "optimizer"), alloc_bytes(mf.ranks[0], "optimizer"));
  const Task* a = find_label(mf.ranks[0], "opt.step");
  const Task* b = find_label(f2.ranks[0], "opt.step");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_DOUBLE_EQ(a->bytes_read - b->bytes_read, 6.0 * params / 4);
  EXPECT_DOUBLE_EQ(a->bytes_written - b->bytes_written, 6.0 * params / 4);
  // Below ZeRO-3 the rule does nothing.
  Scenario z1 = sc, z1f = fsdp2;
  z1.parallel.zero = z1f.parallel.zero = 1;
  EXPECT_DOUBLE_EQ(alloc_bytes(lower(z1f).ranks[0], "weights"),
                   alloc_bytes(lower(z1).ranks[0], "weights"));
}

// ---- blocking p2p of non-interleaved 1F1B ------------------------------------------------

// pp 2, m 2, 1F1B, uniform stages (aux free), each pipeline message c ns. Stage 0 runs F0 F1
// B0 B1, stage 1 F0 B0 F1 B1. Asynchronous p2p (recvs posted at once): the step is
// 3F + 3B + 2c. Megatron-Core's blocking batched p2p: F1 of stage 0 waits for its send of
// act0 (f + c), stage 1 posts recv act1 only after B0 (batched with send grad0), so stage
// 0's send act1 and stage 1's send grad0 both end at 2F + B + 2c; stage 0's B1 then waits
// for grad1, sent at 3F + 2B + 2c: 3F + 3B + 3c, one message more.
TEST(LowerRules, Blocking1F1BP2pWaitsForEverySend) {
  Plan p;
  p.pp = 2;
  p.microbatches = 2;
  const auto [prog, old, d, d_old] =
      lower_with_and_without(p, &FrameworkRules::blocking_p2p_1f1b, 0.01);
  TimeNs c = 0;
  for (size_t i = 0; i < prog.ranks[0].tasks.size(); ++i)
    if (prog.ranks[0].tasks[i].kind == TaskKind::kSend) c = d[0][i];
  ASSERT_GT(c, 0);
  const TimeNs now = simulate(prog, d).step_ns;
  const TimeNs before = simulate(old, d_old).step_ns;
  EXPECT_EQ(now - before, c);
  // Every send blocks the first compute task after it.
  for (const RankProgram& rp : prog.ranks)
    for (const Task& s : rp.tasks) {
      if (s.kind != TaskKind::kSend) continue;
      bool blocked = false;
      for (const Task& t : rp.tasks)
        blocked = blocked || (testing::is_compute(t.kind) && depends_on(t, s.id));
      EXPECT_TRUE(blocked) << s.label;
    }
  // Interleaved 1F1B keeps asynchronous p2p (overlap_p2p_comm).
  Plan pi = p;
  pi.schedule = Schedule::kInterleaved;
  pi.vpp = 2;
  Scenario si = make_scenario(tiny_gpt(), pi);
  si.framework.blocking_p2p_1f1b = true;
  for (const RankProgram& rp : lower(si).ranks)
    for (const Task& t : rp.tasks)
      for (int dep : t.deps)
        EXPECT_FALSE(testing::is_compute(t.kind) &&
                     rp.tasks[static_cast<size_t>(dep)].kind == TaskKind::kSend);
}

// Weight gradients added into the main grad by a kernel of their own (Megatron-LM's 2021 DDP
// hook; framework rule grad_accumulation_fusion false) against fused into the GEMM. The tiny
// GPT (8 layers, pp 1) has 4 linears a layer and the output layer: 33 weight-gradient GEMMs a
// microbatch, so 4 microbatches at zero 1 give 132 add kernels, each right after its GEMM;
// fused, none, and each GEMM writes the fp32 main grad (4 bytes an element, 2 before). ZeRO-2
// and ZeRO-3 reduce each microbatch's fresh gradients: no add, no fused accumulation.
TEST(LowerRules, UnfusedGradientAccumulationAddsEachWeightGradient) {
  Plan p;
  p.dp = 2;
  p.zero = 1;
  Scenario fused = make_scenario(tiny_gpt(), p);
  ASSERT_TRUE(fused.framework.grad_accumulation_fusion);  // Megatron-Core's default
  Scenario hook = fused;
  hook.framework.grad_accumulation_fusion = false;
  auto adds = [](const Program& prog) {
    std::vector<const Task*> v;
    for (const Task& t : prog.ranks[0].tasks)
      if (t.label.find(".gradacc.") != std::string::npos) v.push_back(&t);
    return v;
  };
  const Program f = lower(fused), k = lower(hook);
  EXPECT_TRUE(adds(f).empty());
  const auto ka = adds(k);
  ASSERT_EQ(ka.size(), 132u);
  for (const Task* t : ka) {
    const std::string gemm = t->label.substr(0, t->label.find(".gradacc.")) +
                             t->label.substr(t->label.find(".gradacc.") + 8);
    const Task* g = find_label(k.ranks[0], gemm);
    ASSERT_NE(g, nullptr) << t->label;
    // The next task on the compute stream after its GEMM.
    const Task* next = nullptr;
    for (const Task& u : k.ranks[0].tasks)
      if (u.id > g->id && u.stream == g->stream && (next == nullptr || u.id < next->id)) next = &u;
    EXPECT_EQ(next, t) << t->label;
    const double elems = static_cast<double>(g->gemm.m * g->gemm.n);
    EXPECT_DOUBLE_EQ(g->bytes_written, 2 * elems) << gemm;
    EXPECT_DOUBLE_EQ(t->bytes_written, 4 * elems) << t->label;
    const Task* gf = find_label(f.ranks[0], gemm);
    ASSERT_NE(gf, nullptr);
    EXPECT_DOUBLE_EQ(gf->bytes_written, 4 * elems) << gemm;
  }
  EXPECT_GT(run(k).step_ns, run(f).step_ns);
  for (int zero : {2, 3}) {
    Plan z = p;
    z.zero = zero;
    Scenario sc = make_scenario(tiny_gpt(), z);
    sc.framework.grad_accumulation_fusion = false;
    const Program pz = lower(sc);
    EXPECT_TRUE(adds(pz).empty()) << zero;
    const Task* g = find_label(pz.ranks[0], "wgt.L0.fc1.mb0");
    ASSERT_NE(g, nullptr);
    EXPECT_DOUBLE_EQ(g->bytes_written, 2.0 * static_cast<double>(g->gemm.m * g->gemm.n)) << zero;
  }
}

}  // namespace
}  // namespace stepcast
