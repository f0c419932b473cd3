// Hardware profiles built in code for the cost/network tests (the shipped YAML profiles are
// loaded and checked by tests/sim/cluster). Numbers and sources:
//  - peaks: NVIDIA datasheets (A100 SXM bf16 312 TFLOP/s; H100 SXM bf16 989.4, fp8 1978.9
//    dense); HBM 2.039 TB/s (A100 80GB), 3.35 TB/s (H100); SMs 108 / 132.
//  - collectives: docs/model.md "Collectives and network" measured busbw (A100 232 GB/s ring; H100
//  370 ring, 480 NVLS;
//    HDR 24 GB/s and NDR 48 GB/s per NIC); A100 send/recv 195 GB/s
//    (tests/data/measured/nccl_sendrecv_8xA100_1node_liplus.csv, 1 GiB row).
//  - compute: the fit of tests/data/measured/fit_cost_params.py (see compute.cc).
#pragma once

#include "model/units.h"
#include "sim/cluster/profile.h"

namespace stepcast::testing {

inline HwProfile h100_profile() {
  HwProfile hw;
  hw.name = "test-h100";
  hw.gpu.name = "H100 SXM";
  hw.gpu.memory_bytes = 80 * kGiB;
  hw.gpu.hbm_bytes_per_s = 3.35e12;
  hw.gpu.sms = 132;
  hw.gpu.peak_flop_per_s = {{DType::kBf16, 989.4e12},
                            {DType::kFp16, 989.4e12},
                            {DType::kFp8, 1978.9e12},
                            {DType::kFp32, 494.7e12}};
  hw.node.gpus = 8;
  hw.node.nvlink_bytes_per_s = 450e9;
  hw.node.nvswitch = true;
  hw.node.nvls = true;
  hw.node.nics = 8;
  hw.node.nic_bytes_per_s = 50e9;
  // GEMM: fitted to XLA sm_90 bf16 table + MAMF anchor (compute.cc header).
  hw.compute.gemm_max_eff = 0.880;
  hw.compute.gemm_half_m = 107;
  hw.compute.gemm_half_n = 58;
  hw.compute.gemm_half_k = 109;
  hw.compute.gemm_fixed_time_s = 5.8e-6;
  hw.compute.fp8_max_eff = 0.70;  // cuBLASLt fp8 32768^3: 1382.2 / 1978.9 = 0.698
  // Attention: FA3 paper Fig.5/6 FlashAttention-3 fit.
  hw.compute.attn_fwd_eff = 0.919;
  hw.compute.attn_bwd_eff = 0.823;
  hw.compute.attn_half_seq = 358;
  hw.compute.attn_half_head_dim = 47.1;
  hw.compute.membound_eff = 0.85;
  hw.compute.launch_overhead_s = 4e-6;
  hw.compute.comm_sms = 16;
  hw.collectives.nccl_version = "2.21";
  hw.collectives.intra_ring_busbw = 370e9;
  hw.collectives.nvls_busbw = 480e9;
  hw.collectives.nic_busbw = 48e9;
  hw.collectives.p2p_intra_bw = 0;  // falls back to intra_ring_busbw
  return hw;
}

inline HwProfile a100_profile() {
  HwProfile hw = h100_profile();
  hw.name = "test-a100";
  hw.gpu.name = "A100 SXM 80GB";
  hw.gpu.hbm_bytes_per_s = 2.039e12;
  hw.gpu.sms = 108;
  hw.gpu.peak_flop_per_s = {{DType::kBf16, 312e12}, {DType::kFp16, 312e12}, {DType::kFp32, 156e12}};
  hw.node.nvlink_bytes_per_s = 300e9;
  hw.node.nvls = false;
  hw.node.nic_bytes_per_s = 25e9;
  // GEMM: H100 shape terms, max_eff and fixed time fitted to cuBLASLt A100 fp16 (8 shapes).
  hw.compute.gemm_max_eff = 0.815;
  hw.compute.gemm_fixed_time_s = 8.05e-6;
  hw.collectives.intra_ring_busbw = 232e9;
  hw.collectives.nvls_busbw = 0;
  hw.collectives.nic_busbw = 24e9;
  hw.collectives.p2p_intra_bw = 195e9;
  return hw;
}

// The H100 test profile with pods of `pod_gpus` GPUs and `oversub`:1 oversubscription above
// them (0: one pod).
inline HwProfile podded(int pod_gpus, double oversub) {
  HwProfile hw = h100_profile();
  hw.fabric.pod_gpus = pod_gpus;
  hw.fabric.oversubscription = oversub;
  return hw;
}

}  // namespace stepcast::testing
