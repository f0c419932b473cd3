// Compute cost: roofline per op with shape-dependent efficiency (cost.h).
//
//   t = max(flops / (peak[dtype] * eff), bytes / (hbm * membound_eff)) + launch_overhead
//
// GEMM efficiency (fraction of the dtype's dense datasheet peak, kernel-timed):
//   shape(M,n,k) = E * M/(M+hm) * n/(n+hn) * k/(k+hk),  M = batch * m,
//   t_kernel     = flops / (peak * shape) + gemm_fixed_time_s,
//   eff          = flops / (peak * t_kernel),
// E = gemm_max_eff (bf16/fp16/fp32) or fp8_max_eff (fp8, mxfp8, nvfp4: of that dtype's own
// peak; no narrower format has a measured ceiling of its own here); the narrow dtypes take
// fp8_half_m/n/k for hm, hn, hk where the profile has them (their kernels tile
// differently: fitted on an H200's fp8 sweep, M 40, n 108, k 443 against 14, 70, 146). The fixed
// time is the few-microsecond floor every GEMM kernel has (ramp-up, tail wave); without it the
// product form cannot fit both 256^3 (0.7% of peak) and 4096^3 (79%) on H100.
// Fit (tests/data/measured/fit_cost_params.py): Nelder-Mead on sum of squared log-errors
// over XLA's sm_90 bf16 table (375 shapes, b in {1,2,4}, m,n,k in 256..4096) plus the MAMF
// best shape (2048x2048x13312 at 80.3% of 989.4 TFLOP/s, weight 20) and a soft ceiling
// (predicted 65536^3 above 80.3% penalised, weight 20), so E is not extrapolated from the
// 4096-size trend alone (unconstrained: E=0.94). H100 SXM result: E=0.880 hm=107 hn=58
// hk=109 fixed=5.8 us; rms log-error 8.9% over all 375 points, 4.9% where
// min(M,n,k) >= 1024 (max 15%); MAMF point -3.6%; 16384^3 predicted at 86% of peak.
// fp8 (same shape terms, fp8_max_eff 0.70): cuBLASLt H100 squares >= 2048 within 16%,
// 16384^3 / 32768^3 within 3%. Checked in tests/sim/cost/compute_test.cc.
//
// Calibrated points (ComputeParams::gemm_table) override the curve for a shape whose
// M, n and k are each within a factor kTableMatchRatio of a point of the same dtype (the
// nearest such point in log-distance wins); the point's throughput is then the kernel's.
//
// Grouped expert GEMMs (GEMM tasks with batch G > 1, the MoE experts) run as Transformer
// Engine's GroupedLinear: G cuBLAS GEMMs of the expert's own [m, n, k] over 4 streams
// (grouped_gemm_kernel_time_s), that time divided by compute.gemm.grouped_efficiency (1 by
// default; fitted by `stepcast fit` on stepcast-bench's grouped-GEMM measurements).
//
// Attention (flash kernels), of the bf16 peak:
//   eff = E_pass * s/(s + half_seq) * d/(d + half_head_dim),
// s = keys per query row: seq_kv, halved for causal square blocks (a row sees half the keys
// on average); E_pass = attn_fwd_eff or attn_bwd_eff. Fitted per kernel on the FA3 paper's
// H100 figures 5 (fwd) and 6 (bwd) by the same script; see the report in the test.
#include <algorithm>
#include <cmath>
#include <limits>

#include "model/error.h"
#include "sim/cost/cost.h"

namespace stepcast {
namespace {

// A gemm_table point applies when each of M, n, k is within this factor of it.
constexpr double kTableMatchRatio = 1.1;
// Compute streams Transformer Engine spreads a grouped GEMM's per-group cuBLAS GEMMs over
// (transformer_engine/common: nvte_multi_stream_cublas_gemm, num_streams 4).
constexpr double kGroupedGemmStreams = 4.0;

double peak_flop_per_s(DType d, const HwProfile& hw) {
  const auto& peaks = hw.gpu.peak_flop_per_s;
  if (auto it = peaks.find(d); it != peaks.end() && it->second > 0) return it->second;
  // fp16 and bf16 tensor-core peaks are equal on A100/H100/H200; anything missing falls back
  // to bf16, the dtype every profile must give.
  auto it = peaks.find(DType::kBf16);
  STEPCAST_CHECK(it != peaks.end() && it->second > 0,
                 "profile '" + hw.name + "' has no bf16 peak FLOP/s");
  return it->second;
}

bool has_peak(DType d, const HwProfile& hw) {
  auto it = hw.gpu.peak_flop_per_s.find(d);
  return it != hw.gpu.peak_flop_per_s.end() && it->second > 0;
}

double gemm_flops(const GemmShape& g) {
  return 2.0 * static_cast<double>(g.batch) * static_cast<double>(g.m) * static_cast<double>(g.n) *
         static_cast<double>(g.k);
}

double saturation(double x, double half) { return half > 0 ? x / (x + half) : 1.0; }

const GemmPoint* table_match(const GemmShape& g, const ComputeParams& c) {
  const double big_m = static_cast<double>(g.batch) * static_cast<double>(g.m);
  const double q[3] = {big_m, static_cast<double>(g.n), static_cast<double>(g.k)};
  const GemmPoint* best = nullptr;
  double best_dist = std::numeric_limits<double>::infinity();
  const double lim = std::log(kTableMatchRatio) + 1e-12;
  for (const GemmPoint& p : c.gemm_table) {
    if (p.dtype != g.dtype || p.flop_per_s <= 0 || p.m <= 0 || p.n <= 0 || p.k <= 0) continue;
    const double d[3] = {std::log(q[0] / static_cast<double>(p.m)),
                         std::log(q[1] / static_cast<double>(p.n)),
                         std::log(q[2] / static_cast<double>(p.k))};
    if (std::abs(d[0]) > lim || std::abs(d[1]) > lim || std::abs(d[2]) > lim) continue;
    const double dist = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
    if (dist < best_dist) {
      best_dist = dist;
      best = &p;
    }
  }
  return best;
}

// Tensor-core GEMMs want every leading (contiguous) dimension a multiple of 16 bytes of the
// dtype (NVIDIA's matrix-multiplication performance guide: 8 fp16/bf16 elements, 16 fp8;
// by the same 16 bytes, 32 nvfp4);
// otherwise cuBLAS falls back to slower kernels. With row-major operands, C[m,n] =
// op(A)[m,k] op(B)[k,n]: NN and NT lead with k (A) and n (B^T stores [n,k] with k leading;
// C leads with n), TN with m (A^T stores [k,m]) and n, TT with all three. So the token
// dimension — m of a forward or input-gradient GEMM, k of a weight gradient — never needs
// it. Measured on H100 (stas00, SwiGLU MLP at d_hidden 4096): d_ff 10922 (= 2 mod 8) ran at
// 272.7 TFLOP/s, the aligned sizes around it at 395-398.
bool aligned(std::int64_t m, std::int64_t n, std::int64_t k, DType dtype, GemmLayout layout) {
  const auto elems =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(16.0 / dtype_element_bytes(dtype)));
  const bool m_leads = layout == GemmLayout::kTN || layout == GemmLayout::kTT;
  const bool k_leads = layout != GemmLayout::kTN;
  return n % elems == 0 && (!m_leads || m % elems == 0) && (!k_leads || k % elems == 0);
}

double memory_time_s(double bytes, const HwProfile& hw) {
  if (bytes <= 0) return 0;
  STEPCAST_CHECK(hw.gpu.hbm_bytes_per_s > 0 && hw.compute.membound_eff > 0,
                 "profile '" + hw.name + "' has no HBM bandwidth");
  return bytes / (hw.gpu.hbm_bytes_per_s * hw.compute.membound_eff);
}

}  // namespace

double attention_efficiency(const AttentionShape& a, const ComputeParams& c) {
  const double s = attention_keys_per_row(a);
  const double e = a.backward ? c.attn_bwd_eff : c.attn_fwd_eff;
  return e * saturation(std::max(s, 1.0), c.attn_half_seq) *
         saturation(static_cast<double>(std::max<std::int64_t>(a.head_dim, 1)),
                    c.attn_half_head_dim);
}

double gemm_efficiency(const GemmShape& g, const HwProfile& hw) {
  const ComputeParams& c = hw.compute;
  const double peak = peak_flop_per_s(g.dtype, hw);
  const bool shape_aligned = aligned(g.m, g.n, g.k, g.dtype, g.layout);
  if (const GemmPoint* p = table_match(g, c)) {
    // A measured point stands for shapes like it; an aligned point does not vouch for an
    // unaligned shape (points carry no layout: taken as the query's).
    const double e = p->flop_per_s / peak;
    const bool point_aligned = aligned(p->m, p->n, p->k, p->dtype, g.layout);
    return !shape_aligned && point_aligned ? e * c.gemm_unaligned_eff : e;
  }
  const bool narrow = narrow_gemm_dtype(g.dtype) && has_peak(g.dtype, hw);
  const double ceiling = narrow ? c.fp8_max_eff : c.gemm_max_eff;
  const double big_m = static_cast<double>(std::max<std::int64_t>(g.batch, 1)) *
                       static_cast<double>(std::max<std::int64_t>(g.m, 1));
  // fp8's own half sizes where the profile has them (negative: the 16-bit ones): the rule of
  // ComputeParams::gemm_halves, written out here because this is the costing's hot path
  // (calling it measured 2.5% slower on bench_cost BM_TaskDurations, 2026-12-05).
  auto half = [narrow](double fp8, double main) { return narrow && fp8 >= 0 ? fp8 : main; };
  const double shape = ceiling * saturation(big_m, half(c.fp8_half_m, c.gemm_half_m)) *
                       saturation(static_cast<double>(std::max<std::int64_t>(g.n, 1)),
                                  half(c.fp8_half_n, c.gemm_half_n)) *
                       saturation(static_cast<double>(std::max<std::int64_t>(g.k, 1)),
                                  half(c.fp8_half_k, c.gemm_half_k)) *
                       (shape_aligned ? 1.0 : c.gemm_unaligned_eff);
  const double flops = gemm_flops(g);
  if (flops <= 0 || c.gemm_fixed_time_s <= 0) return shape;
  const double t_kernel = flops / (peak * shape) + c.gemm_fixed_time_s;
  return flops / (peak * t_kernel);
}

double grouped_gemm_kernel_time_s(const GemmShape& g, const HwProfile& hw) {
  // Transformer Engine's GroupedLinear runs one cuBLAS GEMM per group, spread round-robin
  // over its compute streams (nvte_multi_stream_cublas_gemm, 4 streams): each group runs at
  // the efficiency of its own [m, n, k], not of a [G*m, n, k] GEMM, and the fixed
  // per-kernel time of G kernels overlaps 4 at a time, so ceil(G/4) of them stay:
  //   t = G * t_one - (G - ceil(G/4)) * min(fixed, t_one)
  // (t_one: one group's kernel time, table point or curve; a table point timed below the
  // fixed time bounds what can overlap, so t >= ceil(G/4) * t_one > 0).
  GemmShape one = g;
  one.batch = 1;
  const double groups = static_cast<double>(std::max<std::int64_t>(g.batch, 1));
  const double t_one =
      gemm_flops(one) / (peak_flop_per_s(one.dtype, hw) * gemm_efficiency(one, hw));
  const double waves = std::ceil(groups / kGroupedGemmStreams);
  return groups * t_one - (groups - waves) * std::min(hw.compute.gemm_fixed_time_s, t_one);
}

double compute_time_s(const Task& t, const HwProfile& hw) {
  const ComputeParams& c = hw.compute;
  const double bytes = t.bytes_read + t.bytes_written;
  switch (t.kind) {
    case TaskKind::kGemm: {
      const double flops = t.flops > 0 ? t.flops : gemm_flops(t.gemm);
      if (t.gemm.batch > 1) {
        // Grouped expert GEMM (the only batched GEMM task: the model's MoE experts;
        // unfused attention's batched GEMMs are costed below as one strided kernel). Always
        // per expert: a gemm_table point at M = batch * m measured one [G*m, n, k] GEMM,
        // not G of [m, n, k] (gemm_efficiency of the expert's own shape consults the table).
        const double t_kernel =
            grouped_gemm_kernel_time_s(t.gemm, hw) * (flops / gemm_flops(t.gemm));
        const double t_flop = t_kernel / (c.sustained_clock * c.gemm_grouped_eff);
        return std::max(t_flop, memory_time_s(bytes, hw)) + c.launch_overhead_s;
      }
      const double eff = gemm_efficiency(t.gemm, hw);
      STEPCAST_CHECK(eff > 0, "GEMM efficiency must be positive (" + t.label + ")");
      const double t_flop = flops / (peak_flop_per_s(t.gemm.dtype, hw) * eff * c.sustained_clock);
      return std::max(t_flop, memory_time_s(bytes, hw)) + c.launch_overhead_s;
    }
    case TaskKind::kAttention: {
      if (!t.attn.flash) {
        // Unfused attention (Megatron-LM before FlashAttention): batched GEMMs over b*heads
        // at the GEMM efficiency of their shape (forward S = Q K^T [sq x skv x d] and
        // O = P V [sq x d x skv]; backward twice those), plus the score-matrix traffic
        // (bytes of the op, model/workload.cc) at memory-bound speed, kernels in sequence.
        const AttentionShape& a = t.attn;
        GemmShape qk{a.seq_q, a.seq_kv, a.head_dim, a.batch * a.heads, a.dtype, GemmLayout::kNT};
        GemmShape pv{a.seq_q, a.head_dim, a.seq_kv, a.batch * a.heads, a.dtype, GemmLayout::kNN};
        auto gemm_s = [&](const GemmShape& g) {
          return gemm_flops(g) /
                     (peak_flop_per_s(g.dtype, hw) * gemm_efficiency(g, hw) * c.sustained_clock) +
                 c.launch_overhead_s;
        };
        const double passes = a.backward ? 2.0 : 1.0;
        const int kernels = a.backward ? 3 : 2;  // softmax, dropout (+ their backward)
        return passes * (gemm_s(qk) + gemm_s(pv)) + memory_time_s(bytes, hw) +
               kernels * c.launch_overhead_s;
      }
      // Flash attention runs at the bf16/fp16 tensor-core rate whatever the GEMM dtype.
      const double eff = attention_efficiency(t.attn, c);
      STEPCAST_CHECK(eff > 0, "attention efficiency must be positive (" + t.label + ")");
      const double t_flop = t.flops / (peak_flop_per_s(DType::kBf16, hw) * eff * c.sustained_clock);
      return std::max(t_flop, memory_time_s(bytes, hw)) + c.launch_overhead_s;
    }
    // A memory-bound task of several kernels (Task::launches; e.g. one copy per rank) pays
    // the fixed per-kernel time of each.
    case TaskKind::kMemoryBound: return memory_time_s(bytes, hw) + t.launches * c.launch_overhead_s;
    case TaskKind::kCollective:
    case TaskKind::kSend:
    case TaskKind::kRecv:
    case TaskKind::kAlloc:
    case TaskKind::kFree: return 0;
  }
  return 0;
}

}  // namespace stepcast
