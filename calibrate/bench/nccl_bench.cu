// NCCL collectives and send/recv over sizes and group shapes, measured as nccl-tests does
// (github.com/NVIDIA/nccl-tests, src/common.cu): `warmup` untimed iterations, then
// `repeats` iterations enqueued back to back between two events per GPU; time = the slowest
// GPU's elapsed / repeats. Data type float, reduction sum.
//  - single process: communicators over the first 2, 4, 8 GPUs (ncclCommInitAll);
//  - with MPI (STEPCAST_BENCH_WITH_MPI): one process per GPU; communicators of one GPU per
//    node and of all GPUs of all nodes (ncclCommInitRank, unique id broadcast with MPI).
// Sizes S follow nccl-tests: allreduce/broadcast/send_recv: the buffer; allgather: the total
// gathered bytes; reduce_scatter: the total input bytes; all_to_all: the bytes each rank
// sends in total. busbw = S/t * factor (doc/PERFORMANCE.md), see busbw_factor().
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "model/busbw.h"

#include "bench.h"
#include "check.h"
#include "nccl_group.h"

namespace stepcast::bench {

double busbw_factor(const std::string& op, int ranks) {
  const std::optional<BusOp> b = bus_op_named(op);
  if (!b) throw BenchError("unknown collective \"" + op + "\"");
  return stepcast::busbw_factor(*b, ranks);
}

void NcclGroup::enqueue(const std::string& op, std::size_t bytes) {
  const std::size_t count = bytes / sizeof(float);  // elements in S
  const int n = static_cast<int>(members_.size());
  STEPCAST_NCCL_CHECK(ncclGroupStart());
  for (int i = 0; i < n; ++i) {
    const Member& m = members_[i];
    const int rank = m.rank;
    const int world = world_size_;
    if (op == "allreduce") {
      STEPCAST_NCCL_CHECK(
          ncclAllReduce(m.send, m.recv, count, ncclFloat, ncclSum, m.comm, m.stream));
    } else if (op == "reduce_scatter") {
      STEPCAST_NCCL_CHECK(
          ncclReduceScatter(m.send, m.recv, count / world, ncclFloat, ncclSum, m.comm, m.stream));
    } else if (op == "allgather") {
      STEPCAST_NCCL_CHECK(
          ncclAllGather(m.send, m.recv, count / world, ncclFloat, m.comm, m.stream));
    } else if (op == "broadcast") {
      STEPCAST_NCCL_CHECK(ncclBroadcast(m.send, m.recv, count, ncclFloat, 0, m.comm, m.stream));
    } else if (op == "all_to_all") {
      const std::size_t chunk = count / world;
      for (int peer = 0; peer < world; ++peer) {
        STEPCAST_NCCL_CHECK(ncclSend(static_cast<float*>(m.send) + peer * chunk, chunk, ncclFloat,
                                     peer, m.comm, m.stream));
        STEPCAST_NCCL_CHECK(ncclRecv(static_cast<float*>(m.recv) + peer * chunk, chunk, ncclFloat,
                                     peer, m.comm, m.stream));
      }
    } else if (op == "send_recv") {
      // nccl-tests sendrecv_perf: each rank sends to rank+1 and receives from rank-1.
      STEPCAST_NCCL_CHECK(ncclSend(m.send, count, ncclFloat, (rank + 1) % world, m.comm, m.stream));
      STEPCAST_NCCL_CHECK(
          ncclRecv(m.recv, count, ncclFloat, (rank - 1 + world) % world, m.comm, m.stream));
    } else {
      throw BenchError("unknown collective \"" + op + "\"");
    }
  }
  STEPCAST_NCCL_CHECK(ncclGroupEnd());
}

double NcclGroup::time_us(const std::string& op, std::size_t bytes, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) enqueue(op, bytes);
  synchronize();
  for (Member& m : members_) {
    STEPCAST_CUDA_CHECK(cudaSetDevice(m.device));
    STEPCAST_CUDA_CHECK(cudaEventRecord(m.start, m.stream));
  }
  for (int i = 0; i < repeats; ++i) enqueue(op, bytes);
  double worst_ms = 0;
  for (Member& m : members_) {
    STEPCAST_CUDA_CHECK(cudaSetDevice(m.device));
    STEPCAST_CUDA_CHECK(cudaEventRecord(m.stop, m.stream));
  }
  for (Member& m : members_) {
    STEPCAST_CUDA_CHECK(cudaSetDevice(m.device));
    STEPCAST_CUDA_CHECK(cudaEventSynchronize(m.stop));
    float ms = 0;
    STEPCAST_CUDA_CHECK(cudaEventElapsedTime(&ms, m.start, m.stop));
    worst_ms = std::max(worst_ms, static_cast<double>(ms));
  }
  return all_max(worst_ms) * 1e3 / repeats;
}

void NcclGroup::synchronize() {
  for (Member& m : members_) {
    STEPCAST_CUDA_CHECK(cudaSetDevice(m.device));
    STEPCAST_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  }
}

namespace {

// Device memory in use on `device` (cudaMemGetInfo total - free), its context made first so
// that what a communicator adds is measured apart from it.
double used_on(int device) {
  STEPCAST_CUDA_CHECK(cudaSetDevice(device));
  STEPCAST_CUDA_CHECK(cudaFree(nullptr));
  std::size_t free_bytes = 0, total_bytes = 0;
  STEPCAST_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<double>(total_bytes - free_bytes);
}

}  // namespace

double NcclGroup::held_bytes() {
  synchronize();
  release_buffers();
  double held = 0;
  for (const Member& m : members_) held = std::max(held, used_on(m.device) - m.used_before);
  return all_max(held);
}

void NcclGroup::release_buffers() {
  for (Member& m : members_) {
    STEPCAST_CUDA_CHECK(cudaSetDevice(m.device));
    STEPCAST_CUDA_CHECK(cudaFree(m.send));
    STEPCAST_CUDA_CHECK(cudaFree(m.recv));
    m.send = m.recv = nullptr;
  }
}

void NcclGroup::allocate(std::size_t bytes) {
  for (Member& m : members_) {
    STEPCAST_CUDA_CHECK(cudaSetDevice(m.device));
    STEPCAST_CUDA_CHECK(cudaMalloc(&m.send, bytes));
    STEPCAST_CUDA_CHECK(cudaMalloc(&m.recv, bytes));
    STEPCAST_CUDA_CHECK(cudaMemset(m.send, 0, bytes));
    STEPCAST_CUDA_CHECK(cudaMemset(m.recv, 0, bytes));
    STEPCAST_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
    STEPCAST_CUDA_CHECK(cudaEventCreate(&m.start));
    STEPCAST_CUDA_CHECK(cudaEventCreate(&m.stop));
  }
}

std::unique_ptr<NcclGroup> NcclGroup::single_process(int ranks, std::size_t bytes) {
  auto g = std::unique_ptr<NcclGroup>(new NcclGroup());
  g->world_size_ = ranks;
  g->nodes_ = 1;
  std::vector<ncclComm_t> comms(ranks);
  std::vector<int> devs(ranks);
  std::vector<double> before(ranks);
  for (int i = 0; i < ranks; ++i) {
    devs[i] = i;
    before[i] = used_on(i);
  }
  STEPCAST_NCCL_CHECK(ncclCommInitAll(comms.data(), ranks, devs.data()));
  for (int i = 0; i < ranks; ++i) {
    g->members_.push_back(Member{i, i, comms[i]});
    g->members_.back().used_before = before[i];
  }
  g->allocate(bytes);
  return g;
}

NcclGroup::~NcclGroup() {
  // No throwing in destructors: cleanup errors are ignored.
  for (Member& m : members_) {
    cudaSetDevice(m.device);
    if (m.comm) ncclCommDestroy(m.comm);
    cudaFree(m.send);
    cudaFree(m.recv);
    if (m.stream) cudaStreamDestroy(m.stream);
    if (m.start) cudaEventDestroy(m.start);
    if (m.stop) cudaEventDestroy(m.stop);
  }
#ifdef STEPCAST_BENCH_WITH_MPI
  if (mpi_comm_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_comm_);
#endif
}

namespace {

std::vector<std::size_t> sweep_sizes(const Options& opt, int ranks) {
  // Multiples of ranks * sizeof(float) * ranks so that every op divides evenly.
  const std::size_t quantum = static_cast<std::size_t>(ranks) * ranks * sizeof(float);
  const double factor = opt.quick ? std::max(4.0, opt.size_factor) : opt.size_factor;
  std::vector<std::size_t> out;
  for (double s = opt.min_bytes; s <= opt.max_bytes * (1 + 1e-9); s *= factor) {
    std::size_t b = static_cast<std::size_t>(s) / quantum * quantum;
    if (b == 0) b = quantum;
    if (out.empty() || out.back() != b) out.push_back(b);
  }
  return out;
}

void sweep(NcclGroup& g, const Options& opt, Results& out) {
  const std::string algo = opt.algo.empty() ? "default" : opt.algo;
  for (const std::string& op : opt.ops) {
    for (std::size_t bytes : sweep_sizes(opt, g.ranks())) {
      // Fewer timed iterations for huge messages keeps the sweep to minutes.
      const int reps = bytes >= (std::size_t{1} << 30) ? std::max(2, opt.repeats / 4) : opt.repeats;
      const double t_us = g.time_us(op, bytes, std::max(1, opt.warmup), reps);
      CollectiveResult r;
      r.op = op;
      r.ranks = g.ranks();
      r.nodes = g.nodes();
      r.algo = algo;
      r.size_bytes = static_cast<double>(bytes);
      r.time_us = t_us;
      r.algbw_GBps = bytes / (t_us * 1e-6) / 1e9;
      r.busbw_GBps = r.algbw_GBps * busbw_factor(op, g.ranks());
      if (g.is_root()) {
        std::fprintf(stderr, "nccl %-14s n=%d N=%d %12zu B: %10.2f us busbw %7.1f GB/s\n",
                     op.c_str(), r.ranks, r.nodes, bytes, t_us, r.busbw_GBps);
        out.collectives.push_back(r);
      }
    }
  }
}

// What NCCL holds once every op of the sweep has run (connections are made as collectives
// first need them): a training process holds it for each communicator it uses.
void record_held(NcclGroup& g, const Options& opt, Results& out) {
  const double held = g.held_bytes();
  if (!g.is_root()) return;
  out.communicators.push_back(
      {g.ranks(), g.nodes(), opt.algo.empty() ? "default" : opt.algo, held});
  std::fprintf(stderr, "nccl communicator n=%d N=%d: %.1f MiB per GPU\n", g.ranks(), g.nodes(),
               held / 1048576.0);
}

}  // namespace

void apply_algo(const Options& opt) {
  if (opt.algo.empty()) return;
  // NCCL reads NCCL_ALGO at communicator creation (NCCL docs, Environment Variables).
  setenv("NCCL_ALGO", opt.algo.c_str(), 1);
}

void run_nccl(const Options& opt, Results& out) {
  apply_algo(opt);
  const std::size_t max_bytes = sweep_sizes(opt, 8).back() + 4096;
#ifdef STEPCAST_BENCH_WITH_MPI
  if (mpi_active()) {
    for (auto kind : {MpiGroupKind::kOnePerNode, MpiGroupKind::kAll}) {
      std::unique_ptr<NcclGroup> g = NcclGroup::mpi(kind, max_bytes);
      if (!g) continue;  // this process is not a member, or the group has one rank
      sweep(*g, opt, out);
      record_held(*g, opt, out);
    }
    return;
  }
#endif
  int devices = 0;
  STEPCAST_CUDA_CHECK(cudaGetDeviceCount(&devices));
  bool any = false;
  for (int ranks : opt.group_sizes) {
    if (ranks < 2) continue;
    if (ranks > devices) {
      out.notes.push_back("nccl: group of " + std::to_string(ranks) + " skipped (" +
                          std::to_string(devices) + " GPUs)");
      continue;
    }
    std::unique_ptr<NcclGroup> g = NcclGroup::single_process(ranks, max_bytes);
    sweep(*g, opt, out);
    record_held(*g, opt, out);
    any = true;
  }
  if (!any) out.notes.push_back("nccl: needs at least 2 GPUs; nothing measured");
}

}  // namespace stepcast::bench

// ------------------------------------------------------------------ MPI (optional build)

namespace stepcast::bench {

#ifdef STEPCAST_BENCH_WITH_MPI

#define STEPCAST_MPI_CHECK(call)                                                          \
  do {                                                                                    \
    int rc_ = (call);                                                                     \
    if (rc_ != MPI_SUCCESS) {                                                             \
      char msg_[MPI_MAX_ERROR_STRING];                                                    \
      int len_ = 0;                                                                       \
      MPI_Error_string(rc_, msg_, &len_);                                                 \
      ::stepcast::bench::call_failed(__FILE__, __LINE__, #call, std::string(msg_, len_)); \
    }                                                                                     \
  } while (0)

bool mpi_active() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return false;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size > 1;
}

int mpi_world_rank() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

std::unique_ptr<NcclGroup> NcclGroup::mpi(MpiGroupKind kind, std::size_t bytes) {
  int world_rank = 0;
  STEPCAST_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  // Processes sharing a node: local rank picks the GPU; node count = number of local roots.
  MPI_Comm local;
  STEPCAST_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &local));
  int local_rank = 0;
  STEPCAST_MPI_CHECK(MPI_Comm_rank(local, &local_rank));
  STEPCAST_MPI_CHECK(MPI_Comm_free(&local));
  int is_local_root = local_rank == 0 ? 1 : 0;
  int nodes = 0;
  STEPCAST_MPI_CHECK(MPI_Allreduce(&is_local_root, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));

  const bool member = kind == MpiGroupKind::kAll || is_local_root;
  MPI_Comm comm;
  STEPCAST_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world_rank, &comm));
  if (!member) return nullptr;
  int rank = 0, size = 0;
  STEPCAST_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  STEPCAST_MPI_CHECK(MPI_Comm_size(comm, &size));
  if (size < 2) {
    STEPCAST_MPI_CHECK(MPI_Comm_free(&comm));
    return nullptr;
  }
  int devices = 0;
  STEPCAST_CUDA_CHECK(cudaGetDeviceCount(&devices));
  const int device = local_rank % devices;
  const double used_before = used_on(device);
  ncclUniqueId id;
  if (rank == 0) STEPCAST_NCCL_CHECK(ncclGetUniqueId(&id));
  STEPCAST_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
  ncclComm_t nccl_comm;
  STEPCAST_NCCL_CHECK(ncclCommInitRank(&nccl_comm, size, id, rank));

  auto g = std::unique_ptr<NcclGroup>(new NcclGroup());
  g->world_size_ = size;
  g->nodes_ = nodes;
  g->mpi_comm_ = comm;
  g->members_.push_back(Member{rank, device, nccl_comm});
  g->members_.back().used_before = used_before;
  g->allocate(bytes);
  return g;
}

double NcclGroup::all_max(double v) const {
  if (mpi_comm_ == MPI_COMM_NULL) return v;
  double r = v;
  STEPCAST_MPI_CHECK(MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_MAX, mpi_comm_));
  return r;
}

#else

double NcclGroup::all_max(double v) const { return v; }

#endif

}  // namespace stepcast::bench
