#!/usr/bin/env python3
"""Converts published microbenchmark tables (tests/data/measured/) into stepcast measurements files (schema
"stepcast.measurements/1") for the calibration tests. Numbers are copied as published; the
only derived values are times computed from published FLOP/s (XLA, Azure GEMM tables:
time_us = 2*b*m*n*k / flop_per_s) and the XLA collectives' runtime (already derived in the
CSV). Every file records its source (repository, file, commit) in "source".

Usage: convert_measured.py tests/data/measured OUT_DIR
"""
import csv
import json
import os
import sys


def rows(path):
    with open(path) as f:
        lines = [l for l in f if not l.startswith("#")]
    return list(csv.DictReader(lines))


def header_comments(path):
    with open(path) as f:
        return [l[1:].strip() for l in f if l.startswith("#")]


def doc(source, gpu_name, gpu_count, nccl_version="", hostname="", date_utc=""):
    prov = {"gpu_name": gpu_name, "gpu_count": gpu_count, "nodes": 1}
    if nccl_version:
        prov["nccl_version"] = nccl_version
    if hostname:
        prov["hostname"] = hostname
    if date_utc:
        prov["date_utc"] = date_utc
    return {"schema": "stepcast.measurements/1", "source": source, "provenance": prov,
            "gemm": [], "collectives": []}


def nccl_tests_rows(path, op, ranks, algo, out):
    """nccl-tests columns: both out-of-place and in-place results become points."""
    for r in rows(path):
        size = int(r["size_bytes"])
        if size == 0:
            continue
        for prefix, in_place in (("oop_", False), ("ip_", True)):
            out.append({"op": op, "ranks": ranks, "nodes": 1, "algo": algo, "dtype": "fp32",
                        "size_bytes": size, "time_us": float(r[prefix + "time_us"]),
                        "algbw_GBps": float(r[prefix + "algbw_GBps"]),
                        "busbw_GBps": float(r[prefix + "busbw_GBps"]), "in_place": in_place})


def write(out_dir, name, d):
    with open(os.path.join(out_dir, name), "w") as f:
        json.dump(d, f, indent=1)
        f.write("\n")
    print("wrote", name, len(d["gemm"]), "gemm,", len(d["collectives"]), "collective points")


def main(src, out):
    together = ("github.com/togethercomputer/together-nccl-tests benchmarks/H100/results "
                "(all_reduce_ring.out commit c9a53f3, all_gather_ring.out and "
                "reduce_scatter_ring.out commit 6698e53); nccl-tests 2.17.9, NCCL 2.26.2, "
                "single node 8x H100 80GB HBM3 SXM; via tests/data/measured/"
                "nccl_{allreduce_8xH100_1node_NVLSoff,allgather_8xH100_1node,"
                "reducescatter_8xH100_1node}_ring_together.csv")
    # Hosts: all_gather/reduce_scatter ran on gpu-dp-2jvzl-pqq7p; the allreduce file interleaves
    # two independent single-node runs (pqq7p and ddjjs), so the host is left out.
    d = doc(together, "NVIDIA H100 80GB HBM3", 8, "2.26.2", "", "2026-03-05")
    nccl_tests_rows(os.path.join(src, "nccl_allreduce_8xH100_1node_NVLSoff_ring_together.csv"),
                    "allreduce", 8, "ring", d["collectives"])
    nccl_tests_rows(os.path.join(src, "nccl_allgather_8xH100_1node_ring_together.csv"),
                    "allgather", 8, "ring", d["collectives"])
    nccl_tests_rows(os.path.join(src, "nccl_reducescatter_8xH100_1node_ring_together.csv"),
                    "reduce_scatter", 8, "ring", d["collectives"])
    write(out, "h100_together_nccl_ring.json", d)

    d = doc("github.com/togethercomputer/together-nccl-tests benchmarks/H100/results/"
            "20260306_001221_slurm/all_reduce_nvls.out commit c9a53f3 (NCCL_NVLS_ENABLE=1, "
            "NCCL_ALGO unset; two independent single-node runs interleaved); nccl-tests 2.17.9, "
            "NCCL 2.26.2; via tests/data/measured/"
            "nccl_allreduce_8xH100_1node_NVLSon_together.csv",
            "NVIDIA H100 80GB HBM3", 8, "2.26.2", "", "2026-03-06")
    nccl_tests_rows(os.path.join(src, "nccl_allreduce_8xH100_1node_NVLSon_together.csv"),
                    "allreduce", 8, "default", d["collectives"])
    write(out, "h100_together_allreduce_nvls.json", d)

    d = doc("github.com/stas00/ml-engineering network/README.md (commit 744d01e), "
            "all_reduce_perf -b 32k -e 16G -f 2 -g 8, 8x A100 SXM, NCCL version not printed; "
            "via tests/data/measured/nccl_allreduce_8xA100_1node_stas00.csv",
            "NVIDIA A100-SXM4", 8)
    for r in rows(os.path.join(src, "nccl_allreduce_8xA100_1node_stas00.csv")):
        d["collectives"].append({"op": "allreduce", "ranks": 8, "nodes": 1, "algo": "default",
                                 "dtype": "fp32", "size_bytes": int(r["size_bytes"]),
                                 "time_us": float(r["time_us"]),
                                 "algbw_GBps": float(r["algbw_GBps"]),
                                 "busbw_GBps": float(r["busbw_GBps"])})
    write(out, "a100_stas00_allreduce.json", d)

    d = doc("openxla/xla xla/service/gpu/model/collective_interpolator_data.h, key sm_90 "
            "(via github.com/ROCm/xla commit d02afb4), 8 devices = one 8-GPU Hopper node, F32; "
            "time = tensor bytes / published throughput (runtime_us_derived); groups of 8, 4 "
            "and 2 run side by side (2x4, 4x2); via tests/data/measured/"
            "xla_collectives_perf_table_sm90_8gpu.csv",
            "NVIDIA H100 (XLA table key sm_90; SKU not stated)", 8)
    ops = {"all-reduce": "allreduce", "all-gather": "allgather",
           "reduce-scatter": "reduce_scatter", "all-to-all": "all_to_all"}
    for r in rows(os.path.join(src, "xla_collectives_perf_table_sm90_8gpu.csv")):
        if r["op"] not in ops:
            continue
        d["collectives"].append({"op": ops[r["op"]], "ranks": int(r["devices_per_group"]),
                                 "nodes": 1, "algo": "default", "dtype": "fp32",
                                 "size_bytes": int(r["tensor_size_bytes_derived"]),
                                 "time_us": float(r["runtime_us_derived"])})
    write(out, "h100_xla_collectives.json", d)

    d = doc("openxla/xla xla/service/gpu/model/matmul_interpolator_data.h, key sm_90 (via "
            "github.com/ROCm/xla commit d02afb4), bf16 x bf16 -> bf16, batched GEMM "
            "b x (m x k) @ (k x n); time_us = 2*b*m*n*k / published FLOP/s; via "
            "tests/data/measured/gemm_xla_perf_table_sm90_bf16_fp32_fp8.csv",
            "NVIDIA H100 (XLA table key sm_90; SKU not stated)", 1)
    for r in rows(os.path.join(src, "gemm_xla_perf_table_sm90_bf16_fp32_fp8.csv")):
        b, m, n, k = (int(r[c]) for c in ("b", "m", "n", "k"))
        fl = float(r["flops_bf16xbf16_to_bf16"])
        d["gemm"].append({"m": m, "n": n, "k": k, "batch": b, "dtype": "bf16",
                          "time_us": 2.0 * b * m * n * k / fl * 1e6, "flop_per_s": fl})
    write(out, "h100_xla_gemm_bf16.json", d)

    d = doc("github.com/Azure/AI-benchmarking-guide Azure_Results/ND_H100_v5 results "
            "(commit 8fd0c6e), cuBLASLt FP8 GEMM TFLOPS, single GPU; time_us = 2*m*n*k / "
            "published FLOP/s; via tests/data/measured/"
            "gemm_cublaslt_azure_ND_A100v4_fp16_H100v5_H200v5_fp8.csv",
            "NVIDIA H100 80GB HBM3", 1)
    for r in rows(os.path.join(src, "gemm_cublaslt_azure_ND_A100v4_fp16_H100v5_H200v5_fp8.csv")):
        if r["gpu"] != "H100":
            continue
        m, n, k = (int(r[c]) for c in ("m", "n", "k"))
        fl = float(r["tflops"]) * 1e12
        d["gemm"].append({"m": m, "n": n, "k": k, "batch": 1, "dtype": "fp8",
                          "time_us": 2.0 * m * n * k / fl * 1e6, "flop_per_s": fl})
    write(out, "h100_azure_gemm_fp8.json", d)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
