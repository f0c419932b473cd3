// The GEMM efficiency curve: its least-squares fit (Levenberg-Marquardt on log time, Eigen)
// and fit_gemm, which fits it to the measured shapes and puts the shapes it misses in
// compute.gemm_table (fit.h).
#include "calibrate/fit/fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <Eigen/Dense>

#include "calibrate/fit/fit_internal.h"
#include "model/error.h"
#include "sim/cost/cost.h"

namespace stepcast {

// ------------------------------------------------------------------ GEMM time curve

double gemm_curve_time_s(const GemmCurve& c, const GemmSample& s) {
  const double shape =
      c.max_eff * s.big_m / (s.big_m + c.half_m) * s.n / (s.n + c.half_n) * s.k / (s.k + c.half_k);
  return s.flops / (s.peak_flop_per_s * shape) + c.fixed_time_s;
}

namespace {

// theta = (log E, log hm, log hn, log hk, fixed time in us). Residuals r_i = log t_fit -
// log t_i and the Jacobian, with a = flops/(peak*E*shape) and t = a + fixed:
//   d/dlogE = -a/t,  d/dlog h = (a/t) * h/(d+h),  d/dfixed_us = 1e-6/t.
GemmCurve curve_of(const Eigen::Matrix<double, 5, 1>& th) {
  GemmCurve c;
  c.max_eff = std::exp(th[0]);
  c.half_m = std::exp(th[1]);
  c.half_n = std::exp(th[2]);
  c.half_k = std::exp(th[3]);
  c.fixed_time_s = th[4] * 1e-6;
  return c;
}

double gemm_residuals(const std::vector<GemmSample>& s, const Eigen::Matrix<double, 5, 1>& th,
                      Eigen::VectorXd& r, Eigen::MatrixXd* jac) {
  const GemmCurve c = curve_of(th);
  const int n = static_cast<int>(s.size());
  r.resize(n);
  if (jac) jac->resize(n, 5);
  for (int i = 0; i < n; ++i) {
    const GemmSample& p = s[i];
    const double t = gemm_curve_time_s(c, p);
    const double a = t - c.fixed_time_s;
    r[i] = std::log(t) - std::log(p.time_s);
    if (jac) {
      (*jac)(i, 0) = -a / t;
      (*jac)(i, 1) = a / t * c.half_m / (p.big_m + c.half_m);
      (*jac)(i, 2) = a / t * c.half_n / (p.n + c.half_n);
      (*jac)(i, 3) = a / t * c.half_k / (p.k + c.half_k);
      (*jac)(i, 4) = 1e-6 / t;
    }
  }
  return r.squaredNorm();
}

// Keeps parameters physical: E in (0, 1] (max_efficiency is a fraction of the peak), half
// sizes in [1, 1e6] elements, fixed time in [0, 1 ms].
void clamp_theta(Eigen::Matrix<double, 5, 1>& th) {
  th[0] = std::min(th[0], 0.0);
  for (int d = 1; d < 4; ++d) th[d] = std::clamp(th[d], 0.0, std::log(1e6));
  th[4] = std::clamp(th[4], 0.0, 1000.0);
}

GemmCurve lm(const std::vector<GemmSample>& samples, Eigen::Matrix<double, 5, 1> th,
             const std::array<bool, 5>& free, double& cost_out) {
  clamp_theta(th);
  Eigen::VectorXd r;
  Eigen::MatrixXd jac;
  double cost = gemm_residuals(samples, th, r, &jac);
  for (int d = 0; d < 5; ++d)
    if (!free[d]) jac.col(d).setZero();
  double lambda = 1e-3;
  int it = 0;
  for (; it < 500; ++it) {
    Eigen::Matrix<double, 5, 5> jtj = jac.transpose() * jac;
    const Eigen::Matrix<double, 5, 1> g = jac.transpose() * r;
    Eigen::Matrix<double, 5, 5> a = jtj;
    for (int d = 0; d < 5; ++d) a(d, d) += lambda * std::max(jtj(d, d), 1e-12) + (free[d] ? 0 : 1);
    const Eigen::Matrix<double, 5, 1> step = a.ldlt().solve(-g);
    Eigen::Matrix<double, 5, 1> cand = th + step;
    clamp_theta(cand);
    Eigen::VectorXd r2;
    const double c2 = gemm_residuals(samples, cand, r2, nullptr);
    if (c2 < cost) {
      const double gain = cost - c2;
      th = cand;
      cost = gemm_residuals(samples, th, r, &jac);
      for (int d = 0; d < 5; ++d)
        if (!free[d]) jac.col(d).setZero();
      lambda = std::max(lambda / 3, 1e-12);
      if (gain < 1e-13 * std::max(cost, 1e-30) || step.norm() < 1e-12) break;
    } else {
      lambda *= 4;
      if (lambda > 1e12) break;
    }
  }
  GemmCurve c = curve_of(th);
  c.rms_log_err = std::sqrt(cost / static_cast<double>(samples.size()));
  c.iterations = it;
  cost_out = cost;
  return c;
}

}  // namespace

GemmCurve fit_gemm_curve(const std::vector<GemmSample>& samples, const GemmCurve& start,
                         const std::array<bool, 5>& free) {
  STEPCAST_CHECK(!samples.empty(), "fit_gemm_curve: no samples");
  auto theta = [](const GemmCurve& c) {
    Eigen::Matrix<double, 5, 1> th;
    th << std::log(std::max(c.max_eff, 1e-6)), std::log(std::max(c.half_m, 1.0)),
        std::log(std::max(c.half_n, 1.0)), std::log(std::max(c.half_k, 1.0)), c.fixed_time_s * 1e6;
    return th;
  };
  double best_cost = INFINITY;
  GemmCurve best = start;
  std::vector<GemmCurve> starts = {start};
  if (free[1] || free[2] || free[3]) {
    for (double h : {16.0, 128.0, 1024.0}) {
      GemmCurve s = start;
      if (free[1]) s.half_m = h;
      if (free[2]) s.half_n = h;
      if (free[3]) s.half_k = h;
      starts.push_back(s);
    }
  }
  for (const GemmCurve& s : starts) {
    double cost = 0;
    const GemmCurve c = lm(samples, theta(s), free, cost);
    if (cost < best_cost) {
      best_cost = cost;
      best = c;
    }
  }
  return best;
}

namespace fit_detail {

double peak_of(const HwProfile& base, DType d) {
  auto it = base.gpu.peak_flop_per_s.find(d);
  return it == base.gpu.peak_flop_per_s.end() ? 0 : std::max(it->second, 0.0);
}

InputIssue above_peak(const Measurements& m, const std::string& pointer, double flop_per_s,
                      double peak, const std::string& what) {
  return InputIssue{m.file, 0, 0, pointer + "/time_us",
                    fmt::format("{:.4g} TFLOP/s for a {}, above the base profile's peak of "
                                "{:.4g} TFLOP/s",
                                flop_per_s / 1e12, what, peak / 1e12)};
}

namespace {

// Residuals of the fitted curve (rep.compute) at each measured shape, bf16/fp16 (`main_p`) then
// fp8 (`fp8_p`): rep.gemm_residuals and the errors; the shapes it misses go to
// compute.gemm_table.
void fit_gemm_table(const HwProfile& base, const std::vector<const MeasuredGemm*>& main_p,
                    const std::vector<const MeasuredGemm*>& fp8_p, FitReport& rep) {
  ComputeParams& c = rep.compute;
  // Residuals of the curve alone, evaluated by the simulator's own gemm_efficiency; shapes
  // it misses by more than kTableTolerance go to the table (M = batch * m, as the sim
  // looks them up; shapes that coincide there keep their geometric mean).
  HwProfile curve_only = base;
  curve_only.compute = c;
  curve_only.compute.gemm_table.clear();
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, DType>;
  std::map<Key, std::vector<double>> rates_by_key;  // every measurement of an (M, n, k, dtype)
  std::set<Key> miss;
  double sq = 0;
  int count = 0;
  for (const auto* pts : {&main_p, &fp8_p}) {
    for (const MeasuredGemm* g : *pts) {
      const GemmShape shape{g->m, g->n, g->k, g->batch, g->dtype, GemmLayout::kNN};
      const double peak = base.gpu.peak_flop_per_s.at(g->dtype);
      GemmResidual r{g->m,
                     g->n,
                     g->k,
                     g->batch,
                     g->dtype,
                     g->flop_per_s,
                     peak * gemm_efficiency(shape, curve_only),
                     false};
      const double e = r.curve_flop_per_s / r.measured_flop_per_s - 1;
      sq += e * e;
      ++count;
      rep.gemm_max_rel_err = std::max(rep.gemm_max_rel_err, std::abs(e));
      const Key key{g->batch * g->m, g->n, g->k, g->dtype};
      rates_by_key[key].push_back(g->flop_per_s);
      if (std::abs(e) > kTableTolerance) miss.insert(key);
      rep.gemm_residuals.push_back(r);
    }
  }
  rep.gemm_rms_rel_err = count ? std::sqrt(sq / count) : 0;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, DType>, GemmPoint> table;
  // The base's points stay, except at the shapes measured here: those are this fit's (in the
  // table only where the curve misses them), so a profile refitted in place keeps no stale
  // point the new curve reproduces.
  for (const GemmPoint& p : base.compute.gemm_table)
    if (!rates_by_key.count(Key{p.m, p.n, p.k, p.dtype})) table[{p.m, p.n, p.k, p.dtype}] = p;
  for (GemmResidual& r : rep.gemm_residuals)
    r.in_table = miss.count(Key{r.batch * r.m, r.n, r.k, r.dtype}) > 0;
  for (const Key& key : miss) {
    const std::vector<double>& rates = rates_by_key.at(key);
    double log_sum = 0;
    for (double v : rates) log_sum += std::log(v);
    const auto& [bm, n, k, d] = key;
    table[key] = GemmPoint{bm, n, k, d, std::exp(log_sum / static_cast<double>(rates.size()))};
  }
  c.gemm_table.clear();
  for (const auto& [key, p] : table) c.gemm_table.push_back(p);
  if (c.gemm_table != base.compute.gemm_table) rep.fitted.push_back("compute.gemm_table");
}

}  // namespace

void fit_gemm(const Measurements& m, const HwProfile& base, FitReport& rep) {
  std::vector<GemmSample> main_s, fp8_s;
  std::vector<const MeasuredGemm*> main_p, fp8_p;
  std::set<DType> no_peak;
  std::vector<InputIssue> impossible;
  for (const MeasuredGemm& g : m.gemm) {
    const double peak = peak_of(base, g.dtype);
    if (peak <= 0) {
      no_peak.insert(g.dtype);
      continue;
    }
    if (!(g.flop_per_s <= peak)) {
      impossible.push_back(above_peak(
          m, g.pointer, g.flop_per_s, peak,
          fmt::format("{}x{}x{} {} GEMM", g.batch * g.m, g.n, g.k, dtype_name(g.dtype))));
      continue;
    }
    const GemmSample s{static_cast<double>(g.batch) * static_cast<double>(g.m),
                       static_cast<double>(g.n),
                       static_cast<double>(g.k),
                       g.flop_per_s * g.time_s,
                       peak,
                       g.time_s};
    (g.dtype == DType::kFp8 ? fp8_s : main_s).push_back(s);
    (g.dtype == DType::kFp8 ? fp8_p : main_p).push_back(&g);
  }
  throw_measurement_issues(std::move(impossible), m);
  for (DType d : no_peak)
    rep.warnings.push_back(
        fmt::format("gemm: no {} peak in the base profile: those points are "
                    "not fitted",
                    dtype_name(d)));
  ComputeParams& c = rep.compute;
  rep.gemm_points = static_cast<int>(main_s.size());
  rep.gemm_fp8_points = static_cast<int>(fp8_s.size());
  if (main_s.empty() && fp8_s.empty()) return;

  GemmCurve cur{
      c.gemm_max_eff, c.gemm_half_m, c.gemm_half_n, c.gemm_half_k, c.gemm_fixed_time_s, 0, 0};
  // Five parameters need a handful of shapes; with fewer only the ceiling is fitted.
  constexpr std::size_t kFullFitMin = 8;
  const std::array<bool, 5> all{true, true, true, true, true};
  const std::array<bool, 5> ceiling_only{true, false, false, false, false};
  const char* shape_keys[] = {"compute.gemm.half_m", "compute.gemm.half_n", "compute.gemm.half_k",
                              "compute.gemm.fixed_time"};
  bool shape_fitted = false;
  if (!main_s.empty()) {
    shape_fitted = main_s.size() >= kFullFitMin;
    cur = fit_gemm_curve(main_s, cur, shape_fitted ? all : ceiling_only);
    c.gemm_max_eff = cur.max_eff;
    rep.fitted.push_back("compute.gemm.max_efficiency");
  }
  if (!fp8_s.empty()) {
    // fp8 points fit fp8's own half sizes (fixed time shared) when the 16-bit shape was
    // fitted here or the profile already has fp8 terms of its own; otherwise, with enough
    // of them, they set the shared terms (the only shapes measured).
    const bool has_own = c.has_fp8_halves();
    const bool enough = fp8_s.size() >= kFullFitMin;
    const bool own = enough && (shape_fitted || has_own);
    const bool fp8_shape = enough && !own;
    GemmCurve f = cur;
    f.max_eff = c.fp8_max_eff;
    // The 16-bit sizes as fitted so far, or fp8's own where the profile has them.
    ComputeParams start = c;
    start.gemm_half_m = cur.half_m;
    start.gemm_half_n = cur.half_n;
    start.gemm_half_k = cur.half_k;
    const std::array<double, 3> half = start.gemm_halves(true);
    f.half_m = half[0];
    f.half_n = half[1];
    f.half_k = half[2];
    const std::array<bool, 5> own_shape{true, true, true, true, false};
    f = fit_gemm_curve(fp8_s, f, own ? own_shape : fp8_shape ? all : ceiling_only);
    c.fp8_max_eff = f.max_eff;
    rep.fitted.push_back("compute.gemm.fp8_max_efficiency");
    if (own) {
      c.fp8_half_m = f.half_m;
      c.fp8_half_n = f.half_n;
      c.fp8_half_k = f.half_k;
      rep.fitted.insert(rep.fitted.end(), {"compute.gemm.fp8_half_m", "compute.gemm.fp8_half_n",
                                           "compute.gemm.fp8_half_k"});
    }
    if (fp8_shape) {
      cur = f;
      shape_fitted = true;
      rep.warnings.push_back(
          "gemm: only fp8 shapes measured: half sizes and fixed time "
          "fitted on fp8; max_efficiency (bf16/fp16) kept from the base");
    }
  }
  if (shape_fitted) {
    c.gemm_half_m = cur.half_m;
    c.gemm_half_n = cur.half_n;
    c.gemm_half_k = cur.half_k;
    c.gemm_fixed_time_s = cur.fixed_time_s;
    rep.fitted.insert(rep.fitted.end(), std::begin(shape_keys), std::end(shape_keys));
  }
  if (c.gemm_max_eff >= 0.999 || c.fp8_max_eff >= 0.999)
    rep.warnings.push_back(
        "gemm: a fitted efficiency ceiling reached 1 (the bound): the "
        "measurements approach the base profile's peak (wrong peak or GPU?)");

  fit_gemm_table(base, main_p, fp8_p, rep);
}

}  // namespace fit_detail

}  // namespace stepcast
