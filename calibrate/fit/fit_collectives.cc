// Collectives: alpha-beta lines (t = alpha + beta * bytes) and the piecewise curve of one
// collective over its sizes (fit.h), and fit_collectives, which turns the measured
// collectives into calibrated entries (sim/cluster/params.h CollectiveCalib).
#include "calibrate/fit/fit.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "calibrate/fit/fit_internal.h"
#include "model/error.h"
#include "sim/cost/cost.h"

namespace stepcast {

// ------------------------------------------------------------------ alpha-beta lines

namespace {

double max_rel_err(const std::vector<double>& x, const std::vector<double>& t, double a, double b) {
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

namespace fit_detail {

namespace {

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
    for (CollOp c :
         {CollOp::kAllReduce, CollOp::kReduceScatter, CollOp::kAllGather, CollOp::kBroadcast}) {
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

}  // namespace

void fit_collectives(const Measurements& m, const HwProfile& base, FitReport& rep) {
  // Group by (op, ranks, nodes); within a group prefer NCCL's own choice ("default").
  std::map<std::tuple<std::string, int, int>,
           std::map<std::string, std::vector<const MeasuredCollective*>>>
      groups;
  for (const MeasuredCollective& c : m.collectives)
    groups[{c.op, c.ranks, c.nodes}][c.algo].push_back(&c);
  for (const auto& [key, by_algo] : groups) {
    const auto& [op, ranks, nodes] = key;
    auto chosen = by_algo.find("default");
    if (chosen == by_algo.end()) chosen = by_algo.begin();
    for (const auto& [algo, pts] : by_algo)
      if (algo != chosen->first)
        rep.warnings.push_back(
            fmt::format("collectives: {} n={} N={}: algo \"{}\" not fitted "
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
        rep.warnings.push_back(
            fmt::format("collectives: {} n={} N={}: algo \"{}\" is not one "
                        "the model runs ({}): not written",
                        op, ranks, nodes, f.algo, fmt::join(collective_algorithm_names(), ", ")));
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
      e.source = fmt::format(
          "stepcast fit of {} ({}, {}), NCCL {}, algo {}: {} points, max "
          "error {}{}",
          m.file, m.provenance.gpu_name,
          m.provenance.date_utc.empty() ? "date not recorded" : m.provenance.date_utc,
          m.provenance.nccl_version.empty() ? "?" : m.provenance.nccl_version, f.algo, s.points,
          pct(s.max_rel_err), s.latency_bound ? ", latency-bound range" : "");
      rep.calibrated.push_back(e);
    }
    rep.fitted.push_back(fmt::format("collectives.calibrated[{} n={} N={}]", op, ranks, nodes));
    rep.collectives.push_back(std::move(f));
  }
}

}  // namespace fit_detail

}  // namespace stepcast
