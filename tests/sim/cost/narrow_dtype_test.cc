// GEMMs in the block-scaled dtypes: at their own peak (mxfp8 at the FP8 rate, nvfp4 at FP4),
// with the narrow-format ceiling, the 16-byte alignment rule counted in their elements.
#include <gtest/gtest.h>

#include "sim/cost/cost.h"
#include "test_profiles.h"

namespace stepcast {
namespace {

// An H100-like profile with Blackwell-style peaks (B200 HGX: 2250 / 4500 / 9000 TFLOP/s).
HwProfile blackwell_like() {
  HwProfile hw = testing::h100_profile();
  hw.gpu.peak_flop_per_s = {{DType::kBf16, 2250e12},
                            {DType::kFp8, 4500e12},
                            {DType::kMxfp8, 4500e12},
                            {DType::kNvfp4, 9000e12}};
  hw.compute.gemm_unaligned_eff = 0.69;
  return hw;
}

TEST(NarrowDtypes, GemmAtTheDtypesOwnPeakAndCeiling) {
  HwProfile hw = blackwell_like();
  hw.compute.gemm_fixed_time_s = 0;  // shape terms alone: closed form below
  const GemmShape base{8192, 8192, 8192, 1, DType::kBf16, GemmLayout::kNN};
  const double s = 8192.0;
  const double shape = s / (s + 107) * s / (s + 58) * s / (s + 109);
  GemmShape g = base;
  EXPECT_NEAR(gemm_efficiency(g, hw), 0.880 * shape, 1e-12);
  for (DType d : {DType::kFp8, DType::kMxfp8, DType::kNvfp4}) {
    g.dtype = d;
    EXPECT_NEAR(gemm_efficiency(g, hw), 0.70 * shape, 1e-12) << dtype_name(d);
  }
  // Time: 2 s^3 / (peak x eff x sustained clock) + launch; nvfp4 at 9000 x 0.70 against
  // bf16 at 2250 x 0.88: (9000 x 0.70) / (2250 x 0.88) = 3.18x faster, mxfp8 1.59x.
  auto time = [&](DType d) {
    Task t;
    t.kind = TaskKind::kGemm;
    t.gemm = base;
    t.gemm.dtype = d;
    t.flops = 2 * s * s * s;
    return compute_time_s(t, hw) - hw.compute.launch_overhead_s;
  };
  EXPECT_NEAR(time(DType::kBf16) / time(DType::kNvfp4), 9000 * 0.70 / (2250 * 0.88), 1e-9);
  EXPECT_NEAR(time(DType::kBf16) / time(DType::kMxfp8), 4500 * 0.70 / (2250 * 0.88), 1e-9);
}

TEST(NarrowDtypes, AlignmentInTheDtypesElements) {
  // 16 bytes: 8 bf16, 16 mxfp8, 32 nvfp4 elements. n = 4112 = 16 x 257 (odd multiple of 16).
  HwProfile hw = blackwell_like();
  hw.compute.gemm_fixed_time_s = 0;  // the factor alone
  auto ratio = [&](DType d) {
    const GemmShape even{4096, 4096, 4096, 1, d, GemmLayout::kNN};
    const GemmShape odd{4096, 4112, 4096, 1, d, GemmLayout::kNN};
    return gemm_efficiency(odd, hw) / gemm_efficiency(even, hw);
  };
  EXPECT_GT(ratio(DType::kBf16), 0.99);           // aligned for bf16
  EXPECT_GT(ratio(DType::kMxfp8), 0.99);          // aligned for mxfp8
  EXPECT_NEAR(ratio(DType::kNvfp4), 0.69, 0.01);  // 4112 % 32 = 16: unaligned for nvfp4
}

}  // namespace
}  // namespace stepcast
