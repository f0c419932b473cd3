// `stepcast fit` on GEMM sweeps with fp8 shapes of their own (calibrate/fit/fit_gemm.cc):
// synthetic sweeps made by the curve itself, written as a measurements file, fitted into
// a profile and loaded back by the simulator's loader.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "calibrate/fit/fit.h"
#include "model/workload.h"
#include "sim/cluster/profile.h"
#include "sim/cost/cost.h"
#include "tests/calibrate/fit_test_util.h"

namespace stepcast {
namespace {

using fit_test::out_path;
using fit_test::profiles_dir;
using fit_test::write_file;

// A measurements file of m, n, k in {256, 512, ..., 8192}: bf16 timed by `bf16` and, when
// `with_fp8`, fp8 by `fp8` (peaks 989.4 and 1978.9 TFLOP/s, H100's).
std::string sweep(const GemmCurve& bf16, const GemmCurve& fp8, bool with_fp8) {
  std::ostringstream j;
  j.precision(17);
  j << R"({"schema": "stepcast.measurements/1", "source": "synthetic: the curve itself",
    "provenance": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1}, "gemm": [)";
  bool first = true;
  for (int d = 0; d < (with_fp8 ? 2 : 1); ++d)
    for (double m = 256; m <= 8192; m *= 2)
      for (double n = 256; n <= 8192; n *= 2)
        for (double k = 256; k <= 8192; k *= 2) {
          const double peak = d ? 1978.9e12 : 989.4e12;
          const GemmSample s{m, n, k, 2 * m * n * k, peak, 0};
          const double t = gemm_curve_time_s(d ? fp8 : bf16, s);
          j << (first ? "" : ",") << R"({"m": )" << m << R"(, "n": )" << n << R"(, "k": )" << k
            << R"(, "dtype": ")" << (d ? "fp8" : "bf16") << R"(", "time_us": )" << t * 1e6
            << R"(, "flop_per_s": )" << s.flops / t << "}";
          first = false;
        }
  j << "]}";
  return j.str();
}

HwProfile fit_sweep(const std::string& text, FitReport& rep) {
  const std::string in = write_file("sweep.json", text);
  const std::string out = out_path("fitted.yaml");
  fit_profile(in, "h100-sxm", out, &rep);
  return load_profile(out, profiles_dir());
}

// bf16 made with E 0.81, hm 14, hn 70, hk 146, fixed 5.6 us and fp8 with E 0.80, hm 40,
// hn 108, hk 443 and the same fixed time (the H200 sweep's fits): the fit returns both sets,
// fp8's as its own half sizes, and the loaded profile's curve times fp8 shapes as made.
TEST(FitGemm, Fp8GetsHalfSizesOfItsOwn) {
  const GemmCurve bf16{0.81, 14, 70, 146, 5.6e-6, 0, 0};
  const GemmCurve fp8{0.80, 40, 108, 443, 5.6e-6, 0, 0};
  FitReport rep;
  const HwProfile got = fit_sweep(sweep(bf16, fp8, true), rep);
  const ComputeParams& c = got.compute;
  EXPECT_NEAR(c.gemm_max_eff, 0.81, 1e-4);
  EXPECT_NEAR(c.gemm_half_m, 14, 0.05);
  EXPECT_NEAR(c.gemm_half_n, 70, 0.05);
  EXPECT_NEAR(c.gemm_half_k, 146, 0.05);
  EXPECT_NEAR(c.gemm_fixed_time_s, 5.6e-6, 1e-10);
  EXPECT_NEAR(c.fp8_max_eff, 0.80, 1e-4);
  EXPECT_NEAR(c.fp8_half_m, 40, 0.05);
  EXPECT_NEAR(c.fp8_half_n, 108, 0.05);
  EXPECT_NEAR(c.fp8_half_k, 443, 0.1);
  EXPECT_LT(rep.gemm_rms_rel_err, 1e-4);
  EXPECT_NE(rep.text().find("fp8's own half sizes: M 40.0, n 108.0, k 443.0"), std::string::npos)
      << rep.text();
  // The curve, not the base profile's measured points; aligned shapes (16 fp8 elements).
  HwProfile curve = got;
  curve.compute.gemm_table.clear();
  for (double m : {304.0, 3008.0})
    for (double k : {704.0, 7008.0}) {
      const GemmShape g{static_cast<std::int64_t>(m),
                        1024,
                        static_cast<std::int64_t>(k),
                        1,
                        DType::kFp8,
                        GemmLayout::kNN};
      const GemmSample s{m, 1024, k, 2 * m * 1024 * k, 1978.9e12, 0};
      EXPECT_NEAR(s.flops / gemm_curve_time_s(fp8, s) / (1978.9e12 * gemm_efficiency(g, curve)),
                  1.0, 1e-3)
          << m << " " << k;
    }
}

// Only bf16 measured: fp8 keeps what the base has (no half sizes of its own: -1).
TEST(FitGemm, WithoutFp8PointsFp8HasNoHalfSizesOfItsOwn) {
  const GemmCurve bf16{0.81, 14, 70, 146, 5.6e-6, 0, 0};
  FitReport rep;
  const HwProfile got = fit_sweep(sweep(bf16, bf16, false), rep);
  EXPECT_LT(got.compute.fp8_half_m, 0);
  EXPECT_LT(got.compute.fp8_half_k, 0);
  EXPECT_EQ(rep.text().find("fp8's own"), std::string::npos);
}

// Refitting a profile in place: a shape measured again that the new curve reproduces leaves
// the table. A sweep with 1024^3 bf16 30% slow puts that point in the table (beyond the 5%
// tolerance); the same sweep measured right and fitted on that profile drops it, and the
// base's points at shapes not measured again stay.
TEST(FitGemm, RefitDropsTheTablePointsItNowReproduces) {
  const GemmCurve bf16{0.81, 14, 70, 146, 5.6e-6, 0, 0};
  std::string slow = sweep(bf16, bf16, false);
  {
    const GemmSample s{1024, 1024, 1024, 2.0 * 1024 * 1024 * 1024, 989.4e12, 0};
    std::ostringstream key, was, now;
    key.precision(17);
    key << R"({"m": 1024, "n": 1024, "k": 1024, "dtype": "bf16", "time_us": )";
    const double t = gemm_curve_time_s(bf16, s);
    was.precision(17);
    was << key.str() << t * 1e6 << R"(, "flop_per_s": )" << s.flops / t << "}";
    now.precision(17);
    now << key.str() << 1.3 * t * 1e6 << R"(, "flop_per_s": )" << s.flops / (1.3 * t) << "}";
    const auto at = slow.find(was.str());
    ASSERT_NE(at, std::string::npos);
    slow.replace(at, was.str().size(), now.str());
  }
  auto has_1024 = [](const HwProfile& hw) {
    return std::any_of(
        hw.compute.gemm_table.begin(), hw.compute.gemm_table.end(), [](const GemmPoint& p) {
          return p.m == 1024 && p.n == 1024 && p.k == 1024 && p.dtype == DType::kBf16;
        });
  };
  FitReport rep;
  const std::string first = out_path("first.yaml");
  fit_profile(write_file("slow.json", slow), "h100-sxm", first, &rep);
  const HwProfile one = load_profile(first, profiles_dir());
  ASSERT_TRUE(has_1024(one));
  const std::string second = out_path("second.yaml");
  fit_profile(write_file("right.json", sweep(bf16, bf16, false)), first, second, &rep);
  const HwProfile two = load_profile(second, profiles_dir());
  EXPECT_FALSE(has_1024(two));
  // What the base had elsewhere (H100's points at shapes this sweep does not measure) stays.
  EXPECT_EQ(two.compute.gemm_table.size(), one.compute.gemm_table.size() - 1);
}

// A GEMM faster than the base profile's peak was not measured: bad input at its time, line
// and column (it fitted a 34x-peak table point; a time of 1e-300 us stopped the fit with an
// internal error). 2 x 256^3 FLOP in 0.001 us is 3.4e16 FLOP/s against H100's 9.894e14.
TEST(FitGemm, AGemmFasterThanThePeakIsBadInput) {
  const std::string text =
      "{\"schema\": \"stepcast.measurements/1\", \"source\": \"typo\",\n"
      " \"provenance\": {\"gpu_name\": \"NVIDIA H100 80GB HBM3\", \"gpu_count\": 1},\n"
      " \"gemm\": [{\"m\": 256, \"n\": 256, \"k\": 256, \"dtype\": \"bf16\",\n"
      "            \"time_us\": 0.001}]}";
  const std::string in = write_file("fast.json", text);
  try {
    fit_profile(in, "h100-sxm", out_path("fast.yaml"), nullptr);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    const InputIssue& i = e.issues()[0];
    EXPECT_EQ(i.file, in);
    EXPECT_EQ(i.key, "/gemm/0/time_us");
    EXPECT_EQ(i.line, 4);
    EXPECT_NE(i.message.find("above the base profile's peak of 989.4 TFLOP/s"), std::string::npos)
        << i.message;
  }
}

}  // namespace
}  // namespace stepcast
