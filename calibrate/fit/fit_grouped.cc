// compute.gemm.grouped_efficiency: how fast the measured grouped expert GEMMs (stepcast-bench
// gemm, "grouped_gemm") ran against the simulator's own time for them (fit.h).
//
// The simulator costs a grouped GEMM of G groups of [m, n, k] as Transformer Engine runs it,
// G cuBLAS GEMMs at the dense curve (or gemm_table) of the expert's shape over 4 streams
// (grouped_gemm_kernel_time_s, sim/cost/compute.cc), divided by the efficiency e. With the
// dense profile as fit_gemm left it, each point i gives t_model_i, and
//   log t_i = log t_model_i - log e + noise
// is least squares in log e alone: log e = mean(log(t_model_i / t_i)), the geometric mean of
// the ratios. The residuals are those of t_model_i / e against t_i.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "calibrate/fit/fit_internal.h"
#include "sim/cost/cost.h"

namespace stepcast::fit_detail {

namespace {

// The profile key's bound (sim/cluster/params.cc): a grouped GEMM more than twice as fast as
// its experts' GEMMs at the dense curve is no kernel the model describes.
constexpr double kMaxGroupedEfficiency = 2.0;

// The layout the simulator gives an expert GEMM of this phase (model/workload_parts.h,
// Linear: forward NN, input gradient NT, weight gradient TN), which its alignment rule reads.
GemmLayout simulated_layout(const std::string& phase) {
  if (phase == "bwd_input") return GemmLayout::kNT;
  if (phase == "bwd_weight") return GemmLayout::kTN;
  return GemmLayout::kNN;
}

}  // namespace

void fit_grouped_gemm(const Measurements& m, const HwProfile& base, FitReport& rep) {
  if (m.grouped_gemm.empty()) return;
  HwProfile dense = base;
  dense.compute = rep.compute;    // the fitted curve and gemm_table
  std::vector<double> log_ratio;  // log(t_model / t_measured), one per fitted point
  std::set<DType> no_peak;
  std::vector<InputIssue> impossible;
  for (const MeasuredGroupedGemm& g : m.grouped_gemm) {
    const double peak = peak_of(base, g.dtype);
    if (peak <= 0) {
      no_peak.insert(g.dtype);
      continue;
    }
    if (!(g.flop_per_s <= peak)) {
      impossible.push_back(above_peak(m, g.pointer, g.flop_per_s, peak,
                                      fmt::format("grouped GEMM of {} x {}x{}x{} {}", g.groups, g.m,
                                                  g.n, g.k, dtype_name(g.dtype))));
      continue;
    }
    const GemmShape shape{g.m, g.n, g.k, g.groups, g.dtype, simulated_layout(g.phase)};
    log_ratio.push_back(std::log(grouped_gemm_kernel_time_s(shape, dense) / g.time_s));
  }
  throw_measurement_issues(std::move(impossible), m);
  for (DType d : no_peak)
    rep.warnings.push_back(
        fmt::format("grouped_gemm: no {} peak in the base profile: those points are not fitted",
                    dtype_name(d)));
  rep.grouped_gemm_points = static_cast<int>(log_ratio.size());
  if (log_ratio.empty()) return;

  double sum = 0;
  for (double r : log_ratio) sum += r;
  double e = std::exp(sum / static_cast<double>(log_ratio.size()));
  if (e > kMaxGroupedEfficiency) {
    rep.warnings.push_back(fmt::format(
        "grouped_gemm: the measured grouped GEMMs ran {:.3g}x faster than their experts' GEMMs "
        "at the dense curve; grouped_efficiency capped at {} (wrong base profile or dense "
        "curve?)",
        e, kMaxGroupedEfficiency));
    e = kMaxGroupedEfficiency;
  }
  const auto [lo, hi] = std::minmax_element(log_ratio.begin(), log_ratio.end());
  rep.grouped_gemm_ratio_range = {std::exp(*lo), std::exp(*hi)};
  double sq = 0;
  for (double r : log_ratio) {
    const double err = std::exp(r) / e - 1;
    sq += err * err;
    rep.grouped_gemm_max_rel_err = std::max(rep.grouped_gemm_max_rel_err, std::abs(err));
  }
  rep.grouped_gemm_rms_rel_err = std::sqrt(sq / static_cast<double>(log_ratio.size()));
  rep.compute.gemm_grouped_eff = e;
  rep.fitted.push_back("compute.gemm.grouped_efficiency");
  if (rep.gemm_points + rep.gemm_fp8_points == 0)
    rep.warnings.push_back(
        "grouped_gemm: no dense GEMM measured beside them: grouped_efficiency is relative to "
        "the base profile's GEMM curve");
}

}  // namespace stepcast::fit_detail
