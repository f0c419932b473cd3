#include "sim/plan/plan.h"

#include <fmt/format.h>

namespace stepcast {

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kZbH1: return "zb-h1";
    case Schedule::kDualPipeV: return "dualpipev";
  }
  return "?";
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

DType grad_reduce_dtype(const TrainingSpec& t) {
  if (t.grad_reduce_dtype) return *t.grad_reduce_dtype;
  return t.dtype == DType::kFp16 ? DType::kFp16 : DType::kFp32;
}

std::vector<PlanProblem> dualpipev_problems(const ParallelSpec& pl) {
  std::vector<PlanProblem> out;
  if (pl.schedule != Schedule::kDualPipeV) return out;
  if (pl.vpp != 2)
    out.push_back({"vpp", fmt::format("the dualpipev schedule runs exactly 2 model chunks per "
                                      "pipeline rank (vpp: 2), got vpp = {}",
                                      pl.vpp)});
  if (pl.pp < 2)
    out.push_back(
        {"schedule", fmt::format("the dualpipev schedule needs pp >= 2, got pp = {}", pl.pp)});
  if (pl.zero > 1)
    out.push_back({"zero", fmt::format("the dualpipev schedule runs with zero 0 or 1 (its "
                                       "overlapped forward-backward pairs), got zero {}",
                                       pl.zero)});
  if (pl.recompute == Recompute::kFull)
    out.push_back({"recompute",
                   "the dualpipev schedule cannot run with full recompute (its overlapped "
                   "forward-backward pairs)"});
  return out;
}

std::string dualpipev_microbatch_problem(const ParallelSpec& pl, std::int64_t microbatches) {
  if (pl.schedule != Schedule::kDualPipeV || microbatches >= 2 * pl.pp) return {};
  return fmt::format(
      "the dualpipev schedule needs at least 2 x pp = {} microbatches "
      "(global_batch/(dp*microbatch) = {})",
      2 * pl.pp, microbatches);
}

}  // namespace stepcast
