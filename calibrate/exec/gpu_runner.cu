// Runs a Plan on GPUs (gpu_runner.h). Per rank: one CUDA stream per Program stream, two
// timing events per task (start before, end after it on its stream), and a dependency is a
// cudaStreamWaitEvent on the end event of the task it waits for. One host thread per GPU
// enqueues its rank's tasks through the executor's issue loop (schedule.h: a task when it
// heads its stream and its deps are enqueued, a collective or send/recv once every member
// reached it), each member's NCCL call in its own ncclGroupStart/End on its own thread, so
// the host keeps ahead of the GPUs (one thread issuing all ranks in turn could not). Before
// each run a hold kernel (kernels.h) keeps every GPU idle until its thread has queued the
// whole Program, so start events time the GPU, not the launch; a Program longer than a
// stream's launch queue outlasts the hold, and --graph (Runner::capture) instead captures
// the same issue into one CUDA graph per GPU, replayed with no host work between tasks.
//  - gemm: cuBLASLt (bench::GemmRunner: m, n, k, batch, dtype), called as Transformer Engine
//    calls it in the task's phase (bench::cublas_gemm: forward TN, input gradient NN, weight
//    gradient NT; fp8 TN always, as cuBLASLt requires); the task's layout key, the
//    simulator's alignment convention, is not what cuBLAS is given. A task of batch > 1 is a
//    MoE layer's experts: one GEMM per expert over 4 streams forked from and joined back to
//    the task's stream (bench::GroupedGemmRunner), as TE's GroupedLinear runs them;
//  - attention: cuDNN's fused scaled-dot-product attention, forward or backward, causal,
//    grouped-query in the forward (attention_cudnn.h), where the build has cuDNN and cuDNN
//    runs the shape; otherwise (or with --attention unfused) unfused — per (batch x head):
//    S = Q K^T, a softmax pass over S (read and write, 2 bytes per element), O = P V;
//    backward: dP = dO V^T, dV = P^T dO, a softmax backward pass (read P and dP, write
//    dS), dQ = dS K, dK = dS^T Q, the full seq_q x seq_kv product even when causal (README:
//    how this biases the result), batched GEMMs over heads in chunks whose S is at most
//    kAttnChunkBytes. The result's provenance says how many tasks ran each way;
//  - memory_bound: a kernel doing the task's arithmetic (kernels.h: norm, softmax, Adam,
//    elementwise) reading bytes_read and writing bytes_written (over 4 GiB in pieces of
//    4 GiB, see launch_memory), at addresses that move on through scratch buffers larger than
//    the task plus twice the L2 cache, so that a task does not find the last one's bytes in L2;
//  - collective: on the group's communicator, buffer S = bytes as nccl-tests counts it:
//    allreduce / broadcast (root 0) count S, reduce_scatter recvcount S/n, allgather
//    sendcount S/n, all_to_all S/n to each member as ncclSend/ncclRecv pairs;
//  - send/recv: ncclSend/ncclRecv on a communicator of its directed pair (plan.h P2pPair:
//    sender rank 0, receiver rank 1), so that a rank's sends and receives, or two pairs'
//    transfers, are not serialised by NCCL on one shared communicator;
//  - alloc/free: cudaMallocAsync/cudaFreeAsync from the device's pool (release threshold
//    kept, so freed memory is reused as a caching allocator would); the pool's high-water
//    mark is the measured peak. Scratch buffers of GEMMs, kernels and communication are
//    outside the pool (allocated once, before timing).
#include "gpu_runner.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "bench.h"
#include "check.h"
#include "gemm_runner.h"
#include "gpu_local.h"
#include "kernels.h"
#include "schedule.h"

namespace stepcast::exec {

namespace {

using bench::BenchError;

int dtype_bytes(const std::string& d) {
  if (d == "fp8" || d == "mxfp8" || d == "nvfp4") return 1;  // block formats run as fp8
  if (d == "fp32") return 4;
  return 2;
}

ncclDataType_t nccl_type(const std::string& d) {
  if (d == "fp8" || d == "mxfp8" || d == "nvfp4")
    return ncclInt8;  // timing only: NCCL moves bytes, the sum is not used
  if (d == "fp32") return ncclFloat;
  if (d == "fp16") return ncclHalf;
  return ncclBfloat16;
}

void launch_compute(Local& l, const Task& t) {
  cudaStream_t s = l.streams[static_cast<size_t>(t.stream)];
  switch (t.kind) {
    case Kind::kGemm:
      if (t.batch > 1) {  // a MoE layer's experts, one GEMM each over TE's 4 streams
        grouped_for(l, t)->run(s);
        return;
      }
      gemm_for(l, t.m, t.n, t.k, t.batch, t.dtype, t.stream, kPhases[static_cast<size_t>(t.phase)])
          ->launch();
      return;
    case Kind::kAttention:
      if (Sdpa* f = l.fused[static_cast<size_t>(t.id)]) {
        f->launch(s);
        return;
      }
      for (const AttnPart& part : l.attention[static_cast<size_t>(t.id)])
        for (int i = 0; i < part.launches; ++i) {
          if (part.gemm)
            part.gemm->launch();
          else
            launch_memory(l, s, part.read, part.written, part.op);
        }
      return;
    case Kind::kMemoryBound:
      launch_memory(l, s, t.bytes_read, t.bytes_written, mem_op_of(t.what));
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
void enqueue_nccl(const Plan& plan, Local& l, const Task& t, int instance) {
  cudaStream_t s = l.streams[static_cast<size_t>(t.stream)];
  const ExecRank& er = plan.ranks[static_cast<size_t>(l.rank)];
  if (t.kind == Kind::kSend || t.kind == Kind::kRecv) {
    // On the pair's own communicator: the sender is its rank 0, the receiver its rank 1.
    ncclComm_t c = l.pair_comms.at(plan.rendezvous[static_cast<size_t>(instance)].pair);
    const auto count = static_cast<std::size_t>(t.bytes);
    if (t.kind == Kind::kSend)
      STEPCAST_NCCL_CHECK(ncclSend(l.p2p_send, count, ncclInt8, 1, c, s));
    else
      STEPCAST_NCCL_CHECK(ncclRecv(l.p2p_recv, count, ncclInt8, 0, c, s));
    return;
  }
  const int g = er.group[static_cast<size_t>(t.id)];
  ncclComm_t c = l.comms.at(g);
  const int n = static_cast<int>(plan.program->groups[static_cast<size_t>(g)].ranks.size());
  const ncclDataType_t type = nccl_type(t.dtype);
  const std::size_t count =
      static_cast<std::size_t>(t.bytes) / static_cast<std::size_t>(dtype_bytes(t.dtype));
  const std::string& op = kCollOps[static_cast<size_t>(t.op)];
  if (op == "allreduce") {
    STEPCAST_NCCL_CHECK(ncclAllReduce(l.coll_send, l.coll_recv, count, type, ncclSum, c, s));
  } else if (op == "reduce_scatter") {
    STEPCAST_NCCL_CHECK(
        ncclReduceScatter(l.coll_send, l.coll_recv, count / n, type, ncclSum, c, s));
  } else if (op == "allgather") {
    STEPCAST_NCCL_CHECK(ncclAllGather(l.coll_send, l.coll_recv, count / n, type, c, s));
  } else if (op == "broadcast") {
    STEPCAST_NCCL_CHECK(ncclBroadcast(l.coll_send, l.coll_recv, count, type, 0, c, s));
  } else {  // all_to_all
    const std::size_t chunk = count / n * static_cast<std::size_t>(dtype_bytes(t.dtype));
    for (int p = 0; p < n; ++p) {
      STEPCAST_NCCL_CHECK(
          ncclSend(static_cast<char*>(l.coll_send) + p * chunk, chunk, ncclInt8, p, c, s));
      STEPCAST_NCCL_CHECK(
          ncclRecv(static_cast<char*>(l.coll_recv) + p * chunk, chunk, ncclInt8, p, c, s));
    }
  }
}

struct Runner {
  const Plan& plan;
  bool graph = false;  // --graph: capture once, replay (capture(), replay())
  bool timed = true;   // false (--untimed, graph only): no event around each task
  std::vector<Local> locals;
  std::vector<int> local_of;      // global rank -> index in locals, -1 elsewhere
  std::function<void()> barrier;  // MPI: every process has queued its Program (else none)

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

  // The GPU side of the issue loop (schedule.h): called from rank `rank`'s own thread.
  class Issuer : public Device {
   public:
    explicit Issuer(Runner& r) : r_(r) {}
    void issue(int rank, const Task& t) override {
      Local& l = begin(rank, t);
      launch_compute(l, t);
      end(l, t);
    }
    void issue_rendezvous(int rank, const Task& t, int instance, const Arrival&) override {
      Local& l = begin(rank, t);
      STEPCAST_NCCL_CHECK(ncclGroupStart());
      enqueue_nccl(r_.plan, l, t, instance);
      STEPCAST_NCCL_CHECK(ncclGroupEnd());
      end(l, t);
    }

   private:
    // A task waits for its deps' end, then records its start. Captured (--graph), the
    // timing events are external record nodes, which no capture dependency can follow, so
    // deps wait on the task's own dependency event instead.
    // Untimed (graph only), a dep on the same stream needs no event: the stream orders it.
    Local& begin(int rank, const Task& t) {
      Local& l = *r_.local(rank);
      STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));  // per host thread; cheap when unchanged
      cudaStream_t s = l.streams[static_cast<size_t>(t.stream)];
      const std::vector<cudaEvent_t>& wait = r_.graph ? l.dep : l.end;
      for (int d : t.deps) {
        if (!r_.timed && !l.cross[static_cast<size_t>(d)]) continue;
        STEPCAST_CUDA_CHECK(cudaStreamWaitEvent(s, wait[static_cast<size_t>(d)], 0));
      }
      if (r_.timed) record(l.start[static_cast<size_t>(t.id)], s);
      return l;
    }
    void end(Local& l, const Task& t) {
      cudaStream_t s = l.streams[static_cast<size_t>(t.stream)];
      const auto id = static_cast<size_t>(t.id);
      if (r_.timed) record(l.end[id], s);
      if (r_.graph && (r_.timed || l.cross[id])) STEPCAST_CUDA_CHECK(cudaEventRecord(l.dep[id], s));
    }
    void record(cudaEvent_t e, cudaStream_t s) {
      if (r_.graph)
        STEPCAST_CUDA_CHECK(cudaEventRecordWithFlags(e, s, cudaEventRecordExternal));
      else
        STEPCAST_CUDA_CHECK(cudaEventRecord(e, s));
    }
    Runner& r_;
  };

  // One run of the Program (header comment): hold every GPU, let each rank's thread queue its
  // tasks behind the hold, release. Returns how many holds timed out.
  int run_once() {
    std::vector<int> ranks;
    for (Local& l : locals) {
      STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));
      __atomic_store_n(&l.hold[0], 0, __ATOMIC_SEQ_CST);
      l.hold[1] = 0;
      launch_hold(l.hold_dev, l.hold_dev + 1, kHoldTimeoutNs, l.streams[0]);
      STEPCAST_CUDA_CHECK(cudaEventRecord(l.zero, l.streams[0]));
      for (size_t s = 1; s < l.streams.size(); ++s)
        STEPCAST_CUDA_CHECK(cudaStreamWaitEvent(l.streams[s], l.zero, 0));
      ranks.push_back(l.rank);
    }
    Issuer issuer(*this);
    try {
      run_ranks(plan, ranks, issuer);
    } catch (...) {
      for (Local& l : locals) __atomic_store_n(&l.hold[0], 1, __ATOMIC_SEQ_CST);
      throw;
    }
    if (barrier) barrier();  // release together: the GPUs' zeros stay aligned
    for (Local& l : locals) __atomic_store_n(&l.hold[0], 1, __ATOMIC_SEQ_CST);
    sync_all();
    // What the Program left allocated (it should free everything; be robust).
    for (Local& l : locals) {
      STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));
      for (auto& [what, v] : l.live)
        for (void* p : v)
          if (p) STEPCAST_CUDA_CHECK(cudaFree(p));
      l.live.clear();
    }
    int timed_out = 0;
    for (Local& l : locals) timed_out += __atomic_load_n(&l.hold[1], __ATOMIC_SEQ_CST) ? 1 : 0;
    return timed_out;
  }

  // --graph: the same issue loop, captured once per rank into a CUDA graph (stream 0's
  // capture; every other stream forks from it and joins it at the end), then replayed: one
  // launch per GPU and run, so no host work sits between tasks and no hold is needed. The
  // allocations become the graph's memory nodes (freed before each relaunch when the
  // Program leaves one allocated); the zero event is the graph's first node.
  void capture() {
    std::vector<int> ranks;
    for (Local& l : locals) {
      STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));
      STEPCAST_CUDA_CHECK(cudaStreamBeginCapture(l.streams[0], cudaStreamCaptureModeRelaxed));
      STEPCAST_CUDA_CHECK(cudaEventRecordWithFlags(l.zero, l.streams[0], cudaEventRecordExternal));
      STEPCAST_CUDA_CHECK(cudaEventRecord(l.fork, l.streams[0]));
      for (size_t s = 1; s < l.streams.size(); ++s)
        STEPCAST_CUDA_CHECK(cudaStreamWaitEvent(l.streams[s], l.fork, 0));
      ranks.push_back(l.rank);
    }
    auto end_capture = [&](bool keep) {
      for (Local& l : locals) {
        cudaSetDevice(l.device);
        for (size_t s = 1; s < l.streams.size(); ++s) {
          cudaEventRecord(l.join[s], l.streams[s]);
          cudaStreamWaitEvent(l.streams[0], l.join[s], 0);
        }
        // Untimed, the step ends at this node, after every stream's last task.
        if (!timed) cudaEventRecordWithFlags(l.last, l.streams[0], cudaEventRecordExternal);
        cudaGraph_t g = nullptr;
        const cudaError_t err = cudaStreamEndCapture(l.streams[0], &g);
        if (keep) STEPCAST_CUDA_CHECK(err);
        if (!keep && g) cudaGraphDestroy(g);
        if (keep) l.graph = g;
      }
    };
    Issuer issuer(*this);
    try {
      run_ranks(plan, ranks, issuer);
    } catch (...) {
      end_capture(false);
      throw;
    }
    end_capture(true);
    for (Local& l : locals) {
      STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));
      const cudaError_t err = cudaGraphInstantiateWithFlags(
          &l.graph_exec, l.graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
      if (err == cudaErrorMemoryAllocation)
        throw OutOfMemory("rank " + std::to_string(l.rank) +
                          ": the captured Program's allocations do not fit in GPU memory");
      STEPCAST_CUDA_CHECK(err);
      l.live.clear();  // the graph's memory nodes, not this process's to free
    }
  }

  void replay() {
    for (Local& l : locals) {
      STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));
      const cudaError_t err = cudaGraphLaunch(l.graph_exec, l.streams[0]);
      if (err == cudaErrorMemoryAllocation)
        throw OutOfMemory("rank " + std::to_string(l.rank) +
                          ": the captured Program's allocations do not fit in GPU memory");
      STEPCAST_CUDA_CHECK(err);
    }
    sync_all();
  }
};

// Each local rank's task times (relative to its zero event) and its peak memory.
void read_times(Runner& run, Recorded& rec) {
  rec.times.resize(static_cast<size_t>(run.plan.world_size()));
  rec.peak_bytes.assign(static_cast<size_t>(run.plan.world_size()), -1.0);
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
    if (run.graph)
      STEPCAST_CUDA_CHECK(
          cudaDeviceGetGraphMemAttribute(l.device, cudaGraphMemAttrUsedMemHigh, &high));
    else
      STEPCAST_CUDA_CHECK(cudaMemPoolGetAttribute(l.pool, cudaMemPoolAttrUsedMemHigh, &high));
    rec.peak_bytes[static_cast<size_t>(l.rank)] = static_cast<double>(high);
  }
}

// --untimed: the Program captured again with no event around its tasks, replayed `warmup`
// times and once more; the step is the longest rank's zero-to-last time.
double untimed_step(Runner& run, int warmup) {
  for (Local& l : run.locals) {
    STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));
    STEPCAST_CUDA_CHECK(cudaDeviceSynchronize());
    if (l.graph_exec) STEPCAST_CUDA_CHECK(cudaGraphExecDestroy(l.graph_exec));
    if (l.graph) STEPCAST_CUDA_CHECK(cudaGraphDestroy(l.graph));
    l.graph_exec = nullptr;
    l.graph = nullptr;
  }
  run.timed = false;
  run.capture();
  for (int i = 0; i < std::max(warmup, 1); ++i) run.replay();
  run.replay();
  double step = 0;
  for (Local& l : run.locals) {
    STEPCAST_CUDA_CHECK(cudaSetDevice(l.device));
    float ms = 0;
    STEPCAST_CUDA_CHECK(cudaEventElapsedTime(&ms, l.zero, l.last));
    step = std::max(step, ms * 1e-3);
  }
  return step;
}

}  // namespace

int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

#ifdef STEPCAST_EXEC_WITH_MPI
// Gathers every process's task times (start, end pairs) and peaks into process 0's record;
// false on the other processes, whose record is then not to be used.
static bool gather_on_first_process(Recorded& rec, MPI_Comm comm) {
  int me = 0, np = 0;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &np);
  std::vector<double> flat;
  const auto& tt = rec.times[static_cast<size_t>(me)];
  for (const TaskTime& t : tt) {
    flat.push_back(t.start_s);
    flat.push_back(t.end_s);
  }
  flat.push_back(rec.peak_bytes[static_cast<size_t>(me)]);
  int n = static_cast<int>(flat.size());
  std::vector<int> counts(static_cast<size_t>(np)), offsets(static_cast<size_t>(np), 0);
  MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  std::vector<double> all;
  if (me == 0) {
    for (int i = 1; i < np; ++i)
      offsets[static_cast<size_t>(i)] =
          offsets[static_cast<size_t>(i) - 1] + counts[static_cast<size_t>(i) - 1];
    all.resize(static_cast<size_t>(offsets.back() + counts.back()));
  }
  MPI_Gatherv(flat.data(), n, MPI_DOUBLE, all.data(), counts.data(), offsets.data(), MPI_DOUBLE, 0,
              comm);
  if (me != 0) return false;
  for (int r = 0; r < np; ++r) {
    auto& out = rec.times[static_cast<size_t>(r)];
    const int base = offsets[static_cast<size_t>(r)];
    const int pairs = (counts[static_cast<size_t>(r)] - 1) / 2;
    out.resize(static_cast<size_t>(pairs));
    for (int i = 0; i < pairs; ++i)
      out[static_cast<size_t>(i)] = {all[static_cast<size_t>(base + 2 * i)],
                                     all[static_cast<size_t>(base + 2 * i + 1)]};
    rec.peak_bytes[static_cast<size_t>(r)] = all[static_cast<size_t>(base + 2 * pairs)];
  }
  return true;
}
#endif

// Provenance of a run: this process's first GPU, the library versions, how it was run.
static void record_provenance(std::map<std::string, std::string>& provenance, int first_device,
                              size_t gpus, const std::string& processes, int warmup, bool graph,
                              int holds_timed_out) {
  cudaDeviceProp prop{};
  STEPCAST_CUDA_CHECK(cudaGetDeviceProperties(&prop, first_device));
  const bench::SoftwareVersions v = bench::software_versions();
  provenance["gpu"] = prop.name;
  provenance["sm_count"] = std::to_string(prop.multiProcessorCount);
  provenance["driver"] = std::to_string(v.cuda_driver);
  provenance["cuda_runtime"] = std::to_string(v.cuda_runtime);
  provenance["nccl"] = std::to_string(v.nccl);
  provenance["cublaslt"] = std::to_string(v.cublaslt);
  provenance["hostname"] = v.hostname;
  provenance["date_utc"] = bench::utc_now();
  provenance["processes"] = processes;
  provenance["warmup_runs"] = std::to_string(warmup);
  provenance["host_threads"] = std::to_string(gpus) + " (one per GPU)";
  // A hold that timed out let the GPU start before its queue was full: launch latency may
  // be in the first tasks' times (this process's GPUs only).
  provenance["holds_timed_out"] = std::to_string(holds_timed_out);
  provenance["issue"] = graph ? "cuda graph per GPU, captured once and replayed"
                              : "streams behind a hold kernel, issued each run";
}

// How this process's attention tasks ran: fused through cuDNN (how many grouped) or
// unfused, and why the first unfused one was.
static void record_attention(std::map<std::string, std::string>& provenance,
                             const std::vector<Local>& locals, bool wanted) {
  int fused = 0, grouped = 0, unfused = 0;
  std::string why;
  for (const Local& l : locals) {
    fused += l.attn_fused;
    grouped += l.attn_grouped;
    unfused += l.attn_unfused;
    if (why.empty()) why = l.attn_why;
  }
  provenance["attention"] = std::to_string(fused) + " tasks fused (" + std::to_string(grouped) +
                            " grouped-query), " + std::to_string(unfused) + " unfused";
  provenance["attention_library"] = wanted ? SdpaRank::library() : "none (--attention unfused)";
  if (unfused > 0) provenance["attention_unfused_because"] = why;
}

Recorded run_on_gpus(const Plan& plan, const GpuOptions& opt,
                     std::map<std::string, std::string>& provenance) {
  Runner run{
      plan, opt.graph, true, {}, std::vector<int>(static_cast<size_t>(plan.world_size()), -1), {}};
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
  for (Local& l : run.locals) set_up(plan, l, opt.graph, opt.fused_attention);

  // Communicators: one per group with collectives, one per directed send/recv pair.
  const Program& p = *plan.program;
  struct CommSpec {
    bool pair = false;
    int index = 0;             // group id or Plan::pairs index
    std::vector<int> members;  // comm rank i = members[i] (a pair: sender, receiver)
  };
  std::vector<CommSpec> specs;
  for (size_t g = 0; g < p.groups.size(); ++g)
    if (plan.collectives_per_group[g] > 0)
      specs.push_back({false, static_cast<int>(g), plan.group_members[g]});
  for (size_t i = 0; i < plan.pairs.size(); ++i)
    specs.push_back({true, static_cast<int>(i), {plan.pairs[i].src, plan.pairs[i].dst}});
  auto set_comm = [&](const CommSpec& cs, int rank, ncclComm_t c) {
    Local* l = run.local(rank);
    (cs.pair ? l->pair_comms : l->comms)[cs.index] = c;
  };
#ifdef STEPCAST_EXEC_WITH_MPI
  const bool mpi = opt.mpi != MPI_COMM_NULL;
  if (mpi) run.barrier = [&] { MPI_Barrier(opt.mpi); };
#else
  const bool mpi = false;
#endif
  if (!mpi) {
    for (const CommSpec& cs : specs) {
      std::vector<int> devs;
      for (int r : cs.members) devs.push_back(plan.ranks[static_cast<size_t>(r)].device);
      std::vector<ncclComm_t> comms(cs.members.size());
      STEPCAST_NCCL_CHECK(
          ncclCommInitAll(comms.data(), static_cast<int>(cs.members.size()), devs.data()));
      for (size_t i = 0; i < cs.members.size(); ++i) set_comm(cs, cs.members[i], comms[i]);
    }
  }
#ifdef STEPCAST_EXEC_WITH_MPI
  if (mpi) {
    int me = 0;
    MPI_Comm_rank(opt.mpi, &me);
    std::vector<ncclUniqueId> ids(specs.size());
    if (me == 0)
      for (auto& id : ids) STEPCAST_NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(ids.data(), static_cast<int>(ids.size() * sizeof(ncclUniqueId)), MPI_BYTE, 0,
              opt.mpi);
    STEPCAST_NCCL_CHECK(ncclGroupStart());
    for (size_t i = 0; i < specs.size(); ++i) {
      const std::vector<int>& members = specs[i].members;
      for (size_t j = 0; j < members.size(); ++j) {
        Local* l = run.local(members[j]);
        if (!l) continue;
        STEPCAST_CUDA_CHECK(cudaSetDevice(l->device));
        ncclComm_t c = nullptr;
        STEPCAST_NCCL_CHECK(
            ncclCommInitRank(&c, static_cast<int>(members.size()), ids[i], static_cast<int>(j)));
        set_comm(specs[i], members[j], c);
      }
    }
    STEPCAST_NCCL_CHECK(ncclGroupEnd());
  }
#endif

  int holds_timed_out = 0;
  if (run.graph) {
    if (mpi) throw BenchError("--graph runs in one process (not under mpirun)");
    run.capture();
    for (int i = 0; i < opt.warmup; ++i) run.replay();
    for (Local& l : run.locals) {  // the graph memory's high-water mark from here on
      std::uint64_t zero = 0;
      STEPCAST_CUDA_CHECK(
          cudaDeviceSetGraphMemAttribute(l.device, cudaGraphMemAttrUsedMemHigh, &zero));
    }
    run.replay();
  } else {
    for (int i = 0; i < opt.warmup; ++i) run.run_once();
    for (Local& l : run.locals) {  // the pool's high-water mark from here on
      std::uint64_t zero = 0;
      STEPCAST_CUDA_CHECK(cudaMemPoolSetAttribute(l.pool, cudaMemPoolAttrUsedMemHigh, &zero));
    }
#ifdef STEPCAST_EXEC_WITH_MPI
    if (mpi) MPI_Barrier(opt.mpi);
#endif
    holds_timed_out = run.run_once();
  }

  // Times relative to each rank's zero event.
  Recorded rec;
  read_times(run, rec);
#ifdef STEPCAST_EXEC_WITH_MPI
  if (mpi && !gather_on_first_process(rec, opt.mpi)) return {};
#endif
  if (opt.untimed) rec.untimed_step_s = untimed_step(run, opt.warmup);

  record_provenance(provenance, run.locals.empty() ? 0 : run.locals[0].device, run.locals.size(),
                    mpi ? std::to_string(plan.world_size()) : "1", opt.warmup, opt.graph,
                    holds_timed_out);
  record_attention(provenance, run.locals, opt.fused_attention);
  return rec;
}

}  // namespace stepcast::exec
