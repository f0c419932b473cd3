// Memory bandwidth and launch overhead: HBM bandwidth of the copy and adam-like kernels
// (t = a + bytes/bw above the launch-bound sizes) -> compute.memory_bound_efficiency; the
// measured launch overhead -> compute.launch_overhead.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "calibrate/fit/fit_internal.h"

namespace stepcast::fit_detail {

namespace {

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

}  // namespace

void fit_memory_bandwidth(const Measurements& m, const HwProfile& base, FitReport& rep) {
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
        rep.warnings.push_back(
            fmt::format("memory: measured {:.0f} GB/s exceeds the datasheet "
                        "{:.0f} GB/s; memory_bound_efficiency capped at 1",
                        rep.copy_bw_bytes_per_s / 1e9, base.gpu.hbm_bytes_per_s / 1e9));
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
}

}  // namespace stepcast::fit_detail
