// HBM bandwidth and kernel launch overhead.
//  - copy: dst[i] = src[i] over float4 (reads N bytes, writes N bytes).
//  - adam: an Adam-like read-modify-write over fp32 param, grad, m, v (Kingma & Ba 2015,
//    Algorithm 1): reads 4 arrays, writes 3 -> 28 bytes per element.
//  - launch overhead: mean time per empty kernel over 10,000 back-to-back launches on one
//    stream (the rate at which the host can issue kernels; the GPU is idle otherwise).
// Bandwidth = (bytes read + bytes written) / median kernel time (CUDA events).
#include <cmath>
#include <cstdio>

#include "bench.h"
#include "check.h"

namespace stepcast::bench {

namespace {

__global__ void copy_kernel(const float4* __restrict__ src, float4* __restrict__ dst,
                            std::size_t n4) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g,
                            float* __restrict__ m, float* __restrict__ v, std::size_t n, float lr,
                            float beta1, float beta2, float eps) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * mi / (sqrtf(vi) + eps);
  }
}

__global__ void empty_kernel() {}

__global__ void init_kernel(float* p, std::size_t n, float value) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = value;
}

// Grid large enough to fill every SM several times over.
int grid_for(std::size_t n, int threads, int sms) {
  const std::size_t want = (n + threads - 1) / threads;
  const std::size_t cap = static_cast<std::size_t>(sms) * 32;
  return static_cast<int>(want < cap ? (want == 0 ? 1 : want) : cap);
}

template <typename Launch>
double median_time_us(Launch&& launch, int warmup, int repeats, cudaStream_t s) {
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<double> t;
  cudaEvent_t a, b;
  STEPCAST_CUDA_CHECK(cudaEventCreate(&a));
  STEPCAST_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < repeats; ++i) {
    STEPCAST_CUDA_CHECK(cudaEventRecord(a, s));
    launch();
    STEPCAST_CUDA_CHECK(cudaEventRecord(b, s));
    STEPCAST_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    STEPCAST_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3);
  }
  STEPCAST_CUDA_CHECK(cudaEventDestroy(a));
  STEPCAST_CUDA_CHECK(cudaEventDestroy(b));
  return median(t);
}

}  // namespace

void run_memory(const Options& opt, Results& out) {
  STEPCAST_CUDA_CHECK(cudaSetDevice(opt.device));
  STEPCAST_CUDA_CHECK(cudaFree(nullptr));  // the context exists from here on
  // What training tensors can never use: in use before this benchmark allocates anything
  // (stepcast fit writes it as gpu.memory_reserved; a training process holds at least this
  // much besides its tensors, plus NCCL's buffers and its allocator's slack).
  std::size_t free_bytes = 0, total_bytes = 0;
  STEPCAST_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  out.context_memory_bytes = static_cast<double>(total_bytes - free_bytes);
  std::fprintf(stderr, "device memory in use before the benchmark: %.1f MiB of %.1f MiB\n",
               out.context_memory_bytes / 1048576.0, total_bytes / 1048576.0);
  int sms = 0;
  STEPCAST_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, opt.device));
  cudaStream_t s;
  STEPCAST_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  constexpr int kThreads = 256;

  // Buffer sizes per array: 1 MiB .. 1 GiB (x4 steps; x16 with --quick).
  const double step = opt.quick ? 16 : 4;
  std::vector<std::size_t> sizes;
  for (double b = 1 << 20; b <= (1u << 30); b *= step) sizes.push_back(static_cast<std::size_t>(b));
  const std::size_t max_bytes = sizes.back();

  float *x = nullptr, *y = nullptr, *z = nullptr, *w = nullptr;
  for (float** p : {&x, &y, &z, &w}) {
    STEPCAST_CUDA_CHECK(cudaMalloc(p, max_bytes));
    init_kernel<<<grid_for(max_bytes / 4, kThreads, sms), kThreads, 0, s>>>(*p, max_bytes / 4,
                                                                            0.5f);
    STEPCAST_CUDA_CHECK_LAUNCH();
  }
  STEPCAST_CUDA_CHECK(cudaStreamSynchronize(s));

  for (std::size_t bytes : sizes) {
    const std::size_t n4 = bytes / sizeof(float4);
    const double copy_us = median_time_us(
        [&] {
          copy_kernel<<<grid_for(n4, kThreads, sms), kThreads, 0, s>>>(
              reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), n4);
          STEPCAST_CUDA_CHECK_LAUNCH();
        },
        opt.warmup, opt.repeats, s);
    out.memory.push_back({"copy", static_cast<double>(bytes), static_cast<double>(bytes), copy_us,
                          2.0 * bytes / (copy_us * 1e-6)});

    const std::size_t n = bytes / sizeof(float);
    const double adam_us = median_time_us(
        [&] {
          adam_kernel<<<grid_for(n, kThreads, sms), kThreads, 0, s>>>(x, y, z, w, n, 1e-4f, 0.9f,
                                                                      0.95f, 1e-8f);
          STEPCAST_CUDA_CHECK_LAUNCH();
        },
        opt.warmup, opt.repeats, s);
    const double rd = 4.0 * bytes, wr = 3.0 * bytes;
    out.memory.push_back({"adam", rd, wr, adam_us, (rd + wr) / (adam_us * 1e-6)});
    std::fprintf(stderr, "memory %8.1f MiB: copy %8.1f GB/s  adam %8.1f GB/s\n", bytes / 1048576.0,
                 2.0 * bytes / (copy_us * 1e-6) / 1e9, (rd + wr) / (adam_us * 1e-6) / 1e9);
  }

  // Launch overhead: back-to-back empty kernels.
  constexpr int kLaunches = 10000;
  for (int i = 0; i < 100; ++i) empty_kernel<<<1, 1, 0, s>>>();
  STEPCAST_CUDA_CHECK_LAUNCH();
  cudaEvent_t a, b;
  STEPCAST_CUDA_CHECK(cudaEventCreate(&a));
  STEPCAST_CUDA_CHECK(cudaEventCreate(&b));
  STEPCAST_CUDA_CHECK(cudaStreamSynchronize(s));
  STEPCAST_CUDA_CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < kLaunches; ++i) empty_kernel<<<1, 1, 0, s>>>();
  STEPCAST_CUDA_CHECK_LAUNCH();
  STEPCAST_CUDA_CHECK(cudaEventRecord(b, s));
  STEPCAST_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  STEPCAST_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  out.launch_overhead_us = ms * 1e3 / kLaunches;
  std::fprintf(stderr, "launch overhead: %.2f us per kernel\n", out.launch_overhead_us);
  STEPCAST_CUDA_CHECK(cudaEventDestroy(a));
  STEPCAST_CUDA_CHECK(cudaEventDestroy(b));

  for (float* p : {x, y, z, w}) STEPCAST_CUDA_CHECK(cudaFree(p));
  STEPCAST_CUDA_CHECK(cudaStreamDestroy(s));
}

}  // namespace stepcast::bench
