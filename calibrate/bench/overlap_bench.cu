// SM interference: a GEMM on GPU 0 timed alone, then while an NCCL allreduce over all GPUs
// of the process runs on another stream. NCCL kernels hold SMs for their whole duration, so
// the GEMM slows down; `stepcast fit` turns the ratio into compute.comm_sms.
// The allreduce is enqueued first and repeated long enough to cover every timed GEMM.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "bench.h"
#include "check.h"
#include "gemm_runner.h"
#include "nccl_group.h"

namespace stepcast::bench {

void run_overlap(const Options& opt, Results& out) {
  int devices = 0;
  STEPCAST_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    out.notes.push_back("overlap: needs at least 2 GPUs; nothing measured");
    return;
  }
  apply_algo(opt);
  const int ranks = std::min(devices, 8);
  const std::size_t ar_bytes = std::size_t{256} << 20;
  std::unique_ptr<NcclGroup> g = NcclGroup::single_process(ranks, ar_bytes);

  const std::int64_t dims[] = {4096, 8192};
  for (std::int64_t d : dims) {
    const GemmShapeSpec shape{d, d, d, 1, "bf16", "overlap", ""};
    STEPCAST_CUDA_CHECK(cudaSetDevice(0));
    cudaStream_t s;
    STEPCAST_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    double alone_us = 0, overlapped_us = 0, ar_us = 0;
    {
      GemmRunner gemm(shape, s);
      alone_us = median(gemm.time_us(opt.warmup, opt.repeats));
      ar_us = g->time_us("allreduce", ar_bytes, 2, 5);
      // Enough allreduces to outlast warmup + repeats GEMMs (x2 margin).
      const double need_us = 2.0 * (opt.warmup + opt.repeats) * alone_us;
      const int count = static_cast<int>(std::ceil(need_us / ar_us)) + 2;
      for (int i = 0; i < count; ++i) g->enqueue("allreduce", ar_bytes);
      STEPCAST_CUDA_CHECK(cudaSetDevice(0));
      overlapped_us = median(gemm.time_us(opt.warmup, opt.repeats));
      g->synchronize();
    }
    STEPCAST_CUDA_CHECK(cudaSetDevice(0));
    STEPCAST_CUDA_CHECK(cudaStreamDestroy(s));
    OverlapResult r;
    r.gemm = shape;
    r.ranks = ranks;
    r.allreduce_size_bytes = static_cast<double>(ar_bytes);
    r.gemm_alone_time_us = alone_us;
    r.gemm_overlapped_time_us = overlapped_us;
    r.allreduce_alone_time_us = ar_us;
    std::fprintf(stderr,
                 "overlap gemm %lld^3 bf16: alone %.1f us, with allreduce %.1f us (x%.3f)\n",
                 static_cast<long long>(d), alone_us, overlapped_us, overlapped_us / alone_us);
    out.overlap.push_back(r);
  }
}

}  // namespace stepcast::bench
