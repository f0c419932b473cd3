// Tests of the fused-attention fit (calibrate/fit/fit_attention.cc), of fitting several
// measurement files at once, and of the H200 profile against what was measured on an H200
// (tests/data/measured/h200-2026-12-04/, README there): the profile must reproduce its own
// measurements through the simulator's cost functions.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "calibrate/fit/fit.h"
#include "calibrate/fit/measurements.h"
#include "model/error.h"
#include "sim/cluster/profile.h"
#include "sim/cost/cost.h"
#include "tests/calibrate/fit_test_util.h"

namespace stepcast {
namespace {

namespace fs = std::filesystem;

using fit_test::out_path;
using fit_test::profiles_dir;
using fit_test::write_file;

std::string h200_data(const std::string& name) {
  return std::string(STEPCAST_SOURCE_DIR) + "/tests/data/measured/h200-2026-12-04/" + name;
}

// FLOPs by the FlashAttention convention (model/workload.cc, measurements.h).
double fa_flops(double b, double h, double s, double d, bool causal, bool bwd) {
  return 4 * b * h * s * s * d * (causal ? 0.5 : 1.0) * (bwd ? 2.5 : 1.0);
}

// A synthetic attention file: times from the model of sim/cost/compute.cc with the given
// parameters, launch overhead `launch_us` (also written as the memory launch overhead, which
// the fit subtracts), peak 989.4 TFLOP/s (the H100/H200 bf16 datasheet value).
std::string synthetic(const std::string& backend, double e_fwd, double e_bwd, double hs, double hd,
                      double launch_us, bool with_launch_key = true) {
  std::ostringstream j;
  j.precision(17);
  j << R"({"schema": "stepcast.measurements/1", "source": "synthetic",
    "provenance": {"gpu_name": "NVIDIA H200", "gpu_count": 1},)";
  if (with_launch_key) j << R"("memory": {"launch_overhead_us": )" << launch_us << "},";
  j << R"("attention": [)";
  bool first = true;
  for (int d : {64, 128, 256})
    for (int s : {512, 2048, 8192})
      for (bool causal : {false, true})
        for (bool bwd : {false, true}) {
          const double b = 16384.0 / s, h = 2048.0 / d;
          const double keys = causal ? s / 2.0 : s;
          const double eff = (bwd ? e_bwd : e_fwd) * keys / (keys + hs) * d / (d + hd);
          const double fl = fa_flops(b, h, s, d, causal, bwd);
          const double t_us = fl / (989.4e12 * eff) * 1e6 + launch_us;
          j << (first ? "" : ",") << R"({"backend": ")" << backend << R"(", "causal": )"
            << (causal ? "true" : "false") << R"(, "direction": ")" << (bwd ? "bwd" : "fwd")
            << R"(", "batch": )" << b << R"(, "heads": )" << h << R"(, "kv_heads": )" << h
            << R"(, "seq_q": )" << s << R"(, "seq_kv": )" << s << R"(, "head_dim": )" << d
            << R"(, "time_us": )" << t_us << "}";
          first = false;
        }
  j << "]}";
  return j.str();
}

// The fit recovers the parameters that generated the data: 0.85 / 0.70, half_seq 300, half
// head dim 40 (the grid's last refinement steps by 65536^(1/1600) = 0.7%; the per-direction
// E is then exact in closed form up to that).
TEST(FitAttention, RecoversParametersOfTheModel) {
  const std::string in = write_file("a.json", synthetic("cudnn", 0.85, 0.70, 300, 40, 4));
  FitReport rep;
  fit_profile(in, "h200-sxm", out_path("fitted.yaml"), &rep);
  const HwProfile got = load_profile(out_path("fitted.yaml"), profiles_dir());
  EXPECT_NEAR(got.compute.attn_fwd_eff, 0.85, 0.85 * 0.01);
  EXPECT_NEAR(got.compute.attn_bwd_eff, 0.70, 0.70 * 0.01);
  EXPECT_NEAR(got.compute.attn_half_seq, 300, 300 * 0.01);
  EXPECT_NEAR(got.compute.attn_half_head_dim, 40, 40 * 0.01);
  EXPECT_EQ(rep.attention_points[0], 18);  // 3 head sizes x 3 lengths x causal or not
  EXPECT_EQ(rep.attention_points[1], 18);
  EXPECT_LT(rep.attention_max_rel_err[0], 0.01);
  EXPECT_LT(rep.attention_max_rel_err[1], 0.01);
  EXPECT_NE(rep.text().find("attention (cudnn)"), std::string::npos);
}

// No head-size effect (half_head_dim 0 in the data): the first pass finds 0 and the
// refinements keep it at exactly 0 while half_seq and E come back within 1%.
TEST(FitAttention, NoHeadSizeEffectStaysZero) {
  const std::string in = write_file("a.json", synthetic("cudnn", 0.80, 0.60, 500, 0, 4));
  FitReport rep;
  fit_profile(in, "h200-sxm", out_path("fitted.yaml"), &rep);
  const HwProfile got = load_profile(out_path("fitted.yaml"), profiles_dir());
  EXPECT_EQ(got.compute.attn_half_head_dim, 0);
  EXPECT_NEAR(got.compute.attn_half_seq, 500, 500 * 0.01);
  EXPECT_NEAR(got.compute.attn_fwd_eff, 0.80, 0.80 * 0.01);
  EXPECT_NEAR(got.compute.attn_bwd_eff, 0.60, 0.60 * 0.01);
  EXPECT_LT(rep.attention_max_rel_err[0], 0.01);
}

// A kernel cannot beat the peak: data made with E = 1.3 fits at E = 1 exactly, and the half
// sizes move to make up what they can (the time residuals are then not zero).
TEST(FitAttention, EfficiencyIsCappedAtThePeak) {
  const std::string in = write_file("a.json", synthetic("cudnn", 1.3, 1.3, 300, 40, 4));
  FitReport rep;
  fit_profile(in, "h200-sxm", out_path("fitted.yaml"), &rep);
  EXPECT_EQ(rep.compute.attn_fwd_eff, 1.0);
  EXPECT_EQ(rep.compute.attn_bwd_eff, 1.0);
  EXPECT_GT(rep.attention_max_rel_err[0], 0.01);
}

// cuDNN's points are the kernel the profile models (Transformer Engine's on Hopper): flash
// points of another curve in the same file leave the fit unchanged; without cuDNN points
// the flash ones are fitted.
TEST(FitAttention, FitsCudnnWhenPresent) {
  std::string cudnn = synthetic("cudnn", 0.85, 0.70, 300, 40, 4);
  std::string flash = synthetic("flash", 0.5, 0.4, 900, 10, 4);
  const std::string flash_points = flash.substr(flash.find("\"attention\": [") + 14);
  std::string both = cudnn.substr(0, cudnn.size() - 2) + "," + flash_points;
  FitReport rep_both, rep_flash;
  fit_profile(write_file("both.json", both), "h200-sxm", out_path("both.yaml"), &rep_both);
  fit_profile(write_file("flash.json", flash), "h200-sxm", out_path("flash.yaml"), &rep_flash);
  EXPECT_EQ(rep_both.attention_backend, "cudnn");
  EXPECT_EQ(rep_both.attention_points[0], 18);
  EXPECT_NEAR(rep_both.compute.attn_fwd_eff, 0.85, 0.01);
  EXPECT_EQ(rep_flash.attention_backend, "all backends");
  EXPECT_NEAR(rep_flash.compute.attn_fwd_eff, 0.5, 0.005);
  EXPECT_NEAR(rep_flash.compute.attn_half_seq, 900, 9);
}

// The launch overhead is subtracted before the efficiency is taken: data made with 20 us per
// kernel fits the same curve when the file says so, and a different one when it does not.
TEST(FitAttention, SubtractsTheMeasuredLaunchOverhead) {
  FitReport with, without;
  fit_profile(write_file("w.json", synthetic("cudnn", 0.85, 0.70, 300, 40, 20)), "h200-sxm",
              out_path("w.yaml"), &with);
  EXPECT_NEAR(with.compute.attn_half_seq, 300, 3);
  // Without the key the base profile's launch overhead (4.24 us) is used: 16 us per kernel
  // are left in the compute part, which the curve must absorb.
  fit_profile(write_file("wo.json", synthetic("cudnn", 0.85, 0.70, 300, 40, 20, false)), "h200-sxm",
              out_path("wo.yaml"), &without);
  EXPECT_GT(std::abs(without.compute.attn_half_seq - 300), 3);
}

// ---------------------------------------------------------------- several files

TEST(FitSeveralFiles, MergesListsAndRefusesAnotherGpu) {
  const std::string a = write_file("a.json", synthetic("cudnn", 0.85, 0.70, 300, 40, 4));
  const std::string g = write_file("g.json", R"({"schema": "stepcast.measurements/1",
    "source": "gemm", "provenance": {"gpu_name": "NVIDIA H200", "gpu_count": 1},
    "gemm": [{"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "time_us": 200}]})");
  const Measurements m = load_measurements(std::vector<std::string>{a, g});
  EXPECT_EQ(m.attention.size(), 36u);
  EXPECT_EQ(m.gemm.size(), 1u);
  EXPECT_EQ(m.file, a + ", " + g);
  EXPECT_EQ(m.source, "synthetic, gemm");
  ASSERT_TRUE(m.launch_overhead_s.has_value());
  EXPECT_DOUBLE_EQ(*m.launch_overhead_s, 4e-6);

  const std::string other = write_file("o.json", R"({"schema": "stepcast.measurements/1",
    "source": "gemm", "provenance": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1},
    "gemm": [{"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "time_us": 200}]})");
  try {
    load_measurements(std::vector<std::string>{a, other});
    ADD_FAILURE() << "a second GPU model was accepted";
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].file, other);
    EXPECT_EQ(e.issues()[0].key, "/provenance/gpu_name");
    EXPECT_NE(e.issues()[0].message.find("one fit takes one GPU model"), std::string::npos);
  }
}

// A profile refitted in place (output = base) keeps its text: the base is read before the
// output is opened.
TEST(FitSeveralFiles, RefitsAProfileInPlace) {
  const std::string prof = out_path("h200-sxm.yaml");
  fs::copy_file(profiles_dir() + "/h200-sxm.yaml", prof, fs::copy_options::overwrite_existing);
  const std::string in = write_file("a.json", synthetic("cudnn", 0.85, 0.70, 300, 40, 4));
  fit_profile(in, prof, prof, nullptr);
  const HwProfile got = load_profile(prof, profiles_dir());
  EXPECT_NEAR(got.compute.attn_fwd_eff, 0.85, 0.01);
  EXPECT_EQ(got.gpu.name, "H200 SXM 141GB");  // the rest of the base is there
}

// ---------------------------------------------------------------- bad attention entries

InputIssue only_issue(const std::string& entry) {
  const std::string text = std::string(R"({"schema": "stepcast.measurements/1", "source": "t",
    "provenance": {"gpu_name": "NVIDIA H200", "gpu_count": 1}, "attention": [)") +
                           entry + "]}";
  try {
    parse_measurements(text, "m.json");
  } catch (const InputError& e) {
    EXPECT_EQ(e.issues().size(), 1u) << e.what();
    return e.issues().front();
  }
  ADD_FAILURE() << "no InputError for: " << entry;
  return {};
}

// 4 * 1 * 16 * 2048^2 * 128 / 2 (causal) = 1.7180e10 FLOPs in 35 us = 4.909e14 FLOP/s.
const std::string kEntry = R"({"backend": "cudnn", "causal": true, "direction": "fwd",
  "batch": 1, "heads": 16, "kv_heads": 16, "seq_q": 2048, "seq_kv": 2048, "head_dim": 128,
  "time_us": 35, "flop_per_s": 4.909e14})";

std::string with(const std::string& from, const std::string& to) {
  std::string s = kEntry;
  const auto pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return s.replace(pos, from.size(), to);
}

TEST(MeasurementsBadAttention, GoodEntryLoads) {
  const Measurements m = parse_measurements(std::string(R"({"schema": "stepcast.measurements/1",
    "source": "t", "provenance": {"gpu_name": "NVIDIA H200", "gpu_count": 1},
    "attention": [)") + kEntry + "]}",
                                            "m.json");
  ASSERT_EQ(m.attention.size(), 1u);
  EXPECT_DOUBLE_EQ(m.attention[0].flops, 4.0 * 16 * 2048.0 * 2048 * 128 / 2);
  EXPECT_DOUBLE_EQ(m.attention[0].time_s, 35e-6);
  EXPECT_TRUE(m.attention[0].shape.causal);
  EXPECT_FALSE(m.attention[0].shape.backward);
}

TEST(MeasurementsBadAttention, EachRule) {
  struct Case {
    std::string from, to, key, message;
  } cases[] = {
      {R"("direction": "fwd")", R"("direction": "backward")", "/attention/0/direction", "fwd"},
      {R"("causal": true)", R"("causal": "yes")", "/attention/0/causal", "expected true or false"},
      {R"("causal": true, )", "", "/attention/0/causal", "missing required key"},
      {R"("kv_heads": 16)", R"("kv_heads": 5)", "/attention/0/kv_heads", "multiple of kv_heads"},
      {R"("time_us": 35)", R"("time_us": -1)", "/attention/0/time_us", "positive"},
      {R"("backend": "cudnn", )", "", "/attention/0/backend", "missing required key"},
      {R"("flop_per_s": 4.909e14)", R"("flop_per_s": 9e14)", "/attention/0/flop_per_s",
       "inconsistent"},
      {R"("head_dim": 128)", R"("head_dim": 0)", "/attention/0/head_dim", "integer >= 1"},
  };
  for (const Case& c : cases) {
    const InputIssue i = only_issue(with(c.from, c.to));
    EXPECT_EQ(i.file, "m.json");
    EXPECT_EQ(i.key, c.key) << c.to;
    EXPECT_NE(i.message.find(c.message), std::string::npos) << c.to << ": " << i.message;
  }
}

// ---------------------------------------------------------------- the H200 profile

// hw_profiles/h200-sxm.yaml was fitted (`stepcast fit`) to the cuBLASLt sweep measured on an
// H200: through the simulator's compute_time_s, at the clock the benchmark ran at
// (sustained_clock 1), every measured GEMM is reproduced within the table tolerance or
// better, since the shapes the curve misses by more are in compute.gemm_table: the fit
// bounds the throughput error by 5%, so the time error by 1/(1 - 0.05) - 1 = 5.26%.
TEST(H200Profile, ReproducesItsMeasuredGemmSweep) {
  HwProfile hw = load_profile("h200-sxm", profiles_dir());
  hw.compute.sustained_clock = 1.0;
  hw.compute.launch_overhead_s = 0;  // the benchmark times kernels, not launches
  const Measurements m = load_measurements(h200_data("gemm.json"));
  ASSERT_GT(m.gemm.size(), 600u);
  double worst = 0;
  for (const MeasuredGemm& g : m.gemm) {
    Task t;
    t.kind = TaskKind::kGemm;
    t.gemm.m = g.m;
    t.gemm.n = g.n;
    t.gemm.k = g.k;
    t.gemm.batch = g.batch;
    t.gemm.dtype = g.dtype;
    t.flops = 2.0 * g.m * g.n * g.k * g.batch;
    const double err = compute_time_s(t, hw) / g.time_s - 1;
    worst = std::max(worst, std::abs(err));
    EXPECT_LE(std::abs(err), 1 / (1 - kTableTolerance) - 1 + 1e-4)
        << g.pointer << " " << g.m << "x" << g.n << "x" << g.k;
  }
  std::cout << "worst GEMM error over " << m.gemm.size() << " points: " << worst << "\n";
}

// Fused attention: the profile's curve against the cuDNN kernels measured on the H200
// (attention.json, 36 forward and 36 backward points; fit report in the profile's header:
// rms 10.4% / 9.2%, max 29% / 33%, the largest at seqlen 512 and GQA).
TEST(H200Profile, ReproducesMeasuredCudnnAttention) {
  HwProfile hw = load_profile("h200-sxm", profiles_dir());
  hw.compute.sustained_clock = 1.0;
  const Measurements m = load_measurements(h200_data("attention.json"));
  double sum_sq[2] = {0, 0};
  int n[2] = {0, 0};
  for (const MeasuredAttention& a : m.attention) {
    if (a.backend != "cudnn") continue;
    Task t;
    t.kind = TaskKind::kAttention;
    t.attn = a.shape;
    t.flops = a.flops;
    const double err = compute_time_s(t, hw) / a.time_s - 1;
    sum_sq[a.shape.backward] += err * err;
    ++n[a.shape.backward];
    EXPECT_LE(std::abs(err), 0.34) << a.pointer;
  }
  ASSERT_EQ(n[0], 36);
  ASSERT_EQ(n[1], 36);
  EXPECT_LE(std::sqrt(sum_sq[0] / n[0]), 0.11);
  EXPECT_LE(std::sqrt(sum_sq[1] / n[1]), 0.10);
}

}  // namespace
}  // namespace stepcast
