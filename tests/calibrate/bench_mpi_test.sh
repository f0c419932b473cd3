#!/usr/bin/env bash
# MPI build of stepcast-bench (calibrate/README.md: multi-node NCCL groups under mpirun):
# configures calibrate/bench on its own with -DSTEPCAST_BENCH_MPI=ON against the machine's
# Open MPI, builds it, and runs `stepcast-bench nccl` on 2 MPI ranks. With 2 GPUs the sweep
# must write measurements that the fit's strict loader accepts; without a GPU every rank
# must stop with one clear "stepcast-bench: ..." error and a failing exit status (MPI_Abort),
# not a crash or a hang. Exit 77 (skipped) without mpicxx/mpirun or nvcc.
# Usage: bench_mpi_test.sh SOURCE_DIR CALIBRATE_FIT_TEST
set -euo pipefail
src=$1
fit_test=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/mpi_build.sh"
mpi_standalone_build "$src" bench "$out"
bench="$out/build/stepcast-bench"
args=(nccl --quick --repeats 3 --max-bytes 16777216 --source tests/calibrate/bench_mpi_test.sh
      -o "$out/measurements.json")
set +e
timeout 300 "${mpi[@]}" "$bench" "${args[@]}" >"$out/run.log" 2>&1
rc=$?
set -e
cat "$out/run.log"
if [[ $(nvidia-smi -L 2>/dev/null | wc -l) -ge 2 ]]; then
  [[ $rc -eq 0 ]] || { echo "mpirun failed with $rc"; exit 1; }
  STEPCAST_BENCH_MEASUREMENTS="$out/measurements.json" "$fit_test" --gtest_filter='BenchOutput.*'
  exit 0
fi
# No GPU: a clean, reported failure on every rank.
[[ $rc -ne 0 && $rc -ne 124 ]] || { echo "expected a failing exit status without a GPU, got $rc"; exit 1; }
n=$(grep -c '^stepcast-bench: ' "$out/run.log" || true)
[[ $n -ge 1 ]] || { echo "no 'stepcast-bench:' error line"; exit 1; }
if grep -qiE 'segmentation|core dumped|signal [0-9]' "$out/run.log"; then
  echo "crashed instead of reporting"; exit 1
fi
echo "MPI build OK; without a GPU: $n clear error line(s), exit $rc"
