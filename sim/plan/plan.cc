#include "sim/plan/plan.h"

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

}  // namespace stepcast
