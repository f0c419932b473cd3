// The streamed Chrome trace (what `stepcast run --trace` writes) is the same text as the
// document trace_json builds, for every rank and for a selection of ranks; the pipeline
// diagram's blocks cover every task, merged or not.
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

TEST(ScheduleBlocks, EveryTaskLiesInABlockOfItsStageAndRowMergedOrNot) {
  testing::Plan plan;
  plan.tp = 2;
  plan.pp = 4;
  plan.sp = true;
  plan.microbatches = 8;
  const Program prog = lower(testing::make_scenario(testing::tiny_gpt(8), plan));
  testing::Synth synth;
  synth.comm_ns_per_byte = 1e-3;  // communication takes time, so it is drawn
  const Timeline t = simulate(prog, testing::synth_durations(prog, synth));
  size_t exact_blocks = 0;
  for (const TimeNs gap : {TimeNs{0}, t.step_ns / 2200, t.step_ns}) {
    const std::vector<ScheduleBlock> blocks = schedule_blocks(prog, t, gap);
    if (gap == 0)
      exact_blocks = blocks.size();
    else
      EXPECT_LT(blocks.size(), exact_blocks) << gap;
    size_t tasks = 0, drawn = 0;
    for (const ScheduleBlock& b : blocks) drawn += static_cast<size_t>(b.tasks);
    for (size_t r = 0; r < prog.ranks.size(); ++r) {
      const RankProgram& rp = prog.ranks[r];
      if (rp.rank != rp.stands_for.front()) continue;  // one drawn rank per stage
      for (const Task& task : rp.tasks) {
        const TaskTiming& tt = t.ranks[r].tasks[static_cast<size_t>(task.id)];
        if (task.kind == TaskKind::kAlloc || task.kind == TaskKind::kFree || tt.end <= tt.start)
          continue;
        ++tasks;
        const bool comm = task.stream != StreamKind::kCompute;
        bool covered = false;
        for (const ScheduleBlock& b : blocks)
          covered = covered || (b.stage == rp.pp_stage && b.comm == comm && b.start <= tt.start &&
                                tt.end <= b.end);
        EXPECT_TRUE(covered) << task.label << " gap " << gap;
      }
    }
    EXPECT_EQ(drawn, tasks) << gap;
    if (gap == t.step_ns) {
      // Communication of a stage is one block; backward passes hold their weight gradients.
      for (int s = 0; s < plan.pp; ++s) {
        int comm_blocks = 0;
        for (const ScheduleBlock& b : blocks) comm_blocks += b.comm && b.stage == s;
        EXPECT_EQ(comm_blocks, 1) << s;
      }
      for (const ScheduleBlock& b : blocks) EXPECT_NE(b.phase, Phase::kBwdWeight);
    }
  }
}

}  // namespace
}  // namespace stepcast
