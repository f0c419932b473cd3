// The thin CUDA / cuBLASLt / NCCL layer of the executor (gpu_runner.cu): runs a placed Plan
// (plan.h) and records every task's start and end with CUDA events; write_measured
// (measured.h) turns the times into the result. No CUDA types here, so main.cc stays C++.
#pragma once

#include <map>
#include <stdexcept>
#include <string>

#include "measured.h"
#include "plan.h"

#ifdef STEPCAST_EXEC_WITH_MPI
#include <mpi.h>
#endif

namespace stepcast::exec {

// An alloc task that the GPU cannot satisfy: the plan does not fit (main() exits 3).
class OutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct GpuOptions {
  int warmup = 1;      // whole-Program runs before the timed one (cuBLASLt / NCCL setup, clocks)
  bool graph = false;  // capture each GPU's Program into a CUDA graph once, replay it
  // Attention through cuDNN's fused SDPA where the build has cuDNN and cuDNN runs the
  // task's shape (attention_cudnn.h); false: every attention task unfused.
  bool fused_attention = true;
  // With graph: after the timed replay, capture the Program again with no timing event
  // around its tasks (only the events other streams wait on) and time that replay's step.
  bool untimed = false;
#ifdef STEPCAST_EXEC_WITH_MPI
  MPI_Comm mpi = MPI_COMM_NULL;  // one process per GPU; MPI_COMM_NULL: single process
#endif
};

int visible_gpus();  // cudaGetDeviceCount, 0 when none or no driver

// Runs the ranks placed in this process (ExecRank::device >= 0), `opt.warmup` times untimed
// and once timed. Returns every rank's times in the calling process (single process) or in
// process 0 (MPI; the others get an empty Recorded). Fills `provenance`. Throws
// bench::BenchError on a CUDA/cuBLAS/NCCL failure, OutOfMemory when an alloc fails.
Recorded run_on_gpus(const Plan& plan, const GpuOptions& opt,
                     std::map<std::string, std::string>& provenance);

}  // namespace stepcast::exec
