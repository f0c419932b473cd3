// `stepcast fit` on grouped expert GEMMs (calibrate/fit/fit_grouped.cc): synthetic
// measurement files made by the simulator's own grouped-GEMM time at a known
// compute.gemm.grouped_efficiency, fitted into a profile and loaded back; and one bad-input
// test per rule of the "grouped_gemm" entries (calibrate/fit/measurements.cc).
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "calibrate/fit/fit.h"
#include "calibrate/fit/measurements.h"
#include "model/error.h"
#include "model/workload.h"
#include "sim/cluster/profile.h"
#include "sim/cost/cost.h"
#include "tests/calibrate/fit_test_util.h"

namespace stepcast {
namespace {

using fit_test::only_issue;
using fit_test::out_path;
using fit_test::profiles_dir;
using fit_test::replace;
using fit_test::write_file;

constexpr double kBf16Peak = 989.4e12;  // h100-sxm.yaml, the base of every fit here

// The dense curve the synthetic sweeps are made with (the H200 sweep's bf16 half sizes and
// fixed time, a lower ceiling), unlike h100-sxm's own (E 0.880, hm 107, hn 58, hk 109,
// fixed 5.8 us). With the H200's ceiling 0.81 the two curves time the grouped shapes below
// within 0.2% of each other (in geometric mean), which would not tell them apart.
const GemmCurve kCurve{0.72, 14, 70, 146, 5.6e-6, 0, 0};

// h100-sxm (no gemm_table) with the dense curve `c`: what a fit of a sweep made by `c`
// gives (FitGemm tests: within 1e-4), and so the profile the grouped points are made under.
HwProfile h100_with(const GemmCurve& c) {
  HwProfile hw = load_profile("h100-sxm", profiles_dir());
  hw.compute.gemm_max_eff = c.max_eff;
  hw.compute.gemm_half_m = c.half_m;
  hw.compute.gemm_half_n = c.half_n;
  hw.compute.gemm_half_k = c.half_k;
  hw.compute.gemm_fixed_time_s = c.fixed_time_s;
  return hw;
}

struct Grouped {
  std::int64_t m, n, k, groups;
  DType dtype;
  const char* phase;
  GemmLayout layout;  // the simulator's for that phase (model/workload_parts.h, Linear)
};

// Expert GEMMs of Qwen3-30B-A3B (h 2048, f 768), DeepSeek-V3 (7168, 2048) and GPT-OSS-120B
// (2880, 2880): fc1 [rows, 2f, h] forward, fc2's input gradient [rows, f, h], fc1's weight
// gradient [h, 2f, rows], 4 and 16 groups, 512 and 4096 rows, bf16 and fp8.
std::vector<Grouped> grouped_shapes() {
  std::vector<Grouped> out;
  for (auto [h, f] : {std::pair<std::int64_t, std::int64_t>{2048, 768}, {7168, 2048}, {2880, 2880}})
    for (std::int64_t g : {4, 16})
      for (std::int64_t rows : {512, 4096}) {
        const DType d = rows == 512 ? DType::kFp8 : DType::kBf16;
        out.push_back({rows, 2 * f, h, g, d, "fwd", GemmLayout::kNN});
        out.push_back({rows, f, h, g, d, "bwd_input", GemmLayout::kNT});
        out.push_back({h, 2 * f, rows, g, d, "bwd_weight", GemmLayout::kTN});
      }
  return out;
}

// A measurements file: the bf16 sweep m, n, k in {256, ..., 8192} timed by `dense` (none
// when null) and the grouped shapes timed by the simulator under `truth` over `efficiency`,
// each times exp(N(0, noise)) (seeded).
std::string measurements(const GemmCurve* dense, const HwProfile& truth, double efficiency,
                         double noise, const std::vector<Grouped>& shapes = grouped_shapes()) {
  std::ostringstream j;
  j.precision(17);
  j << R"({"schema": "stepcast.measurements/1", "source": "synthetic: the model itself",
    "provenance": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1}, "gemm": [)";
  bool first = true;
  for (double m = 256; dense && m <= 8192; m *= 2)
    for (double n = 256; n <= 8192; n *= 2)
      for (double k = 256; k <= 8192; k *= 2) {
        const GemmSample s{m, n, k, 2 * m * n * k, kBf16Peak, 0};
        const double t = gemm_curve_time_s(*dense, s);
        j << (first ? "" : ",") << R"({"m": )" << m << R"(, "n": )" << n << R"(, "k": )" << k
          << R"(, "dtype": "bf16", "time_us": )" << t * 1e6 << "}";
        first = false;
      }
  j << R"(], "grouped_gemm": [)";
  std::mt19937 rng(7);
  std::normal_distribution<double> z(0.0, 1.0);
  first = true;
  for (const Grouped& g : shapes) {
    const GemmShape shape{g.m, g.n, g.k, g.groups, g.dtype, g.layout};
    const double t =
        grouped_gemm_kernel_time_s(shape, truth) / efficiency * std::exp(noise * z(rng));
    j << (first ? "" : ",") << R"({"m": )" << g.m << R"(, "n": )" << g.n << R"(, "k": )" << g.k
      << R"(, "groups": )" << g.groups << R"(, "dtype": ")" << dtype_name(g.dtype)
      << R"(", "phase": ")" << g.phase << R"(", "layout": "TN", "streams": 4, "time_us": )"
      << t * 1e6 << R"(, "flop_per_s": )" << 2.0 * g.m * g.n * g.k * g.groups / t << "}";
    first = false;
  }
  j << "]}";
  return j.str();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// 36 grouped points made at efficiency 0.8 with 1% noise beside a dense sweep of kCurve: the
// fit recovers 0.8 within 1% (the noise's mean over 36 points: ~0.17%), against the curve it
// has just fitted (the base's curve would be off by more than 2%: the test tells them
// apart), writes it in place with `# fitted`, and the grouped points stay out of the dense
// fit (the curve is kCurve's within 1e-4 although they run 1/0.8 slower) and the table.
TEST(FitGrouped, RecoversTheEfficiencyAgainstTheFittedCurve) {
  const HwProfile truth = h100_with(kCurve);
  const std::string in = write_file("grouped.json", measurements(&kCurve, truth, 0.8, 0.01));
  const std::string out = out_path("fitted.yaml");
  FitReport rep;
  fit_profile(in, "h100-sxm", out, &rep);
  const HwProfile got = load_profile(out, profiles_dir());
  EXPECT_NEAR(got.compute.gemm_grouped_eff / 0.8, 1.0, 0.01);
  EXPECT_NEAR(got.compute.gemm_grouped_eff, rep.compute.gemm_grouped_eff, 1e-4);
  EXPECT_EQ(rep.grouped_gemm_points, 36);
  EXPECT_LT(rep.grouped_gemm_rms_rel_err, 0.02);  // the 1% noise
  EXPECT_EQ(rep.gemm_points, 216);                // 6^3 dense shapes, no grouped one
  EXPECT_NEAR(got.compute.gemm_max_eff, kCurve.max_eff, 1e-4);
  EXPECT_NEAR(got.compute.gemm_half_m, kCurve.half_m, 0.05);
  EXPECT_TRUE(got.compute.gemm_table.empty());
  EXPECT_NE(rep.text().find(fmt::format("grouped gemm: grouped_efficiency {:.4f}",
                                        rep.compute.gemm_grouped_eff)),
            std::string::npos)
      << rep.text();
  // Written in place into the base's compute.gemm (which lacks the key: at its end).
  const std::string text = slurp(out);
  const auto at = text.find("\n    grouped_efficiency: ");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  EXPECT_NE(line.find("# fitted"), std::string::npos) << line;

  // The same points against h100-sxm's curve would give another factor.
  const HwProfile base = load_profile("h100-sxm", profiles_dir());
  double log_sum = 0;
  for (const Grouped& g : grouped_shapes()) {
    const GemmShape s{g.m, g.n, g.k, g.groups, g.dtype, g.layout};
    log_sum += std::log(grouped_gemm_kernel_time_s(s, base) / grouped_gemm_kernel_time_s(s, truth));
  }
  EXPECT_GT(std::abs(std::exp(log_sum / 36) - 1), 0.02);

  // Loaded back, the simulator times each grouped task as measured (at the measured clock,
  // without the launch; every shape here is aligned, so the layout does not matter): within
  // the noise (4 sigma).
  HwProfile sim = got;
  sim.compute.sustained_clock = 1;
  sim.compute.launch_overhead_s = 0;
  const Measurements m = load_measurements(in);
  ASSERT_EQ(m.grouped_gemm.size(), 36u);
  for (const MeasuredGroupedGemm& g : m.grouped_gemm) {
    Task t;
    t.kind = TaskKind::kGemm;
    t.gemm = GemmShape{g.m, g.n, g.k, g.groups, g.dtype, GemmLayout::kNN};
    EXPECT_NEAR(compute_time_s(t, sim) / g.time_s, 1.0, 0.04) << g.pointer;
  }
}

// Grouped points alone: against the base profile's curve, with a warning saying so.
TEST(FitGrouped, WithoutADenseSweepTheBaseCurveIsTheReference) {
  const HwProfile base = load_profile("h100-sxm", profiles_dir());
  FitReport rep;
  fit_profile(write_file("alone.json", measurements(nullptr, base, 0.9, 0)), "h100-sxm",
              out_path("fitted.yaml"), &rep);
  EXPECT_NEAR(rep.compute.gemm_grouped_eff, 0.9, 1e-9);
  EXPECT_LT(rep.grouped_gemm_max_rel_err, 1e-9);
  EXPECT_EQ(rep.gemm_points, 0);
  ASSERT_FALSE(rep.warnings.empty());
  EXPECT_NE(rep.warnings.back().find("relative to the base profile's GEMM curve"),
            std::string::npos);
}

// A factor above the key's bound of 2 is capped with a warning, so the profile loads: 16
// groups of [128, 128, 128] 3 times faster than the curve's ~4 * 5.8 us of fixed time
// (8 us for 67 MFLOP: 8.4 TFLOP/s, far below the peak).
TEST(FitGrouped, AnEfficiencyAboveTwoIsCapped) {
  const HwProfile base = load_profile("h100-sxm", profiles_dir());
  FitReport rep;
  const std::string out = out_path("fitted.yaml");
  const std::vector<Grouped> tiny = {{128, 128, 128, 16, DType::kBf16, "fwd", GemmLayout::kNN}};
  fit_profile(write_file("fast.json", measurements(nullptr, base, 3.0, 0, tiny)), "h100-sxm", out,
              &rep);
  EXPECT_DOUBLE_EQ(load_profile(out, profiles_dir()).compute.gemm_grouped_eff, 2.0);
  bool warned = false;
  for (const std::string& w : rep.warnings) warned |= w.find("capped at 2") != std::string::npos;
  EXPECT_TRUE(warned);
}

// ---------------------------------------------------------------- bad grouped_gemm entries

// 16 x 2*4096*1536*2048 FLOP = 412.3 GFLOP in 800 us: 515.4 TFLOP/s.
const char* kGood = R"({"schema": "stepcast.measurements/1", "source": "test",
  "provenance": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1},
  "grouped_gemm": [{"m": 4096, "n": 1536, "k": 2048, "groups": 16, "dtype": "bf16",
                    "phase": "fwd", "time_us": 800, "flop_per_s": 515.4e12}]})";

TEST(GroupedMeasurementsBad, GoodFileLoads) {
  const Measurements m = parse_measurements(kGood, "m.json");
  ASSERT_EQ(m.grouped_gemm.size(), 1u);
  EXPECT_EQ(m.grouped_gemm[0].groups, 16);
  EXPECT_EQ(m.grouped_gemm[0].phase, "fwd");
  EXPECT_NEAR(m.grouped_gemm[0].flop_per_s, 16 * 2.0 * 4096 * 1536 * 2048 / 800e-6, 1);
  EXPECT_TRUE(m.gemm.empty());  // kept apart from the dense GEMMs
}

TEST(GroupedMeasurementsBad, MissingGroups) {
  const InputIssue i = only_issue(replace(kGood, R"("groups": 16, )", ""));
  EXPECT_EQ(i.key, "/grouped_gemm/0/groups");
  EXPECT_EQ(i.message, "missing required key");
  EXPECT_EQ(i.line, 3);  // the object lacking it
}

TEST(GroupedMeasurementsBad, GroupsMustBeAPositiveInteger) {
  InputIssue i = only_issue(replace(kGood, R"("groups": 16)", R"("groups": 0)"));
  EXPECT_EQ(i.key, "/grouped_gemm/0/groups");
  EXPECT_NE(i.message.find("expected an integer >= 1, got 0"), std::string::npos) << i.message;
  i = only_issue(replace(kGood, R"("groups": 16)", R"("groups": 2.5)"));
  EXPECT_NE(i.message.find("expected an integer >= 1, got 2.5"), std::string::npos) << i.message;
}

TEST(GroupedMeasurementsBad, PhaseIsAProgramPhase) {
  const InputIssue i = only_issue(replace(kGood, R"("phase": "fwd")", R"("phase": "dgrad")"));
  EXPECT_EQ(i.key, "/grouped_gemm/0/phase");
  EXPECT_NE(i.message.find("expected one of fwd, recompute, bwd_input, bwd_weight, got \"dgrad\""),
            std::string::npos)
      << i.message;
  EXPECT_EQ(i.line, 4);
}

TEST(GroupedMeasurementsBad, DtypeIsAGemmDtype) {
  const InputIssue i = only_issue(replace(kGood, R"("dtype": "bf16")", R"("dtype": "fp32")"));
  EXPECT_EQ(i.key, "/grouped_gemm/0/dtype");
  EXPECT_NE(i.message.find("expected one of bf16, fp16, fp8"), std::string::npos) << i.message;
}

TEST(GroupedMeasurementsBad, TimeMustBePositive) {
  const InputIssue i = only_issue(replace(replace(kGood, "\"time_us\": 800", "\"time_us\": 0"),
                                          ", \"flop_per_s\": 515.4e12", ""));
  EXPECT_EQ(i.key, "/grouped_gemm/0/time_us");
  EXPECT_NE(i.message.find("expected a positive number, got 0"), std::string::npos) << i.message;
  EXPECT_EQ(i.line, 4);
}

TEST(GroupedMeasurementsBad, InconsistentFlops) {
  // 515.4 TFLOP/s is what 800 us gives; 1030.8 is twice that.
  const InputIssue i = only_issue(replace(kGood, "515.4e12", "1030.8e12"));
  EXPECT_EQ(i.key, "/grouped_gemm/0/flop_per_s");
  EXPECT_NE(i.message.find("inconsistent"), std::string::npos) << i.message;
  EXPECT_NE(i.message.find("2*m*n*k*groups/time_us gives 5.15396e+14"), std::string::npos)
      << i.message;
}

TEST(GroupedMeasurementsBad, UnitMissingFromKey) {
  const InputIssue i = only_issue(replace(kGood, "\"time_us\": 800, \"flop_per_s\": 515.4e12",
                                          "\"time_us\": 800, \"flop\": 515.4e12"));
  EXPECT_EQ(i.key, "/grouped_gemm/0/flop");
  EXPECT_NE(i.message.find("a number without a unit"), std::string::npos) << i.message;
  EXPECT_NE(i.message.find("\"flop_per_s\""), std::string::npos);
}

TEST(GroupedMeasurementsBad, UnknownKeySuggestsTheClosest) {
  const InputIssue i =
      only_issue(replace(kGood, R"("groups": 16)", R"("groups": 16, "stream": 4)"));
  EXPECT_EQ(i.key, "/grouped_gemm/0/stream");
  EXPECT_NE(i.message.find("did you mean \"streams\""), std::string::npos) << i.message;
}

TEST(GroupedMeasurementsBad, NotAnArray) {
  const InputIssue i =
      only_issue(replace(replace(kGood, "\"grouped_gemm\": [{", "\"grouped_gemm\": {\"x\": {"),
                         "515.4e12}]}", "515.4e12}}}"));
  EXPECT_EQ(i.key, "/grouped_gemm");
  EXPECT_NE(i.message.find("expected an array, got object"), std::string::npos) << i.message;
}

// Every problem at once: a bad phase in the first entry, a bad m in a second.
TEST(GroupedMeasurementsBad, AllProblemsReported) {
  const std::string two =
      replace(replace(kGood, R"("phase": "fwd")", R"("phase": "forward")"), "515.4e12}]}",
              "515.4e12},\n    {\"m\": -1, \"n\": 8, \"k\": 8, \"groups\": 2, \"dtype\": \"bf16\", "
              "\"phase\": \"fwd\", \"time_us\": 1}]}");
  try {
    parse_measurements(two, "m.json");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 2u) << e.what();
    EXPECT_EQ(e.issues()[0].key, "/grouped_gemm/0/phase");
    EXPECT_EQ(e.issues()[1].key, "/grouped_gemm/1/m");
    EXPECT_EQ(e.issues()[1].line, 5);
  }
}

// A grouped GEMM faster than the tensor cores' peak is bad input at its time, line and
// column: 412.3 GFLOP in 100 us is 4123 TFLOP/s against H100's 989.4.
TEST(GroupedMeasurementsBad, FasterThanThePeak) {
  const std::string in = write_file(
      "fast.json",
      replace(replace(kGood, "\"time_us\": 800", "\"time_us\": 100"), "515.4e12", "4123.2e12"));
  try {
    fit_profile(in, "h100-sxm", out_path("fast.yaml"), nullptr);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 1u) << e.what();
    const InputIssue& i = e.issues()[0];
    EXPECT_EQ(i.file, in);
    EXPECT_EQ(i.key, "/grouped_gemm/0/time_us");
    EXPECT_EQ(i.line, 4);
    EXPECT_NE(i.message.find("4123 TFLOP/s for a grouped GEMM of 16 x 4096x1536x2048 bf16, above "
                             "the base profile's peak of 989.4 TFLOP/s"),
              std::string::npos)
        << i.message;
  }
}

}  // namespace
}  // namespace stepcast
