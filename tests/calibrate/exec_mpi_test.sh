#!/usr/bin/env bash
# MPI build of stepcast-exec (one process per GPU, across nodes): configures calibrate/exec
# on its own with -DSTEPCAST_BENCH_MPI=ON against the machine's Open MPI, builds it, and
# runs a 2-rank Program (tests/data/exec/tiny_8gpu.yaml cut to tp = 2 on 2 GPUs, full
# fidelity) on 2 MPI processes. With 2 GPUs `stepcast validate` must accept the measurement;
# without a GPU every process must stop with one clear error and a failing exit status
# (MPI_Abort), not a crash or a hang. Exit 77 (skipped) without mpicxx/mpirun or nvcc.
# Usage: exec_mpi_test.sh SOURCE_DIR STEPCAST
set -euo pipefail
src=$1
stepcast=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/mpi_build.sh"
mpi_standalone_build "$src" exec "$out"
sed -e 's/  pp: 2/  pp: 1/' -e 's/  nodes: 1/  gpus: 2/' "$src/tests/data/exec/tiny_8gpu.yaml" >"$out/tp2.yaml"
"$stepcast" lower "$out/tp2.yaml" --fidelity full -o "$out/program.json"
# --dry-run needs no GPU: one description, from process 0.
timeout 120 "${mpi[@]}" "$out/build/stepcast-exec" "$out/program.json" --dry-run >"$out/dry.log" 2>&1
cat "$out/dry.log"
[[ $(grep -c "issue order" "$out/dry.log") -eq 1 ]] || { echo "expected one --dry-run description"; exit 1; }
set +e
timeout 300 "${mpi[@]}" "$out/build/stepcast-exec" "$out/program.json" -o "$out/measured.json" >"$out/run.log" 2>&1
rc=$?
set -e
cat "$out/run.log"
if [[ $(nvidia-smi -L 2>/dev/null | wc -l) -ge 2 ]]; then
  [[ $rc -eq 0 ]] || { echo "mpirun failed with $rc"; exit 1; }
  "$stepcast" run "$out/tp2.yaml" --json "$out/predicted.json" >/dev/null
  "$stepcast" validate "$out/predicted.json" "$out/measured.json"
  exit 0
fi
[[ $rc -ne 0 && $rc -ne 124 ]] || { echo "expected a failing exit status without a GPU, got $rc"; exit 1; }
grep -q "stepcast-exec: process [01]: no GPU visible" "$out/run.log" || { echo "missing the clear error"; exit 1; }
echo "no GPU: every process stopped with a clear error (expected)"
