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
