#!/usr/bin/env bash
# GPU test (CTest label "gpu"): runs a tiny stepcast-bench sweep and checks that the fit's
# strict loader accepts its output and that a profile can be fitted from it. Exit 77
# (skipped) when no GPU is usable.
# Usage: bench_gpu_test.sh STEPCAST_BENCH CALIBRATE_FIT_TEST
set -euo pipefail
bench=$1
fit_test=$2
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no GPU (nvidia-smi failed): skipped"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
subs=(gemm memory)
if [[ $(nvidia-smi -L | wc -l) -ge 2 ]]; then subs+=(nccl overlap); fi
"$bench" "${subs[@]}" --quick --dims 512,2048 --repeats 3 --max-bytes 16777216 \
  --source "tests/calibrate/bench_gpu_test.sh" -o "$out/measurements.json"
STEPCAST_BENCH_MEASUREMENTS="$out/measurements.json" "$fit_test" --gtest_filter='BenchOutput.*'
