// Tests of calibrate/fit: the least-squares building blocks on closed forms, fits of
// recorded published measurements (tests/data/calibration/, made by convert_measured.py
// from tests/data/measured/) checked through the simulator's own cost functions
// after a YAML round trip, and one bad-input test per validation rule.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "calibrate/fit/fit.h"
#include "calibrate/fit/measurements.h"
#include "model/error.h"
#include "sim/cluster/profile.h"
#include "sim/cost/cost.h"
#include "tests/calibrate/fit_test_util.h"

namespace stepcast {
namespace {

std::string data(const std::string& name) {
  return std::string(STEPCAST_SOURCE_DIR) + "/tests/data/calibration/" + name;
}

using fit_test::only_issue;
using fit_test::out_path;
using fit_test::profiles_dir;
using fit_test::replace;
using fit_test::write_file;

// ---------------------------------------------------------------- closed forms

TEST(FitAlphaBeta, RecoversAnExactLine) {
  // t = 20 us + x / 360 GB/s exactly -> alpha = 20e-6 s, beta = 1/360e9 s/B.
  std::vector<double> x, t;
  for (double s = 1e6; s <= 8e9; s *= 2) {
    x.push_back(s);
    t.push_back(20e-6 + s / 360e9);
  }
  const AlphaBeta ab = fit_alpha_beta(x, t);
  ASSERT_TRUE(ab.valid);
  EXPECT_NEAR(ab.alpha_s, 20e-6, 1e-12);
  EXPECT_NEAR(1.0 / ab.beta_s_per_byte, 360e9, 360e9 * 1e-9);
  EXPECT_LT(ab.max_rel_err, 1e-9);
}

TEST(FitAlphaBeta, OneDistinctSizeIsNotALine) {
  const AlphaBeta ab = fit_alpha_beta({1e6, 1e6}, {1e-5, 1.1e-5});
  EXPECT_FALSE(ab.valid);
}

TEST(FitCollectiveCurve, SplitsTwoProtocolRegimes) {
  // Two regimes (as NCCL LL -> Simple): S <= 1 MiB: 10 us + S*F/100 GB/s; above: 30 us +
  // S*F/300 GB/s, F = 2*7/8 (allreduce, 8 ranks). One line cannot fit both within 4%:
  // at 1 MiB the regimes differ by (10 + 18.35) vs (30 + 6.12) us = 27%.
  const double f = 2.0 * 7 / 8;
  std::vector<double> s, t;
  for (double b = 4096; b <= 4.0 * (1 << 30); b *= 2) {
    s.push_back(b);
    t.push_back(b <= (1 << 20) ? 10e-6 + b * f / 100e9 : 30e-6 + b * f / 300e9);
  }
  const auto segs = fit_collective_curve(s, t, f, kCollectiveTolerance);
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].min_bytes, 4096);
  EXPECT_EQ(segs[0].max_bytes, 1 << 20);
  EXPECT_EQ(segs[1].min_bytes, 2 << 20);
  EXPECT_NEAR(segs[0].latency_s, 10e-6, 1e-12);
  EXPECT_NEAR(segs[0].busbw_bytes_per_s, 100e9, 1e3);
  EXPECT_NEAR(segs[1].latency_s, 30e-6, 1e-12);
  EXPECT_NEAR(segs[1].busbw_bytes_per_s, 300e9, 1e3);
  EXPECT_FALSE(segs[1].latency_bound);
}

TEST(FitCollectiveCurve, EveryPointWithinToleranceOnNoisyData) {
  // Property over random monotone curves with 3% multiplicative noise: the greedy split
  // keeps every point within the tolerance whenever a range has more than one size.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(-0.03, 0.03), lat(5e-6, 50e-6), bw(50e9, 500e9);
  for (int trial = 0; trial < 50; ++trial) {
    const double a = lat(rng), b = bw(rng);
    std::vector<double> s, t;
    for (double x = 1024; x <= 1e10; x *= 2) {
      s.push_back(x);
      t.push_back((a + x / b) * (1 + noise(rng)));
    }
    for (const CollectiveSegment& seg : fit_collective_curve(s, t, 1.0, kCollectiveTolerance)) {
      EXPECT_LE(seg.max_rel_err, kCollectiveTolerance + 1e-12);
      EXPECT_GT(seg.busbw_bytes_per_s, 0);
      EXPECT_GE(seg.latency_s, 0);
    }
  }
}

TEST(FitGemmCurve, RecoversParametersOfTheModel) {
  // Data made by the model itself (E=0.75, hm=100, hn=60, hk=120, fixed 5 us, peak
  // 989.4 TFLOP/s) over m,n,k in {256..8192}: LM must return the generating parameters.
  const GemmCurve truth{0.75, 100, 60, 120, 5e-6, 0, 0};
  std::vector<GemmSample> s;
  for (double m = 256; m <= 8192; m *= 2)
    for (double n = 256; n <= 8192; n *= 2)
      for (double k = 256; k <= 8192; k *= 2) {
        GemmSample g{m, n, k, 2 * m * n * k, 989.4e12, 0};
        g.time_s = gemm_curve_time_s(truth, g);
        s.push_back(g);
      }
  const GemmCurve fit = fit_gemm_curve(s, GemmCurve{}, {true, true, true, true, true});
  EXPECT_NEAR(fit.max_eff, 0.75, 1e-4);
  EXPECT_NEAR(fit.half_m, 100, 0.1);
  EXPECT_NEAR(fit.half_n, 60, 0.1);
  EXPECT_NEAR(fit.half_k, 120, 0.1);
  EXPECT_NEAR(fit.fixed_time_s, 5e-6, 1e-9);
  EXPECT_LT(fit.rms_log_err, 1e-6);
}

// ---------------------------------------------------------------- recorded measurements

struct Fitted {
  FitReport report;
  HwProfile profile;  // the written YAML, loaded back by the simulator's loader
};

Fitted fit(const std::string& measurements, const std::string& base) {
  Fitted f;
  const std::string out = out_path("fitted.yaml");
  fit_profile(data(measurements), base, out, &f.report);
  f.profile = load_profile(out, profiles_dir());
  return f;
}

// Collective points above the latency-bound range, predicted by the simulator's
// collective_time() from the loaded profile: within 5% of the measurement.
void expect_collectives_reproduced(const Fitted& f) {
  int checked = 0;
  for (const CollectiveFit& c : f.report.collectives) {
    for (std::size_t i = 0; i < c.sizes_bytes.size(); ++i) {
      const double s = c.sizes_bytes[i];
      const CollectiveSegment* seg = nullptr;
      for (const CollectiveSegment& g : c.segments)
        if (s >= g.min_bytes && s <= g.max_bytes) seg = &g;
      ASSERT_NE(seg, nullptr) << c.op << " " << s;
      if (seg->latency_bound) continue;
      CollOp op = CollOp::kAllReduce;
      if (c.op == "reduce_scatter") op = CollOp::kReduceScatter;
      if (c.op == "allgather") op = CollOp::kAllGather;
      if (c.op == "all_to_all") op = CollOp::kAllToAll;
      if (c.op == "broadcast") op = CollOp::kBroadcast;
      const GroupShape g{c.ranks, c.nodes, c.ranks / c.nodes, 1};
      // An entry answers where the model runs its algorithm: Ring sweeps (NCCL_ALGO=ring)
      // where NVLS is off.
      HwProfile hw = f.profile;
      if (c.algo == "ring") hw.node.nvls = false;
      const CollectiveChoice ch = collective_time(op, s, g, hw);
      EXPECT_TRUE(ch.calibrated) << c.op << " n=" << c.ranks << " S=" << s;
      EXPECT_NEAR(ch.time_s / c.times_s[i], 1.0, 0.05)
          << c.op << " n=" << c.ranks << " S=" << s << " measured " << c.times_s[i] * 1e6
          << " us, predicted " << ch.time_s * 1e6 << " us";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(FitRecorded, TogetherH100RingCollectivesWithin5Percent) {
  // together-nccl-tests 8x H100: ring allreduce, allgather, reduce_scatter, 1 MB..8 GB.
  const Fitted f = fit("h100_together_nccl_ring.json", "h100-sxm");
  ASSERT_EQ(f.report.collectives.size(), 3u);
  expect_collectives_reproduced(f);
  // t = alpha + S*F/B >= S*F/B, so the top range's B is at least the measured busbw S*F/t
  // at the largest size, up to the fit's error: published 8 GiB busbw ring allreduce 368,
  // allgather 359-363, reduce_scatter 358-362 GB/s (the CSVs' last rows).
  const std::map<std::string, double> busbw_8g = {
      {"allreduce", 368.0}, {"allgather", 359.0}, {"reduce_scatter", 358.0}};
  for (const CollectiveFit& c : f.report.collectives) {
    const double b = c.segments.back().busbw_bytes_per_s / 1e9;
    EXPECT_GE(b, busbw_8g.at(c.op) * (1 - kCollectiveTolerance)) << c.op;
    EXPECT_LE(b, busbw_8g.at(c.op) * 1.2) << c.op;
  }
}

TEST(FitRecorded, TogetherH100NvlsAllreduceWithin5Percent) {
  const Fitted f = fit("h100_together_allreduce_nvls.json", "h100-sxm");
  expect_collectives_reproduced(f);
  // The base profile's NVLS entry (allreduce, 8 ranks, 1 node) is replaced, not kept beside.
  int entries = 0;
  for (const CollectiveCalib& c : f.profile.collectives.calibrated)
    if (c.op == "allreduce" && c.ranks == 8 && c.nodes == 1) ++entries;
  EXPECT_EQ(static_cast<std::size_t>(entries), f.report.collectives[0].segments.size());
}

TEST(FitRecorded, A100AllreduceWithin5Percent) {
  const Fitted f = fit("a100_stas00_allreduce.json", "a100-80g-sxm");
  expect_collectives_reproduced(f);
  // Top range busbw ~ published 16 GiB busbw 234.9 GB/s.
  EXPECT_NEAR(f.report.collectives[0].segments.back().busbw_bytes_per_s / 1e9, 234.9, 5);
}

TEST(FitRecorded, XlaCollectivesAllGroupShapesWithin5Percent) {
  // XLA sm_90 table: allreduce, allgather, reduce_scatter, all_to_all over groups of 2, 4, 8.
  const Fitted f = fit("h100_xla_collectives.json", "h100-sxm");
  EXPECT_EQ(f.report.collectives.size(), 12u);
  expect_collectives_reproduced(f);
}

TEST(FitRecorded, XlaBf16GemmReproducedThroughTheSimulator) {
  const Fitted f = fit("h100_xla_gemm_bf16.json", "h100-sxm");
  const ComputeParams& c = f.profile.compute;
  EXPECT_EQ(f.report.gemm_points, 375);
  // The loaded profile holds what the report says was fitted (YAML keeps 5 digits).
  EXPECT_NEAR(c.gemm_max_eff, f.report.compute.gemm_max_eff, 1e-4);
  EXPECT_NEAR(c.gemm_half_m, f.report.compute.gemm_half_m, 1e-3 * c.gemm_half_m);
  EXPECT_NEAR(c.gemm_fixed_time_s, f.report.compute.gemm_fixed_time_s, 1e-9);
  // Every measured shape is reproduced within 5% by the simulator's gemm_efficiency
  // (curve, or gemm_table where the curve misses by more). The simulator sees M = b*m, so
  // shapes that coincide there (b=2, m=256 and b=1, m=512) are compared with the geometric
  // mean of their measurements, which is what the table keeps.
  const double peak = f.profile.gpu.peak_flop_per_s.at(DType::kBf16);
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::pair<double, int>> logs;
  for (const GemmResidual& r : f.report.gemm_residuals) {
    auto& [sum, n] = logs[{r.batch * r.m, r.n, r.k}];
    sum += std::log(r.measured_flop_per_s);
    n++;
  }
  int checked = 0;
  for (const GemmResidual& r : f.report.gemm_residuals) {
    const auto& [sum, n] = logs[{r.batch * r.m, r.n, r.k}];
    const GemmShape g{r.m, r.n, r.k, r.batch, DType::kBf16, GemmLayout::kNN};
    EXPECT_NEAR(peak * gemm_efficiency(g, f.profile) / std::exp(sum / n), 1.0, 0.05)
        << r.batch << "x" << r.m << "x" << r.n << "x" << r.k;
    ++checked;
  }
  EXPECT_EQ(checked, 375);
  // The curve alone: above the launch-bound range (min(M,n,k) >= 1024) rms error < 10%
  // (sim/cost/compute.cc reports 4.9% for its own fit of the same table).
  double sq = 0;
  int n = 0;
  for (const GemmResidual& r : f.report.gemm_residuals) {
    if (std::min({r.batch * r.m, r.n, r.k}) < 1024) continue;
    const double e = r.curve_flop_per_s / r.measured_flop_per_s - 1;
    sq += e * e;
    ++n;
  }
  ASSERT_GT(n, 0);
  EXPECT_LT(std::sqrt(sq / n), 0.10);
}

TEST(FitRecorded, AzureFp8OnlyFitsTheFp8Ceiling) {
  const Fitted f = fit("h100_azure_gemm_fp8.json", "h100-sxm");
  EXPECT_EQ(f.report.gemm_fp8_points, 9);
  // Only fp8 measured: bf16 max_efficiency stays the base profile's.
  EXPECT_EQ(f.profile.compute.gemm_max_eff,
            load_profile("h100-sxm", profiles_dir()).compute.gemm_max_eff);
  // The best published point is 32768^3 at 1382.2 TFLOP/s = 0.698 of 1978.9: the ceiling
  // must be at least that and at most 1.
  EXPECT_GE(f.profile.compute.fp8_max_eff, 1382.2 / 1978.9 - 1e-3);
  EXPECT_LE(f.profile.compute.fp8_max_eff, 1.0);
  const double peak = f.profile.gpu.peak_flop_per_s.at(DType::kFp8);
  for (const GemmResidual& r : f.report.gemm_residuals) {
    const GemmShape g{r.m, r.n, r.k, 1, DType::kFp8, GemmLayout::kTN};
    EXPECT_NEAR(peak * gemm_efficiency(g, f.profile) / r.measured_flop_per_s, 1.0, 0.05)
        << r.m << "x" << r.n << "x" << r.k;
  }
}

TEST(FitRoundTrip, KeepsEveryBaseKeyAndRecordsProvenance) {
  const std::string out = out_path("fitted.yaml");
  FitReport rep;
  fit_profile(data("h100_together_nccl_ring.json"), "h100-sxm", out, &rep);
  const HwProfile base = load_profile("h100-sxm", profiles_dir());
  const HwProfile got = load_profile(out, profiles_dir());
  EXPECT_EQ(got.name, base.name);
  EXPECT_EQ(got.gpu.name, base.gpu.name);
  EXPECT_EQ(got.gpu.sms, base.gpu.sms);
  EXPECT_EQ(got.node.gpus, base.node.gpus);
  EXPECT_EQ(got.node.nvls, base.node.nvls);
  EXPECT_EQ(got.fabric.topology, base.fabric.topology);
  EXPECT_EQ(got.collectives.nvls_busbw, base.collectives.nvls_busbw);
  // No GEMM measured: compute values unchanged.
  EXPECT_EQ(got.compute.gemm_max_eff, base.compute.gemm_max_eff);
  EXPECT_EQ(got.compute.attn_fwd_eff, base.compute.attn_fwd_eff);
  // Calibrated entries: the base's Ring entries (allgather, reduce_scatter 8/1) replaced by
  // the fitted ones, written with their algorithm; its NVLS allreduce entries and its
  // all-to-all entry kept (a Ring sweep says nothing of NVLS or all-to-all), and the fitted
  // Ring allreduce beside them.
  std::size_t fitted_entries = 0, base_kept = 0;
  for (const CollectiveFit& c : rep.collectives) fitted_entries += c.segments.size();
  for (const CollectiveCalib& c : base.collectives.calibrated)
    base_kept += c.algo == CollAlgo::kNvls || c.op == "all_to_all" ? 1 : 0;
  EXPECT_EQ(base_kept, 4u);
  EXPECT_EQ(got.collectives.calibrated.size(), fitted_entries + base_kept);
  for (const CollectiveCalib& c : got.collectives.calibrated) {
    const bool fitted = c.source.find("h100_together_nccl_ring.json") != std::string::npos;
    EXPECT_EQ(fitted, c.algo == CollAlgo::kRing) << c.op << " " << c.source;
  }
  // With NVLS on the model runs NVLS for the 8-GPU allreduce: the base's NVLS entries answer.
  EXPECT_TRUE(collective_time(CollOp::kAllReduce, 1e8, GroupShape{8, 1, 8, 1}, got).calibrated);
  EXPECT_EQ(collective_time(CollOp::kAllReduce, 1e8, GroupShape{8, 1, 8, 1}, got).algo,
            CollAlgo::kNvls);
  // Comments record the measurements file, the GPU and the residuals.
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  EXPECT_NE(text.find("# stepcast fit: "), std::string::npos);
  EXPECT_NE(text.find("NVIDIA H100 80GB HBM3"), std::string::npos);
  EXPECT_NE(text.find("max error"), std::string::npos);
  EXPECT_NE(text.find("algorithm: ring"), std::string::npos);
  EXPECT_NE(rep.text().find("busbw"), std::string::npos);
  // The base profile's text and comments are kept (the sources of the values not fitted);
  // only the fitted keys are rewritten, marked.
  EXPECT_NE(text.find("  # [NW] NDR 400G per NIC \"46-49 GB/s\" (nccl-tests issues 290, 267)\n"
                      "  nic_busbw: 48 GB/s\n"),
            std::string::npos);
  EXPECT_NE(text.find("  calibrated:  # fitted\n"), std::string::npos);
  EXPECT_EQ(text.find("are not carried over"), std::string::npos);
}

TEST(FitSynthetic, MemoryLaunchAndOverlap) {
  // Synthetic bench output (closed forms, not a measurement):
  //  copy: t = 5 us + bytes / 3.0 TB/s -> bw 3.0e12, memory_bound_efficiency =
  //        3.0 / 3.35 (H100 datasheet) = 0.89552;
  //  launch overhead 2.5 us;
  //  overlap: GEMM 1000 us alone, 1100 us beside an allreduce on 132 SMs:
  //        comm_sms = 132 * (1 - 1000/1100) = 12.0.
  std::ostringstream j;
  j.precision(17);
  j << R"({"schema": "stepcast.measurements/1", "source": "synthetic, closed forms in the test",
    "provenance": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 8,
      "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "sm_count": 132}]},
    "memory": {"launch_overhead_us": 2.5, "kernels": [)";
  bool first = true;
  for (double b = 1 << 20; b <= (1u << 30); b *= 4) {
    const double t_us = 5 + 2 * b / 3.0e12 * 1e6;
    j << (first ? "" : ",") << R"({"kernel": "copy", "bytes_read": )" << b
      << R"(, "bytes_written": )" << b << R"(, "time_us": )" << t_us << "}";
    first = false;
  }
  j << R"(]}, "overlap": [{"m": 8192, "n": 8192, "k": 8192, "dtype": "bf16", "ranks": 8,
      "allreduce_size_bytes": 268435456, "gemm_alone_time_us": 1000,
      "gemm_overlapped_time_us": 1100}]})";
  const std::string in = write_file("synthetic.json", j.str());
  const std::string out = out_path("fitted.yaml");
  FitReport rep;
  fit_profile(in, "h100-sxm", out, &rep);
  const HwProfile got = load_profile(out, profiles_dir());
  EXPECT_NEAR(rep.copy_bw_bytes_per_s, 3.0e12, 3.0e12 * 1e-6);
  EXPECT_NEAR(got.compute.membound_eff, 3.0 / 3.35, 1e-4);
  EXPECT_NEAR(got.compute.launch_overhead_s, 2.5e-6, 1e-12);
  EXPECT_EQ(got.compute.comm_sms, 12);
  // No context measurement: the base's reserve (none) stays.
  EXPECT_EQ(got.gpu.memory_reserved_bytes, 0);
  EXPECT_EQ(rep.memory_reserved_bytes, 0);
}

// communicators[] -> collectives.communicator_memory, one entry per shape in whole MiB
// rounded up, the largest over algorithms: 2 ranks 100 MiB + 1 B -> 101 MiB; 8 ranks ring
// 300 MiB and NVLS 1000 MiB -> 1000 MiB. A 4-rank communicator, not measured, then counts as
// the largest one-node entry (1000 MiB).
TEST(FitSynthetic, CommunicatorMemoryPerShape) {
  const std::string in = write_file("comms.json", R"({"schema": "stepcast.measurements/1",
    "source": "synthetic", "provenance": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 8},
    "communicators": [
      {"ranks": 2, "nodes": 1, "algo": "default", "memory_bytes_per_gpu": 104857601},
      {"ranks": 8, "nodes": 1, "algo": "ring", "memory_bytes_per_gpu": 314572800},
      {"ranks": 8, "nodes": 1, "algo": "nvls", "memory_bytes_per_gpu": 1048576000}]})");
  const std::string out = out_path("comms.yaml");
  FitReport rep;
  fit_profile(in, "h100-sxm", out, &rep);
  const double mib = 1048576;
  ASSERT_EQ(rep.communicator_memory.size(), 2u);
  const HwProfile got = load_profile(out, profiles_dir());
  ASSERT_EQ(got.collectives.communicator_memory.size(), 2u);
  EXPECT_EQ(communicator_memory_bytes(got.collectives, 2, 1), 101 * mib);
  EXPECT_EQ(communicator_memory_bytes(got.collectives, 8, 1), 1000 * mib);
  EXPECT_EQ(communicator_memory_bytes(got.collectives, 4, 1), 1000 * mib);
  EXPECT_NE(got.collectives.communicator_memory[0].source.find("comms.json"), std::string::npos);
  EXPECT_NE(rep.text().find("communicator memory: 8 ranks on 1 node(s): 1000 MiB per GPU"),
            std::string::npos)
      << rep.text();
}

// memory.context_memory_bytes -> gpu.memory_reserved, in whole MiB rounded up (a bound):
// 536870913 B = 512 MiB + 1 B -> 513 MiB = 537919488 B. What fits then changes by it: the
// usable memory is 81559 - 513 = 81046 MiB.
TEST(FitSynthetic, ContextMemoryBecomesTheReserve) {
  const std::string in = write_file("context.json", R"({"schema": "stepcast.measurements/1",
    "source": "synthetic", "provenance": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1},
    "memory": {"kernels": [], "context_memory_bytes": 536870913}})");
  const std::string out = out_path("reserved.yaml");
  FitReport rep;
  fit_profile(in, "h100-sxm", out, &rep);
  EXPECT_EQ(rep.memory_reserved_bytes, 513.0 * 1048576);
  EXPECT_NE(rep.text().find("gpu.memory_reserved: 513 MiB"), std::string::npos) << rep.text();
  const HwProfile got = load_profile(out, profiles_dir());
  EXPECT_EQ(got.gpu.memory_reserved_bytes, 513.0 * 1048576);
  EXPECT_EQ(got.gpu.usable_memory_bytes(), (81559.0 - 513) * 1048576);
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("memory_reserved: 513 MiB  # fitted"), std::string::npos) << ss.str();

  // As much in use as the whole GPU (another GPU model, or a busy one): not written, said.
  const std::string full = write_file("context_full.json", R"({"schema": "stepcast.measurements/1",
    "source": "synthetic", "provenance": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1},
    "memory": {"kernels": [], "context_memory_bytes": 85521448960}})");
  FitReport rep2;
  fit_profile(full, "h100-sxm", out_path("reserved_full.yaml"), &rep2);
  EXPECT_EQ(rep2.memory_reserved_bytes, 0);
  ASSERT_EQ(rep2.warnings.size(), 1u);
  EXPECT_NE(rep2.warnings[0].find("gpu.memory_reserved not written"), std::string::npos);
  EXPECT_EQ(load_profile(out_path("reserved_full.yaml"), profiles_dir()).gpu.memory_reserved_bytes,
            0);
}

// ---------------------------------------------------------------- stepcast-bench output

// Run by tests/calibrate/bench_gpu_test.sh on a GPU box with the file it just measured.
TEST(BenchOutput, LoadsAndFits) {
  const char* path = std::getenv("STEPCAST_BENCH_MEASUREMENTS");
  if (!path) GTEST_SKIP() << "STEPCAST_BENCH_MEASUREMENTS not set (needs a GPU run)";
  const Measurements m = load_measurements(path);
  EXPECT_FALSE(m.provenance.gpu_name.empty());
  EXPECT_FALSE(m.gemm.empty());
  EXPECT_FALSE(m.grouped_gemm.empty());  // the quick grid of grouped expert GEMMs
  ASSERT_TRUE(m.launch_overhead_s.has_value());
  ASSERT_TRUE(m.context_memory_bytes.has_value());  // the CUDA context holds some memory
  FitReport rep;
  fit_profile(path, "h100-sxm", out_path("fitted.yaml"), &rep);
  EXPECT_GT(rep.copy_bw_bytes_per_s, 0);
  EXPECT_GT(rep.memory_reserved_bytes, 0);
  std::cout << rep.text();
}

// ---------------------------------------------------------------- bad measurement files

const char* kGood = R"({"schema": "stepcast.measurements/1", "source": "test",
  "provenance": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 8},
  "collectives": [{"op": "allreduce", "ranks": 8, "nodes": 1, "size_bytes": 1048576,
                   "time_us": 41.58, "algbw_GBps": 25.22, "busbw_GBps": 44.13}]})";

TEST(MeasurementsBad, GoodFileLoads) {
  // 1048576 B in 41.58 us: algbw 25.22 GB/s, busbw x 2*7/8 = 44.13 (nccl-tests row).
  const Measurements m = parse_measurements(kGood, "m.json");
  ASSERT_EQ(m.collectives.size(), 1u);
  EXPECT_NEAR(m.collectives[0].time_s, 41.58e-6, 1e-15);
}

TEST(MeasurementsBad, WrongSchema) {
  const InputIssue i = only_issue(replace(kGood, "measurements/1", "measurements/9"));
  EXPECT_EQ(i.file, "m.json");
  EXPECT_EQ(i.key, "/schema");
  EXPECT_NE(i.message.find("expected \"stepcast.measurements/1\""), std::string::npos);
}

TEST(MeasurementsBad, MissingKey) {
  const InputIssue i = only_issue(replace(kGood, R"("time_us": 41.58, )", ""));
  EXPECT_EQ(i.key, "/collectives/0/time_us");
  EXPECT_EQ(i.message, "missing required key");
  // A missing key is placed at the object that lacks it: line 3, `  "collectives": [` is 18
  // characters before its `{`.
  EXPECT_EQ(i.line, 3);
  EXPECT_EQ(i.column, 19);
}

TEST(MeasurementsBad, NegativeTime) {
  const InputIssue i = only_issue(replace(kGood, "41.58,", "-41.58,"));
  EXPECT_EQ(i.key, "/collectives/0/time_us");
  EXPECT_NE(i.message.find("expected a positive number, got -41.58"), std::string::npos);
  // Placed at the value: line 4, after 19 spaces and `"time_us": ` (11 characters).
  EXPECT_EQ(i.line, 4);
  EXPECT_EQ(i.column, 31);
}

TEST(MeasurementsBad, UnitMissingFromKey) {
  const InputIssue i = only_issue(replace(kGood, R"("time_us": 41.58, "algbw_GBps": 25.22, )",
                                          R"("time_us": 41.58, "algbw": 25.22, )"));
  EXPECT_EQ(i.key, "/collectives/0/algbw");
  EXPECT_NE(i.message.find("a number without a unit"), std::string::npos);
  EXPECT_NE(i.message.find("\"algbw_GBps\""), std::string::npos);
}

TEST(MeasurementsBad, CommunicatorEntries) {
  auto with = [](const std::string& entry) {
    return replace(kGood, R"("collectives": [)",
                   "\"communicators\": [" + entry + "],\n  \"collectives\": [");
  };
  EXPECT_EQ(
      parse_measurements(with(R"({"ranks": 8, "nodes": 1, "memory_bytes_per_gpu": 5e8})"), "m.json")
          .communicators.size(),
      1u);
  InputIssue i = only_issue(with(R"({"ranks": 2, "nodes": 3, "memory_bytes_per_gpu": 5e8})"));
  EXPECT_EQ(i.key, "/communicators/0/nodes");
  EXPECT_EQ(i.line, 3);
  i = only_issue(with(R"({"ranks": 2, "nodes": 1, "memory_bytes_per_gpu": 0})"));
  EXPECT_EQ(i.key, "/communicators/0/memory_bytes_per_gpu");
  // A key without its unit is named, and the key it should have been is missing: both said.
  try {
    parse_measurements(with(R"({"ranks": 2, "nodes": 1, "memory_bytes": 5e8})"), "m.json");
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 2u);
    EXPECT_EQ(e.issues()[0].key, "/communicators/0/memory_bytes");
    EXPECT_NE(e.issues()[0].message.find("expected \"memory_bytes_per_gpu\""), std::string::npos);
    EXPECT_EQ(e.issues()[1].key, "/communicators/0/memory_bytes_per_gpu");
  }
}

TEST(MeasurementsBad, ContextMemoryMustBePositive) {
  const std::string text = replace(kGood, R"("collectives": [)",
                                   R"("memory": {"context_memory_bytes": 0}, "collectives": [)");
  const InputIssue i = only_issue(text);
  EXPECT_EQ(i.key, "/memory/context_memory_bytes");
  EXPECT_NE(i.message.find("expected a positive number, got 0"), std::string::npos) << i.message;
  EXPECT_EQ(i.line, 3);
}

TEST(MeasurementsBad, UnknownKeySuggestsTheClosest) {
  const InputIssue i = only_issue(replace(kGood, "\"ranks\": 8", "\"rank\": 8, \"ranks\": 8"));
  EXPECT_EQ(i.key, "/collectives/0/rank");
  EXPECT_NE(i.message.find("did you mean \"ranks\""), std::string::npos);
}

TEST(MeasurementsBad, InconsistentBusbw) {
  // busbw must be algbw * 2(n-1)/n = 25.22 * 1.75 = 44.13; 88.26 is twice that.
  const InputIssue i = only_issue(replace(kGood, "44.13", "88.26"));
  EXPECT_EQ(i.key, "/collectives/0/busbw_GBps");
  EXPECT_NE(i.message.find("inconsistent"), std::string::npos);
}

TEST(MeasurementsBad, MixedGpus) {
  const InputIssue i =
      only_issue(replace(kGood, R"("gpu_count": 8})",
                         R"("gpu_count": 2, "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3"},
                                  {"index": 1, "name": "NVIDIA A100-SXM4-80GB"}]})"));
  EXPECT_EQ(i.key, "/provenance/gpus/1/name");
  EXPECT_NE(i.message.find("mixed GPUs"), std::string::npos);
}

TEST(MeasurementsBad, UnknownOpAndMoreNodesThanRanksAllReported) {
  // Loaders report every problem at once.
  try {
    parse_measurements(
        replace(replace(kGood, "\"allreduce\"", "\"allreduse\""), "\"nodes\": 1", "\"nodes\": 9"),
        "m.json");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 2u);
    EXPECT_EQ(e.issues()[0].key, "/collectives/0/op");
    EXPECT_EQ(e.issues()[1].key, "/collectives/0/nodes");
    EXPECT_NE(e.issues()[1].message.find("9 nodes for 8 ranks"), std::string::npos);
  }
}

TEST(MeasurementsBad, InconsistentGemmFlops) {
  // 2*4096^3 / 200 us = 687.2 TFLOP/s; 900e12 disagrees.
  const InputIssue i = only_issue(
      replace(kGood, R"("collectives": [)",
              R"("gemm": [{"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "time_us": 200,
                   "flop_per_s": 900e12}], "collectives": [)"));
  EXPECT_EQ(i.key, "/gemm/0/flop_per_s");
  EXPECT_NE(i.message.find("inconsistent"), std::string::npos);
}

TEST(MeasurementsBad, InvalidJsonHasLineAndColumn) {
  const InputIssue i = only_issue("{\n  \"schema\": \"stepcast.measurements/1\",\n  oops\n}");
  EXPECT_EQ(i.file, "m.json");
  EXPECT_EQ(i.line, 3);
  EXPECT_GT(i.column, 0);
  EXPECT_NE(i.message.find("invalid JSON"), std::string::npos);
}

// 200,000 levels of lists under an unknown key: an issue, not a stack overflow while placing
// it (sim/io/json_locator.h kMaxDepth).
TEST(MeasurementsBad, DeeplyNestedValueIsAnIssueNotACrash) {
  std::string text = kGood;
  text.insert(1, "\"deep\": " + std::string(200000, '[') + std::string(200000, ']') + ", ");
  std::vector<InputIssue> issues;
  try {
    parse_measurements(text, "m.json");
  } catch (const InputError& e) {
    issues = e.issues();
  }
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].key, "/deep");
  EXPECT_EQ(issues[0].line, 1);
  EXPECT_EQ(issues[0].column, 10);  // after `{"deep": `
}

TEST(MeasurementsBad, NothingMeasured) {
  const InputIssue i = only_issue(R"({"schema": "stepcast.measurements/1", "source": "x",
      "provenance": {"gpu_name": "g", "gpu_count": 1}, "gemm": [], "collectives": []})");
  EXPECT_NE(i.message.find("no measurements"), std::string::npos);
  EXPECT_EQ(i.line, 1);  // about the whole document: its start
}

TEST(MeasurementsBad, MissingFileNamesIt) {
  try {
    fit_profile("/nonexistent/m.json", "h100-sxm", out_path("x.yaml"), nullptr);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.issues().front().file, "/nonexistent/m.json");
  }
}

TEST(MeasurementsBad, RecordedFilesAllLoad) {
  for (const char* f : {"h100_together_nccl_ring.json", "h100_together_allreduce_nvls.json",
                        "a100_stas00_allreduce.json", "h100_xla_collectives.json",
                        "h100_xla_gemm_bf16.json", "h100_azure_gemm_fp8.json"}) {
    const Measurements m = load_measurements(data(f));
    EXPECT_FALSE(m.source.empty()) << f;
  }
}

}  // namespace
}  // namespace stepcast
