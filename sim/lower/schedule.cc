#include "sim/lower/schedule.h"

#include <algorithm>
#include <array>
#include <deque>

#include <fmt/format.h>

#include "model/error.h"

namespace stepcast {
namespace {

std::vector<PassOp> gpipe_order(int m) {
  std::vector<PassOp> ops;
  ops.reserve(static_cast<size_t>(2 * m));
  for (int i = 0; i < m; ++i) ops.push_back({PassKind::kF, 0, i});
  for (int i = 0; i < m; ++i) ops.push_back({PassKind::kB, 0, i});
  return ops;
}

// PipeDream-Flush 1F1B (Narayanan et al. 2021, Figure 4 top).
// With the all-to-all overlap (schedule.h), one more warm-up forward and every steady-state
// F paired with the B after it: Megatron-Core's combined 1F1B without pipelining runs the
// first forward alone, then forward i+1 merged with backward i, then the last backward.
std::vector<PassOp> one_f_one_b_order(int p, int m, int s, bool ep_overlap) {
  const int warmup = std::min(p - s - 1 + (ep_overlap ? 1 : 0), m);
  std::vector<PassOp> ops;
  ops.reserve(static_cast<size_t>(2 * m));
  for (int i = 0; i < warmup; ++i) ops.push_back({PassKind::kF, 0, i});
  for (int i = 0; i < m - warmup; ++i) {
    ops.push_back({PassKind::kF, 0, warmup + i, ep_overlap});
    ops.push_back({PassKind::kB, 0, i});
  }
  for (int i = m - warmup; i < m; ++i) ops.push_back({PassKind::kB, 0, i});
  return ops;
}

// Megatron-LM schedules.py, forward_backward_pipelining_with_interleaving (the classic
// form, microbatch group size p): virtual microbatch k runs chunk (k mod pv) / p (reversed
// for backward) on microbatch (k / pv) * p + k mod p.
// With the all-to-all overlap, one more warm-up microbatch (Megatron-Core schedules.py adds
// one when overlap_moe_expert_parallel_comm is set) and the steady state paired.
std::vector<PassOp> interleaved_order(int p, int v, int m, int s, bool ep_overlap) {
  const int total = m * v;
  int warmup = 0;
  if (m == p) {
    warmup = total;  // Megatron: all_warmup_microbatches
  } else {
    warmup = std::min((p - s - 1) * 2 + (v - 1) * p + (ep_overlap ? 1 : 0), total);
  }
  auto chunk_of = [&](int k, bool fwd) {
    int c = (k % (p * v)) / p;
    return fwd ? c : v - 1 - c;
  };
  auto mb_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  std::vector<PassOp> ops;
  ops.reserve(static_cast<size_t>(2 * total));
  for (int k = 0; k < warmup; ++k) ops.push_back({PassKind::kF, chunk_of(k, true), mb_of(k)});
  const int remaining = total - warmup;
  for (int i = 0; i < remaining; ++i) {
    const int kf = i + warmup;
    ops.push_back({PassKind::kF, chunk_of(kf, true), mb_of(kf), ep_overlap});
    ops.push_back({PassKind::kB, chunk_of(i, false), mb_of(i)});
  }
  for (int k = remaining; k < total; ++k)
    ops.push_back({PassKind::kB, chunk_of(k, false), mb_of(k)});
  return ops;
}

// ZB-H1 (Qi et al. 2023, section 3.1 and Figure 3): 1F1B's order of F and B (B = input
// gradient only), with the W of microbatch k - s placed after B(k) on stage s and the last s
// W passes drained at the end. Later stages thus postpone their W passes by s microbatches,
// so that in the cool-down the B passes run back to back down the pipeline while the W
// passes fill what were bubbles: with uniform stages the bubble is (p-1)(T_F + T_B - T_W)
// instead of 1F1B's (p-1)(T_F + T_B + T_W). Microbatches in flight (F done, W not) on stage
// s: at most (p - s) + s = p, stage 0's 1F1B figure, so the peak activation memory over the
// stages is 1F1B's.
std::vector<PassOp> zb_h1_order(int p, int m, int s) {
  const int warmup = std::min(p - s - 1, m);
  const int delay = s;
  std::vector<PassOp> ops;
  ops.reserve(static_cast<size_t>(3 * m));
  auto after_b = [&](int k) {
    if (k - delay >= 0) ops.push_back({PassKind::kW, 0, k - delay});
  };
  auto b = [&](int k) { ops.push_back({PassKind::kB, 0, k, false, /*defer_w=*/true}); };
  for (int i = 0; i < warmup; ++i) ops.push_back({PassKind::kF, 0, i});
  for (int k = 0; k < m - warmup; ++k) {
    ops.push_back({PassKind::kF, 0, warmup + k});
    b(k);
    after_b(k);
  }
  for (int k = m - warmup; k < m; ++k) {
    b(k);
    after_b(k);
  }
  for (int k = std::max(0, m - delay); k < m; ++k) ops.push_back({PassKind::kW, 0, k});
  return ops;
}

// DualPipeV (deepseek-ai/DualPipe dualpipe/dualpipev.py, DualPipeV.step) on rank r of p,
// its eight steps as the code runs them. Each chunk runs its forwards and its backwards in
// microbatch order; a backward run "with zero bubble" (enable_zb) leaves its weight
// gradients in WeightGradStore, a FIFO, and each W (_weight_chunk) runs the oldest.
// _forward_backward_chunk(c0, c1) is a forward of chunk c0 overlapped with a full backward
// of chunk c1 (a paired F and B here).
std::vector<PassOp> dualpipev_order(int p, int m, int r) {
  std::vector<PassOp> ops;
  ops.reserve(static_cast<size_t>(6 * m));
  std::array<int, 2> next_f{0, 0}, next_b{0, 0};
  std::deque<PassOp> store;  // WeightGradStore
  auto f = [&](int c, bool paired) {
    ops.push_back({PassKind::kF, c, next_f[static_cast<size_t>(c)]++, paired});
  };
  auto b = [&](int c, bool zb) {
    ops.push_back({PassKind::kB, c, next_b[static_cast<size_t>(c)]++, false, zb});
    if (zb) store.push_back({PassKind::kW, c, ops.back().mb});
  };
  auto w = [&] {
    STEPCAST_CHECK(!store.empty(), "DualPipeV: a W with no deferred weight gradient");
    ops.push_back(store.front());
    store.pop_front();
  };
  for (int i = 0; i < 2 * (p - r - 1); ++i) f(0, false);  // step 1: nF0
  for (int i = 0; i < r + 1; ++i) {                       // step 2: nF0F1
    f(0, false);
    f(1, false);
  }
  for (int i = 0; i < p - r - 1; ++i) {  // step 3: nB1W1F1, zero bubble
    b(1, true);
    w();
    f(1, false);
  }
  for (int i = 0; i < m - 2 * p + r + 1; ++i) {  // step 4, the main step: nF0B1F1B0
    // The last rank runs its first F0, B1 not overlapped ("to further reduce bubble size").
    f(0, !(i == 0 && r == p - 1));
    b(1, false);
    f(1, true);
    b(0, false);
  }
  for (int i = 0; i < p - r - 1; ++i) {  // step 5: nB1F1B0
    b(1, false);
    f(1, true);
    b(0, false);
  }
  bool zb = false;  // step 6: nB1B0, the second half with zero bubble
  for (int i = 0; i < r + 1; ++i) {
    if (i == (r + 1) / 2 && r % 2 == 1) zb = true;
    b(1, zb);
    if (i == (r + 1) / 2 && r % 2 == 0) zb = true;
    b(0, zb);
  }
  for (int i = 0; i < p - r - 1; ++i) {  // step 7: nWB0, zero bubble
    w();
    b(0, true);
  }
  for (int i = 0; i < r + 1; ++i) w();  // step 8: nW
  STEPCAST_CHECK(store.empty(), "DualPipeV: weight gradients left in WeightGradStore");
  return ops;
}

constexpr double kUnknown = -1.0;

}  // namespace

int virtual_stage(Schedule schedule, int chunk, int stage, int p) {
  if (schedule == Schedule::kDualPipeV) return chunk == 0 ? stage : 2 * p - 1 - stage;
  return chunk * p + stage;
}

int stage_of_virtual(Schedule schedule, int vs, int p) {
  if (schedule == Schedule::kDualPipeV) return vs < p ? vs : 2 * p - 1 - vs;
  return vs % p;
}

std::vector<std::vector<PassOp>> pipeline_schedule(Schedule schedule, int p, int v, int m,
                                                   bool ep_overlap) {
  STEPCAST_CHECK(p >= 1 && v >= 1 && m >= 1, fmt::format("p {} v {} m {}", p, v, m));
  STEPCAST_CHECK(
      !ep_overlap || (schedule == Schedule::k1F1B && p == 1) || schedule == Schedule::kInterleaved,
      "the MoE all-to-all overlap runs with 1F1B on one stage or interleaved 1F1B");
  std::vector<std::vector<PassOp>> orders(static_cast<size_t>(p));
  switch (schedule) {
    case Schedule::kGpipe:
      STEPCAST_CHECK(v == 1, "GPipe runs one model chunk per stage (vpp 1)");
      for (auto& o : orders) o = gpipe_order(m);
      break;
    case Schedule::k1F1B:
      STEPCAST_CHECK(v == 1, "1F1B runs one model chunk per stage (vpp 1)");
      for (int s = 0; s < p; ++s)
        orders[static_cast<size_t>(s)] = one_f_one_b_order(p, m, s, ep_overlap);
      break;
    case Schedule::kInterleaved:
      STEPCAST_CHECK(
          m % p == 0,
          fmt::format("interleaved 1F1B needs microbatches ({}) divisible by pp ({})", m, p));
      for (int s = 0; s < p; ++s)
        orders[static_cast<size_t>(s)] = interleaved_order(p, v, m, s, ep_overlap);
      break;
    case Schedule::kZbH1:
      STEPCAST_CHECK(v == 1, "ZB-H1 runs one model chunk per stage (vpp 1)");
      for (int s = 0; s < p; ++s) orders[static_cast<size_t>(s)] = zb_h1_order(p, m, s);
      break;
    case Schedule::kDualPipeV:
      STEPCAST_CHECK(v == 2 && p >= 2 && m >= 2 * p,
                     fmt::format("DualPipeV runs 2 chunks per stage (vpp {}) on pp >= 2 ({}) "
                                 "with at least 2 x pp microbatches ({})",
                                 v, p, m));
      for (int s = 0; s < p; ++s) orders[static_cast<size_t>(s)] = dualpipev_order(p, m, s);
      break;
  }
  return orders;
}

std::vector<P2pCall> blocking_p2p_calls(Schedule schedule, const std::vector<PassOp>& order, int p,
                                        int m) {
  STEPCAST_CHECK(schedule == Schedule::k1F1B || schedule == Schedule::kInterleaved,
                 "blocking p2p follows the 1F1B and interleaved schedules");
  const bool interleaved = schedule == Schedule::kInterleaved;
  std::vector<P2pCall> calls(order.size(), P2pCall::kBatched);
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    const PassKind now = order[i].kind, next = order[i + 1].kind;
    if (!interleaved) {
      if (now == next) calls[i] = P2pCall::kSendThenRecv;
    } else if (now == PassKind::kF && next == PassKind::kB) {
      calls[i] = m == p ? P2pCall::kSendThenRecv : P2pCall::kNone;
    }
  }
  return calls;
}

std::vector<P2pCall> deepspeed_engine_p2p_calls(const std::vector<PassOp>& order, int p,
                                                int stage) {
  STEPCAST_CHECK(p >= 1 && stage >= 0 && stage < p, "deepspeed_engine_p2p_calls: bad stage");
  auto slot = [&](const PassOp& op) {
    STEPCAST_CHECK(op.kind != PassKind::kW && op.chunk == 0,
                   "DeepSpeed's pipeline engine runs 1F1B (F and B of one chunk)");
    return op.kind == PassKind::kF ? 2 * op.mb + stage : 2 * op.mb + 2 * p - stage - 1;
  };
  std::vector<P2pCall> calls(order.size(), P2pCall::kBatched);
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    const bool adjacent_fb = order[i].kind == PassKind::kF && order[i + 1].kind == PassKind::kB &&
                             slot(order[i + 1]) == slot(order[i]) + 1;
    calls[i] = adjacent_fb ? P2pCall::kRecvThenSend : P2pCall::kSendThenRecv;
  }
  return calls;
}

std::vector<std::vector<double>> nominal_start_times(Schedule schedule,
                                                     const std::vector<std::vector<PassOp>>& orders,
                                                     int p, int v, int m,
                                                     const NominalCosts& costs) {
  const int nv = p * v;
  STEPCAST_CHECK(static_cast<int>(orders.size()) == p, "one order per stage");
  STEPCAST_CHECK(
      costs.f.size() == static_cast<size_t>(nv) && costs.b.size() == static_cast<size_t>(nv),
      "nominal costs per virtual stage");
  auto idx = [&](int vs, int mb) {
    return static_cast<size_t>(vs) * static_cast<size_t>(m) + static_cast<size_t>(mb);
  };
  std::vector<double> f_end(static_cast<size_t>(nv) * static_cast<size_t>(m), kUnknown);
  std::vector<double> b_end = f_end;
  std::vector<std::vector<double>> start(static_cast<size_t>(p));
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> avail(static_cast<size_t>(p), 0.0);
  size_t total = 0, placed = 0;
  for (int s = 0; s < p; ++s) {
    start[static_cast<size_t>(s)].assign(orders[static_cast<size_t>(s)].size(), 0.0);
    total += orders[static_cast<size_t>(s)].size();
  }
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const size_t su = static_cast<size_t>(s);
      const auto& ord = orders[su];
      while (next[su] < ord.size()) {
        // A paired F runs with the B after it: one pass of both costs (schedule.h).
        const size_t n = ord[next[su]].paired ? 2 : 1;
        STEPCAST_CHECK(
            next[su] + n <= ord.size() && (n == 1 || (ord[next[su]].kind == PassKind::kF &&
                                                      ord[next[su] + 1].kind == PassKind::kB)),
            "a paired pass is an F followed by a B");
        double ready = 0, dur = 0;
        for (size_t j = 0; j < n; ++j) {
          const PassOp& op = ord[next[su] + j];
          const int vs = virtual_stage(schedule, op.chunk, s, p);
          double r = 0;
          if (op.kind == PassKind::kF) {
            r = vs == 0 ? 0.0 : f_end[idx(vs - 1, op.mb)];
            dur += costs.f[static_cast<size_t>(vs)];
          } else if (op.kind == PassKind::kB) {
            r = vs == nv - 1 ? f_end[idx(vs, op.mb)] : b_end[idx(vs + 1, op.mb)];
            dur += costs.b[static_cast<size_t>(vs)];
            if (!op.defer_w && !costs.w.empty()) dur += costs.w[static_cast<size_t>(vs)];
          } else {
            r = b_end[idx(vs, op.mb)];
            dur += costs.w.empty() ? 0.0 : costs.w[static_cast<size_t>(vs)];
          }
          ready = r == kUnknown || ready == kUnknown ? kUnknown : std::max(ready, r);
        }
        if (ready == kUnknown) break;
        const double t0 = std::max(avail[su], ready);
        avail[su] = t0 + dur;
        for (size_t j = 0; j < n; ++j) {
          const PassOp& op = ord[next[su]];
          const int vs = virtual_stage(schedule, op.chunk, s, p);
          start[su][next[su]] = t0;
          if (op.kind == PassKind::kF) f_end[idx(vs, op.mb)] = t0 + dur;
          if (op.kind == PassKind::kB) b_end[idx(vs, op.mb)] = t0 + dur;
          ++next[su];
          ++placed;
        }
        progress = true;
      }
    }
  }
  STEPCAST_CHECK(placed == total,
                 fmt::format("pipeline orders deadlock: {} of {} passes could run", placed, total));
  return start;
}

}  // namespace stepcast
