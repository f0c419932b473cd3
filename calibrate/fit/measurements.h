// measurements.json (schema "stepcast.measurements/1"), as written by stepcast-bench
// (calibrate/bench/output.cu) or converted from published nccl-tests / GEMM tables
// (tests/data/calibration/). Loaded strictly: every key is known and carries its unit in its
// name; numbers are positive and finite; derived numbers (flop_per_s, algbw_GBps,
// busbw_GBps, bytes_per_s) must agree with the raw ones; all GPUs of the run are the same
// model. Each problem is an InputIssue naming the file, the line and column of the value
// (of the object lacking it for a missing key; sim/io/json_locator.h) and the JSON
// pointer of the key; all are reported at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/workload.h"

namespace stepcast {

inline constexpr const char* kMeasurementsSchema = "stepcast.measurements/1";

struct MeasuredGemm {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  DType dtype = DType::kBf16;
  double time_s = 0;
  double flop_per_s = 0;  // 2*m*n*k*batch / time_s
  std::string pointer;    // "/gemm/3"
};

// A grouped expert GEMM as Transformer Engine's GroupedLinear runs it (stepcast-bench gemm,
// "grouped_gemm": GroupedGemmRunner): `groups` cuBLAS GEMMs of [m, n, k] (the simulator's
// C[m,n] = A[m,k] B[k,n]) over 4 streams, each called as TE calls it in `phase`, timed from
// the fork to the join. Kept apart from `gemm`: these never enter the dense curve or
// gemm_table; they fit compute.gemm.grouped_efficiency.
struct MeasuredGroupedGemm {
  std::int64_t m = 0, n = 0, k = 0, groups = 1;
  DType dtype = DType::kBf16;
  std::string phase;      // a Program phase: fwd | recompute | bwd_input | bwd_weight
  double time_s = 0;      // the whole group
  double flop_per_s = 0;  // 2*m*n*k*groups / time_s
  std::string pointer;    // "/grouped_gemm/3"
};

// The Program phases a grouped GEMM is measured in (MeasuredGroupedGemm::phase).
const std::vector<std::string>& grouped_gemm_phase_names();

struct MeasuredMemory {
  std::string kernel;  // "copy" | "adam"
  double bytes_read = 0, bytes_written = 0;
  double time_s = 0;
  std::string pointer;
};

struct MeasuredCollective {
  std::string op;  // allreduce | reduce_scatter | allgather | all_to_all | broadcast | send_recv
  int ranks = 0, nodes = 1;
  std::string algo = "default";
  double size_bytes = 0;  // S as nccl-tests counts it
  double time_s = 0;
  std::string pointer;
};

// Device memory NCCL held per GPU for one communicator, its data buffers excluded
// (communicators[] of stepcast-bench nccl).
struct MeasuredCommunicator {
  int ranks = 0, nodes = 1;
  std::string algo = "default";
  double bytes_per_gpu = 0;
  std::string pointer;
};

struct MeasuredOverlap {
  std::int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::kBf16;
  int ranks = 0;
  double allreduce_size_bytes = 0;
  double gemm_alone_s = 0, gemm_overlapped_s = 0;
  std::string pointer;
};

// One fused-attention kernel (calibrate/bench/attention_sdpa.py): its shape, the library
// that ran it ("cudnn": the fused SDPA Transformer Engine runs on Hopper; "flash":
// FlashAttention-2) and its time. FLOPs by the FlashAttention papers' convention, which the
// lowering uses too (model/workload.cc): 4 * batch * heads * seq_q * seq_kv * head_dim,
// halved when causal, 2.5 times that for the backward.
struct MeasuredAttention {
  std::string backend;
  AttentionShape shape;  // batch, heads, kv_heads, seq_q, seq_kv, head_dim, causal, backward
  double time_s = 0;
  double flops = 0;
  std::string pointer;  // "/attention/3"
};

struct MeasurementProvenance {
  std::string gpu_name;
  int gpu_count = 0;
  int nodes = 1;
  int sm_count = 0;  // from gpus[0].sm_count; 0 when not recorded
  std::string cuda_driver_version, cuda_runtime_version, nccl_version;
  std::string hostname, date_utc;
};

struct Measurements {
  std::string file;
  std::string source;
  MeasurementProvenance provenance;
  std::vector<MeasuredGemm> gemm;
  std::vector<MeasuredGroupedGemm> grouped_gemm;
  std::vector<MeasuredMemory> memory;
  std::vector<MeasuredAttention> attention;
  std::optional<double> launch_overhead_s;
  // Device memory in use before the memory benchmark allocated anything (CUDA context,
  // loaded modules): memory.context_memory_bytes.
  std::optional<double> context_memory_bytes;
  std::vector<MeasuredCollective> collectives;
  std::vector<MeasuredCommunicator> communicators;
  std::vector<MeasuredOverlap> overlap;
};

// nccl-tests bus bandwidth factor (nccl-tests doc/PERFORMANCE.md): busbw = algbw * factor,
// allreduce 2(n-1)/n; reduce_scatter, allgather, all_to_all (n-1)/n; broadcast, send_recv 1.
double busbw_factor(const std::string& op, int ranks);
const std::vector<std::string>& collective_op_names();

// Throws InputError listing every problem (file, JSON pointer, message).
Measurements load_measurements(const std::string& path);
// Several files of one GPU model (a GEMM sweep, a memory sweep, attention...) as one: the
// lists concatenated, provenance, launch overhead and context memory from the first file
// that has them; file and source joined with ", ". A file of another GPU model is an
// InputError at its /provenance/gpu_name.
Measurements load_measurements(const std::vector<std::string>& paths);
Measurements parse_measurements(const std::string& text, const std::string& file);

}  // namespace stepcast
