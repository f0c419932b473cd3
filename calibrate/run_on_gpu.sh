#!/usr/bin/env bash
# Builds stepcast-bench on a GPU box that has only the CUDA toolkit (with NCCL), CMake and a
# C++ compiler (standalone build of calibrate/bench), runs a short sweep (a few minutes on
# one 8-GPU node) and writes OUTDIR/measurements.json (plus OUTDIR/bench.log). Then builds
# the reference executor (calibrate/exec) the same way and runs the validation loop on the
# scenarios of tests/data/exec: lower (full fidelity), predict, execute, validate — the 1-GPU
# ones always (tiny_1gpu, and mcore_1.7B_1gpu: one GPU's share of the Megatron-Core 1.7B
# validation case, docs/accuracy.md), the 8-GPU one with 8+ GPUs — into OUTDIR/exec/. Unless
# PROGRAM is given, the GEMM sweep also times the exact GEMM shapes of mcore_1.7B_1gpu.
# Usage: calibrate/run_on_gpu.sh OUTDIR [extra stepcast-bench options...]
# Environment: BUILD_DIR (default OUTDIR/build), CUDA_ARCH (default 90: H100/H200; `native`
#              needs CMake >= 3.24),
#              PROGRAM (a Program JSON whose GEMM shapes to time too),
#              STEPCAST (the stepcast binary for lower/run/validate; default build/stepcast;
#              tools/stepcast is not tried: it may run the dependency installer on a box
#              without package access), BENCH=0 / EXEC=0 (skip a part),
#              LOWERED=DIR (the cases' CASE.program.json and CASE.predicted.json, made
#              elsewhere with LOWER_ONLY=1: for a GPU box where the stepcast CLI cannot be
#              built, e.g. one without yaml-cpp or network; validate then runs back there:
#              stepcast validate CASE.predicted.json CASE.measured.json),
#              LOWER_ONLY=1 (on any machine: only lower and predict the cases into
#              OUTDIR/exec, then stop; needs the stepcast CLI, no GPU).
# A failed sweep or case is reported and the script goes on to the next (GPU time is scarce);
# it exits 1 at the end if any failed.
set -euo pipefail
failed=0
if [[ $# -lt 1 ]]; then
  echo "usage: $0 OUTDIR [stepcast-bench options...]" >&2
  exit 2
fi
outdir=$1
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
build=${BUILD_DIR:-$outdir/build}
arch=${CUDA_ARCH:-90}
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
jobs=$(nproc 2>/dev/null || echo 4)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

# build_standalone SRC DIR: configure and build a calibrate/ program on its own; returns 1
# (and the script goes on with the other part) when it fails.
build_standalone() {
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    >>"$outdir/cmake.log" 2>&1 || { tail -n 30 "$outdir/cmake.log" >&2; return 1; }
  cmake --build "$2" -j "$jobs" >>"$outdir/cmake.log" 2>&1 ||
    { tail -n 30 "$outdir/cmake.log" >&2; return 1; }
}

# The stepcast CLI, for lowering Programs and the validation loop (docs/calibration.md).
# Only an explicit STEPCAST or a ready build/stepcast: tools/stepcast builds the CLI and may
# run the dependency installer, minutes lost (or a hang) on a box without package access.
stepcast=${STEPCAST:-}
if [[ -z $stepcast && -x $root/build/stepcast ]]; then stepcast=$root/build/stepcast; fi
export STEPCAST_PROFILES=${STEPCAST_PROFILES:-$root/hw_profiles}
mkdir -p "$outdir/exec"
# lower_case CASE: tests/data/exec/CASE.yaml lowered (full fidelity) and predicted into
# OUTDIR/exec/CASE.{program,predicted}.json, once per run (the bench lowers mcore_1.7B_1gpu
# for its GEMM shapes before the executor loop needs it).
declare -A lowered_now=()
lower_case() {
  [[ -z ${lowered_now[$1]:-} ]] || return 0
  "$stepcast" lower "$root/tests/data/exec/$1.yaml" --fidelity full \
    -o "$outdir/exec/$1.program.json" &&
    "$stepcast" run "$root/tests/data/exec/$1.yaml" --json "$outdir/exec/$1.predicted.json" \
      >/dev/null &&
    lowered_now[$1]=1
}
lowered=${LOWERED:-}
if [[ -n $lowered ]]; then lowered=$(cd "$lowered" && pwd); fi
all_cases=(tiny_1gpu tiny_8gpu mcore_1.7B_1gpu)

if [[ ${LOWER_ONLY:-0} != 0 ]]; then
  [[ -n $stepcast ]] || { echo "LOWER_ONLY needs the stepcast CLI (set STEPCAST=...)" >&2; exit 2; }
  for c in "${all_cases[@]}"; do lower_case "$c"; done
  echo "wrote $outdir/exec/: carry it to the GPU box and run LOWERED=<it> $0 OUTDIR there"
  exit 0
fi

if [[ ${BENCH:-1} != 0 ]] && ! build_standalone "$here/bench" "$build"; then
  echo "building stepcast-bench failed (see $outdir/cmake.log); going on" >&2
  failed=1
elif [[ ${BENCH:-1} != 0 ]]; then
  extra=()
  program=${PROGRAM:-}
  if [[ -z $program && -n $lowered && -f $lowered/mcore_1.7B_1gpu.program.json ]]; then
    program=$lowered/mcore_1.7B_1gpu.program.json
  elif [[ -z $program && -n $stepcast ]]; then
    program=$outdir/exec/mcore_1.7B_1gpu.program.json
    if ! lower_case mcore_1.7B_1gpu; then
      echo "lowering mcore_1.7B_1gpu failed: the sweep runs without its GEMM shapes" >&2
      program=
    fi
  fi
  if [[ -n $program ]]; then extra+=(--program "$program"); fi
  subs=(gemm memory)
  if [[ $ngpu -ge 2 ]]; then subs+=(nccl overlap); fi
  # Quick sweep: GEMM grid 512/2048/8192 (x3 dtypes), memory 1 MiB..1 GiB, collectives
  # 1 KiB..1 GiB in x4 steps over 2/4/8 GPUs.
  rc=0
  "$build/stepcast-bench" "${subs[@]}" --quick --repeats 10 --max-bytes 1073741824 \
    --source "calibrate/run_on_gpu.sh on $(hostname)" ${extra[@]+"${extra[@]}"} "$@" \
    -o "$outdir/measurements.json" 2>&1 | tee "$outdir/bench.log" || rc=$?
  if [[ $rc -eq 0 ]]; then
    echo "wrote $outdir/measurements.json"
  else
    echo "stepcast-bench failed (exit $rc, see $outdir/bench.log); going on" >&2
    failed=1
  fi
fi

[[ ${EXEC:-1} != 0 ]] || exit $failed
if [[ -z $stepcast && -z $lowered ]]; then
  echo "stepcast CLI not available (set STEPCAST=... or LOWERED=...): executor loop skipped" >&2
  exit $failed
fi
if ! build_standalone "$here/exec" "$build-exec"; then
  echo "building stepcast-exec failed (see $outdir/cmake.log)" >&2
  exit 1
fi
cases=(tiny_1gpu)
if [[ $ngpu -ge 8 ]]; then cases+=(tiny_8gpu); fi
cases+=(mcore_1.7B_1gpu)  # last: it needs ~53 GB of GPU memory (exit 3 where it does not fit)
for c in "${cases[@]}"; do
  o=$outdir/exec/$c
  rc=0
  if [[ -n $lowered ]]; then
    cp "$lowered/$c.program.json" "$o.program.json" || rc=$?
    [[ $rc -ne 0 ]] || cp "$lowered/$c.predicted.json" "$o.predicted.json" || rc=$?
  else
    lower_case "$c" || rc=$?
  fi
  if [[ $rc -eq 0 ]]; then
    "$build-exec/stepcast-exec" "$o.program.json" --warmup 2 --timeline -o "$o.measured.json" \
      2>&1 | tee "$o.exec.log" || rc=$?
  fi
  if [[ $rc -eq 0 && -z $stepcast ]]; then
    echo "$c: measured; validate it where stepcast runs: stepcast validate" \
      "$c.predicted.json $c.measured.json" >&2
  elif [[ $rc -eq 0 ]]; then
    "$stepcast" validate "$o.predicted.json" "$o.measured.json" | tee "$o.validate.txt" || rc=$?
  fi
  if [[ $rc -ne 0 ]]; then
    echo "$c: failed (exit $rc; 3 = does not fit in GPU memory); going on" >&2
    failed=1
  fi
done
echo "wrote $outdir/exec/"
exit $failed
