// Runs a Plan on GPUs (gpu_runner.h). Per rank: one CUDA stream per Program stream, two
// timing events per task (start before, end after it on its stream), and a dependency is a
// cudaStreamWaitEvent on the end event of the task it waits for. Tasks are enqueued in the
// plan's issue order (plan.h); a collective or send/recv pair is enqueued for all its local
// members in one ncclGroupStart/End.
//  - gemm: cuBLASLt (bench::GemmRunner: m, n, k, batch, dtype; NN for bf16/fp16, TN for
//    fp8 as cuBLASLt requires — the layout key is not honoured, as in stepcast-bench);
//  - attention: unfused — per (batch x head): S = Q K^T, a softmax pass over S (read and
//    write, 2 bytes per element), O = P V; backward: dP = dO V^T, dV = P^T dO, a softmax
//    backward pass (read P and dP, write dS), dQ = dS K, dK = dS^T Q. Causal masking is not
//    exploited: the full seq_q x seq_kv product runs (README: how this biases the result).
//    Batched GEMMs over heads in chunks whose S is at most kAttnChunkBytes;
//  - memory_bound: one kernel that reads bytes_read and writes bytes_written (float4; over
//    4 GiB in pieces of 4 GiB, see launch_memory);
//  - collective: on the group's communicator, buffer S = bytes as nccl-tests counts it:
//    allreduce / broadcast (root 0) count S, reduce_scatter recvcount S/n, allgather
//    sendcount S/n, all_to_all S/n to each member as ncclSend/ncclRecv pairs;
//  - send/recv: ncclSend/ncclRecv on a communicator of all ranks (peer = global rank);
//  - alloc/free: cudaMallocAsync/cudaFreeAsync from the device's pool (release threshold
//    kept, so freed memory is reused as a caching allocator would); the pool's high-water
//    mark is the measured peak. Scratch buffers of GEMMs, kernels and communication are
//    outside the pool (allocated once, before timing).
#include "gpu_runner.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <tuple>

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "bench.h"
#include "check.h"
#include "gemm_runner.h"

namespace stepcast::exec {

namespace {

using bench::BenchError;
using bench::GemmRunner;
using bench::GemmShapeSpec;

constexpr std::size_t kAttnChunkBytes = std::size_t{512} << 20;  // S per chunk of heads

// Reads n_read and writes n_write float4s; a read past n_write feeds a store that never
// happens (the buffers hold no -1234.5), so the compiler keeps it.
__global__ void memory_kernel(const float4* __restrict__ src, float4* __restrict__ dst,
                              std::size_t n_read, std::size_t n_write) {
  const std::size_t n = n_read > n_write ? n_read : n_write;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float4 v = i < n_read ? src[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    if (i < n_write)
      dst[i] = v;
    else if (v.x == -1234.5f)
      dst[0] = v;
  }
}

int dtype_bytes(const std::string& d) {
  if (d == "fp8") return 1;
  if (d == "fp32") return 4;
  return 2;
}

ncclDataType_t nccl_type(const std::string& d) {
  if (d == "fp8") return ncclInt8;  // timing only: NCCL moves bytes, the sum is not used
  if (d == "fp32") return ncclFloat;
  if (d == "fp16") return ncclHalf;
  return ncclBfloat16;
}

struct AttnPart {
  GemmRunner* gemm = nullptr;  // or a memory pass of `bytes` read and written per launch
  double read = 0, written = 0;
  int launches = 1;
};

struct Local {
  int rank = 0;
  int device = 0;
  std::array<cudaStream_t, 9> streams{};  // one per kStreams entry (set_up checks the count)
  cudaEvent_t zero = nullptr;
  std::vector<cudaEvent_t> start, end;  // per task
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::string, int>,
           std::unique_ptr<GemmRunner>>
      gemms;
  std::vector<std::vector<AttnPart>> attention;  // per task (attention tasks only)
  void* mem_src = nullptr;
  void* mem_dst = nullptr;
  void* coll_send = nullptr;
  void* coll_recv = nullptr;
  void* p2p_send = nullptr;
  void* p2p_recv = nullptr;
  ncclComm_t world = nullptr;
  std::map<int, ncclComm_t> comms;  // by group
  std::map<std::string, std::vector<void*>> live;  // alloc/free by `what`
  cudaMemPool_t pool = nullptr;
};

// A memory-bound task larger than the scratch buffers streams through them in pieces of at
// most kMemScratchBytes read and written (mcore_1.7B's optimizer step reads 45 GB: full-size
// scratch would take 2 x 45 GB beside the Program's own memory). Pieces of GiBs stay
// HBM-bound (L2 is ~50 MB) and add a launch each.
constexpr double kMemScratchBytes = 4.0 * (std::size_t{1} << 30);

void launch_memory(Local& l, cudaStream_t s, double read, double written) {
  do {
    const double r = std::min(read, kMemScratchBytes), w = std::min(written, kMemScratchBytes);
    const auto n_read = static_cast<std::size_t>(r / 16);
    const auto n_write = static_cast<std::size_t>(w / 16);
    memory_kernel<<<1024, 512, 0, s>>>(static_cast<const float4*>(l.mem_src),
                                         static_cast<float4*>(l.mem_dst), n_read, n_write);
    STEPCAST_CUDA_CHECK_LAUNCH();
    read -= r;
    written -= w;
  } while (read > 0 || written > 0);
}

GemmRunner* gemm_for(Local& l, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch,
                     const std::string& dtype, int stream) {
  if (dtype == "fp32") throw BenchError("fp32 GEMMs are not supported by the executor (bf16, fp16, fp8)");
  if (!bench::dtype_supported(dtype, l.device))
    throw BenchError(dtype + " GEMMs need compute capability 8.9+ (device " + std::to_string(l.device) + ")");
  auto key = std::make_tuple(m, n, k, batch, dtype, stream);
  auto& r = l.gemms[key];
  if (!r) {
    GemmShapeSpec s;
    s.m = m;
    s.n = n;
    s.k = k;
    s.batch = batch;
    s.dtype = dtype;
    s.origin = "program";
    r = std::make_unique<GemmRunner>(s, l.streams[static_cast<size_t>(stream)]);
  }
  return r.get();
}

// The unfused attention of a task (header comment), GEMM runners created once.
std::vector<AttnPart> attention_parts(Local& l, const Task& t, double& mem_need) {
  const std::string dtype = t.dtype == "fp16" ? "fp16" : "bf16";
  const std::int64_t bh = t.batch * t.heads;
  const double s_bytes = static_cast<double>(t.seq_q) * static_cast<double>(t.seq_kv) * 2.0;
  const std::int64_t chunk =
      std::max<std::int64_t>(1, std::min<std::int64_t>(bh, static_cast<std::int64_t>(kAttnChunkBytes / s_bytes)));
  const std::int64_t full = bh / chunk, rest = bh % chunk;
  std::vector<AttnPart> parts;
  auto gemm = [&](std::int64_t m, std::int64_t n, std::int64_t k) {
    parts.push_back({gemm_for(l, m, n, k, chunk, dtype, t.stream), 0, 0, static_cast<int>(full)});
    if (rest > 0) parts.push_back({gemm_for(l, m, n, k, rest, dtype, t.stream), 0, 0, 1});
  };
  auto pass = [&](double reads, double writes) {  // in S-sized arrays
    parts.push_back({nullptr, reads * s_bytes * static_cast<double>(chunk),
                     writes * s_bytes * static_cast<double>(chunk), static_cast<int>(full)});
    if (rest > 0)
      parts.push_back({nullptr, reads * s_bytes * static_cast<double>(rest),
                       writes * s_bytes * static_cast<double>(rest), 1});
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

void launch_compute(Local& l, const Task& t) {
  cudaStream_t s = l.streams[static_cast<size_t>(t.stream)];
  switch (t.kind) {
    case Kind::kGemm:
      gemm_for(l, t.m, t.n, t.k, t.batch, t.dtype, t.stream)->launch();
      return;
    case Kind::kAttention:
      for (const AttnPart& part : l.attention[static_cast<size_t>(t.id)])
        for (int i = 0; i < part.launches; ++i) {
          if (part.gemm)
            part.gemm->launch();
          else
            launch_memory(l, s, part.read, part.written);
        }
      return;
    case Kind::kMemoryBound:
      launch_memory(l, s, t.bytes_read, t.bytes_written);
      return;
    case Kind::kAlloc: {
      void* p = nullptr;
      // The Program's "nccl" allocation stands for NCCL's own buffers, which this process's
      // communicators really hold: allocating it too would count them twice.
      if (t.bytes > 0 && t.what != "nccl") {
        const cudaError_t err = cudaMallocAsync(&p, static_cast<std::size_t>(t.bytes), s);
        if (err == cudaErrorMemoryAllocation)
          throw OutOfMemory("rank " + std::to_string(l.rank) + ": alloc '" + t.label + "' of " +
                            std::to_string(t.bytes / (1024.0 * 1024 * 1024)) +
                            " GiB failed: the plan does not fit in GPU memory");
        STEPCAST_CUDA_CHECK(err);
      }
      l.live[t.what].push_back(p);
      return;
    }
    case Kind::kFree: {
      auto& v = l.live[t.what];
      if (v.empty()) throw BenchError("free of '" + t.what + "' with nothing allocated");
      if (v.back()) STEPCAST_CUDA_CHECK(cudaFreeAsync(v.back(), s));
      v.pop_back();
      return;
    }
    default:
      throw BenchError("internal: " + std::string(kind_name(t.kind)) + " is not a local task");
  }
}

// One member's NCCL call(s) of a rendezvous (inside ncclGroupStart/End).
void enqueue_nccl(const Plan& plan, Local& l, const Task& t) {
  cudaStream_t s = l.streams[static_cast<size_t>(t.stream)];
  const ExecRank& er = plan.ranks[static_cast<size_t>(l.rank)];
  if (t.kind == Kind::kSend || t.kind == Kind::kRecv) {
    const int peer = er.peer[static_cast<size_t>(t.id)];
    const auto count = static_cast<std::size_t>(t.bytes);
    if (t.kind == Kind::kSend)
      STEPCAST_NCCL_CHECK(ncclSend(l.p2p_send, count, ncclInt8, peer, l.world, s));
    else
      STEPCAST_NCCL_CHECK(ncclRecv(l.p2p_recv, count, ncclInt8, peer, l.world, s));
    return;
  }
  const int g = er.group[static_cast<size_t>(t.id)];
  ncclComm_t c = l.comms.at(g);
  const int n = static_cast<int>(plan.program->groups[static_cast<size_t>(g)].ranks.size());
  const ncclDataType_t type = nccl_type(t.dtype);
  const std::size_t count = static_cast<std::size_t>(t.bytes) / static_cast<std::size_t>(dtype_bytes(t.dtype));
  const std::string& op = kCollOps[static_cast<size_t>(t.op)];
  if (op == "allreduce") {
    STEPCAST_NCCL_CHECK(ncclAllReduce(l.coll_send, l.coll_recv, count, type, ncclSum, c, s));
  } else if (op == "reduce_scatter") {
    STEPCAST_NCCL_CHECK(ncclReduceScatter(l.coll_send, l.coll_recv, count / n, type, ncclSum, c, s));
  } else if (op == "allgather") {
    STEPCAST_NCCL_CHECK(ncclAllGather(l.coll_send, l.coll_recv, count / n, type, c, s));
  } else if (op == "broadcast") {
    STEPCAST_NCCL_CHECK(ncclBroadcast(l.coll_send, l.coll_recv, count, type, 0, c, s));
  } else {  // all_to_all
    const std::size_t chunk = count / n * static_cast<std::size_t>(dtype_bytes(t.dtype));
    for (int p = 0; p < n; ++p) {
      STEPCAST_NCCL_CHECK(ncclSend(static_cast<char*>(l.coll_send) + p * chunk, chunk, ncclInt8, p, c, s));
      STEPCAST_NCCL_CHECK(ncclRecv(static_cast<char*>(l.coll_recv) + p * chunk, chunk, ncclInt8, p, c, s));
    }
  }
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

// Streams, events, GEMM runners and scratch buffers of one rank.
void set_up(const Plan& plan, Local& l) {
  if (l.streams.size() != kStreams.size())
    throw BenchError("internal: " + std::to_string(kStreams.size()) + " Program streams, " +
                     std::to_string(l.streams.size()) + " CUDA streams per rank");
  STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));
  for (auto& s : l.streams) STEPCAST_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  STEPCAST_CUDA_CHECK(cudaEventCreate(&l.zero));
  const auto& tasks = plan.tasks_of(l.rank);
  l.start.resize(tasks.size());
  l.end.resize(tasks.size());
  for (auto& e : l.start) STEPCAST_CUDA_CHECK(cudaEventCreate(&e));
  for (auto& e : l.end) STEPCAST_CUDA_CHECK(cudaEventCreate(&e));
  double mem = 16, coll = 16, p2p = 16;
  l.attention.resize(tasks.size());
  for (const Task& t : tasks) {
    if (t.kind == Kind::kGemm) gemm_for(l, t.m, t.n, t.k, t.batch, t.dtype, t.stream);
    if (t.kind == Kind::kAttention) l.attention[static_cast<size_t>(t.id)] = attention_parts(l, t, mem);
    if (t.kind == Kind::kMemoryBound) mem = std::max({mem, t.bytes_read, t.bytes_written});
    if (t.kind == Kind::kCollective) coll = std::max(coll, t.bytes);
    if (t.kind == Kind::kSend || t.kind == Kind::kRecv) p2p = std::max(p2p, t.bytes);
  }
  cudaStream_t s0 = l.streams[0];
  mem = std::min(mem, kMemScratchBytes);  // launch_memory streams larger tasks in pieces
  l.mem_src = scratch(static_cast<std::size_t>(mem), s0, "");
  l.mem_dst = scratch(static_cast<std::size_t>(mem), s0, "");
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
  for (void* p : {l.mem_src, l.mem_dst, l.coll_send, l.coll_recv, l.p2p_send, l.p2p_recv}) cudaFree(p);
  for (auto& e : l.start) cudaEventDestroy(e);
  for (auto& e : l.end) cudaEventDestroy(e);
  if (l.zero) cudaEventDestroy(l.zero);
  for (auto& [g, c] : l.comms) ncclCommDestroy(c);
  if (l.world) ncclCommDestroy(l.world);
  for (auto& s : l.streams)
    if (s) cudaStreamDestroy(s);
}

struct Runner {
  const Plan& plan;
  std::vector<Local> locals;
  std::vector<int> local_of;  // global rank -> index in locals, -1 elsewhere

  Local* local(int rank) {
    const int i = local_of[static_cast<size_t>(rank)];
    return i < 0 ? nullptr : &locals[static_cast<size_t>(i)];
  }

  void sync_all() {
    for (Local& l : locals) {
      STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));
      STEPCAST_CUDA_CHECK(cudaDeviceSynchronize());
    }
  }

  // One pass over the issue order (header comment).
  void run_once() {
    for (Local& l : locals) {
      STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));
      STEPCAST_CUDA_CHECK(cudaEventRecord(l.zero, l.streams[0]));
      for (size_t s = 1; s < l.streams.size(); ++s)
        STEPCAST_CUDA_CHECK(cudaStreamWaitEvent(l.streams[s], l.zero, 0));
    }
    for (const IssueStep& step : plan.steps) {
      std::vector<std::pair<Local*, const Task*>> mine;
      for (const RankTask& rt : step.tasks)
        if (Local* l = local(rt.rank)) mine.emplace_back(l, &plan.task(rt));
      if (mine.empty()) continue;
      for (auto [l, t] : mine) {
        STEPCAST_CUDA_CHECK(cudaSetDevice(l->device));
        cudaStream_t s = l->streams[static_cast<size_t>(t->stream)];
        for (int d : t->deps) STEPCAST_CUDA_CHECK(cudaStreamWaitEvent(s, l->end[static_cast<size_t>(d)], 0));
        STEPCAST_CUDA_CHECK(cudaEventRecord(l->start[static_cast<size_t>(t->id)], s));
      }
      if (step.rendezvous >= 0) {
        STEPCAST_NCCL_CHECK(ncclGroupStart());
        for (auto [l, t] : mine) enqueue_nccl(plan, *l, *t);
        STEPCAST_NCCL_CHECK(ncclGroupEnd());
      } else {
        STEPCAST_CUDA_CHECK(cudaSetDevice(mine[0].first->device));
        launch_compute(*mine[0].first, *mine[0].second);
      }
      for (auto [l, t] : mine) {
        STEPCAST_CUDA_CHECK(cudaSetDevice(l->device));
        STEPCAST_CUDA_CHECK(cudaEventRecord(l->end[static_cast<size_t>(t->id)],
                                            l->streams[static_cast<size_t>(t->stream)]));
      }
    }
    sync_all();
    // What the Program left allocated (it should free everything; be robust).
    for (Local& l : locals) {
      STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));
      for (auto& [what, v] : l.live)
        for (void* p : v)
          if (p) STEPCAST_CUDA_CHECK(cudaFree(p));
      l.live.clear();
    }
  }
};

}  // namespace

int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

Recorded run_on_gpus(const Plan& plan, const GpuOptions& opt,
                     std::map<std::string, std::string>& provenance) {
  Runner run{plan, {}, std::vector<int>(static_cast<size_t>(plan.world_size()), -1)};
  for (const ExecRank& er : plan.ranks) {
    if (er.device < 0) continue;
    run.local_of[static_cast<size_t>(er.rank)] = static_cast<int>(run.locals.size());
    Local l;
    l.rank = er.rank;
    l.device = er.device;
    run.locals.push_back(std::move(l));
  }
  struct Cleanup {
    Runner& r;
    ~Cleanup() {
      for (Local& l : r.locals) tear_down(l);
    }
  } cleanup{run};
  for (Local& l : run.locals) set_up(plan, l);

  // Communicators: one per group with collectives, one of all ranks for send/recv.
  const Program& p = *plan.program;
  bool any_p2p = false;
  for (const Rendezvous& rv : plan.rendezvous) any_p2p = any_p2p || rv.group < 0;
  std::vector<int> comm_groups;  // group ids; -1 = all ranks (send/recv)
  for (size_t g = 0; g < p.groups.size(); ++g)
    if (plan.collectives_per_group[g] > 0) comm_groups.push_back(static_cast<int>(g));
  if (any_p2p) comm_groups.push_back(-1);
  auto members_of = [&](int g) {
    std::vector<int> m;
    if (g >= 0) return p.groups[static_cast<size_t>(g)].ranks;
    for (int r = 0; r < plan.world_size(); ++r) m.push_back(r);
    return m;
  };
  auto set_comm = [&](int g, int rank, ncclComm_t c) {
    Local* l = run.local(rank);
    if (g < 0)
      l->world = c;
    else
      l->comms[g] = c;
  };
#ifdef STEPCAST_EXEC_WITH_MPI
  const bool mpi = opt.mpi != MPI_COMM_NULL;
#else
  const bool mpi = false;
#endif
  if (!mpi) {
    for (int g : comm_groups) {
      const std::vector<int> members = members_of(g);
      std::vector<int> devs;
      for (int r : members) devs.push_back(plan.ranks[static_cast<size_t>(r)].device);
      std::vector<ncclComm_t> comms(members.size());
      STEPCAST_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(members.size()), devs.data()));
      for (size_t i = 0; i < members.size(); ++i) set_comm(g, members[i], comms[i]);
    }
  }
#ifdef STEPCAST_EXEC_WITH_MPI
  if (mpi) {
    int me = 0;
    MPI_Comm_rank(opt.mpi, &me);
    std::vector<ncclUniqueId> ids(comm_groups.size());
    if (me == 0)
      for (auto& id : ids) STEPCAST_NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(ids.data(), static_cast<int>(ids.size() * sizeof(ncclUniqueId)), MPI_BYTE, 0, opt.mpi);
    STEPCAST_NCCL_CHECK(ncclGroupStart());
    for (size_t i = 0; i < comm_groups.size(); ++i) {
      const std::vector<int> members = members_of(comm_groups[i]);
      for (size_t j = 0; j < members.size(); ++j) {
        Local* l = run.local(members[j]);
        if (!l) continue;
        STEPCAST_CUDA_CHECK(cudaSetDevice(l->device));
        ncclComm_t c = nullptr;
        STEPCAST_NCCL_CHECK(ncclCommInitRank(&c, static_cast<int>(members.size()), ids[i], static_cast<int>(j)));
        set_comm(comm_groups[i], members[j], c);
      }
    }
    STEPCAST_NCCL_CHECK(ncclGroupEnd());
  }
#endif

  for (int i = 0; i < opt.warmup; ++i) run.run_once();
  for (Local& l : run.locals) {  // the pool's high-water mark from here on
    std::uint64_t zero = 0;
    STEPCAST_CUDA_CHECK(cudaMemPoolSetAttribute(l.pool, cudaMemPoolAttrUsedMemHigh, &zero));
  }
#ifdef STEPCAST_EXEC_WITH_MPI
  if (mpi) MPI_Barrier(opt.mpi);
#endif
  run.run_once();

  // Times relative to each rank's zero event.
  Recorded rec;
  rec.times.resize(static_cast<size_t>(plan.world_size()));
  rec.peak_bytes.assign(static_cast<size_t>(plan.world_size()), -1.0);
  for (Local& l : run.locals) {
    STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));
    auto& tt = rec.times[static_cast<size_t>(l.rank)];
    tt.resize(l.start.size());
    for (size_t i = 0; i < l.start.size(); ++i) {
      float a = 0, b = 0;
      STEPCAST_CUDA_CHECK(cudaEventElapsedTime(&a, l.zero, l.start[i]));
      STEPCAST_CUDA_CHECK(cudaEventElapsedTime(&b, l.zero, l.end[i]));
      tt[i].start_s = std::max(0.0, a * 1e-3);
      tt[i].end_s = std::max(tt[i].start_s, b * 1e-3);
    }
    std::uint64_t high = 0;
    STEPCAST_CUDA_CHECK(cudaMemPoolGetAttribute(l.pool, cudaMemPoolAttrUsedMemHigh, &high));
    rec.peak_bytes[static_cast<size_t>(l.rank)] = static_cast<double>(high);
  }
#ifdef STEPCAST_EXEC_WITH_MPI
  if (mpi) {  // gather every rank's times (start, end pairs) and peak on process 0
    int me = 0, np = 0;
    MPI_Comm_rank(opt.mpi, &me);
    MPI_Comm_size(opt.mpi, &np);
    std::vector<double> flat;
    const auto& tt = rec.times[static_cast<size_t>(me)];
    for (const TaskTime& t : tt) {
      flat.push_back(t.start_s);
      flat.push_back(t.end_s);
    }
    flat.push_back(rec.peak_bytes[static_cast<size_t>(me)]);
    int n = static_cast<int>(flat.size());
    std::vector<int> counts(static_cast<size_t>(np)), offsets(static_cast<size_t>(np), 0);
    MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, opt.mpi);
    std::vector<double> all;
    if (me == 0) {
      for (int i = 1; i < np; ++i) offsets[static_cast<size_t>(i)] = offsets[static_cast<size_t>(i) - 1] + counts[static_cast<size_t>(i) - 1];
      all.resize(static_cast<size_t>(offsets.back() + counts.back()));
    }
    MPI_Gatherv(flat.data(), n, MPI_DOUBLE, all.data(), counts.data(), offsets.data(), MPI_DOUBLE, 0, opt.mpi);
    if (me != 0) return {};
    for (int r = 0; r < np; ++r) {
      auto& out = rec.times[static_cast<size_t>(r)];
      const int base = offsets[static_cast<size_t>(r)];
      const int pairs = (counts[static_cast<size_t>(r)] - 1) / 2;
      out.resize(static_cast<size_t>(pairs));
      for (int i = 0; i < pairs; ++i)
        out[static_cast<size_t>(i)] = {all[static_cast<size_t>(base + 2 * i)], all[static_cast<size_t>(base + 2 * i + 1)]};
      rec.peak_bytes[static_cast<size_t>(r)] = all[static_cast<size_t>(base + 2 * pairs)];
    }
  }
#endif

  // Provenance: this process's first GPU and the library versions.
  cudaDeviceProp prop{};
  STEPCAST_CUDA_CHECK(cudaGetDeviceProperties(&prop, run.locals.empty() ? 0 : run.locals[0].device));
  const bench::SoftwareVersions v = bench::software_versions();
  provenance["gpu"] = prop.name;
  provenance["sm_count"] = std::to_string(prop.multiProcessorCount);
  provenance["driver"] = std::to_string(v.cuda_driver);
  provenance["cuda_runtime"] = std::to_string(v.cuda_runtime);
  provenance["nccl"] = std::to_string(v.nccl);
  provenance["cublaslt"] = std::to_string(v.cublaslt);
  provenance["hostname"] = v.hostname;
  provenance["date_utc"] = bench::utc_now();
  provenance["processes"] = mpi ? std::to_string(plan.world_size()) : "1";
  provenance["warmup_runs"] = std::to_string(opt.warmup);
  return rec;
}

}  // namespace stepcast::exec
