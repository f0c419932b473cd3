#include "calibrate/fit/fit.h"

#include "calibrate/fit/yaml_patch.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include <Eigen/Dense>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "model/error.h"
#include "sim/cluster/profile.h"
#include "sim/cost/cost.h"
#include "sim/io/yaml_util.h"

namespace stepcast {

// ------------------------------------------------------------------ alpha-beta lines

namespace {

double max_rel_err(const std::vector<double>& x, const std::vector<double>& t, double a,
                   double b) {
  double e = 0;
  for (std::size_t i = 0; i < x.size(); ++i) e = std::max(e, std::abs((a + b * x[i]) / t[i] - 1));
  return e;
}

}  // namespace

AlphaBeta fit_alpha_beta(const std::vector<double>& x, const std::vector<double>& t) {
  STEPCAST_CHECK(x.size() == t.size(), "fit_alpha_beta: sizes differ");
  AlphaBeta r;
  // Weighted least squares, w = 1/t^2: minimises the sum of squared relative errors.
  double s0 = 0, s1 = 0, s2 = 0, t0 = 0, t1 = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double w = 1.0 / (t[i] * t[i]);
    s0 += w;
    s1 += w * x[i];
    s2 += w * x[i] * x[i];
    t0 += w * t[i];
    t1 += w * x[i] * t[i];
  }
  const double det = s0 * s2 - s1 * s1;
  if (x.size() < 2 || !(std::abs(det) > 1e-12 * s0 * s2)) return r;  // one distinct x
  r.alpha_s = (t0 * s2 - s1 * t1) / det;
  r.beta_s_per_byte = (s0 * t1 - s1 * t0) / det;
  r.valid = r.alpha_s >= 0 && r.beta_s_per_byte > 0;
  r.max_rel_err = max_rel_err(x, t, r.alpha_s, r.beta_s_per_byte);
  return r;
}

namespace {

// Best line for one size range: unconstrained if valid and within tolerance, else the
// better of it and "bandwidth of the range above" (beta = beta_ref: small sizes are
// latency-dominated, their own slope is noise). "No latency" (alpha = 0) only for the top
// range, or when nothing else is valid (times falling with size faster than beta_ref).
AlphaBeta fit_range(const std::vector<double>& x, const std::vector<double>& t, double beta_ref,
                    double tolerance) {
  AlphaBeta free = fit_alpha_beta(x, t);
  if (free.valid && free.max_rel_err <= tolerance) return free;
  std::vector<AlphaBeta> alts;
  if (free.valid) alts.push_back(free);
  AlphaBeta no_latency;
  {
    double sxt = 0, sxx = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double w = 1.0 / (t[i] * t[i]);
      sxt += w * x[i] * t[i];
      sxx += w * x[i] * x[i];
    }
    no_latency = AlphaBeta{0, sxt / sxx, 0, sxx > 0 && sxt > 0};
    no_latency.max_rel_err = max_rel_err(x, t, 0, no_latency.beta_s_per_byte);
    if (no_latency.valid && beta_ref <= 0) alts.push_back(no_latency);
  }
  if (beta_ref > 0) {
    double sw = 0, swr = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double w = 1.0 / (t[i] * t[i]);
      sw += w;
      swr += w * (t[i] - beta_ref * x[i]);
    }
    AlphaBeta b{swr / sw, beta_ref, 0, swr >= 0};
    b.max_rel_err = max_rel_err(x, t, b.alpha_s, b.beta_s_per_byte);
    if (b.valid) alts.push_back(b);
  }
  AlphaBeta best;
  for (const AlphaBeta& a : alts)
    if (!best.valid || a.max_rel_err < best.max_rel_err) best = a;
  return best.valid ? best : no_latency;
}

}  // namespace

std::vector<CollectiveSegment> fit_collective_curve(const std::vector<double>& sizes,
                                                    const std::vector<double>& times_s,
                                                    double busbw_factor, double tolerance) {
  STEPCAST_CHECK(sizes.size() == times_s.size(), "fit_collective_curve: sizes differ");
  STEPCAST_CHECK(busbw_factor > 0, "busbw factor must be positive");
  // Points grouped by distinct size, ascending.
  std::map<double, std::vector<double>> by_size;
  for (std::size_t i = 0; i < sizes.size(); ++i) by_size[sizes[i]].push_back(times_s[i]);
  std::vector<std::pair<double, std::vector<double>>> groups(by_size.begin(), by_size.end());
  auto collect = [&](int lo, int hi, std::vector<double>& x, std::vector<double>& t) {
    x.clear();
    t.clear();
    for (int g = lo; g <= hi; ++g)
      for (double ti : groups[g].second) {
        x.push_back(groups[g].first * busbw_factor);  // bytes on the bus per unit busbw
        t.push_back(ti);
      }
  };

  std::vector<CollectiveSegment> out;
  double beta_ref = 0;
  std::vector<double> x, t;
  for (int hi = static_cast<int>(groups.size()) - 1; hi >= 0;) {
    int lo = hi;
    collect(lo, hi, x, t);
    AlphaBeta best = fit_range(x, t, beta_ref, tolerance);
    const double x_max = groups[hi].first * busbw_factor;
    auto latency_dominated = [&](const AlphaBeta& ab) {
      return ab.valid && ab.alpha_s >= ab.beta_s_per_byte * x_max;
    };
    while (lo > 0) {
      collect(lo - 1, hi, x, t);
      AlphaBeta cand = fit_range(x, t, beta_ref, tolerance);
      bool ok = cand.valid && cand.max_rel_err <= tolerance;
      if (!ok && latency_dominated(best)) {
        // Latency-bound sizes: run-to-run noise of a few us on ~35 us is 10-30% (nccl-tests
        // out-of-place vs in-place at 128 B: 34.7 vs 47.3 us); one looser line beats a
        // dozen ranges fitted to noise, as long as it stays latency-bound.
        const AlphaBeta loose = fit_range(x, t, beta_ref, kLatencyTolerance);
        if (latency_dominated(loose) && loose.max_rel_err <= kLatencyTolerance) {
          cand = loose;
          ok = true;
        }
      }
      if (!ok) break;
      --lo;
      best = cand;
    }
    STEPCAST_CHECK(best.valid, "no valid line for a collective size range");
    CollectiveSegment s;
    s.min_bytes = groups[lo].first;
    s.max_bytes = groups[hi].first;
    s.latency_s = best.alpha_s;
    s.busbw_bytes_per_s = 1.0 / best.beta_s_per_byte;
    s.max_rel_err = best.max_rel_err;
    for (int g = lo; g <= hi; ++g) s.points += static_cast<int>(groups[g].second.size());
    s.latency_bound = best.alpha_s >= best.beta_s_per_byte * s.max_bytes * busbw_factor;
    if (!s.latency_bound || beta_ref == 0) beta_ref = best.beta_s_per_byte;
    out.push_back(s);
    hi = lo - 1;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// ------------------------------------------------------------------ GEMM time curve

double gemm_curve_time_s(const GemmCurve& c, const GemmSample& s) {
  const double shape = c.max_eff * s.big_m / (s.big_m + c.half_m) * s.n / (s.n + c.half_n) *
                       s.k / (s.k + c.half_k);
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
        std::log(std::max(c.half_n, 1.0)), std::log(std::max(c.half_k, 1.0)),
        c.fixed_time_s * 1e6;
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

// ------------------------------------------------------------------ fit_profile

namespace {

std::string pct(double f) { return fmt::format("{:.2f}%", 100 * f); }

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Model tokens in a GPU name ("NVIDIA H100 80GB HBM3" -> {H100}); used to warn when the
// measurements come from another GPU model than the base profile.
std::set<std::string> gpu_models(const std::string& name) {
  std::set<std::string> out;
  static const std::regex re("\\b([A-Z]{1,2}[0-9]{2,3})\\b");
  for (auto it = std::sregex_iterator(name.begin(), name.end(), re); it != std::sregex_iterator();
       ++it)
    out.insert((*it)[1]);
  return out;
}

void fit_gemm(const Measurements& m, const HwProfile& base, FitReport& rep) {
  std::vector<GemmSample> main_s, fp8_s;
  std::vector<const MeasuredGemm*> main_p, fp8_p;
  std::set<DType> no_peak;
  for (const MeasuredGemm& g : m.gemm) {
    auto it = base.gpu.peak_flop_per_s.find(g.dtype);
    if (it == base.gpu.peak_flop_per_s.end() || it->second <= 0) {
      no_peak.insert(g.dtype);
      continue;
    }
    const GemmSample s{static_cast<double>(g.batch) * static_cast<double>(g.m),
                       static_cast<double>(g.n), static_cast<double>(g.k),
                       g.flop_per_s * g.time_s, it->second, g.time_s};
    (g.dtype == DType::kFp8 ? fp8_s : main_s).push_back(s);
    (g.dtype == DType::kFp8 ? fp8_p : main_p).push_back(&g);
  }
  for (DType d : no_peak)
    rep.warnings.push_back(fmt::format("gemm: no {} peak in the base profile: those points are "
                                       "not fitted", dtype_name(d)));
  ComputeParams& c = rep.compute;
  rep.gemm_points = static_cast<int>(main_s.size());
  rep.gemm_fp8_points = static_cast<int>(fp8_s.size());
  if (main_s.empty() && fp8_s.empty()) return;

  GemmCurve cur{c.gemm_max_eff, c.gemm_half_m, c.gemm_half_n, c.gemm_half_k,
                c.gemm_fixed_time_s, 0, 0};
  // Five parameters need a handful of shapes; with fewer only the ceiling is fitted.
  constexpr std::size_t kFullFitMin = 8;
  const std::array<bool, 5> all{true, true, true, true, true};
  const std::array<bool, 5> ceiling_only{true, false, false, false, false};
  const char* shape_keys[] = {"compute.gemm.half_m", "compute.gemm.half_n",
                              "compute.gemm.half_k", "compute.gemm.fixed_time"};
  bool shape_fitted = false;
  if (!main_s.empty()) {
    shape_fitted = main_s.size() >= kFullFitMin;
    cur = fit_gemm_curve(main_s, cur, shape_fitted ? all : ceiling_only);
    c.gemm_max_eff = cur.max_eff;
    rep.fitted.push_back("compute.gemm.max_efficiency");
  }
  if (!fp8_s.empty()) {
    GemmCurve f = cur;
    f.max_eff = c.fp8_max_eff;
    const bool fp8_shape = !shape_fitted && fp8_s.size() >= kFullFitMin;
    f = fit_gemm_curve(fp8_s, f, fp8_shape ? all : ceiling_only);
    c.fp8_max_eff = f.max_eff;
    rep.fitted.push_back("compute.gemm.fp8_max_efficiency");
    if (fp8_shape) {
      cur = f;
      shape_fitted = true;
      rep.warnings.push_back("gemm: only fp8 shapes measured: half sizes and fixed time "
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
    rep.warnings.push_back("gemm: a fitted efficiency ceiling reached 1 (the bound): the "
                           "measurements approach the base profile's peak (wrong peak or GPU?)");

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
      GemmResidual r{g->m, g->n, g->k, g->batch, g->dtype, g->flop_per_s,
                     peak * gemm_efficiency(shape, curve_only), false};
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
  for (const GemmPoint& p : base.compute.gemm_table) table[{p.m, p.n, p.k, p.dtype}] = p;
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
  if (!miss.empty()) rep.fitted.push_back("compute.gemm_table");
}

// HBM bandwidth of one kernel: t = a + bytes/bw over the sizes above the launch-bound range
// (kernel time >= 10 launch overheads).
double fit_memory_kernel(const Measurements& m, const std::string& kernel, double launch_s,
                         double& max_err) {
  std::vector<double> x, t;
  double best_bw = 0;
  for (const MeasuredMemory& e : m.memory) {
    if (e.kernel != kernel) continue;
    best_bw = std::max(best_bw, (e.bytes_read + e.bytes_written) / e.time_s);
    if (e.time_s >= 10 * launch_s) {
      x.push_back(e.bytes_read + e.bytes_written);
      t.push_back(e.time_s);
    }
  }
  const AlphaBeta ab = fit_alpha_beta(x, t);
  if (ab.valid) {
    max_err = ab.max_rel_err;
    return 1.0 / ab.beta_s_per_byte;
  }
  max_err = 0;
  return best_bw;  // too few points above the launch-bound range: the best one measured
}

// The `algorithm` of a calibrated entry (sim/cluster/params.h) for measurements run with NCCL
// algorithm `algo` (bench --algo: NCCL_ALGO's names, any case; "default": NCCL's own choice,
// taken to be the algorithm the model runs for the collective under the base profile,
// bandwidth_algorithm). all_to_all and send_recv run as grouped send/recv: direct. nullopt:
// an algorithm the model has no name for (CollNet, ...).
std::optional<CollAlgo> entry_algorithm(const std::string& op, int ranks, int nodes,
                                        const std::string& algo, const HwProfile& base) {
  if (op == "all_to_all" || op == "send_recv") return CollAlgo::kDirect;
  std::string a;
  for (char ch : algo) a += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (a == "default") {
    for (CollOp c : {CollOp::kAllReduce, CollOp::kReduceScatter, CollOp::kAllGather,
                     CollOp::kBroadcast}) {
      if (op != coll_op_name(c)) continue;
      GroupShape g;
      g.ranks = ranks;
      g.nodes = nodes;
      g.ranks_per_node = (ranks + nodes - 1) / nodes;
      return bandwidth_algorithm(c, g, base);
    }
    return std::nullopt;
  }
  if (a == "nvlstree") a = "nvls_tree";
  const auto& names = collective_algorithm_names();
  if (std::find(names.begin(), names.end(), a) == names.end()) return std::nullopt;
  return collective_algorithm(a);
}

void fit_collectives(const Measurements& m, const HwProfile& base, FitReport& rep) {
  // Group by (op, ranks, nodes); within a group prefer NCCL's own choice ("default").
  std::map<std::tuple<std::string, int, int>, std::map<std::string, std::vector<const MeasuredCollective*>>>
      groups;
  for (const MeasuredCollective& c : m.collectives) groups[{c.op, c.ranks, c.nodes}][c.algo].push_back(&c);
  for (const auto& [key, by_algo] : groups) {
    const auto& [op, ranks, nodes] = key;
    auto chosen = by_algo.find("default");
    if (chosen == by_algo.end()) chosen = by_algo.begin();
    for (const auto& [algo, pts] : by_algo)
      if (algo != chosen->first)
        rep.warnings.push_back(fmt::format("collectives: {} n={} N={}: algo \"{}\" not fitted "
                                           "(calibrated entries hold one algorithm; using \"{}\")",
                                           op, ranks, nodes, algo, chosen->first));
    CollectiveFit f{op, ranks, nodes, chosen->first, {}, {}, {}};
    for (const MeasuredCollective* c : chosen->second) {
      f.sizes_bytes.push_back(c->size_bytes);
      f.times_s.push_back(c->time_s);
    }
    f.segments = fit_collective_curve(f.sizes_bytes, f.times_s, busbw_factor(op, ranks),
                                      kCollectiveTolerance);
    // Entries cover contiguous sizes: each range runs up to one byte below the next one.
    for (std::size_t i = 0; i < f.segments.size(); ++i) {
      const CollectiveSegment& s = f.segments[i];
      const auto algo = entry_algorithm(op, ranks, nodes, f.algo, base);
      if (!algo) {
        rep.warnings.push_back(fmt::format("collectives: {} n={} N={}: algo \"{}\" is not one "
                                           "the model runs ({}): not written",
                                           op, ranks, nodes, f.algo,
                                           fmt::join(collective_algorithm_names(), ", ")));
        continue;
      }
      CollectiveCalib e;
      e.op = op;
      e.algo = *algo;
      e.ranks = ranks;
      e.nodes = nodes;
      e.min_bytes = s.min_bytes;
      e.max_bytes = i + 1 < f.segments.size() ? f.segments[i + 1].min_bytes - 1 : s.max_bytes;
      e.latency_s = s.latency_s;
      e.busbw_bytes_per_s = s.busbw_bytes_per_s;
      e.source = fmt::format("stepcast fit of {} ({}, {}), NCCL {}, algo {}: {} points, max "
                             "error {}{}",
                             m.file, m.provenance.gpu_name,
                             m.provenance.date_utc.empty() ? "date not recorded"
                                                           : m.provenance.date_utc,
                             m.provenance.nccl_version.empty() ? "?" : m.provenance.nccl_version,
                             f.algo, s.points, pct(s.max_rel_err),
                             s.latency_bound ? ", latency-bound range" : "");
      rep.calibrated.push_back(e);
    }
    rep.fitted.push_back(fmt::format("collectives.calibrated[{} n={} N={}]", op, ranks, nodes));
    rep.collectives.push_back(std::move(f));
  }
}

// ---- YAML output ---------------------------------------------------------------------

std::string num(double v, int digits) { return fmt::format("{:.{}g}", v, digits); }

YAML::Node flow_map() {
  YAML::Node n(YAML::NodeType::Map);
  n.SetStyle(YAML::EmitterStyle::Flow);
  return n;
}

void write_yaml(const HwProfile& base, const FitReport& rep, const Measurements& m,
                const std::string& out_yaml) {
  YAML::Node doc = load_yaml_file(base.file);
  const ComputeParams& c = rep.compute;
  auto is_fitted = [&](const std::string& k) {
    return std::find(rep.fitted.begin(), rep.fitted.end(), k) != rep.fitted.end();
  };
  YAML::Node compute = doc["compute"];
  if (!compute.IsMap()) {
    compute = YAML::Node(YAML::NodeType::Map);
    doc["compute"] = compute;
  }
  const std::pair<const char*, double> gemm_keys[] = {
      {"max_efficiency", c.gemm_max_eff}, {"half_m", c.gemm_half_m}, {"half_n", c.gemm_half_n},
      {"half_k", c.gemm_half_k}, {"fp8_max_efficiency", c.fp8_max_eff}};
  for (const auto& [key, value] : gemm_keys) {
    if (!is_fitted(std::string("compute.gemm.") + key)) continue;
    if (!compute["gemm"].IsMap()) compute["gemm"] = YAML::Node(YAML::NodeType::Map);
    compute["gemm"][key] = num(value, 5);
  }
  if (is_fitted("compute.gemm.fixed_time"))
    compute["gemm"]["fixed_time"] = num(c.gemm_fixed_time_s * 1e6, 5) + " us";
  if (is_fitted("compute.memory_bound_efficiency"))
    compute["memory_bound_efficiency"] = num(c.membound_eff, 4);
  if (is_fitted("compute.launch_overhead"))
    compute["launch_overhead"] = num(c.launch_overhead_s * 1e6, 4) + " us";
  if (is_fitted("compute.comm_sms")) compute["comm_sms"] = c.comm_sms;
  if (is_fitted("compute.gemm_table")) {
    YAML::Node table(YAML::NodeType::Sequence);
    for (const GemmPoint& p : c.gemm_table) {
      YAML::Node e = flow_map();
      e["m"] = p.m;
      e["n"] = p.n;
      e["k"] = p.k;
      e["dtype"] = dtype_name(p.dtype);
      e["throughput"] = num(p.flop_per_s / 1e12, 6) + " TFLOP/s";
      table.push_back(e);
    }
    compute["gemm_table"] = table;
  }
  std::string src = fmt::format("stepcast fit of {} ({}, measured {}): {}", m.file,
                                m.provenance.gpu_name,
                                m.provenance.date_utc.empty() ? "date not recorded"
                                                              : m.provenance.date_utc,
                                m.source);
  if (!base.compute.source.empty()) src += "; values not fitted: " + base.compute.source;
  compute["source"] = src;

  if (is_fitted("gpu.memory_reserved")) {
    if (!doc["gpu"].IsMap()) doc["gpu"] = YAML::Node(YAML::NodeType::Map);
    doc["gpu"]["memory_reserved"] = fmt::format("{:.0f} MiB", rep.memory_reserved_bytes / 1048576.0);
  }

  if (is_fitted("collectives.communicator_memory")) {
    if (!doc["collectives"].IsMap()) doc["collectives"] = YAML::Node(YAML::NodeType::Map);
    YAML::Node list(YAML::NodeType::Sequence);
    for (const CommunicatorMemory& e : rep.communicator_memory) {
      YAML::Node n = flow_map();
      n["ranks"] = e.ranks;
      n["nodes"] = e.nodes;
      n["memory"] = fmt::format("{:.0f} MiB", e.bytes / 1048576.0);
      if (!e.source.empty()) n["source"] = e.source;
      list.push_back(n);
    }
    doc["collectives"]["communicator_memory"] = list;
  }

  if (!rep.calibrated.empty()) {
    YAML::Node coll = doc["collectives"];
    if (!coll.IsMap()) {
      coll = YAML::Node(YAML::NodeType::Map);
      doc["collectives"] = coll;
    }
    // A fit replaces the base's entries of the same op, shape and algorithm (a Ring sweep
    // leaves the NVLS entries alone: they answer where the model runs NVLS).
    std::set<std::tuple<std::string, int, int, CollAlgo>> refit;
    for (const CollectiveCalib& e : rep.calibrated) refit.insert({e.op, e.ranks, e.nodes, e.algo});
    YAML::Node list(YAML::NodeType::Sequence);
    // One calibrated entry as a flow mapping (keys of sim/cluster/params.h); the source is
    // written whenever it is known (fitted entries always carry one).
    auto entry = [&](const CollectiveCalib& e) {
      YAML::Node n = flow_map();
      n["op"] = e.op;
      n["algorithm"] = algo_name(e.algo);
      n["ranks"] = e.ranks;
      n["nodes"] = e.nodes;
      n["min_size"] = num(e.min_bytes, 15) + " B";
      n["max_size"] = num(e.max_bytes, 15) + " B";
      n["latency"] = num(e.latency_s * 1e6, 6) + " us";
      n["busbw"] = num(e.busbw_bytes_per_s / 1e9, 6) + " GB/s";
      if (!e.source.empty()) n["source"] = e.source;
      return n;
    };
    for (const CollectiveCalib& e : base.collectives.calibrated) {
      if (refit.count({e.op, e.ranks, e.nodes, e.algo})) continue;  // replaced below
      list.push_back(entry(e));
    }
    for (const CollectiveCalib& e : rep.calibrated) list.push_back(entry(e));
    coll["calibrated"] = list;
  }

  YAML::Emitter em;
  em.SetIndent(2);
  em << doc;
  STEPCAST_CHECK(em.good(), "YAML emitter: " + em.GetLastError());
  std::ofstream f(out_yaml);
  if (!f) throw InputError(InputIssue{out_yaml, 0, 0, "", "cannot write the output profile"});
  // The base's text with only the fitted keys rewritten, so its comments (the sources of the
  // values not fitted) stay; the whole document when that cannot be done in place.
  std::ifstream in(base.file);
  std::stringstream base_text;
  base_text << in.rdbuf();
  const std::optional<std::string> patched =
      patch_yaml_text(base_text.str(), load_yaml_file(base.file), doc, "fitted");
  std::istringstream header(rep.text());
  f << "# Written by `stepcast fit` on " << utc_now() << ".\n";
  if (patched)
    f << "# The text and comments of the base profile " << base.file
      << " are kept; each key this\n# fit changed ends with `# fitted`, naming the value it "
         "replaces (the comments above\n# such a key describe that base value).\n#\n";
  else
    f << "# The comments of the base profile are not carried over: see " << base.file
      << "\n# for the sources of the values not fitted here.\n#\n";
  for (std::string line; std::getline(header, line);) f << "# " << line << "\n";
  if (patched)
    f << "\n" << *patched;
  else
    f << em.c_str() << "\n";
  if (!f) throw InputError(InputIssue{out_yaml, 0, 0, "", "error writing the output profile"});
}

}  // namespace

void fit_profile(const std::string& measurements_path, const std::string& base_profile,
                 const std::string& out_yaml, FitReport* report) {
  const Measurements m = load_measurements(measurements_path);
  HwProfile base;
  try {
    base = load_profile(base_profile, default_profiles_dir());
  } catch (const InputError& e) {
    // An unknown name is the --base flag's (load_profile names a scenario's cluster.profile).
    std::vector<InputIssue> issues = e.issues();
    for (InputIssue& i : issues)
      if (i.file.empty() && i.key == "cluster.profile") i.key = "--base";
    throw InputError(std::move(issues));
  }

  FitReport rep;
  rep.measurements_file = measurements_path;
  rep.base_profile = base.file;
  rep.out_yaml = out_yaml;
  rep.gpu_name = m.provenance.gpu_name;
  rep.date_utc = m.provenance.date_utc;
  rep.source = m.source;
  rep.compute = base.compute;

  const std::set<std::string> measured_models = gpu_models(m.provenance.gpu_name);
  const std::set<std::string> base_models = gpu_models(base.gpu.name);
  if (!measured_models.empty() && !base_models.empty() &&
      std::none_of(measured_models.begin(), measured_models.end(),
                   [&](const std::string& s) { return base_models.count(s) > 0; }))
    rep.warnings.push_back(fmt::format("measured GPU \"{}\" is not the base profile's \"{}\"",
                                       m.provenance.gpu_name, base.gpu.name));

  fit_gemm(m, base, rep);

  if (m.launch_overhead_s) {
    rep.compute.launch_overhead_s = *m.launch_overhead_s;
    rep.fitted.push_back("compute.launch_overhead");
  }
  if (std::any_of(m.memory.begin(), m.memory.end(),
                  [](const MeasuredMemory& e) { return e.kernel == "copy"; })) {
    rep.copy_bw_bytes_per_s =
        fit_memory_kernel(m, "copy", rep.compute.launch_overhead_s, rep.copy_max_rel_err);
    if (base.gpu.hbm_bytes_per_s > 0) {
      double eff = rep.copy_bw_bytes_per_s / base.gpu.hbm_bytes_per_s;
      if (eff > 1) {
        rep.warnings.push_back(fmt::format("memory: measured {:.0f} GB/s exceeds the datasheet "
                                           "{:.0f} GB/s; memory_bound_efficiency capped at 1",
                                           rep.copy_bw_bytes_per_s / 1e9,
                                           base.gpu.hbm_bytes_per_s / 1e9));
        eff = 1;
      }
      rep.compute.membound_eff = eff;
      rep.fitted.push_back("compute.memory_bound_efficiency");
    }
  }
  if (std::any_of(m.memory.begin(), m.memory.end(),
                  [](const MeasuredMemory& e) { return e.kernel == "adam"; }))
    rep.adam_bw_bytes_per_s =
        fit_memory_kernel(m, "adam", rep.compute.launch_overhead_s, rep.adam_max_rel_err);

  if (!m.overlap.empty()) {
    const int sms = m.provenance.sm_count > 0 ? m.provenance.sm_count : base.gpu.sms;
    if (sms <= 0) {
      rep.warnings.push_back("overlap: SM count unknown (neither measured nor in the profile)");
    } else {
      for (const MeasuredOverlap& o : m.overlap)
        rep.comm_sms_estimates.push_back(
            std::max(0.0, sms * (1.0 - o.gemm_alone_s / o.gemm_overlapped_s)));
      std::vector<double> v = rep.comm_sms_estimates;
      std::sort(v.begin(), v.end());
      const double med = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
      rep.compute.comm_sms = static_cast<int>(std::lround(med));
      rep.fitted.push_back("compute.comm_sms");
    }
  }

  if (m.context_memory_bytes) {
    // Whole MiB, rounded up: the reserve is a bound, never below what was measured.
    const double reserve = std::ceil(*m.context_memory_bytes / 1048576.0) * 1048576.0;
    if (reserve < base.gpu.memory_bytes) {
      rep.memory_reserved_bytes = reserve;
      rep.fitted.push_back("gpu.memory_reserved");
    } else {
      rep.warnings.push_back(fmt::format(
          "memory: {} in use before the benchmark is not less than the base profile's {} of "
          "GPU memory; gpu.memory_reserved not written",
          format_bytes(*m.context_memory_bytes), format_bytes(base.gpu.memory_bytes)));
    }
  }

  if (!m.communicators.empty()) {
    std::vector<CommunicatorMemory>& out = rep.communicator_memory;
    const std::string src = fmt::format("stepcast fit of {}", m.file);
    for (const MeasuredCommunicator& c : m.communicators) {
      const double bytes = std::ceil(c.bytes_per_gpu / 1048576.0) * 1048576.0;
      auto same = std::find_if(out.begin(), out.end(), [&](const CommunicatorMemory& e) {
        return e.ranks == c.ranks && e.nodes == c.nodes;
      });
      if (same == out.end())
        out.push_back({c.ranks, c.nodes, bytes, src});
      else
        same->bytes = std::max(same->bytes, bytes);  // several algorithms: the largest
    }
    for (const CommunicatorMemory& e : base.collectives.communicator_memory)
      if (std::none_of(out.begin(), out.end(), [&](const CommunicatorMemory& x) {
            return x.ranks == e.ranks && x.nodes == e.nodes;
          }))
        out.push_back(e);
    std::sort(out.begin(), out.end(), [](const CommunicatorMemory& a, const CommunicatorMemory& b) {
      return std::tie(a.nodes, a.ranks) < std::tie(b.nodes, b.ranks);
    });
    rep.fitted.push_back("collectives.communicator_memory");
  }

  fit_collectives(m, base, rep);
  write_yaml(base, rep, m, out_yaml);
  // What was written must load as any profile does (fitted values are kept in range, so a
  // failure here is a bug of the writer, not of the input).
  try {
    load_profile(out_yaml, default_profiles_dir());
  } catch (const InputError& e) {
    STEPCAST_CHECK(false, std::string("the fitted profile does not load: ") + e.what());
  }
  if (report) *report = std::move(rep);
}

std::string FitReport::text() const {
  std::ostringstream o;
  o << "stepcast fit: " << measurements_file << " -> " << out_yaml << "\n";
  o << "  base profile: " << base_profile << "\n";
  o << "  measured on: " << (gpu_name.empty() ? "?" : gpu_name) << ", "
    << (date_utc.empty() ? "date not recorded" : date_utc) << "\n";
  if (!source.empty()) o << "  source: " << source << "\n";
  if (gemm_points + gemm_fp8_points > 0) {
    o << fmt::format("  gemm: t = flops / (peak * {:.4f} * M/(M+{:.1f}) * n/(n+{:.1f}) * "
                     "k/(k+{:.1f})) + {:.2f} us; fp8 ceiling {:.4f}\n",
                     compute.gemm_max_eff, compute.gemm_half_m, compute.gemm_half_n,
                     compute.gemm_half_k, compute.gemm_fixed_time_s * 1e6, compute.fp8_max_eff);
    const auto in_table = std::count_if(gemm_residuals.begin(), gemm_residuals.end(),
                                        [](const GemmResidual& r) { return r.in_table; });
    o << fmt::format("        {} bf16/fp16 + {} fp8 points: curve rms error {}, max {}; {} "
                     "points off by > {} written to gemm_table",
                     gemm_points, gemm_fp8_points, pct(gemm_rms_rel_err), pct(gemm_max_rel_err),
                     in_table, pct(kTableTolerance));
    o << "\n";
  }
  if (copy_bw_bytes_per_s > 0)
    o << fmt::format("  memory: copy {:.1f} GB/s (fit max error {}) -> memory_bound_efficiency "
                     "{:.4f}\n",
                     copy_bw_bytes_per_s / 1e9, pct(copy_max_rel_err), compute.membound_eff);
  if (adam_bw_bytes_per_s > 0)
    o << fmt::format("  memory: adam-like update {:.1f} GB/s (fit max error {}), not written\n",
                     adam_bw_bytes_per_s / 1e9, pct(adam_max_rel_err));
  if (std::find(fitted.begin(), fitted.end(), "compute.launch_overhead") != fitted.end())
    o << fmt::format("  launch overhead: {:.2f} us\n", compute.launch_overhead_s * 1e6);
  if (memory_reserved_bytes > 0)
    o << fmt::format("  gpu.memory_reserved: {:.0f} MiB in use before the memory benchmark (CUDA "
                     "context, loaded modules)\n",
                     memory_reserved_bytes / 1048576.0);
  for (const CommunicatorMemory& e : communicator_memory)
    o << fmt::format("  communicator memory: {} ranks on {} node(s): {:.0f} MiB per GPU{}\n",
                     e.ranks, e.nodes, e.bytes / 1048576.0,
                     e.source.rfind("stepcast fit of " + measurements_file, 0) == 0 ? ""
                                                                                  : " (base)");
  if (!comm_sms_estimates.empty())
    o << fmt::format("  comm_sms: {} (from {} overlap measurements)\n", compute.comm_sms,
                     comm_sms_estimates.size());
  for (const CollectiveFit& f : collectives) {
    o << fmt::format("  {} n={} N={} (algo {}): {} points\n", f.op, f.ranks, f.nodes, f.algo,
                     f.sizes_bytes.size());
    for (const CollectiveSegment& s : f.segments)
      o << fmt::format("    [{}, {}]: latency {:.2f} us, busbw {:.1f} GB/s, max error {} over "
                       "{} points{}\n",
                       format_bytes(s.min_bytes), format_bytes(s.max_bytes), s.latency_s * 1e6,
                       s.busbw_bytes_per_s / 1e9, pct(s.max_rel_err), s.points,
                       s.latency_bound ? " (latency-bound)" : "");
  }
  for (const std::string& w : warnings) o << "  warning: " << w << "\n";
  return o.str();
}

}  // namespace stepcast
