// One transformer layer against a measurement: Korthikanti et al. 2022, Table 4
// (docs/model.md, "Per-layer timings measured"): one layer of the 22B
// model (h 6144, 64 heads, s 2048, microbatch 4) on 8 A100s with t = 8, forward and
// backward (the backward includes any recomputation), in five settings. The simulated
// layer (the span of layer 24's tasks of the first microbatch, every stream) must be within
// 10% of each measured time. It guards the whole per-layer chain at once: GEMM and
// unfused-attention efficiency, memory-bound ops, TP collectives and their calibration,
// recomputation and sequence parallelism. Simulated (ms, forward / backward, against
// Table 4), with the 2022 code's asynchronous input-gradient reductions the case file
// states: no recompute 7.98 / 11.01 (7.7 / 11.9), sequence parallel 7.28 / 11.25 (7.2 /
// 11.8), full recompute 7.98 / 19.00 (7.7 / 19.5), selective 7.98 / 12.48 (7.7 / 13.2),
// selective + sequence parallel 7.28 / 12.71 (7.2 / 13.1): −7.4% to +3.7%. With the
// reductions synchronous the backwards were 12.66, 11.99, 20.64, 14.12 and 13.45 (the sequence
// parallel backward includes its weight-gradient re-gathers since they were modelled:
// 11.86 and 13.32 before; 12.26 and 13.72 while SM interference slowed a GEMM over its whole
// length when a re-gather ran as it started, not only over their overlap).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <limits>

#include "sim/report/report.h"
#include "sim/scenario/scenario.h"

namespace stepcast {
namespace {

struct Row {
  const char* setting;
  const char* recompute;
  bool sequence_parallel;
  double fwd_ms, bwd_ms;  // Table 4
};

// Forward and backward span (ms) of `layer`, microbatch 0, on the first simulated rank.
std::pair<double, double> layer_spans_ms(const Prediction& p, int layer) {
  TimeNs f0 = std::numeric_limits<TimeNs>::max(), f1 = 0;
  TimeNs b0 = std::numeric_limits<TimeNs>::max(), b1 = 0;
  const RankProgram& rp = p.program.ranks.front();
  const RankTimeline& tl = p.timeline.ranks.front();
  for (const Task& t : rp.tasks) {
    if (t.layer != layer || t.microbatch != 0) continue;
    const TaskTiming& tt = tl.tasks[static_cast<size_t>(t.id)];
    if (t.phase == Phase::kFwd) {
      f0 = std::min(f0, tt.start);
      f1 = std::max(f1, tt.end);
    } else if (t.phase == Phase::kBwdInput || t.phase == Phase::kBwdWeight ||
               t.phase == Phase::kRecompute) {
      b0 = std::min(b0, tt.start);
      b1 = std::max(b1, tt.end);
    }
  }
  EXPECT_GT(f1, f0);
  EXPECT_GT(b1, b0);
  return {static_cast<double>(f1 - f0) * 1e-6, static_cast<double>(b1 - b0) * 1e-6};
}

TEST(LayerTiming, Korthikanti22BLayerWithinTenPercentOfTable4) {
  const Row rows[] = {
      {"no recompute", "none", false, 7.7, 11.9},
      {"sequence parallel", "none", true, 7.2, 11.8},
      {"full recompute", "full", false, 7.7, 19.5},
      {"selective recompute", "selective", false, 7.7, 13.2},
      {"selective + sequence parallel", "selective", true, 7.2, 13.1},
  };
  for (const Row& row : rows) {
    YAML::Node doc =
        YAML::LoadFile(std::string(STEPCAST_SOURCE_DIR) +
                       "/scenarios/validation/korthikanti2022-t5-22B-full-recompute.yaml");
    doc["parallel"]["recompute"] = row.recompute;
    doc["parallel"]["sequence_parallel"] = row.sequence_parallel;
    const Scenario sc = load_scenario_node(doc, "22b-table4.yaml");
    ASSERT_EQ(sc.parallel.tp, 8);
    ASSERT_EQ(sc.parallel.microbatch, 4);
    const Prediction p = predict(sc);
    const auto [fwd, bwd] = layer_spans_ms(p, 24);
    EXPECT_NEAR(fwd / row.fwd_ms, 1.0, 0.10) << row.setting << ": forward " << fwd << " ms";
    EXPECT_NEAR(bwd / row.bwd_ms, 1.0, 0.10) << row.setting << ": backward " << bwd << " ms";
    // In the test XML (--gtest_output=xml): the simulated times of each row.
    RecordProperty(std::string(row.setting) + " fwd/bwd ms",
                   std::to_string(fwd) + " / " + std::to_string(bwd));
  }
}

}  // namespace
}  // namespace stepcast
