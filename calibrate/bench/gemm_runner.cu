// GemmRunner (gemm_runner.h): one cuBLASLt GEMM with its own buffers, filled with
// pseudo-random values (zeros would draw less power and run faster than real data).
// Shared by the GEMM sweep, the overlap benchmark and the executor (calibrate/exec), as is
// GroupedGemmRunner, Transformer Engine's grouped GEMM made of them.
#include <algorithm>
#include <memory>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "bench.h"
#include "check.h"
#include "gemm_runner.h"

namespace stepcast::bench {

namespace {

// Deterministic pseudo-random values in [-1, 1) (a hash of the index), converted to T.
template <typename T>
__global__ void fill_kernel(T* p, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float v = (h & 0xFFFF) / 32768.0f - 1.0f;
    p[i] = T(v);
  }
}

// Holds its stream for `ns` nanoseconds of the GPU's global timer (at most 1e7 polls, so it
// cannot hang). Enqueued before timed launches, it lets the host queue them all: started on
// an idle GPU, each GEMM would wait for its own submission and a short GEMM's sample would
// include the host's launch latency (microseconds) instead of the GPU time alone.
__global__ void hold_kernel(unsigned long long ns) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (int i = 0; i < 10000000; ++i) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= ns) break;
  }
}

// Runs `launch` `warmup` times, then `repeats` times each between two events on `stream`,
// all queued behind hold_kernel (`per_run_ns` per timed run: the host's time to queue one),
// and returns each timed run's span in microseconds.
template <typename Launch>
std::vector<double> timed_behind_hold(cudaStream_t stream, int warmup, int repeats,
                                      unsigned long long per_run_ns, Launch launch) {
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<cudaEvent_t> ev(2 * repeats);
  for (auto& e : ev) STEPCAST_CUDA_CHECK(cudaEventCreate(&e));
  hold_kernel<<<1, 1, 0, stream>>>(per_run_ns * static_cast<unsigned long long>(repeats));
  STEPCAST_CUDA_CHECK_LAUNCH();
  for (int i = 0; i < repeats; ++i) {
    STEPCAST_CUDA_CHECK(cudaEventRecord(ev[2 * i], stream));
    launch();
    STEPCAST_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], stream));
  }
  STEPCAST_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> t(repeats);
  for (int i = 0; i < repeats; ++i) {
    float ms = 0;
    STEPCAST_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t[i] = ms * 1e3;
  }
  for (auto& e : ev) STEPCAST_CUDA_CHECK(cudaEventDestroy(e));
  return t;
}

template <typename T>
void fill(void* p, std::size_t n, unsigned seed, cudaStream_t s) {
  fill_kernel<T><<<1024, 256, 0, s>>>(static_cast<T*>(p), n, seed);
  STEPCAST_CUDA_CHECK_LAUNCH();
}

struct DtypeInfo {
  cudaDataType_t ab;  // inputs
  cudaDataType_t cd;  // output
  int ab_bytes;
  int cd_bytes;
  bool transpose_a;  // fp8 on Hopper/Ada requires A transposed ("TN")
};

DtypeInfo dtype_info(const std::string& d) {
  if (d == "bf16") return {CUDA_R_16BF, CUDA_R_16BF, 2, 2, false};
  if (d == "fp16") return {CUDA_R_16F, CUDA_R_16F, 2, 2, false};
  if (d == "fp8") return {CUDA_R_8F_E4M3, CUDA_R_16BF, 1, 2, true};
  throw BenchError("unknown GEMM dtype \"" + d + "\" (bf16, fp16, fp8)");
}

}  // namespace

void fill_values(void* p, std::size_t elems, const std::string& dtype, unsigned seed,
                 cudaStream_t s) {
  if (dtype == "fp8")
    fill<__nv_fp8_e4m3>(p, elems, seed, s);
  else if (dtype == "fp16")
    fill<__half>(p, elems, seed, s);
  else if (dtype == "fp32")
    fill<float>(p, elems, seed, s);
  else
    fill<__nv_bfloat16>(p, elems, seed, s);
}

bool dtype_supported(const std::string& dtype, int device) {
  if (dtype != "fp8") return true;
  int major = 0, minor = 0;
  STEPCAST_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  STEPCAST_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor >= 89;
}

GemmRunner::GemmRunner(const GemmShapeSpec& s, cudaStream_t stream, void* workspace)
    : shape_(s), stream_(stream), workspace_(workspace), own_workspace_(workspace == nullptr) {
  // A throwing constructor runs no destructor: free the buffers here, or every skipped shape
  // of a sweep (run_gemm goes on after it) leaks them.
  try {
    init();
  } catch (...) {
    release();
    throw;
  }
}

void GemmRunner::init() {
  const GemmShapeSpec& s = shape_;
  const DtypeInfo info = dtype_info(s.dtype);
  const CublasGemm call = cublas_gemm(s);
  layout_ = info.transpose_a ? "TN" : call.layout;
  const bool trans_a = layout_[0] == 'T', trans_b = layout_[1] == 'T';
  const std::int64_t m = call.m, n = call.n;
  const std::size_t a_elems = static_cast<std::size_t>(m) * s.k * s.batch;
  const std::size_t b_elems = static_cast<std::size_t>(s.k) * n * s.batch;
  const std::size_t d_elems = static_cast<std::size_t>(m) * n * s.batch;
  STEPCAST_CUDA_CHECK(cudaMalloc(&a_, a_elems * info.ab_bytes));
  STEPCAST_CUDA_CHECK(cudaMalloc(&b_, b_elems * info.ab_bytes));
  STEPCAST_CUDA_CHECK(cudaMalloc(&d_, d_elems * info.cd_bytes));
  if (own_workspace_) STEPCAST_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  fill_values(a_, a_elems, s.dtype, 1, stream_);
  fill_values(b_, b_elems, s.dtype, 2, stream_);

  STEPCAST_CUBLAS_CHECK(cublasLtCreate(&lt_));
  STEPCAST_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  STEPCAST_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  STEPCAST_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));

  // Column-major cuBLAS view: D[m,n] = op(A)[m,k] * op(B)[k,n]; A is stored k x m when
  // transposed, B n x k (each with its rows as leading dimension).
  const std::uint64_t a_rows = trans_a ? s.k : m;
  const std::uint64_t a_cols = trans_a ? m : s.k;
  const std::uint64_t b_rows = trans_b ? n : s.k;
  const std::uint64_t b_cols = trans_b ? s.k : n;
  STEPCAST_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la_, info.ab, a_rows, a_cols, a_rows));
  STEPCAST_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb_, info.ab, b_rows, b_cols, b_rows));
  STEPCAST_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld_, info.cd, m, n, m));
  if (s.batch > 1) {
    const int batch = static_cast<int>(s.batch);
    const std::int64_t sa = m * s.k, sb = s.k * n, sd = m * n;
    for (auto [layout, stride] : {std::pair{la_, sa}, std::pair{lb_, sb}, std::pair{ld_, sd}}) {
      STEPCAST_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
      STEPCAST_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
  }

  cublasLtMatmulPreference_t pref = nullptr;
  STEPCAST_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::size_t ws = kWorkspaceBytes;
  STEPCAST_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  STEPCAST_CUBLAS_CHECK(
      cublasLtMatmulAlgoGetHeuristic(lt_, desc_, la_, lb_, ld_, ld_, pref, 1, &heur, &found));
  STEPCAST_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  if (found == 0) {
    throw BenchError("cuBLASLt has no algorithm for " + s.dtype + " " + layout_ + " " +
                     std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(s.k));
  }
  algo_ = heur.algo;
}

GemmRunner::~GemmRunner() { release(); }

void GemmRunner::release() noexcept {
  // Must not throw: errors here are ignored (the run already reported its own).
  if (la_) cublasLtMatrixLayoutDestroy(la_);
  if (lb_) cublasLtMatrixLayoutDestroy(lb_);
  if (ld_) cublasLtMatrixLayoutDestroy(ld_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
  if (lt_) cublasLtDestroy(lt_);
  cudaFree(a_);
  cudaFree(b_);
  cudaFree(d_);
  if (own_workspace_) cudaFree(workspace_);
}

void GemmRunner::launch() {
  const float alpha = 1.0f, beta = 0.0f;
  STEPCAST_CUBLAS_CHECK(cublasLtMatmul(lt_, desc_, &alpha, a_, la_, b_, lb_, &beta, d_, ld_, d_,
                                       ld_, &algo_, workspace_, kWorkspaceBytes, stream_));
}

double GemmRunner::flops() const {
  return 2.0 * static_cast<double>(shape_.m) * static_cast<double>(shape_.n) *
         static_cast<double>(shape_.k) * static_cast<double>(shape_.batch);
}

std::vector<double> GemmRunner::time_us(int warmup, int repeats) {
  // 50 us per timed launch covers the host's cublasLtMatmul and two event records.
  return timed_behind_hold(stream_, warmup, repeats, 50000, [this] { launch(); });
}

GroupedGemmRunner::GroupedGemmRunner(std::int64_t m, std::int64_t n, std::int64_t k,
                                     std::int64_t groups, const std::string& dtype,
                                     const std::string& phase) {
  try {
    init(m, n, k, groups, dtype, phase);
  } catch (...) {
    release();
    throw;
  }
}

void GroupedGemmRunner::init(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t groups,
                             const std::string& dtype, const std::string& phase) {
  if (m < 1 || n < 1 || k < 1 || groups < 1)
    throw BenchError("grouped GEMM: m, n, k and groups must be positive, got " +
                     std::to_string(groups) + " x " + std::to_string(m) + "x" + std::to_string(n) +
                     "x" + std::to_string(k));
  const int n_streams = static_cast<int>(std::min<std::int64_t>(groups, kStreams));
  for (int s = 0; s < n_streams; ++s) {
    STEPCAST_CUDA_CHECK(cudaStreamCreateWithFlags(&streams_.emplace_back(), cudaStreamNonBlocking));
    STEPCAST_CUDA_CHECK(cudaMalloc(&workspaces_.emplace_back(), GemmRunner::kWorkspaceBytes));
    STEPCAST_CUDA_CHECK(cudaEventCreateWithFlags(&join_.emplace_back(), cudaEventDisableTiming));
  }
  STEPCAST_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  // Group g on stream g % streams, as TE assigns them; the runners of one stream share its
  // workspace (they run one after another there).
  GemmShapeSpec spec;
  spec.m = m;
  spec.n = n;
  spec.k = k;
  spec.dtype = dtype;
  spec.phase = phase;
  for (std::int64_t g = 0; g < groups; ++g) {
    const auto s = static_cast<std::size_t>(g % n_streams);
    gemms_.push_back(std::make_unique<GemmRunner>(spec, streams_[s], workspaces_[s]));
  }
  // The fills run on the side streams; run() orders every GEMM after them on its stream.
}

GroupedGemmRunner::~GroupedGemmRunner() { release(); }

void GroupedGemmRunner::release() noexcept {
  // The GEMMs first: they use the streams and workspaces. Errors are ignored here (the run
  // already reported its own); cudaFree waits for the work using the memory.
  gemms_.clear();
  for (void* w : workspaces_) cudaFree(w);
  for (cudaEvent_t e : join_)
    if (e) cudaEventDestroy(e);
  if (fork_) cudaEventDestroy(fork_);
  for (cudaStream_t s : streams_)
    if (s) cudaStreamDestroy(s);
  workspaces_.clear();
  join_.clear();
  streams_.clear();
  fork_ = nullptr;
}

void GroupedGemmRunner::run(cudaStream_t stream) {
  STEPCAST_CUDA_CHECK(cudaEventRecord(fork_, stream));
  for (cudaStream_t s : streams_) STEPCAST_CUDA_CHECK(cudaStreamWaitEvent(s, fork_, 0));
  for (const auto& g : gemms_) g->launch();
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    STEPCAST_CUDA_CHECK(cudaEventRecord(join_[s], streams_[s]));
    STEPCAST_CUDA_CHECK(cudaStreamWaitEvent(stream, join_[s], 0));
  }
}

std::vector<double> GroupedGemmRunner::time_us(int warmup, int repeats, cudaStream_t stream) {
  // Per timed run the host issues a GEMM per group and 2 + 4 * streams event calls: 50 us
  // plus 10 us per group covers them.
  const auto per_run_ns = 50000ull + 10000ull * static_cast<unsigned long long>(gemms_.size());
  return timed_behind_hold(stream, warmup, repeats, per_run_ns, [&] { run(stream); });
}

double GroupedGemmRunner::flops() const {
  double f = 0;
  for (const auto& g : gemms_) f += g->flops();
  return f;
}

}  // namespace stepcast::bench
