// cuBLASLt GEMM sweep: bf16, fp16 and (on sm_89+) fp8 e4m3, over a grid of shapes and the
// exact shapes of a Program; and grouped expert GEMMs as Transformer Engine runs them
// (GroupedGemmRunner) over a grid of current MoE models' expert shapes and the Program's
// batch > 1 GEMMs. Time per GEMM = median over `repeats` launches, each bracketed by CUDA
// events after `warmup` launches; FLOP/s = 2*m*n*k*batch / time.
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

namespace {

// Shapes to time, one measurement per cuBLAS call: a Program's forward and input-gradient
// GEMMs of one shape are different calls (cublas_gemm), a grid shape the Program also has is
// not measured twice when the calls coincide.
struct ShapeList {
  std::vector<GemmShapeSpec> shapes;
  std::set<
      std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::string, std::string>>
      seen;
  void add(GemmShapeSpec s) {
    const CublasGemm c = cublas_gemm(s);
    if (seen.insert({c.m, c.n, s.k, s.batch, s.dtype, c.layout}).second)
      shapes.push_back(std::move(s));
  }
};

// Routed-expert shapes of current MoE models (their Hugging Face configs): hidden h, expert
// width f (every one gated: fc1 gives 2f), and the most local experts a rank holds here
// (Mixtral has 8 experts in all).
struct MoeExperts {
  std::int64_t h, f, max_groups;
};
constexpr MoeExperts kMoeModels[] = {{2048, 768, 32},    // Qwen3-30B-A3B: 128 experts, top 8
                                     {7168, 2048, 32},   // DeepSeek-V3: 256 routed experts, top 8
                                     {2880, 2880, 32},   // GPT-OSS-120B: 128 experts, top 4
                                     {4096, 14336, 8}};  // Mixtral-8x7B: 8 experts, top 2

// The grouped GEMMs of the default grid: fc1 [rows, 2f, h] and fc2 [rows, h, f] of each
// model, forward, input and weight gradient as the simulator shapes them
// (model/workload_parts.h, Linear: fwd [rows, out, in], bwd_input [rows, in, out],
// bwd_weight [in, out, rows]), over local experts (groups) and rows per expert; bf16 and
// fp8 only (fp16 runs at bf16's rate, and MoE layers train in bf16 or fp8).
// Full: 4, 8, 16, 32 groups of 128, 1024, 8192 rows (252 per dtype); quick: 4 and 16 groups
// of 512 and 4096 rows (84).
std::vector<GemmShapeSpec> grouped_grid(const Options& opt) {
  const std::string grid =
      opt.grouped_grid.empty() ? (opt.quick ? "quick" : "full") : opt.grouped_grid;
  if (grid == "none") return {};
  const bool quick = grid == "quick";
  const std::vector<std::int64_t> rows =
      quick ? std::vector<std::int64_t>{512, 4096} : std::vector<std::int64_t>{128, 1024, 8192};
  const std::vector<std::int64_t> groups =
      quick ? std::vector<std::int64_t>{4, 16} : std::vector<std::int64_t>{4, 8, 16, 32};
  std::vector<GemmShapeSpec> out;
  for (const std::string& dt : opt.dtypes) {
    if (dt != "bf16" && dt != "fp8") continue;
    for (const MoeExperts& e : kMoeModels)
      for (auto [in, width] : {std::pair{e.h, 2 * e.f}, std::pair{e.f, e.h}})
        for (std::int64_t g : groups) {
          if (g > e.max_groups) continue;
          for (std::int64_t r : rows) {
            out.push_back(GemmShapeSpec{r, width, in, g, dt, "grid", "fwd"});
            out.push_back(GemmShapeSpec{r, in, width, g, dt, "grid", "bwd_input"});
            out.push_back(GemmShapeSpec{in, width, r, g, dt, "grid", "bwd_weight"});
          }
        }
  }
  return out;
}

// Times each grouped GEMM of `shapes` (batch: groups) on `stream` into out.grouped_gemm;
// the dtypes this GPU lacks go to `unsupported`.
void run_grouped(const Options& opt, const std::vector<GemmShapeSpec>& shapes, cudaStream_t stream,
                 std::set<std::string>& unsupported, Results& out) {
  for (const GemmShapeSpec& s : shapes) {
    if (!dtype_supported(s.dtype, opt.device)) {
      unsupported.insert(s.dtype);
      continue;
    }
    std::unique_ptr<GroupedGemmRunner> g;
    try {
      g = std::make_unique<GroupedGemmRunner>(s.m, s.n, s.k, s.batch, s.dtype, s.phase);
    } catch (const BenchError& e) {
      out.notes.push_back(std::string("grouped gemm: skipped: ") + e.what());
      (void)cudaGetLastError();  // as run_gemm: a failed allocation is the last error
      continue;
    }
    const std::vector<double> t = g->time_us(opt.warmup, opt.repeats, stream);
    GemmResult r;
    r.shape = s;
    r.layout = g->layout();
    r.streams = g->streams();
    r.time_us = median(t);
    r.flop_per_s = g->flops() / (r.time_us * 1e-6);
    r.repeats = opt.repeats;
    std::fprintf(
        stderr,
        "grouped gemm %-4s %3lld x %5lld x %5lld x %5lld %-10s %s: %10.2f us %8.1f TFLOP/s\n",
        s.dtype.c_str(), static_cast<long long>(s.batch), static_cast<long long>(s.m),
        static_cast<long long>(s.n), static_cast<long long>(s.k), s.phase.c_str(), r.layout.c_str(),
        r.time_us, r.flop_per_s / 1e12);
    out.grouped_gemm.push_back(r);
  }
}

}  // namespace

void run_gemm(const Options& opt, Results& out) {
  STEPCAST_CUDA_CHECK(cudaSetDevice(opt.device));
  std::vector<std::int64_t> dims = opt.gemm_dims;
  if (dims.empty()) {
    dims = opt.quick ? std::vector<std::int64_t>{512, 2048, 8192}
                     : std::vector<std::int64_t>{256, 1024, 2048, 4096, 8192, 16384};
  }
  ShapeList dense, grouped;
  // A Program's batch > 1 GEMMs are its MoE layers' grouped expert GEMMs: timed as TE runs
  // them (run_grouped), not as one strided-batched GEMM. Their phases other than the
  // backward ones run as forward (cublas_gemm) and are recorded so.
  if (!opt.program_file.empty()) {
    for (GemmShapeSpec s : program_gemm_shapes(opt.program_file)) {
      s.origin = "program";
      if (s.batch == 1) {
        dense.add(std::move(s));
        continue;
      }
      if (s.phase != "recompute" && s.phase != "bwd_input" && s.phase != "bwd_weight")
        s.phase = "fwd";
      grouped.add(std::move(s));
    }
  }
  for (GemmShapeSpec& s : grouped_grid(opt)) grouped.add(std::move(s));
  for (const std::string& dt : opt.dtypes) {
    for (auto m : dims)
      for (auto n : dims)
        for (auto k : dims) dense.add(GemmShapeSpec{m, n, k, 1, dt, "grid", ""});
  }

  cudaStream_t stream;
  STEPCAST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::set<std::string> unsupported;
  for (const GemmShapeSpec& s : dense.shapes) {
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
  run_grouped(opt, grouped.shapes, stream, unsupported, out);
  for (const auto& d : unsupported)
    out.notes.push_back("gemm: " + d + " skipped (needs compute capability 8.9 or newer)");
  STEPCAST_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace stepcast::bench
