// stepcast-bench: CUDA/cuBLASLt/NCCL microbenchmarks whose output (measurements.json,
// schema "stepcast.measurements/1") `stepcast fit` turns into a hardware profile.
// Builds with the CUDA toolkit, cuBLASLt and NCCL only (calibrate/README.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stepcast::bench {

inline constexpr const char* kMeasurementsSchema = "stepcast.measurements/1";

struct Options {
  bool quick = false;  // a shorter sweep (run_on_gpu.sh)
  int warmup = 5;      // launches before timing
  int repeats = 20;    // timed launches; the median is kept
  std::vector<std::string> dtypes = {"bf16", "fp16", "fp8"};
  std::vector<std::int64_t> gemm_dims;  // grid of m, n, k (all combinations); empty: default
  // Grid of grouped expert GEMMs (gemm_bench.cu): "full", "quick" or "none"; empty: quick
  // with --quick, else full. A Program's grouped GEMMs are timed whatever it says.
  std::string grouped_grid;
  std::string program_file;  // --program: GEMM shapes of a Program (stepcast lower);
                             // its batch > 1 GEMMs are timed as grouped GEMMs
  double min_bytes = 1024;   // collective sizes, doubling (or x4 with --quick)
  double max_bytes = 4.0 * 1024 * 1024 * 1024;
  double size_factor = 2;
  std::vector<int> group_sizes = {2, 4, 8};  // single-process communicators (<= GPUs)
  std::vector<std::string> ops = {"allreduce",  "reduce_scatter", "allgather",
                                  "all_to_all", "broadcast",      "send_recv"};
  std::string algo;    // --algo ring|tree|nvls|...: sets NCCL_ALGO; empty: default
  int device = 0;      // GPU for single-GPU benchmarks
  std::string source;  // free text stored in the file's "source"
};

struct GemmShapeSpec {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  std::string dtype = "bf16";
  std::string origin = "grid";  // "grid" or "program"
  // "": D[m,n] = A[m,k] B[k,n] as cuBLAS NN (column-major). A Program phase ("fwd",
  // "bwd_input", "bwd_weight", ...): the task's C[m,n] = A[m,k] B[k,n] (row-major, the
  // simulator's shape) called as Transformer Engine calls it in that phase (cublas_gemm).
  std::string phase;
};

// The cuBLAS call of a shape: D[m,n] = op(A)[m,k] op(B)[k,n], column-major, `layout` the ops
// of A and B. For a Program phase, as transformer_engine/pytorch/module/linear.py calls
// general_gemm: forward and recompute (weight, input, "TN") and input gradient (weight,
// grad_output, "NN") put the weight first, D[n,m]; weight gradient (input, grad_output,
// "NT") gives D[m,n]. Other phases run as forward. fp8 runs TN whatever this says
// (GemmRunner: cuBLASLt's fp8 kernels on Ada and Hopper take A transposed and B not, which
// is why Transformer Engine keeps transposed fp8 copies).
struct CublasGemm {
  std::int64_t m = 0, n = 0;
  std::string layout = "NN";
};
inline CublasGemm cublas_gemm(const GemmShapeSpec& s) {
  if (s.phase.empty()) return {s.m, s.n, "NN"};
  if (s.phase == "bwd_weight") return {s.m, s.n, "NT"};
  return {s.n, s.m, s.phase == "bwd_input" ? "NN" : "TN"};
}

// One GEMM, or a grouped expert GEMM as Transformer Engine runs it (GroupedGemmRunner:
// shape.batch groups of [m, n, k] in shape.phase, timed from the fork to the join).
struct GemmResult {
  GemmShapeSpec shape;
  std::string layout;  // cuBLAS ops of A and B as run: "NN", "NT" or "TN"
  double time_us = 0;  // median over repeats (CUDA events)
  double flop_per_s = 0;
  int repeats = 0;
  int streams = 1;  // grouped: the streams its groups were spread over
};

struct MemoryResult {
  std::string kernel;  // "copy" | "adam"
  double bytes_read = 0, bytes_written = 0;
  double time_us = 0;
  double bytes_per_s = 0;  // (bytes_read + bytes_written) / time
};

struct CollectiveResult {
  std::string op;
  int ranks = 0, nodes = 1;
  std::string algo;  // "default" or the pinned NCCL_ALGO
  std::string dtype = "fp32";
  double size_bytes = 0;  // S as nccl-tests counts it
  double time_us = 0;
  double algbw_GBps = 0, busbw_GBps = 0;
};

// Device memory NCCL held per GPU for one communicator over the sweep: in use after it (the
// sweep's data buffers freed) minus in use before the communicator was created, the largest
// over its GPUs.
struct CommunicatorResult {
  int ranks = 0, nodes = 1;
  std::string algo;  // "default" or the pinned NCCL_ALGO
  double bytes_per_gpu = 0;
};

struct OverlapResult {
  GemmShapeSpec gemm;
  int ranks = 0;
  double allreduce_size_bytes = 0;
  double gemm_alone_time_us = 0;
  double gemm_overlapped_time_us = 0;
  double allreduce_alone_time_us = 0;
};

struct Results {
  std::vector<GemmResult> gemm;
  std::vector<GemmResult> grouped_gemm;  // grouped expert GEMMs (shape.batch: groups)
  std::vector<MemoryResult> memory;
  double launch_overhead_us = -1;  // < 0: not measured
  // Device memory in use when the memory benchmark starts, before it allocates anything
  // (cudaMemGetInfo total - free): the CUDA context, the modules loaded so far and any other
  // process on the GPU. < 0: not measured.
  double context_memory_bytes = -1;
  std::vector<CollectiveResult> collectives;
  std::vector<CommunicatorResult> communicators;  // single-process groups only
  std::vector<OverlapResult> overlap;
  std::vector<std::string> notes;  // skipped parts and why
  int processes = 1;               // MPI processes (one GPU each) or 1
  int nodes = 1;                   // distinct nodes under MPI
};

// Subcommands (gemm_bench.cu, memory_bench.cu, nccl_bench.cu, overlap_bench.cu).
void run_gemm(const Options& opt, Results& out);
void run_memory(const Options& opt, Results& out);
void run_nccl(const Options& opt, Results& out);
void run_overlap(const Options& opt, Results& out);

// GEMM shapes listed in a Program JSON (any object with integer m, n, k that is the value
// of a "gemm" key or has "kind": "gemm"); duplicates removed. Throws BenchError.
std::vector<GemmShapeSpec> program_gemm_shapes(const std::string& path);

// The software a measurement ran on, for the provenance of stepcast-bench and stepcast-exec:
// CUDA driver and runtime versions (12040 = 12.4), NCCL's (22602 = 2.26.2), cuBLASLt's and
// the host name (versions.cu).
struct SoftwareVersions {
  int cuda_driver = 0, cuda_runtime = 0, nccl = 0;
  std::int64_t cublaslt = 0;
  std::string hostname;
};
SoftwareVersions software_versions();
std::string utc_now();  // "2026-12-03T01:02:03Z"

// Writes the measurements file with provenance (provenance.cu).
void write_measurements(const std::string& path, const Options& opt, const Results& r,
                        const std::vector<std::string>& subcommands);

// nccl-tests bus bandwidth factor (nccl-tests doc/PERFORMANCE.md): busbw = algbw * factor.
double busbw_factor(const std::string& op, int ranks);

double median(std::vector<double> v);

}  // namespace stepcast::bench
