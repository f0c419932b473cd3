// cuBLASLt GEMM sweep: bf16, fp16 and (on sm_89+) fp8 e4m3, over a grid of shapes and the
// exact shapes of a Program. Time per GEMM = median over `repeats` launches, each bracketed
// by CUDA events after `warmup` launches; FLOP/s = 2*m*n*k*batch / time.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "bench.h"
#include "check.h"
#include "gemm_runner.h"

namespace stepcast::bench {

void run_gemm(const Options& opt, Results& out) {
  STEPCAST_CUDA_CHECK(cudaSetDevice(opt.device));
  std::vector<std::int64_t> dims = opt.gemm_dims;
  if (dims.empty()) {
    dims = opt.quick ? std::vector<std::int64_t>{512, 2048, 8192}
                     : std::vector<std::int64_t>{256, 1024, 2048, 4096, 8192, 16384};
  }
  std::vector<GemmShapeSpec> shapes;
  // One measurement per cuBLAS call: a Program's forward and input-gradient GEMMs of one shape
  // are different calls (cublas_gemm), a grid shape the Program also has is not measured twice
  // when the calls coincide.
  std::set<
      std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::string, std::string>>
      seen;
  auto add = [&](GemmShapeSpec s) {
    const CublasGemm c = cublas_gemm(s);
    if (seen.insert({c.m, c.n, s.k, s.batch, s.dtype, c.layout}).second)
      shapes.push_back(std::move(s));
  };
  if (!opt.program_file.empty()) {
    for (GemmShapeSpec s : program_gemm_shapes(opt.program_file)) {
      s.origin = "program";
      add(s);
    }
  }
  for (const std::string& dt : opt.dtypes) {
    for (auto m : dims)
      for (auto n : dims)
        for (auto k : dims) add(GemmShapeSpec{m, n, k, 1, dt, "grid", ""});
  }

  cudaStream_t stream;
  STEPCAST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::set<std::string> unsupported;
  for (const GemmShapeSpec& s : shapes) {
    if (!dtype_supported(s.dtype, opt.device)) {
      unsupported.insert(s.dtype);
      continue;
    }
    std::unique_ptr<GemmRunner> g;
    try {
      g = std::make_unique<GemmRunner>(s, stream);
    } catch (const BenchError& e) {
      // E.g. no cuBLASLt algorithm for an odd Program shape in fp8: recorded, not fatal.
      out.notes.push_back(std::string("gemm: skipped: ") + e.what());
      // Clears the failed call's error (a cudaMalloc out of memory is the last error until
      // read): checked, it would throw that same error and end the sweep; left, the next
      // launch check would report it.
      (void)cudaGetLastError();
      continue;
    }
    const std::vector<double> t = g->time_us(opt.warmup, opt.repeats);
    GemmResult r;
    r.shape = s;
    r.layout = g->layout();
    r.time_us = median(t);
    r.flop_per_s = g->flops() / (r.time_us * 1e-6);
    r.repeats = opt.repeats;
    std::fprintf(stderr, "gemm %-5s %6lld x %6lld x %6lld b%lld %s: %10.2f us %8.1f TFLOP/s\n",
                 s.dtype.c_str(), static_cast<long long>(s.m), static_cast<long long>(s.n),
                 static_cast<long long>(s.k), static_cast<long long>(s.batch), r.layout.c_str(),
                 r.time_us, r.flop_per_s / 1e12);
    out.gemm.push_back(r);
  }
  for (const auto& d : unsupported)
    out.notes.push_back("gemm: " + d + " skipped (needs compute capability 8.9 or newer)");
  STEPCAST_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace stepcast::bench
