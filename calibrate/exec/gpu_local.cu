// What one rank holds on its GPU (gpu_local.h): set-up, the scratch buffers memory-bound
// tasks stream through, the cuBLASLt runners, the fused attention graphs or the unfused
// attention's parts, tear-down.
#include "gpu_local.h"

#include <algorithm>

#include "bench.h"
#include "check.h"

namespace stepcast::exec {

using bench::BenchError;
using bench::GemmRunner;
using bench::GemmShapeSpec;

namespace {

constexpr std::size_t kAttnChunkBytes = std::size_t{512} << 20;  // S per chunk of heads

// The unfused attention of a task (header comment), GEMM runners created once.
std::vector<AttnPart> attention_parts(Local& l, const Task& t, double& mem_need) {
  const std::string dtype = t.dtype == "fp16" ? "fp16" : "bf16";
  const std::int64_t bh = t.batch * t.heads;
  const double s_bytes = static_cast<double>(t.seq_q) * static_cast<double>(t.seq_kv) * 2.0;
  const std::int64_t chunk = std::max<std::int64_t>(
      1, std::min<std::int64_t>(bh, static_cast<std::int64_t>(kAttnChunkBytes / s_bytes)));
  const std::int64_t full = bh / chunk, rest = bh % chunk;
  std::vector<AttnPart> parts;
  auto gemm = [&](std::int64_t m, std::int64_t n, std::int64_t k) {
    parts.push_back(
        {gemm_for(l, m, n, k, chunk, dtype, t.stream, ""), 0, 0, static_cast<int>(full)});
    if (rest > 0) parts.push_back({gemm_for(l, m, n, k, rest, dtype, t.stream, ""), 0, 0, 1});
  };
  auto pass = [&](double reads, double writes) {  // in S-sized arrays
    const MemOp op = reads > 1 ? MemOp::kElementwise : MemOp::kSoftmax;
    parts.push_back({nullptr, reads * s_bytes * static_cast<double>(chunk),
                     writes * s_bytes * static_cast<double>(chunk), static_cast<int>(full), op});
    if (rest > 0)
      parts.push_back({nullptr, reads * s_bytes * static_cast<double>(rest),
                       writes * s_bytes * static_cast<double>(rest), 1, op});
    mem_need = std::max(mem_need, std::max(reads, writes) * s_bytes * static_cast<double>(chunk));
  };
  const std::int64_t sq = t.seq_q, skv = t.seq_kv, d = t.head_dim;
  if (!t.backward) {
    gemm(sq, skv, d);  // S = Q K^T
    pass(1, 1);        // P = softmax(S)
    gemm(sq, d, skv);  // O = P V
  } else {
    gemm(sq, skv, d);  // dP = dO V^T
    gemm(skv, d, sq);  // dV = P^T dO
    pass(2, 1);        // dS = P * (dP - rowsum(dO * O))
    gemm(sq, d, skv);  // dQ = dS K
    gemm(skv, d, sq);  // dK = dS^T Q
  }
  return parts;
}

void* scratch(std::size_t bytes, cudaStream_t s, const std::string& dtype) {
  void* p = nullptr;
  const std::size_t size = std::max<std::size_t>(bytes, 16) + 16;
  const cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation) {  // exit 3, as an allocation of the Program's own
    (void)cudaGetLastError();
    throw OutOfMemory("the executor's scratch buffer of " +
                      std::to_string(static_cast<double>(size) / (1024.0 * 1024 * 1024)) +
                      " GiB does not fit in GPU memory (it is allocated before the Program's"
                      " own memory: the plan would not fit beside it)");
  }
  STEPCAST_CUDA_CHECK(err);
  if (dtype.empty())
    STEPCAST_CUDA_CHECK(cudaMemsetAsync(p, 0, std::max<std::size_t>(bytes, 16) + 16, s));
  else
    bench::fill_values(p, (std::max<std::size_t>(bytes, 16) + 16) / 2, dtype, 7, s);
  return p;
}

// The fused attention graph of an attention task, or nullptr with `why` set when it runs
// unfused (the build or --attention, or cuDNN refusing to plan the shape).
Sdpa* fused_attention_of(Local& l, const Task& t, std::string& why) {
  if (!l.sdpa) return nullptr;
  SdpaShape sh;
  sh.batch = t.batch;
  sh.heads = t.heads;
  sh.kv_heads = t.kv_heads > 0 ? t.kv_heads : t.heads;
  sh.seq_q = t.seq_q;
  sh.seq_kv = t.seq_kv;
  sh.head_dim = t.head_dim;
  sh.causal = t.causal;
  sh.backward = t.backward;
  sh.fp16 = t.dtype == "fp16";
  return l.sdpa->plan(sh, why);
}

}  // namespace

void launch_memory(Local& l, cudaStream_t s, double read, double written, MemOp op) {
  do {
    const double r = std::min(read, kMemScratchBytes), w = std::min(written, kMemScratchBytes);
    const auto need = static_cast<std::size_t>(std::max(r, w) + 255) / 256 * 256;
    if (l.mem_offset + need > l.mem_bytes) l.mem_offset = 0;
    launch_memory_op(op, static_cast<const char*>(l.mem_src) + l.mem_offset,
                     static_cast<char*>(l.mem_dst) + l.mem_offset, static_cast<std::size_t>(r),
                     static_cast<std::size_t>(w), s);
    l.mem_offset += need;
    read -= r;
    written -= w;
  } while (read > 0 || written > 0);
}

// The dtype a Program GEMM runs in here: Blackwell's block-scaled formats as fp8, the nearest
// the cuBLASLt runner has; fp32 refused, fp8 only where the device has it.
static std::string gemm_dtype(const Local& l, const std::string& dtype_in) {
  const std::string dtype = dtype_in == "mxfp8" || dtype_in == "nvfp4" ? "fp8" : dtype_in;
  if (dtype == "fp32")
    throw BenchError("fp32 GEMMs are not supported by the executor (bf16, fp16, fp8)");
  if (!bench::dtype_supported(dtype, l.device))
    throw BenchError(dtype + " GEMMs need compute capability 8.9+ (device " +
                     std::to_string(l.device) + ")");
  return dtype;
}

bench::GroupedGemmRunner* grouped_for(Local& l, const Task& t) {
  const std::string dtype = gemm_dtype(l, t.dtype);
  const std::string& phase = kPhases[static_cast<size_t>(t.phase)];
  const GemmShapeSpec s{t.m, t.n, t.k, 1, dtype, "program", phase};
  auto key =
      std::make_tuple(t.m, t.n, t.k, t.batch, dtype + "/" + bench::cublas_gemm(s).layout, t.stream);
  auto& r = l.grouped[key];
  // One run at a time per runner: a rank's tasks of one shape on different streams could
  // overlap, so each stream gets its own.
  if (!r) r = std::make_unique<bench::GroupedGemmRunner>(t.m, t.n, t.k, t.batch, dtype, phase);
  return r.get();
}

GemmRunner* gemm_for(Local& l, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch,
                     const std::string& dtype_in, int stream, const std::string& phase) {
  const std::string dtype = gemm_dtype(l, dtype_in);
  // Called as Transformer Engine calls it in the task's phase (bench::cublas_gemm); the
  // unfused attention's batched GEMMs pass "" and run as given (NN).
  const GemmShapeSpec s{m, n, k, batch, dtype, "program", phase};
  auto key = std::make_tuple(m, n, k, batch, dtype + "/" + bench::cublas_gemm(s).layout, stream);
  auto& r = l.gemms[key];
  if (!r) r = std::make_unique<GemmRunner>(s, l.streams[static_cast<size_t>(stream)]);
  return r.get();
}

// Streams, events, GEMM runners and scratch buffers of one rank.
void set_up(const Plan& plan, Local& l, bool graph, bool fused_attention) {
  if (l.streams.size() != kStreams.size())
    throw BenchError("internal: " + std::to_string(kStreams.size()) + " Program streams, " +
                     std::to_string(l.streams.size()) + " CUDA streams per rank");
  STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));
  for (auto& s : l.streams)
    STEPCAST_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  STEPCAST_CUDA_CHECK(cudaEventCreate(&l.zero));
  const auto& tasks = plan.tasks_of(l.rank);
  l.start.resize(tasks.size());
  l.end.resize(tasks.size());
  for (auto& e : l.start) STEPCAST_CUDA_CHECK(cudaEventCreate(&e));
  for (auto& e : l.end) STEPCAST_CUDA_CHECK(cudaEventCreate(&e));
  if (graph) {
    l.dep.resize(tasks.size());
    for (auto& e : l.dep) STEPCAST_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    l.cross.assign(tasks.size(), 0);
    for (const Task& t : tasks)
      for (int d : t.deps)
        if (tasks[static_cast<size_t>(d)].stream != t.stream) l.cross[static_cast<size_t>(d)] = 1;
    STEPCAST_CUDA_CHECK(cudaEventCreate(&l.last));
    STEPCAST_CUDA_CHECK(cudaEventCreateWithFlags(&l.fork, cudaEventDisableTiming));
    for (auto& e : l.join)
      STEPCAST_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  double mem = 16, coll = 16, p2p = 16;
  l.attention.resize(tasks.size());
  l.fused.assign(tasks.size(), nullptr);
  std::string unusable;
  if (fused_attention) {
    l.sdpa = std::make_unique<SdpaRank>();
    if (!l.sdpa->open(unusable)) l.sdpa.reset();
  } else {
    unusable = "--attention unfused";
  }
  std::vector<std::string> why(tasks.size(), unusable);  // per attention task run unfused
  for (const Task& t : tasks) {
    if (t.kind == Kind::kGemm && t.batch > 1) grouped_for(l, t);
    if (t.kind == Kind::kGemm && t.batch <= 1)
      gemm_for(l, t.m, t.n, t.k, t.batch, t.dtype, t.stream, kPhases[static_cast<size_t>(t.phase)]);
    if (t.kind == Kind::kAttention)
      l.fused[static_cast<size_t>(t.id)] = fused_attention_of(l, t, why[static_cast<size_t>(t.id)]);
    if (t.kind == Kind::kMemoryBound) mem = std::max({mem, t.bytes_read, t.bytes_written});
    if (t.kind == Kind::kCollective) coll = std::max(coll, t.bytes);
    if (t.kind == Kind::kSend || t.kind == Kind::kRecv) p2p = std::max(p2p, t.bytes);
  }
  cudaStream_t s0 = l.streams[0];
  // The attention buffers (outside the pool, like the scratch) and each graph's first run:
  // the tasks of a graph cuDNN refused to run go unfused. Then every unfused attention task's
  // parts, before the scratch they use is sized, and the counts the provenance reports.
  if (l.sdpa) l.sdpa->bind(s0);
  for (const Task& t : tasks) {
    if (t.kind != Kind::kAttention) continue;
    const auto i = static_cast<size_t>(t.id);
    Sdpa*& f = l.fused[i];
    if (f && !l.sdpa->failure(f).empty()) {
      why[i] = l.sdpa->failure(f);
      f = nullptr;
    }
    if (f) {
      ++l.attn_fused;
      if (f->grouped()) ++l.attn_grouped;
      continue;
    }
    ++l.attn_unfused;
    if (l.attn_why.empty()) l.attn_why = why[i];
    l.attention[i] = attention_parts(l, t, mem);
  }
  // launch_memory streams larger tasks in pieces; twice the L2 beyond the largest piece lets
  // consecutive tasks move on to bytes that are not in L2.
  int l2 = 0;
  STEPCAST_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, l.device));
  mem = std::min(mem, kMemScratchBytes) + 2.0 * l2;
  l.mem_bytes = static_cast<std::size_t>(mem);
  l.mem_src = scratch(l.mem_bytes, s0, "bf16");  // values, not zeros: the kernels compute
  l.mem_dst = scratch(l.mem_bytes, s0, "");
  STEPCAST_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&l.hold), 2 * sizeof(int),
                                    cudaHostAllocMapped | cudaHostAllocPortable));
  STEPCAST_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&l.hold_dev), l.hold, 0));
  l.hold[0] = l.hold[1] = 0;
  l.coll_send = scratch(static_cast<std::size_t>(coll), s0, "");
  l.coll_recv = scratch(static_cast<std::size_t>(coll), s0, "");
  l.p2p_send = scratch(static_cast<std::size_t>(p2p), s0, "");
  l.p2p_recv = scratch(static_cast<std::size_t>(p2p), s0, "");
  STEPCAST_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&l.pool, l.device));
  std::uint64_t keep = UINT64_MAX;
  STEPCAST_CUDA_CHECK(cudaMemPoolSetAttribute(l.pool, cudaMemPoolAttrReleaseThreshold, &keep));
  STEPCAST_CUDA_CHECK(cudaDeviceSynchronize());
}

void tear_down(Local& l) {
  // Destructors and cleanup must not throw: errors are ignored (the run reported its own).
  cudaSetDevice(l.device);
  cudaDeviceSynchronize();
  l.gemms.clear();
  l.grouped.clear();
  l.fused.clear();
  l.sdpa.reset();
  for (void* p : {l.mem_src, l.mem_dst, l.coll_send, l.coll_recv, l.p2p_send, l.p2p_recv})
    cudaFree(p);
  for (auto& e : l.start) cudaEventDestroy(e);
  for (auto& e : l.end) cudaEventDestroy(e);
  if (l.zero) cudaEventDestroy(l.zero);
  for (auto& e : l.dep) cudaEventDestroy(e);
  if (l.fork) cudaEventDestroy(l.fork);
  if (l.last) cudaEventDestroy(l.last);
  for (auto& e : l.join)
    if (e) cudaEventDestroy(e);
  if (l.graph_exec) cudaGraphExecDestroy(l.graph_exec);
  if (l.graph) cudaGraphDestroy(l.graph);
  for (auto& [g, c] : l.comms) ncclCommDestroy(c);
  for (auto& [g, c] : l.pair_comms) ncclCommDestroy(c);
  if (l.hold) cudaFreeHost(l.hold);
  for (auto& s : l.streams)
    if (s) cudaStreamDestroy(s);
}

}  // namespace stepcast::exec
