// An NCCL communicator group as the benchmarks drive it: in one process over several GPUs
// (ncclCommInitAll), or, with MPI, one GPU per process (ncclCommInitRank). The calling
// process owns `members()` (all ranks in single-process mode, its own rank under MPI).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#ifdef STEPCAST_BENCH_WITH_MPI
#include <mpi.h>
#endif

namespace stepcast::bench {

struct Options;

#ifdef STEPCAST_BENCH_WITH_MPI
enum class MpiGroupKind { kOnePerNode, kAll };
bool mpi_active();     // MPI initialised with more than one process
int mpi_world_rank();  // 0 without MPI
#endif

// Sets NCCL_ALGO from --algo before any communicator is created.
void apply_algo(const Options& opt);

class NcclGroup {
 public:
  struct Member {
    int rank = 0;    // rank in the communicator
    int device = 0;  // CUDA device
    ncclComm_t comm = nullptr;
    void* send = nullptr;
    void* recv = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    double used_before = 0;  // device memory in use before the communicator was made
  };

  // Communicator over GPUs 0..ranks-1 of this process, buffers of `bytes` per GPU.
  static std::unique_ptr<NcclGroup> single_process(int ranks, std::size_t bytes);
#ifdef STEPCAST_BENCH_WITH_MPI
  // Collective over MPI_COMM_WORLD (every process must call it). nullptr when this process
  // is not a member or the group would have fewer than 2 ranks.
  static std::unique_ptr<NcclGroup> mpi(MpiGroupKind kind, std::size_t bytes);
#endif
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int ranks() const { return world_size_; }
  int nodes() const { return nodes_; }
  bool is_root() const { return members_.front().rank == 0; }
  std::vector<Member>& members() { return members_; }

  // Enqueues one `op` of S = bytes on every member's stream (one NCCL group call).
  void enqueue(const std::string& op, std::size_t bytes);
  // nccl-tests timing: warmup, then `repeats` back-to-back ops between events; the slowest
  // member's time per op, in microseconds (max over processes under MPI).
  double time_us(const std::string& op, std::size_t bytes, int warmup, int repeats);
  void synchronize();
  // Device memory NCCL holds per GPU for this communicator, once the ops run so far have
  // made their connections: frees the data buffers, then in use now minus in use before the
  // communicator was made, the largest over the members (and processes under MPI).
  double held_bytes();

 private:
  NcclGroup() = default;
  void allocate(std::size_t bytes);
  void release_buffers();
  double all_max(double v) const;

  std::vector<Member> members_;
  int world_size_ = 0;
  int nodes_ = 1;
#ifdef STEPCAST_BENCH_WITH_MPI
  MPI_Comm mpi_comm_ = MPI_COMM_NULL;
#endif
};

}  // namespace stepcast::bench
