// Fused attention: the efficiency curve of sim/cost/compute.cc fitted to measured kernels
// (MeasuredAttention; calibrate/bench/attention_sdpa.py):
//   t = flops / (peak_bf16 * E_dir * s/(s + half_seq) * d/(d + half_head_dim)) + launch
// s = keys per query row (seq_kv, halved for a causal square block), d = head_dim, E_dir =
// fwd_efficiency or bwd_efficiency. No sustained clock: like the GEMM curve, this is the
// kernel at the clock the benchmark ran it at.
//
// The fit minimises the squared log error of the time's compute part (t - launch) over
// all points: for fixed half sizes the best log E_dir is the mean residual of its direction,
// capped at E = 1 (closed form), so only the two half sizes are searched, on a geometric grid
// (half_seq 1..65536, half_head_dim 0 and 1..4096) refined twice around the best cell.
// Deterministic, no starting point to choose.
//
// Which kernel: the profile models the one the stack runs, Transformer Engine's fused
// attention, which on Hopper is cuDNN's; so when the file holds "cudnn" points only those
// are fitted, else every point.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "calibrate/fit/fit_internal.h"
#include "sim/cost/cost.h"

namespace stepcast::fit_detail {

namespace {

struct AttnPoint {
  double s = 0, d = 0;  // keys per query row, head size
  double y = 0;         // log(flops / (peak * (t - launch))): log of the measured efficiency
  int dir = 0;          // 0 forward, 1 backward
  const MeasuredAttention* m = nullptr;
};

struct AttnFit {
  double half_seq = 0, half_head_dim = 0;
  double log_e[2] = {0, 0};
  double sse = std::numeric_limits<double>::infinity();
};

double log_sat(double x, double half) { return half > 0 ? std::log(x / (x + half)) : 0.0; }

// The closed-form best E per direction for these half sizes, and the squared error.
AttnFit evaluate(const std::vector<AttnPoint>& pts, double hs, double hd) {
  AttnFit f;
  f.half_seq = hs;
  f.half_head_dim = hd;
  double sum[2] = {0, 0};
  int cnt[2] = {0, 0};
  std::vector<double> r(pts.size());
  for (std::size_t i = 0; i < pts.size(); ++i) {
    r[i] = pts[i].y - log_sat(pts[i].s, hs) - log_sat(pts[i].d, hd);
    sum[pts[i].dir] += r[i];
    ++cnt[pts[i].dir];
  }
  // E <= 1 (no kernel beats the peak): the constrained optimum of the quadratic in log E.
  for (int d = 0; d < 2; ++d) f.log_e[d] = cnt[d] ? std::min(sum[d] / cnt[d], 0.0) : 0.0;
  f.sse = 0;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const double e = r[i] - f.log_e[pts[i].dir];
    f.sse += e * e;
  }
  return f;
}

// The best (half_seq, half_head_dim) over a geometric grid of `n` values per axis between
// [lo, hi] (log scale); half_head_dim also tries 0 (no head-size effect) `with_zero`, and is
// 0 alone when d_hi is 0 (refining a fit that found no head-size effect).
AttnFit grid(const std::vector<AttnPoint>& pts, double s_lo, double s_hi, double d_lo, double d_hi,
             int n, bool with_zero) {
  AttnFit best;
  const int nd = d_hi > 0 ? n : 0;
  for (int i = 0; i < n; ++i) {
    const double hs = s_lo * std::pow(s_hi / s_lo, i / double(n - 1));
    for (int j = with_zero || nd == 0 ? -1 : 0; j < nd; ++j) {
      const double hd = j < 0 ? 0.0 : d_lo * std::pow(d_hi / d_lo, j / double(n - 1));
      const AttnFit f = evaluate(pts, hs, hd);
      if (f.sse < best.sse) best = f;
    }
  }
  return best;
}

}  // namespace

void fit_attention(const Measurements& m, const HwProfile& base, FitReport& rep) {
  if (m.attention.empty()) return;
  auto peak_it = base.gpu.peak_flop_per_s.find(DType::kBf16);
  if (peak_it == base.gpu.peak_flop_per_s.end() || peak_it->second <= 0) {
    rep.warnings.push_back("attention: no bf16 peak in the base profile: not fitted");
    return;
  }
  const double peak = peak_it->second;
  const bool has_cudnn =
      std::any_of(m.attention.begin(), m.attention.end(),
                  [](const MeasuredAttention& a) { return a.backend == "cudnn"; });
  rep.attention_backend = has_cudnn ? "cudnn" : "all backends";
  const double launch = rep.compute.launch_overhead_s;
  std::vector<AttnPoint> pts;
  for (const MeasuredAttention& a : m.attention) {
    if (has_cudnn && a.backend != "cudnn") continue;
    if (a.time_s <= 2 * launch) {
      rep.warnings.push_back(
          fmt::format("attention: {} takes {:.2f} us, at most twice the launch "
                      "overhead: not fitted",
                      a.pointer, a.time_s * 1e6));
      continue;
    }
    AttnPoint p;
    p.s = attention_keys_per_row(a.shape);
    p.d = static_cast<double>(a.shape.head_dim);
    p.dir = a.shape.backward ? 1 : 0;
    p.m = &a;
    p.y = std::log(a.flops / (peak * (a.time_s - launch)));
    pts.push_back(p);
  }
  if (pts.empty()) return;
  int per_dir[2] = {0, 0};
  for (const AttnPoint& p : pts) ++per_dir[p.dir];

  AttnFit f = grid(pts, 1, 65536, 1, 4096, 161, true);
  // Two refinements: +-1 cell of the previous grid (a factor 65536^(1/160) ~ 1.07 on seq).
  for (double step : {std::pow(65536.0, 1 / 160.0), std::pow(65536.0, 1 / 1600.0)}) {
    const double hd = f.half_head_dim;  // 0 stays 0: no head-size effect
    const AttnFit g =
        grid(pts, f.half_seq / step, f.half_seq * step, hd / step, hd * step, 41, false);
    if (g.sse <= f.sse) f = g;
  }

  ComputeParams& c = rep.compute;
  c.attn_half_seq = f.half_seq;
  c.attn_half_head_dim = f.half_head_dim;
  rep.fitted.push_back("compute.attention.half_seq");
  rep.fitted.push_back("compute.attention.half_head_dim");
  for (int d = 0; d < 2; ++d) {
    if (!per_dir[d]) continue;
    (d ? c.attn_bwd_eff : c.attn_fwd_eff) = std::exp(f.log_e[d]);
    rep.fitted.push_back(d ? "compute.attention.bwd_efficiency"
                           : "compute.attention.fwd_efficiency");
  }
  // Residuals on time, by the simulator's own efficiency (sim/cost/compute.cc).
  for (const AttnPoint& p : pts) {
    const double eff = attention_efficiency(p.m->shape, c);
    const double err = (p.m->flops / (peak * eff) + launch) / p.m->time_s - 1;
    rep.attention_points[p.dir] += 1;
    rep.attention_rms_rel_err[p.dir] += err * err;
    rep.attention_max_rel_err[p.dir] = std::max(rep.attention_max_rel_err[p.dir], std::abs(err));
  }
  for (int d = 0; d < 2; ++d)
    if (rep.attention_points[d])
      rep.attention_rms_rel_err[d] =
          std::sqrt(rep.attention_rms_rel_err[d] / rep.attention_points[d]);
}

}  // namespace stepcast::fit_detail
