// Lowering tests: tensor / sequence parallel (and the TP communication overlap), expert
// parallel all-to-all, context parallel attention, recompute and pipeline messages.
#include "sim/lower/lower.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "model/error.h"
#include "model/memory.h"
#include "model/params.h"
#include "sim/cluster/profile.h"
#include "sim/cost/coster.h"
#include "sim/engine/engine.h"
#include "sim/lower/schedule.h"
#include "sim/program/matching.h"
#include "sim/program/program_json.h"
#include "tests/sim/lower/lower_test_helpers.h"
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast {
namespace {

using testing::alloc_bytes;
using testing::make_scenario;
using testing::Plan;
using testing::run;
using testing::state_bytes;
using testing::Synth;
using testing::synth_durations;
using testing::tiny_gpt;
using testing::tiny_moe;

TEST(Lower, TpCollectivesPerLayer) {
  // Megatron TP: per layer 2 allreduces forward (attention out, MLP out) and 2 backward (the
  // inputs of QKV and fc1); sequence parallel turns each into reduce-scatter + allgather,
  // and its backward all-gathers the inputs of QKV and fc1 again for their weight
  // gradients: 4 forward, 6 backward.
  for (bool sp : {false, true}) {
    Plan p;
    p.tp = 2;
    p.sp = sp;
    const Program prog = lower(make_scenario(tiny_gpt(), p));
    std::map<std::pair<int, Phase>, int> per;  // (layer, phase) for microbatch 0
    for (const Task& t : prog.ranks[0].tasks)
      if (t.kind == TaskKind::kCollective && t.category == Category::kTpComm && t.microbatch == 0 &&
          t.layer >= 0)
        ++per[{t.layer, t.phase}];
    for (int l = 0; l < 8; ++l) {
      EXPECT_EQ((per[{l, Phase::kFwd}]), sp ? 4 : 2) << "layer " << l;
      EXPECT_EQ((per[{l, Phase::kBwdInput}]), sp ? 6 : 2) << "layer " << l;
    }
  }
}

// The re-gather of a column-parallel input under sequence parallelism feeds only that
// GEMM's weight gradient: the qkv, fc1 and logits input-gradient GEMMs do not wait for it, their
// weight-gradient GEMMs do (directly), for every layer and microbatch; with and without TP
// communication overlap, and with the ZB-H1 split of the weight pass (it waits as well).
TEST(Lower, SequenceParallelWgradGatherFeedsOnlyTheWeightGradient) {
  for (int variant = 0; variant < 3; ++variant) {
    Plan p;
    p.tp = 2;
    p.sp = true;
    p.pp = variant == 2 ? 2 : 1;
    p.overlap_tp = variant == 1;
    if (variant == 2) p.schedule = Schedule::kZbH1;
    const Program prog = lower(make_scenario(tiny_gpt(), p));
    const auto& tasks = prog.ranks[0].tasks;
    int gathers = 0;
    for (const Task& g : tasks) {
      if (g.kind != TaskKind::kCollective || g.label.find(".in.wgrad") == std::string::npos)
        continue;
      ++gathers;
      EXPECT_EQ(g.coll, CollOp::kAllGather);
      // The GEMM it feeds: the label's word before ".in.wgrad" (qkv, fc1, logits).
      const size_t end = g.label.find(".in.wgrad"), begin = g.label.rfind('.', end - 1) + 1;
      const std::string gemm = g.label.substr(begin, end - begin);
      int waiting = 0;
      for (const Task& t : tasks) {
        if (t.kind != TaskKind::kGemm || t.layer != g.layer || t.microbatch != g.microbatch ||
            t.label.find("." + gemm + ".") == std::string::npos)
          continue;
        const bool waits = std::find(t.deps.begin(), t.deps.end(), g.id) != t.deps.end();
        EXPECT_EQ(waits, t.phase == Phase::kBwdWeight) << t.label << " / " << g.label;
        waiting += waits;
      }
      EXPECT_EQ(waiting, 1) << g.label;
    }
    EXPECT_GT(gathers, 0) << variant;
  }
}

TEST(Lower, EpAllToAllPerMoeLayer) {
  // Each MoE layer dispatches and combines its routed token copies: per rank T * top_k token
  // copies of h bf16 values each way, T = b*s tokens: 512 * 2 * 256 * 2 = 524288 bytes,
  // then the fp32 probabilities of the copies, 512 * 2 * 4 = 4096 bytes (Megatron's
  // alltoall dispatcher); forward dispatch + combine, backward the same in reverse.
  Plan p;
  p.dp = 4;
  p.ep = 4;
  const Program prog = lower(make_scenario(tiny_moe(), p));
  std::map<std::pair<int, Phase>, int> per, probs;
  for (const Task& t : prog.ranks[0].tasks)
    if (t.kind == TaskKind::kCollective && t.coll == CollOp::kAllToAll && t.microbatch == 0) {
      EXPECT_EQ(t.stream, StreamKind::kEp);
      EXPECT_EQ(t.category, Category::kEpComm);
      if (t.bytes == 512.0 * 2 * 4) {
        ++probs[{t.layer, t.phase}];
        continue;
      }
      EXPECT_DOUBLE_EQ(t.bytes, 512.0 * 2 * 256 * 2);
      ++per[{t.layer, t.phase}];
    }
  for (int l = 0; l < 4; ++l) {
    EXPECT_EQ((per[{l, Phase::kFwd}]), 2);
    EXPECT_EQ((per[{l, Phase::kBwdInput}]), 2);
    EXPECT_EQ((probs[{l, Phase::kFwd}]), 1);
    EXPECT_EQ((probs[{l, Phase::kBwdInput}]), 1);
  }
  // NCCL runs these; under the deepep dispatcher DeepEP's own kernels run the dispatch and
  // combine (Task::ep_kernels), four a layer and microbatch, and the forward's notify (the
  // count exchange, an all-gather of the counts over ep), one more. The SMs they hold (SM
  // interference, coster.h comm_sms) on an H100 (132 SMs, compute.comm_sms 16): DeepEP's 20
  // (Buffer.num_sms), NCCL's 16 for every other collective.
  for (const bool deepep : {false, true}) {
    Scenario sc = make_scenario(tiny_moe(), p);
    sc.parallel.moe_dispatcher = deepep ? MoeDispatcher::kDeepEp : MoeDispatcher::kAllToAll;
    sc.profile.gpu.sms = 132;
    sc.profile.compute.comm_sms = 16;
    int flagged = 0;
    const Program dp = lower(sc);
    for (const Task& t : dp.ranks[0].tasks) {
      if (t.kind == TaskKind::kCollective && t.microbatch == 0 && t.ep_kernels) ++flagged;
      if (t.ep_kernels) {
        EXPECT_EQ(t.coll, t.label.find("moe.notify") != std::string::npos ? CollOp::kAllGather
                                                                          : CollOp::kAllToAll)
            << t.label;
        EXPECT_EQ(comm_sms(t, sc.profile), 20) << t.label;
      } else if (t.kind == TaskKind::kCollective) {
        EXPECT_EQ(comm_sms(t, sc.profile), 16) << t.label;
      }
    }
    EXPECT_EQ(flagged, deepep ? 4 * 5 : 0) << deepep;
  }
}

TEST(Lower, SharedExpertOverlapRunsBesideTheDispatch) {
  // --moe-shared-expert-overlap: the shared experts' fc1 does not wait for the token
  // all-to-all issued before it; the routed experts (moe.sort first) do.
  ModelArch a = tiny_moe();
  a.moe->shared_experts = 1;
  Plan p;
  p.dp = 4;
  p.ep = 4;
  Scenario sc = make_scenario(a, p);
  sc.parallel.overlap_moe_shared = true;
  const Program prog = lower(sc);
  const auto& tasks = prog.ranks[0].tasks;
  int dispatch = -1;
  for (size_t i = 0; i < tasks.size(); ++i)
    if (tasks[i].label == "fwd.L0.moe.dispatch.mb0") dispatch = static_cast<int>(i);
  ASSERT_GE(dispatch, 0);
  const auto waits = [&](const char* label) {
    for (const Task& t : tasks)
      if (t.label == label)
        return std::find(t.deps.begin(), t.deps.end(), dispatch) != t.deps.end();
    ADD_FAILURE() << "no task " << label;
    return false;
  };
  EXPECT_FALSE(waits("fwd.L0.shared.fc1.mb0"));
  EXPECT_TRUE(waits("fwd.L0.moe.sort.mb0"));
  sc.parallel.overlap_moe_shared = false;
  const Program plain = lower(sc);
  // Without it the shared experts run first, before the router.
  int shared = -1, router = -1;
  for (size_t i = 0; i < plain.ranks[0].tasks.size(); ++i) {
    if (plain.ranks[0].tasks[i].label == "fwd.L0.shared.fc2.mb0") shared = static_cast<int>(i);
    if (plain.ranks[0].tasks[i].label == "fwd.L0.router.mb0") router = static_cast<int>(i);
  }
  EXPECT_LT(shared, router);
}

TEST(Lower, RingAttentionSplitsAttentionIntoCpSteps) {
  // cp = 4 ring: per layer forward, 4 attention steps whose FLOPs add up to the model's
  // single attention op, and cp - 1 = 3 KV sends of b * (s/cp) * kv_heads * 2d * 2 bytes =
  // 1 * 128 * 8 * 64 * 2 = 131072 bytes.
  Plan p;
  p.cp = 4;
  const Scenario sc = make_scenario(tiny_gpt(), p);
  const Program prog = lower(sc);
  ShardSpec sh;
  sh.seq_len = p.seq_len;
  sh.cp = 4;
  const LayerOps ops = layer_ops(sc.model, 0, sh);
  double attn_flops = 0;
  for (const Step& s : ops.fwd)
    if (!s.is_comm && s.op.kind == OpKind::kAttention) attn_flops += s.op.flops;
  double got = 0;
  int steps = 0, sends = 0;
  for (const Task& t : prog.ranks[0].tasks) {
    if (t.layer != 0 || t.microbatch != 0 || t.phase != Phase::kFwd) continue;
    if (t.kind == TaskKind::kAttention) {
      got += t.flops;
      ++steps;
    }
    if (t.kind == TaskKind::kSend) {
      ++sends;
      EXPECT_EQ(t.stream, StreamKind::kCp);
      EXPECT_DOUBLE_EQ(t.bytes, 131072.0);
    }
  }
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(sends, 3);
  EXPECT_NEAR(got, attn_flops, attn_flops * 1e-12);
}

TEST(Lower, AllGatherCpGathersKvAndReduceScattersGrads) {
  // Llama 3 all-gather CP: per layer one allgather of K,V before attention (S = cp x the
  // rank's KV = 4 x 131072 bytes), again before the attention backward (only the local K,V
  // are saved), and one reduce-scatter of dK,dV after it.
  Plan p;
  p.cp = 4;
  p.cp_kind = CpKind::kAllGather;
  const Program prog = lower(make_scenario(tiny_gpt(), p));
  int ag = 0, rs = 0;
  for (const Task& t : prog.ranks[0].tasks) {
    if (t.kind != TaskKind::kCollective || t.category != Category::kCpComm) continue;
    EXPECT_DOUBLE_EQ(t.bytes, 4 * 131072.0);
    if (t.coll == CollOp::kAllGather) ++ag;
    if (t.coll == CollOp::kReduceScatter) ++rs;
  }
  EXPECT_EQ(ag, 8 * 4 * 2);  // 8 layers x 4 microbatches x (forward, backward)
  EXPECT_EQ(rs, 8 * 4);
}

TEST(Lower, RecomputeAddsTheRerunForwardWork) {
  // Full recompute re-runs every layer's forward before its backward (its FLOPs equal the
  // forward FLOPs, TP collectives included); selective re-runs only the attention core.
  Plan p;
  p.tp = 2;
  auto totals = [&](Recompute rc) {
    p.recompute = rc;
    const Program prog = lower(make_scenario(tiny_gpt(), p));
    double fwd = 0, re = 0, attn = 0;
    int rc_coll = 0, fwd_coll = 0;
    for (const Task& t : prog.ranks[0].tasks) {
      if (t.layer < 0) continue;
      if (t.kind == TaskKind::kCollective) {
        if (t.phase == Phase::kRecompute) ++rc_coll;
        if (t.phase == Phase::kFwd) ++fwd_coll;
      }
      if (!testing::is_compute(t.kind)) continue;
      if (t.phase == Phase::kFwd) fwd += t.flops;
      if (t.phase == Phase::kFwd && t.kind == TaskKind::kAttention) attn += t.flops;
      if (t.phase == Phase::kRecompute) {
        re += t.flops;
        EXPECT_EQ(t.category, Category::kRecompute);
      }
    }
    return std::make_tuple(fwd, re, attn, rc_coll, fwd_coll);
  };
  auto [f0, r0, a0, c0, fc0] = totals(Recompute::kNone);
  EXPECT_EQ(r0, 0);
  auto [f1, r1, a1, c1, fc1] = totals(Recompute::kFull);
  EXPECT_DOUBLE_EQ(r1, f1);
  EXPECT_EQ(c1, fc1);
  auto [f2, r2, a2, c2, fc2] = totals(Recompute::kSelective);
  EXPECT_DOUBLE_EQ(r2, a2);
  EXPECT_EQ(c2, 0);
}

TEST(Lower, PipelineMessagesCarryShardedActivations) {
  // Megatron p2p with sequence parallel sends the tp-sharded activation:
  // b * s * h * 2 / tp = 1 * 512 * 256 * 2 / 2 = 131072 bytes; without sp 262144.
  for (bool sp : {false, true}) {
    Plan p;
    p.pp = 2;
    p.tp = 2;
    p.sp = sp;
    const Program prog = lower(make_scenario(tiny_gpt(), p));
    int sends = 0;
    for (const Task& t : prog.ranks[0].tasks)
      if (t.kind == TaskKind::kSend) {
        EXPECT_DOUBLE_EQ(t.bytes, sp ? 131072.0 : 262144.0);
        EXPECT_EQ(t.peer, 2);  // same tp coordinate on stage 1: rank 0 + TP*CP*DP = 2
        ++sends;
      }
    EXPECT_EQ(sends, 4);  // one activation per microbatch forward
  }
}

// TP communication overlap (overlap.tp_comm, Transformer Engine userbuffers): each
// sequence-parallel reduce-scatter is split into (tp-1)/tp that runs alongside the GEMM
// producing it and a last chunk of bytes/tp after it; each all-gather is one ring exchange
// that its GEMM does not wait for. Bytes are conserved, the collectives per layer forward go
// 4 -> 6, and the exposed TP time and the step shrink; compute can only grow (SM
// interference slows GEMMs that now overlap communication).
TEST(Lower, TpCommOverlapLeavesTheMoeDispatcherCollectivesWhole) {
  // Transformer Engine's userbuffers pipeline a linear layer's sp gather / reduce-scatter
  // with its GEMM; the MoE token dispatcher's tp collectives are plain NCCL calls. tiny_moe
  // at tp 2 with sp and overlap.tp_comm: attention's reduce-scatters are split in two
  // (".c0", ".c1"), the experts' "mlp.in" / "mlp.out" (no ep) and "moe.tp_in" /
  // "moe.tp_out" (ep 2 with expert_tp 2) are one collective each.
  for (int ep : {1, 2}) {
    Plan p;
    p.tp = 2;
    p.sp = true;
    p.overlap_tp = true;
    p.ep = ep;
    p.dp = ep;
    p.expert_tp = 2;
    const Program prog = lower(make_scenario(tiny_moe(8), p));
    int split_attn = 0, whole_moe = 0;
    for (const Task& t : prog.ranks[0].tasks) {
      if (t.kind != TaskKind::kCollective || t.category != Category::kTpComm) continue;
      const bool moe = t.label.find(".mlp.") != std::string::npos ||
                       t.label.find(".moe.tp_") != std::string::npos;
      const bool split =
          t.label.find(".c0") != std::string::npos || t.label.find(".c1") != std::string::npos;
      if (moe) {
        EXPECT_FALSE(split) << t.label;
        ++whole_moe;
      } else if (split) {
        ++split_attn;
      }
    }
    EXPECT_GT(split_attn, 0) << "ep " << ep;
    EXPECT_GT(whole_moe, 0) << "ep " << ep;
  }
}

TEST(Lower, TpCommOverlapChunksCollectivesAndHidesThem) {
  Plan p;
  p.tp = 8;
  p.sp = true;
  p.seq_len = 4096;
  ModelArch a = tiny_gpt();
  a.hidden = 4096;
  a.ffn_hidden = 16384;
  a.heads = 32;
  a.kv_heads = 32;
  Scenario sc = make_scenario(a, p);
  sc.profile = load_profile("h100-sxm", default_profiles_dir());
  auto run = [&](bool overlap, double* tp_bytes, int* per_layer) {
    sc.parallel.overlap_tp_comm = overlap;
    const Program prog = lower(sc);
    *tp_bytes = 0;
    *per_layer = 0;
    for (const Task& t : prog.ranks[0].tasks) {
      if (t.kind != TaskKind::kCollective || t.category != Category::kTpComm) continue;
      *tp_bytes += t.bytes;
      if (t.layer == 3 && t.microbatch == 0 && t.phase == Phase::kFwd) ++*per_layer;
    }
    return simulate(prog, task_durations(prog, sc.profile));
  };
  double b_off = 0, b_on = 0;
  int n_off = 0, n_on = 0;
  const Timeline off = run(false, &b_off, &n_off);
  const Timeline on = run(true, &b_on, &n_on);
  EXPECT_DOUBLE_EQ(b_on, b_off);
  // Per layer forward: two all-gathers and two reduce-scatters without the overlap; with it
  // each reduce-scatter in two chunks and each all-gather one ring exchange: 2 + 2 x 2.
  EXPECT_EQ(n_off, 4);
  EXPECT_EQ(n_on, 6);
  const auto tp = static_cast<size_t>(Category::kTpComm);
  const auto comp = static_cast<size_t>(Category::kCompute);
  // Only the part of each collective that fits under its GEMM is hidden (here the 33.5 MB
  // all-gathers take longer than the 26 GFLOP GEMMs they overlap), so less than all of it.
  EXPECT_LT(on.breakdown_ns[tp], off.breakdown_ns[tp]);
  EXPECT_GT(on.breakdown_ns[tp], 0);
  EXPECT_LT(on.step_ns, off.step_ns);
  EXPECT_GE(on.breakdown_ns[comp], off.breakdown_ns[comp]);
}

// tiny_gpt at tp 4 with sequence parallelism and the TP overlap on, 2 microbatches.
Plan tp4_overlap_plan() {
  Plan p;
  p.tp = 4;
  p.sp = true;
  p.overlap_tp = true;
  p.microbatches = 2;
  return p;
}

// A kernel on the compute stream.
bool is_compute_task(const Task& t) {
  return t.stream == StreamKind::kCompute &&
         (t.kind == TaskKind::kGemm || t.kind == TaskKind::kAttention ||
          t.kind == TaskKind::kMemoryBound);
}

// Transformer Engine's ring exchange: the GEMM after an overlapped all-gather starts on the
// rank's own chunk, so it does not wait for the all-gather (on the tp_ring stream); the
// compute task after that GEMM does. The all-gather carries the full gathered size
// (nccl-tests' S), so it costs (tp-1)/tp of the bytes over the link, as the tp-1 steps of
// the exchange do.
TEST(Lower, TpOverlapAllGatherIsARingExchangeTheGemmDoesNotWaitFor) {
  const Plan p = tp4_overlap_plan();
  const ModelArch a = tiny_gpt();
  const Scenario sc = make_scenario(a, p);
  const Program prog = lower(sc);
  const TaskList& tasks = prog.ranks[0].tasks;
  HwProfile hw = sc.profile;  // an H100's SMs: the ring exchange holds none of them
  hw.gpu.sms = 132;
  hw.compute.comm_sms = 16;
  // S of the gathered [T, h] activation: b x s x h x 2 bytes.
  const double full = static_cast<double>(sc.parallel.microbatch) *
                      static_cast<double>(sc.training.seq_len) * static_cast<double>(a.hidden) *
                      2.0;
  int checked = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& ag = tasks[i];
    if (ag.kind != TaskKind::kCollective || ag.coll != CollOp::kAllGather ||
        ag.category != Category::kTpComm)
      continue;
    // The gathers for weight gradients run alongside an input-gradient GEMM instead.
    if (ag.label.ends_with(".wgrad.mb" + std::to_string(ag.microbatch))) continue;
    // The next two compute tasks on the compute stream: the GEMM, then the op after it.
    std::vector<const Task*> next;
    for (size_t j = i + 1; j < tasks.size() && next.size() < 2; ++j)
      if (is_compute_task(tasks[j])) next.push_back(&tasks[j]);
    ASSERT_EQ(next.size(), 2u) << ag.label;
    auto waits = [&](const Task& t) {
      return std::find(t.deps.begin(), t.deps.end(), ag.id) != t.deps.end();
    };
    // Only a gather before a GEMM is overlapped (not the embedding's output gradient, which
    // a memory-bound op takes), and the old lowering had that GEMM wait for its first chunk;
    // the count below says that every overlapped one was seen.
    if (next[0]->kind != TaskKind::kGemm || waits(*next[0])) continue;
    EXPECT_TRUE(waits(*next[1])) << ag.label << " -> " << next[1]->label;
    EXPECT_DOUBLE_EQ(ag.bytes, full) << ag.label;
    // On its own stream (TE's, apart from NCCL's), where it holds no SMs.
    EXPECT_EQ(ag.stream, StreamKind::kTpRing) << ag.label;
    EXPECT_EQ(comm_sms(ag, hw), 0) << ag.label;
    ++checked;
  }
  // Per layer and microbatch: the forward's two (before qkv and fc1) and the input
  // gradient's two (before proj and fc2); per microbatch one more before the logits GEMM;
  // over 2 microbatches.
  EXPECT_EQ(checked, (4 * a.layers + 1) * 2);
}

// Transformer Engine's backward (with the TP overlap on): each linear's weight-gradient GEMM
// right after its input-gradient GEMM, as a TE module's backward runs them. After qkv and
// fc1 (column-parallel) the reduce-scatter of the input gradient comes whole between the
// two and runs beside the weight gradient (TE's bulk overlap): the weight gradient does not
// wait for it, the compute after does. proj and fc2 (row-parallel) gathered their output
// gradient by ring exchange, which both GEMMs use: the weight gradient waits for it. With
// W split from B (ZB-H1) the weight gradients stay in their W pass.
TEST(Lower, TpOverlapBackwardRunsEachWeightGradientAfterItsInputGradient) {
  Plan p = tp4_overlap_plan();
  const ModelArch a = tiny_gpt();
  const Program prog = lower(make_scenario(a, p));
  const TaskList& tasks = prog.ranks[0].tasks;
  const double full = 512.0 * static_cast<double>(a.hidden) * 2.0;  // S of [T, h], bf16
  auto waits = [](const Task& t, int id) {
    return std::find(t.deps.begin(), t.deps.end(), id) != t.deps.end();
  };
  auto next_compute = [&](size_t i) {
    for (size_t j = i + 1; j < tasks.size(); ++j)
      if (is_compute_task(tasks[j])) return j;
    return tasks.size();
  };
  int column = 0, row = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& dg = tasks[i];
    if (dg.kind != TaskKind::kGemm || dg.phase != Phase::kBwdInput || dg.layer < 0) continue;
    const std::string name = dg.label.substr(0, dg.label.rfind(".mb"));  // bwd.L3.qkv
    const std::string op = name.substr(name.rfind('.') + 1);
    if (op != "qkv" && op != "fc1" && op != "proj" && op != "fc2") continue;
    const size_t w = next_compute(i);
    ASSERT_LT(w, tasks.size());
    EXPECT_EQ(tasks[w].phase, Phase::kBwdWeight) << dg.label << " -> " << tasks[w].label;
    EXPECT_EQ(tasks[w].label, "wgt" + dg.label.substr(3)) << dg.label;
    const size_t after = next_compute(w);
    ASSERT_LT(after, tasks.size());
    if (op == "qkv" || op == "fc1") {
      // The one task between them: the whole reduce-scatter, after the input gradient.
      ASSERT_EQ(w, i + 2) << dg.label;
      const Task& rs = tasks[i + 1];
      EXPECT_EQ(rs.coll, CollOp::kReduceScatter) << rs.label;
      EXPECT_DOUBLE_EQ(rs.bytes, full) << rs.label;
      EXPECT_TRUE(waits(rs, dg.id)) << rs.label;
      EXPECT_FALSE(waits(tasks[w], rs.id)) << tasks[w].label;
      EXPECT_TRUE(waits(tasks[after], rs.id)) << tasks[after].label;
      ++column;
    } else {
      // The ring exchange before the input gradient: the weight gradient waits for it.
      int ring = -1;
      for (size_t j = i; j-- > 0;)
        if (tasks[j].stream == StreamKind::kTpRing) {
          ring = tasks[j].id;
          break;
        }
      ASSERT_GE(ring, 0) << dg.label;
      EXPECT_FALSE(waits(dg, ring)) << dg.label;
      EXPECT_TRUE(waits(tasks[w], ring)) << tasks[w].label;
      ++row;
    }
  }
  // Two of each per layer and microbatch.
  EXPECT_EQ(column, 2 * a.layers * 2);
  EXPECT_EQ(row, 2 * a.layers * 2);

  // ZB-H1: the weight gradients wait for their W pass; no input gradient is followed by one.
  p.pp = 2;
  p.schedule = Schedule::kZbH1;
  const Program zb = lower(make_scenario(a, p));
  for (const RankProgram& rp : zb.ranks)
    for (size_t i = 0; i < rp.tasks.size(); ++i) {
      const Task& t = rp.tasks[i];
      if (t.kind != TaskKind::kGemm || t.phase != Phase::kBwdInput) continue;
      for (size_t j = i + 1; j < rp.tasks.size(); ++j) {
        if (rp.tasks[j].stream != StreamKind::kCompute || rp.tasks[j].kind == TaskKind::kAlloc ||
            rp.tasks[j].kind == TaskKind::kFree)
          continue;
        EXPECT_NE(rp.tasks[j].phase, Phase::kBwdWeight) << t.label << " -> " << rp.tasks[j].label;
        break;
      }
    }
}

TEST(Lower, MlaReplicatedGradsAreAllReducedOverTpUnderSequenceParallel) {
  // A tiny MLA model (8 layers, hidden 256, 8 heads; q_lora_rank 64, kv_lora_rank 32, rope
  // 16): the down-projections and latent norms hold 256 x 64 + 64 + 256 x (32 + 16) + 32 =
  // 28,768 parameters per layer, whole on every tp rank. With sequence parallel at tp 2 each
  // rank's gradients cover its own tokens: one coalesced all-reduce over the tp group of
  // 8 x 28,768 fp32 values per rank after the backward (Megatron finalize_model_grads).
  // At tp 1, and at tp 2 without sequence parallel, there is none.
  ModelArch a = tiny_gpt();
  a.norm = Norm::kRmsNorm;
  a.head_dim = 32;
  a.qk_head_dim = 48;
  a.q_lora_rank = 64;
  a.kv_lora_rank = 32;
  a.qk_rope_head_dim = 16;
  for (const auto& [tp, sp, want] :
       std::vector<std::tuple<int, bool, int>>{{1, false, 0}, {2, true, 1}, {2, false, 0}}) {
    Plan p;
    p.tp = tp;
    p.sp = sp;
    const Program prog = lower(make_scenario(a, p));
    for (const RankProgram& rp : prog.ranks) {
      int n = 0;
      for (const Task& t : rp.tasks)
        if (t.kind == TaskKind::kCollective && t.label == "grad.tp_replicated") {
          ++n;
          EXPECT_DOUBLE_EQ(t.bytes, 8.0 * 28768 * 4);
          EXPECT_EQ(prog.groups[static_cast<size_t>(t.group)].ranks.size(), 2u);
        }
      EXPECT_EQ(n, want) << "tp " << tp << " sp " << sp;
    }
    run(prog);
  }
}

}  // namespace
}  // namespace stepcast
