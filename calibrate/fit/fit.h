// `stepcast fit`: measurements.json (calibrate/bench) + a base hardware profile -> a new
// profile YAML whose compute: values are fitted and whose collectives.calibrated: gains one
// entry per collective, group shape and size range (keys: sim/cluster/params.h).
//
// What is fitted and how (the residuals of every fit are in FitReport):
//  - GEMM kernel time vs shape, the model of sim/cost/compute.cc (M = batch * m):
//      t = flops / (peak * E * M/(M+hm) * n/(n+hn) * k/(k+hk)) + fixed_time
//    by Levenberg-Marquardt on log residuals (relative error). bf16/fp16 points give E
//    (gemm.max_efficiency), hm, hn, hk and fixed_time; fp8 points give fp8_max_efficiency
//    and, with 8 or more of them beside a fitted 16-bit shape (or a profile that has them
//    already), fp8's own half sizes (fp8_half_m/n/k; the fixed time shared); with too few,
//    the ceiling alone; when only fp8 was measured, all five, shared.
//    Measured shapes the curve misses by more than kTableTolerance go to
//    compute.gemm_table, so the fitted profile reproduces them within that tolerance.
//  - Grouped expert GEMMs (fit_grouped.cc; "grouped_gemm" points, which never enter the
//    curve or gemm_table): compute.gemm.grouped_efficiency e, by least squares on log time
//    after the GEMM fit, with t_model the simulator's grouped-GEMM time under the fitted
//    profile (grouped_gemm_kernel_time_s: one GEMM per group at its own shape, 4 streams):
//      t = t_model / e,  e = geometric mean of t_model / t  (capped at 2, the key's bound)
//  - Fused attention (fit_attention.cc): sim/cost/compute.cc's curve,
//      t = flops / (peak_bf16 * E_dir * s/(s+half_seq) * d/(d+half_head_dim)) + launch,
//    over the cuDNN points when there are any (the kernel Transformer Engine runs), least
//    squares on log time: E_fwd, E_bwd in closed form, the half sizes by a refined grid.
//  - HBM: t = a + bytes/bw over the copy kernel (sizes above the launch-bound range);
//    memory_bound_efficiency = bw / datasheet gpu.hbm_bandwidth. launch_overhead: measured.
//  - Collectives, per (op, ranks, nodes): t = alpha + S*F/busbw (nccl-tests S and busbw
//    factor F) by least squares on relative error. One line rarely fits 1 KB..4 GB within a
//    few percent (NCCL switches protocol LL -> LL128 -> Simple), so sizes are split, from
//    the largest down, into contiguous ranges each fitted within kCollectiveTolerance
//    (kLatencyTolerance where the latency term dominates: noise); each range becomes one
//    calibrated entry [min_size, max_size].
//  - comm_sms: a GEMM slowed from t0 to t1 by a concurrent NCCL kernel lost the SMs that
//    kernel holds: t1/t0 = sms/(sms - comm_sms)  =>  comm_sms = sms * (1 - t0/t1).
//  - collectives.communicator_memory: per communicator shape (ranks, nodes), the device
//    memory NCCL held per GPU (communicators[]; the largest over algorithms), in whole MiB
//    rounded up; the base's entries of other shapes are kept.
//  - gpu.memory_reserved: the device memory in use before the memory benchmark allocated
//    anything (CUDA context and loaded modules; memory.context_memory_bytes), which no
//    training tensor can use. A lower bound of what a training process holds besides its
//    tensors (NCCL's buffers and the allocator's slack come on top).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "calibrate/fit/measurements.h"
#include "sim/cluster/params.h"

namespace stepcast {

inline constexpr double kTableTolerance = 0.05;       // GEMM curve vs measurement
inline constexpr double kCollectiveTolerance = 0.04;  // per size range, max relative error
inline constexpr double kLatencyTolerance = 0.30;     // the same in latency-bound ranges

// ---- building blocks (pure functions, tested on closed forms) ---------------------------

// t = alpha_s + beta_s_per_byte * x, fitted by least squares on relative residuals
// (weights 1/t^2). valid: alpha >= 0 and beta > 0.
struct AlphaBeta {
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  double max_rel_err = 0;  // max |fit/t - 1| over the points
  bool valid = false;
};
AlphaBeta fit_alpha_beta(const std::vector<double>& x, const std::vector<double>& t);

// One contiguous size range of a collective and its line.
struct CollectiveSegment {
  double min_bytes = 0, max_bytes = 0;  // measured sizes at the ends of the range
  double latency_s = 0;
  double busbw_bytes_per_s = 0;
  double max_rel_err = 0;
  int points = 0;
  // The latency term is at least the bandwidth term even at the largest size of the range.
  bool latency_bound = false;
};
// Sizes S (bytes, nccl-tests convention) and times (s); F = busbw factor. Segments are
// returned from the smallest sizes to the largest.
std::vector<CollectiveSegment> fit_collective_curve(const std::vector<double>& sizes,
                                                    const std::vector<double>& times_s,
                                                    double busbw_factor, double tolerance);

// One GEMM measurement as the curve sees it: M = batch * m (sim/cost/compute.cc folds the
// batch into M), its FLOPs, the dtype's peak and the measured kernel time.
struct GemmSample {
  double big_m = 0, n = 0, k = 0;
  double flops = 0;
  double peak_flop_per_s = 0;
  double time_s = 0;
};
// The GEMM time model of sim/cost/compute.cc:
//   t = flops / (peak * E * M/(M+hm) * n/(n+hn) * k/(k+hk)) + fixed_time
struct GemmCurve {
  double max_eff = 0.8, half_m = 128, half_n = 128, half_k = 128, fixed_time_s = 0;
  double rms_log_err = 0;  // sqrt(mean((log t_fit - log t)^2))
  int iterations = 0;
};
double gemm_curve_time_s(const GemmCurve& c, const GemmSample& s);
// Levenberg-Marquardt on log-time residuals over the parameters marked free (order: E, hm,
// hn, hk, fixed_time), starting from `start` (others held). With free half sizes it also
// restarts from several half sizes and keeps the best.
GemmCurve fit_gemm_curve(const std::vector<GemmSample>& samples, const GemmCurve& start,
                         const std::array<bool, 5>& free);

// ---- the fit -----------------------------------------------------------------------------

struct GemmResidual {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  DType dtype = DType::kBf16;
  double measured_flop_per_s = 0;
  double curve_flop_per_s = 0;  // parametric curve alone (sim's gemm_efficiency, no table)
  bool in_table = false;        // its (M, n, k, dtype) went to gemm_table (a measurement of it
                                // is off the curve by > kTableTolerance)
};

struct CollectiveFit {
  std::string op;
  int ranks = 0, nodes = 0;
  std::string algo;
  std::vector<CollectiveSegment> segments;
  std::vector<double> sizes_bytes, times_s;  // the points fitted
};

struct FitReport {
  std::string measurements_file, base_profile, out_yaml;
  std::string gpu_name, date_utc, source;
  ComputeParams compute;            // the compute parameters written (fitted where measured)
  std::vector<std::string> fitted;  // "compute.gemm.max_efficiency", ...
  // GEMM
  int gemm_points = 0, gemm_fp8_points = 0;
  double gemm_rms_rel_err = 0, gemm_max_rel_err = 0;  // curve alone, over fitted points
  std::vector<GemmResidual> gemm_residuals;
  // Grouped GEMM (compute.gemm.grouped_efficiency): relative error of the simulator's time
  // over the fitted efficiency, and the range of t_model / t_measured before it
  int grouped_gemm_points = 0;
  double grouped_gemm_rms_rel_err = 0, grouped_gemm_max_rel_err = 0;
  std::array<double, 2> grouped_gemm_ratio_range = {0, 0};
  // Attention (per direction: 0 forward, 1 backward; relative error of the time)
  std::string attention_backend;  // "cudnn" or "all backends"
  int attention_points[2] = {0, 0};
  double attention_rms_rel_err[2] = {0, 0}, attention_max_rel_err[2] = {0, 0};
  // Memory
  double copy_bw_bytes_per_s = 0, adam_bw_bytes_per_s = 0;
  double copy_max_rel_err = 0, adam_max_rel_err = 0;
  // Collectives
  std::vector<CollectiveFit> collectives;
  std::vector<CollectiveCalib> calibrated;  // entries written
  // gpu.memory_reserved: the measured context memory (0: not measured, or not written)
  double memory_reserved_bytes = 0;
  // collectives.communicator_memory as written (when fitted: the base's other shapes kept)
  std::vector<CommunicatorMemory> communicator_memory;
  // Overlap
  std::vector<double> comm_sms_estimates;
  std::vector<std::string> warnings;

  std::string text() const;  // human-readable summary with residuals
};

// Loads and validates the measurements and the base profile (load_profile; by name in
// default_profiles_dir() or by path), fits, and writes `out_yaml`: the base profile's YAML
// with compute: values replaced and collectives.calibrated: entries added (entries of the
// same op and group shape are replaced), with comments recording the measurements file,
// date, GPU and the fit residuals. Throws InputError on bad input (file + JSON pointer).
void fit_profile(const std::string& measurements_path, const std::string& base_profile,
                 const std::string& out_yaml, FitReport* report);
// The same over several measurement files of one GPU model (load_measurements of a list).
void fit_profile(const std::vector<std::string>& measurements_paths,
                 const std::string& base_profile, const std::string& out_yaml, FitReport* report);

}  // namespace stepcast
