#!/usr/bin/env bash
# Builds stepcast-bench on a GPU box that has only the CUDA toolkit (with NCCL), CMake and a
# C++ compiler (standalone build of calibrate/bench), runs a short sweep (a few minutes on
# one 8-GPU node) and writes OUTDIR/measurements.json (plus OUTDIR/bench.log).
# Usage: calibrate/run_on_gpu.sh OUTDIR [extra stepcast-bench options...]
# Environment: BUILD_DIR (default OUTDIR/build), CUDA_ARCH (default: native GPUs),
#              PROGRAM (a Program JSON whose GEMM shapes to time too).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 OUTDIR [stepcast-bench options...]" >&2
  exit 2
fi
outdir=$1
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
build=${BUILD_DIR:-$outdir/build}
arch=${CUDA_ARCH:-native}
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
jobs=$(nproc 2>/dev/null || echo 4)
cmake -S "$here/bench" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" >"$outdir/cmake.log" 2>&1 ||
  { tail -n 30 "$outdir/cmake.log" >&2; exit 1; }
cmake --build "$build" -j "$jobs" >>"$outdir/cmake.log" 2>&1 ||
  { tail -n 30 "$outdir/cmake.log" >&2; exit 1; }

extra=()
if [[ -n "${PROGRAM:-}" ]]; then extra+=(--program "$PROGRAM"); fi
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
subs=(gemm memory)
if [[ $ngpu -ge 2 ]]; then subs+=(nccl overlap); fi
# Quick sweep: GEMM grid 512/2048/8192 (x3 dtypes), memory 1 MiB..1 GiB, collectives
# 1 KiB..1 GiB in x4 steps over 2/4/8 GPUs.
"$build/stepcast-bench" "${subs[@]}" --quick --repeats 10 --max-bytes 1073741824 \
  --source "calibrate/run_on_gpu.sh on $(hostname)" "${extra[@]}" "$@" \
  -o "$outdir/measurements.json" 2>&1 | tee "$outdir/bench.log"
echo "wrote $outdir/measurements.json"
