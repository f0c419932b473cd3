// Private to calibrate/fit: the steps of fit_profile (fit.cc), one per fitted model, each
// adding to the FitReport what it fitted (rep.fitted: the profile keys it sets), and the
// writer of the fitted profile.
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

#include "calibrate/fit/fit.h"
#include "calibrate/fit/measurements.h"
#include "sim/cluster/profile.h"

namespace stepcast::fit_detail {

// A relative error as a percentage with two decimals ("1.25%").
inline std::string pct(double f) { return fmt::format("{:.2f}%", 100 * f); }

// Throws InputError with `issues` (keys: JSON pointers into the measurements) unless it is
// empty, each placed at its line and column when the measurements are one file (fit.cc).
void throw_measurement_issues(std::vector<InputIssue> issues, const Measurements& m);

// fit_gemm.cc: the GEMM efficiency curve (and the gemm_table of shapes it misses).
void fit_gemm(const Measurements& m, const HwProfile& base, FitReport& rep);
// The base profile's tensor-core peak of `d` (FLOP/s); 0 when it has none (such points are
// not fitted).
double peak_of(const HwProfile& base, DType d);
// A GEMM measured faster than that peak was not measured (a time too small for its FLOPs,
// or the wrong GPU's base profile: it would fit a profile faster than the GPU): the issue at
// `pointer`/time_us, `what` naming the GEMM ("4096x4096x4096 bf16 GEMM").
InputIssue above_peak(const Measurements& m, const std::string& pointer, double flop_per_s,
                      double peak, const std::string& what);

// fit_grouped.cc: compute.gemm.grouped_efficiency, against the simulator's grouped-GEMM time
// under the profile fit_gemm left in rep.compute (run after it).
void fit_grouped_gemm(const Measurements& m, const HwProfile& base, FitReport& rep);

// fit_attention.cc: the fused-attention efficiency curve (after fit_memory_bandwidth: it
// uses the fitted launch overhead).
void fit_attention(const Measurements& m, const HwProfile& base, FitReport& rep);

// fit_memory.cc: the launch overhead; HBM bandwidth of the copy kernel (->
// memory_bound_efficiency) and of the adam-like update (reported, not written).
void fit_memory_bandwidth(const Measurements& m, const HwProfile& base, FitReport& rep);

// fit_resources.cc: the SMs communication kernels hold (compute.comm_sms), the memory in
// use before the benchmark (gpu.memory_reserved) and per communicator.
void fit_comm_sms(const Measurements& m, const HwProfile& base, FitReport& rep);
void fit_memory_reserved(const Measurements& m, const HwProfile& base, FitReport& rep);
void fit_communicator_memory(const Measurements& m, const HwProfile& base, FitReport& rep);

// fit_collectives.cc: calibrated collective entries, a piecewise alpha-beta curve per
// (op, ranks, nodes).
void fit_collectives(const Measurements& m, const HwProfile& base, FitReport& rep);

// fit_report.cc: the fitted profile, written to `out_yaml` (the base's text with the fitted
// keys rewritten when it can be, with the report as its header).
void write_yaml(const HwProfile& base, const FitReport& rep, const Measurements& m,
                const std::string& out_yaml);

}  // namespace stepcast::fit_detail
