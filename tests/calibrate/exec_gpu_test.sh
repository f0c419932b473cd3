#!/usr/bin/env bash
# GPU test (CTest label "gpu"): lowers the 1-GPU scenario (and with 8+ GPUs the 8-GPU one,
# full fidelity), executes it with stepcast-exec, and checks that `stepcast validate
# PREDICTED MEASURED` accepts the measurement. Exit 77 (skipped) when no GPU is usable.
# Usage: exec_gpu_test.sh STEPCAST_EXEC STEPCAST SOURCE_DIR
set -euo pipefail
exec_bin=$1
stepcast=$2
src=$3
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no GPU (nvidia-smi failed): skipped"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cases=(tiny_1gpu)
if [[ $(nvidia-smi -L | grep -c '^GPU') -ge 8 ]]; then cases+=(tiny_8gpu); fi
for c in "${cases[@]}"; do
  "$stepcast" lower "$src/tests/data/exec/$c.yaml" --fidelity full -o "$out/$c.program.json"
  "$stepcast" run "$src/tests/data/exec/$c.yaml" --json "$out/$c.predicted.json" >/dev/null
  "$exec_bin" "$out/$c.program.json" -o "$out/$c.measured.json"
  "$stepcast" validate "$out/$c.predicted.json" "$out/$c.measured.json"
done
# Attention ran fused through cuDNN where the build has it (attention_cudnn.h): the
# provenance counts the tasks each way and names the library; an unfused task in a cuDNN
# build is cuDNN refusing a shape, with the reason beside it.
for c in "${cases[@]}"; do
  grep -o '"attention[a-z_]*": *"[^"]*"' "$out/$c.measured.json"
  if grep -q '"attention_library": *"cudnn ' "$out/$c.measured.json" &&
    ! grep -q '"attention": *"[0-9]* tasks fused ([0-9]* grouped-query), 0 unfused"' \
      "$out/$c.measured.json"; then
    echo "FAIL: $c: attention tasks ran unfused in a cuDNN build"
    exit 1
  fi
done
