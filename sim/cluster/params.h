// Parameters of the cost models, as read from a hardware profile's `compute:` and
// `collectives:` sections. Owned by sim/cost: the profile loader (sim/cluster) hands those
// two YAML sections to parse_compute_params / parse_collective_params.
// Every number carries its source in the profile YAML comments.
//
// YAML keys (profile sections; every key optional, defaults below; units strict):
//   compute:
//     gemm: {max_efficiency: 0.80, half_m: 64, half_n: 64, half_k: 64,
//            fp8_max_efficiency: 0.70, grouped_efficiency: 1.0}
//     attention: {fwd_efficiency: 0.60, bwd_efficiency: 0.50, half_seq: 256}
//     memory_bound_efficiency: 0.85
//     launch_overhead: 4 us
//     comm_sms: 16
//     gemm_table: [{m: 8192, n: 8192, k: 8192, dtype: bf16, throughput: 780 TFLOP/s}]
//     source: "where the numbers come from"
//   collectives:
//     nccl_version: "2.21"
//     intra_ring_busbw: 370 GB/s
//     nvls_busbw: 480 GB/s          # omit or 0 GB/s: no NVLS
//     nic_busbw: 48 GB/s
//     p2p_intra_bw: 150 GB/s
//     calibrated: [{op: allreduce, ranks: 8, nodes: 1, min_size: 1 MB, max_size: 4 GB,
//                   latency: 20 us, busbw: 360 GB/s, source: "..."}]
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "model/workload.h"
#include "sim/io/yaml_util.h"

namespace stepcast {

// A measured GEMM point (calibration table); overrides the parametric curve near it.
struct GemmPoint {
  std::int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::kBf16;
  double flop_per_s = 0;
  bool operator==(const GemmPoint&) const = default;
};

struct ComputeParams {
  // GEMM efficiency vs shape (fraction of the dtype's datasheet peak):
  //   eff(m,n,k) = gemm_max_eff * m/(m+gemm_half_m) * n/(n+gemm_half_n) * k/(k+gemm_half_k)
  // fitted to the measured tables in tests/data/measured/.
  double gemm_max_eff = 0.8;
  double gemm_half_m = 64, gemm_half_n = 64, gemm_half_k = 64;
  double fp8_max_eff = 0.7;  // fp8 GEMM efficiency ceiling (of the fp8 peak)
  // fp8's own half-saturation sizes (YAML compute.gemm.fp8_half_m/n/k), where its kernels
  // tile differently from 16-bit ones; negative: the 16-bit gemm_half_m/n/k (the default).
  // fp8 GEMMs measured on an H200 fit M 40, n 108, k 443 against 14, 70, 146 for bf16.
  double fp8_half_m = -1, fp8_half_n = -1, fp8_half_k = -1;
  // Whether the profile has any fp8 half size of its own.
  bool has_fp8_halves() const { return fp8_half_m >= 0 || fp8_half_n >= 0 || fp8_half_k >= 0; }
  // The half-saturation sizes {m, n, k} a GEMM's curve uses: for a narrow (fp8) GEMM fp8's
  // own where the profile has them, each missing one the 16-bit size.
  std::array<double, 3> gemm_halves(bool narrow) const {
    auto pick = [narrow](double fp8, double main) { return narrow && fp8 >= 0 ? fp8 : main; };
    return {pick(fp8_half_m, gemm_half_m), pick(fp8_half_n, gemm_half_n),
            pick(fp8_half_k, gemm_half_k)};
  }
  // Fixed kernel time of one GEMM (ramp-up/tail; kernel-timed, on top of launch_overhead_s):
  //   t_kernel = flops / (peak * eff(m,n,k)) + gemm_fixed_time_s   (sim/cost/compute.cc).
  // YAML: compute.gemm.fixed_time (a time). 0: none.
  double gemm_fixed_time_s = 0;
  // Efficiency factor of a GEMM with a leading dimension that is not a multiple of 16 bytes
  // of its dtype (8 bf16/fp16 elements, 16 fp8, 4 fp32): cuBLAS cannot use its aligned
  // tensor-core kernels (sim/cost/compute.cc says which dimensions lead per layout).
  // YAML: compute.gemm.unaligned_efficiency (a fraction). 1: no penalty.
  double gemm_unaligned_eff = 1.0;
  // Grouped expert GEMMs (a GEMM task with batch > 1: Transformer Engine's GroupedLinear,
  // one cuBLAS GEMM per local expert over 4 streams) run at this factor of the time the
  // dense curve gives them (sim/cost/compute.cc, grouped_gemm_kernel_time_s): their FLOP
  // time is divided by it. 1: exactly TE's per-expert GEMMs at the dense curve, nothing
  // more. `stepcast fit` fits it on grouped-GEMM measurements (calibrate/fit/fit_grouped.cc).
  // YAML: compute.gemm.grouped_efficiency (a number in (0, 2]).
  double gemm_grouped_eff = 1.0;
  // Attention (flash) efficiency of the bf16 peak, forward and backward, and the sequence
  // length at which it reaches half of it.
  double attn_fwd_eff = 0.6, attn_bwd_eff = 0.5, attn_half_seq = 256;
  // Head-dim saturation: efficiency is multiplied by d/(d + attn_half_head_dim).
  // YAML: compute.attention.half_head_dim (a number). 0: no head-dim effect.
  double attn_half_head_dim = 0;
  // Attention kernel the software stack runs: flash (default) or unfused (Megatron-LM
  // before 2022). YAML: compute.attention.kernel: flash | unfused.
  bool attn_flash = true;
  // Tensor-core rate sustained during training relative to the rate the kernel efficiencies
  // were measured at (isolated microbenchmarks at boost clocks): power-capped clocks under
  // all-GPU load run below boost. Multiplies GEMM and attention rates. YAML:
  // compute.sustained_clock (a fraction in (0, 1]). Default 1.
  double sustained_clock = 1.0;
  double membound_eff = 0.85;       // fraction of HBM bandwidth memory-bound kernels reach
  double launch_overhead_s = 4e-6;  // per kernel
  int comm_sms = 16;                // SMs a communication kernel holds (SM interference)
  std::vector<GemmPoint> gemm_table;
  std::string source;
  bool operator==(const ComputeParams&) const = default;
};

enum class CollAlgo { kRing, kTree, kNvls, kNvlsTree, kPat, kDirect };
enum class CollProto { kLL, kLL128, kSimple };
// YAML names of CollAlgo, in enum order: ring tree nvls nvls_tree pat direct (as
// sim/cost/cost.h algo_name prints them).
const std::vector<std::string>& collective_algorithm_names();
CollAlgo collective_algorithm(const std::string& name);  // one of the names above

// A calibrated collective entry: for op run with algorithm `algo` on a group shape (ranks,
// nodes) and sizes in [min_bytes, max_bytes], time = latency_s + bytes * busbw_factor / busbw.
// Applies only where the model picks that algorithm (sim/cost/collective.cc).
struct CollectiveCalib {
  std::string op;  // allreduce | reduce_scatter | allgather | all_to_all | broadcast | send_recv
  CollAlgo algo = CollAlgo::kRing;  // YAML `algorithm` (collective_algorithm_names)
  int ranks = 0, nodes = 0;
  double min_bytes = 0, max_bytes = 0;
  double latency_s = 0, busbw_bytes_per_s = 0;
  std::string source;
  bool operator==(const CollectiveCalib&) const = default;
};

// Device memory NCCL holds on each GPU for one communicator of `ranks` GPUs over `nodes`
// nodes (its channels' connection buffers, established as the collectives first run),
// measured by stepcast-bench nccl (cudaMemGetInfo around a communicator's life, its data
// buffers excluded) and written by `stepcast fit`. YAML collectives.communicator_memory:
// [{ranks, nodes, memory, source}].
struct CommunicatorMemory {
  int ranks = 0, nodes = 0;
  double bytes = 0;
  std::string source;
  bool operator==(const CommunicatorMemory&) const = default;
};

struct CollectiveParams {
  std::string nccl_version = "2.21";  // version whose constants the model uses
  // Effective (bus) bandwidths the algorithms reach, measured (docs/model.md "Collectives and
  // network"):
  double intra_ring_busbw = 0;  // one-node ring allreduce busbw (A100 230 GB/s, H100 370)
  double nvls_busbw = 0;        // one-node NVLS allreduce busbw (H100 480); 0: no NVLS
  double nic_busbw = 0;         // per NIC effective (HDR 24 GB/s, NDR 48 GB/s)
  double p2p_intra_bw = 0;      // send/recv over NVLink, bytes/s
  // Host/launch latency added to every collective and send/recv on top of NCCL's own
  // latency table (docs/model.md, "Pitfalls the model accounts for" 3: small-message latency
  // depends on CUDA graphs). nccl-tests without graphs floor at ~35 us on 8xH100 where the table
  // gives 10.8 us. YAML: collectives.launch_overhead (a time). Default 0 (graph-captured launches).
  double launch_overhead_s = 0;
  std::vector<CollectiveCalib> calibrated;
  // Empty (the default): NCCL's buffers are not counted (no measured source in
  // tests/data/measured/).
  std::vector<CommunicatorMemory> communicator_memory;
  bool operator==(const CollectiveParams&) const = default;
};

// The memory of a communicator of this shape from collectives.communicator_memory: the entry
// of the same ranks and nodes; else the largest of the entries on one node (nodes == 1) or
// on several (nodes > 1), as the shape is; else the largest of all; 0 when there are none.
// Unmeasured shapes take the largest measured one: a reserve is better over than under.
double communicator_memory_bytes(const CollectiveParams& c, int ranks, int nodes);

void parse_compute_params(YamlReader& r, const YAML::Node& node, const std::string& path,
                          ComputeParams& out);
void parse_collective_params(YamlReader& r, const YAML::Node& node, const std::string& path,
                             CollectiveParams& out);

}  // namespace stepcast
