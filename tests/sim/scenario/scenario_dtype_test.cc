// training.dtype mxfp8 and nvfp4: accepted only where the profile lists that dtype's peak
// (Blackwell), with one message naming the profile otherwise.
#include <string>

#include <gtest/gtest.h>

#include "sim/scenario/scenario.h"
#include "tests/sim/scenario/scenario_doc.h"

namespace stepcast {
namespace {

using namespace scenario_test;

TEST(ScenarioRules, BlockScaledDtypesNeedTheirPeak) {
  for (const std::string d : {"mxfp8", "nvfp4"}) {
    SCOPED_TRACE(d);
    // Hopper's tensor cores have no block-scaled mode: h100-sxm lists no such peak.
    expect_issue(base().insert(15, "  dtype: " + d), "training.dtype", 15,
                 d + " needs a GPU with an " + d + " peak, but profile h100-sxm");
    const Scenario s = load(base().set(10, "  profile: b200-sxm").insert(15, "  dtype: " + d));
    EXPECT_STREQ(dtype_name(s.training.dtype), d.c_str());
  }
  // Unknown dtypes list the choices.
  expect_issue(base().insert(15, "  dtype: fp4"), "training.dtype", 15,
               "(known: bf16, fp16, fp8, mxfp8, nvfp4)");
}

TEST(ScenarioRules, BlockScaledTrainingKeepsBf16Gradients) {
  // Parameters stay bf16 (activation_dtype): bf16 gradients are allowed, fp16 are not.
  const Doc d = base().set(10, "  profile: b200-sxm").insert(15, "  dtype: nvfp4");
  EXPECT_EQ(*load(Doc(d).insert(16, "  grad_reduce_dtype: bf16")).training.grad_reduce_dtype,
            DType::kBf16);
  expect_issue(Doc(d).insert(16, "  grad_reduce_dtype: fp16"), "training.grad_reduce_dtype", 16,
               "fp16 gradients need fp16 parameters, but training.dtype nvfp4 keeps them in bf16");
}

// training.fp8_recipe: delayed (Megatron-Core's default) or current, only with dtype fp8.
TEST(ScenarioRules, Fp8RecipeOnlyWithPerTensorFp8) {
  EXPECT_EQ(load(base().insert(15, "  dtype: fp8")).training.fp8_recipe, Fp8Recipe::kDelayed);
  EXPECT_EQ(load(base().insert(15, "  dtype: fp8").insert(16, "  fp8_recipe: current"))
                .training.fp8_recipe,
            Fp8Recipe::kCurrent);
  expect_issue(base().insert(15, "  fp8_recipe: current"), "training.fp8_recipe", 15,
               "training.dtype is bf16");
  expect_issue(base().insert(15, "  dtype: fp8").insert(16, "  fp8_recipe: blockwise"),
               "training.fp8_recipe", 16, "(known: delayed, current)");
}

}  // namespace
}  // namespace stepcast
