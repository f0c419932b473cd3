// The streamed Chrome trace (what `stepcast run --trace` writes) is the same text as the
// document trace_json builds, for every rank and for a selection of ranks.
#include <sstream>

#include <gtest/gtest.h>

#include "sim/engine/engine.h"
#include "sim/lower/lower.h"
#include "sim/report/visual.h"
#include "tests/sim/lower/lower_test_util.h"

namespace stepcast {
namespace {

TEST(Trace, StreamedTraceIsTheDocumentsDump) {
  testing::Plan plan;
  plan.tp = 2;
  plan.pp = 2;
  plan.dp = 2;
  plan.sp = true;
  plan.zero = 1;
  const Program prog = lower(testing::make_scenario(testing::tiny_gpt(4), plan));
  const Timeline t = simulate(prog, testing::synth_durations(prog));
  for (const std::vector<int>& ranks : {std::vector<int>{}, std::vector<int>{1}}) {
    std::ostringstream out;
    write_trace_json(prog, t, ranks, out);
    const nlohmann::json doc = trace_json(prog, t, ranks);
    EXPECT_EQ(out.str(), doc.dump());
    EXPECT_GT(doc["traceEvents"].size(), 10u);
  }
}

}  // namespace
}  // namespace stepcast
