// Private to the executor's CUDA layer (gpu_runner.cu, gpu_local.cu): what one rank holds
// on its GPU (streams, events, GEMM runners, scratch buffers, communicators, the memory
// pool) and how a rank's resources are set up, used by a compute task and torn down.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "attention_cudnn.h"
#include "gemm_runner.h"
#include "gpu_runner.h"
#include "kernels.h"
#include "plan.h"

namespace stepcast::exec {

struct AttnPart {
  bench::GemmRunner* gemm = nullptr;  // or a memory pass of `bytes` read and written per launch
  double read = 0, written = 0;
  int launches = 1;
  MemOp op = MemOp::kSoftmax;
};

// How long a hold kernel waits for its host thread at most: the host issues the Program in
// milliseconds; should a stream's launch queue fill first (the host then blocks until the
// GPU drains it), the hold gives up instead of deadlocking, and provenance says so.
constexpr unsigned long long kHoldTimeoutNs = 2'000'000'000ull;

struct Local {
  int rank = 0;
  int device = 0;
  std::array<cudaStream_t, 9> streams{};  // one per kStreams entry (set_up checks the count)
  cudaEvent_t zero = nullptr;
  std::vector<cudaEvent_t> start, end;  // per task
  // --graph: per task, the event other tasks wait on (the timing events are recorded as
  // external nodes, which no capture dependency can follow); the fork and join of the
  // streams into stream 0's capture; the captured Program and its executable graph.
  std::vector<cudaEvent_t> dep;
  // Per task: a task on another stream depends on it (its dep event is needed untimed).
  std::vector<char> cross;
  cudaEvent_t last = nullptr;  // --untimed: the captured Program's last node (after the joins)
  cudaEvent_t fork = nullptr;
  std::array<cudaEvent_t, 9> join{};
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t graph_exec = nullptr;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::string, int>,
           std::unique_ptr<bench::GemmRunner>>
      gemms;
  // A Program GEMM task of batch > 1 (a MoE layer's experts), by m, n, k, experts,
  // dtype/layout and stream.
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::string, int>,
           std::unique_ptr<bench::GroupedGemmRunner>>
      grouped;
  std::vector<std::vector<AttnPart>> attention;  // per task (attention tasks run unfused)
  // Fused attention (attention_cudnn.h): the rank's cuDNN state, and per task its graph
  // (nullptr: unfused); how many attention tasks ran which way, and why the first unfused.
  std::unique_ptr<SdpaRank> sdpa;
  std::vector<Sdpa*> fused;
  int attn_fused = 0, attn_grouped = 0, attn_unfused = 0;
  std::string attn_why;
  void* mem_src = nullptr;
  void* mem_dst = nullptr;
  std::size_t mem_bytes = 0, mem_offset = 0;  // scratch size; where the next launch starts
  int* hold = nullptr;                        // host-mapped: [0] release, [1] timed out
  int* hold_dev = nullptr;
  void* coll_send = nullptr;
  void* coll_recv = nullptr;
  void* p2p_send = nullptr;
  void* p2p_recv = nullptr;
  std::map<int, ncclComm_t> comms;                 // by group
  std::map<int, ncclComm_t> pair_comms;            // by Plan::pairs index (pairs this rank is in)
  std::map<std::string, std::vector<void*>> live;  // alloc/free by `what`
  cudaMemPool_t pool = nullptr;
};

// A memory-bound task larger than the scratch buffers streams through them in pieces of at
// most kMemScratchBytes read and written (mcore_1.7B's optimizer step reads 45 GB: full-size
// scratch would take 2 x 45 GB beside the Program's own memory). Pieces of GiBs stay
// HBM-bound (L2 is ~50 MB) and add a launch each.
constexpr double kMemScratchBytes = 4.0 * (std::size_t{1} << 30);

// A memory-bound pass of `read` and `written` bytes on stream `s` (in pieces of at most
// kMemScratchBytes, through the rank's scratch buffers).
void launch_memory(Local& l, cudaStream_t s, double read, double written, MemOp op);

// The cuBLASLt runner of a GEMM task's shape on a stream, created on first use: called as
// Transformer Engine calls it in `phase` (bench::cublas_gemm), or as given (NN) for "".
bench::GemmRunner* gemm_for(Local& l, std::int64_t m, std::int64_t n, std::int64_t k,
                            std::int64_t batch, const std::string& dtype, int stream,
                            const std::string& phase);

// The grouped runner of a MoE layer's expert GEMM task (batch = local experts): one cuBLASLt
// GEMM per expert over Transformer Engine's 4 compute streams, forked from and joined back
// to the task's stream (bench::GroupedGemmRunner, as TE's GroupedLinear runs them through
// nvte_multi_stream_cublas_gemm), created on first use.
bench::GroupedGemmRunner* grouped_for(Local& l, const Task& t);

// Streams, events, GEMM runners, attention graphs and scratch buffers of one rank (graph:
// the --graph events too; fused_attention: attention through cuDNN where it runs the task's
// shape, else unfused); tear_down frees them and never throws.
void set_up(const Plan& plan, Local& l, bool graph, bool fused_attention);
void tear_down(Local& l);

}  // namespace stepcast::exec
