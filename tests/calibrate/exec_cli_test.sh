#!/usr/bin/env bash
# CPU test of the stepcast-exec command line: --dry-run of Programs lowered from
# tests/data/exec/, and exit code 2 with a clear message for a bad Program, a folded one
# that cannot be expanded, and more ranks than GPUs.
# Usage: exec_cli_test.sh STEPCAST_EXEC STEPCAST SOURCE_DIR
set -uo pipefail
exec_bin=$1
stepcast=$2
src=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
# expect RC PATTERN CMD...: runs CMD, checks its exit code and that its output matches.
expect() {
  local want_rc=$1 pattern=$2
  shift 2
  local text rc
  text=$("$@" 2>&1)
  rc=$?
  if [[ $rc -ne $want_rc ]] || ! grep -qF -- "$pattern" <<<"$text"; then
    echo "FAIL: $* -> rc $rc (want $want_rc), output:"
    echo "$text"
    echo "(wanted: $pattern)"
    fail=1
  else
    echo "ok: $* -> rc $rc"
  fi
}
"$stepcast" lower "$src/tests/data/exec/tiny_1gpu.yaml" -o "$out/one.json" >/dev/null || exit 1
"$stepcast" lower "$src/tests/data/exec/tiny_8gpu.yaml" --fidelity full -o "$out/full.json" >/dev/null || exit 1
"$stepcast" lower "$src/tests/data/exec/tiny_8gpu.yaml" -o "$out/folded.json" >/dev/null || exit 1

expect 0 "tasks      126: gemm 54 attention 8 memory_bound 46 alloc 9 free 9" "$exec_bin" "$out/one.json" --dry-run
# One GPU's share of the Megatron-Core 1.7B case, which calibrate/run_on_gpu.sh executes:
# per microbatch (4) and layer (24), 4 forward GEMMs + 4 input-gradient + 4 weight-gradient
# = 12, plus the logits' 3: 12*24*4 + 3*4 = 1164; attention forward and backward: 2*24*4 =
# 192; memory-bound: 8 per layer-microbatch (ln1, ln2, act, residual, forward and backward)
# = 768, final norm and cross entropy forward and backward 4*4 = 16, embedding forward and
# its weight gradient 2*4 = 8, the gradient-buffer zeroing and the optimizer step 2: 794.
"$stepcast" lower "$src/tests/data/exec/mcore_1.7B_1gpu.yaml" --fidelity full -o "$out/m17.json" \
  >/dev/null || exit 1
expect 0 "tasks      2356: gemm 1164 attention 192 memory_bound 794 alloc 103 free 103" \
  "$exec_bin" "$out/m17.json" --dry-run
expect 0 "" bash -n "$src/calibrate/run_on_gpu.sh"
# The script's CPU half (LOWER_ONLY: lower and predict the cases for a GPU box that cannot
# build the CLI) writes each case's Program and prediction; the mcore Program is the one
# dry-run above, task for task.
expect 0 "wrote $out/low/exec/: carry it" env STEPCAST="$stepcast" LOWER_ONLY=1 \
  "$src/calibrate/run_on_gpu.sh" "$out/low"
for c in tiny_1gpu tiny_8gpu mcore_1.7B_1gpu; do
  for f in program predicted; do
    [[ -s $out/low/exec/$c.$f.json ]] || { echo "FAIL: LOWER_ONLY wrote no $c.$f.json"; fail=1; }
  done
done
expect 0 "tasks      2356: gemm 1164 attention 192 memory_bound 794 alloc 103 free 103" \
  "$exec_bin" "$out/low/exec/mcore_1.7B_1gpu.program.json" --dry-run
expect 0 "rendezvous 368 collectives, 32 send/recv pairs" "$exec_bin" "$out/full.json" --dry-run
# 2184 steps: 2176 before the NaN check of each rank's gradient bucket (grad_nan_check, +8).
expect 0 "issue order 2184 steps, no deadlock" "$exec_bin" "$out/full.json" --dry-run --gpus 8
expect 2 "the Program has 8 ranks but this process sees 4 GPU(s)" "$exec_bin" "$out/full.json" --dry-run --gpus 4
expect 2 "no dp group contains it; lower with --fidelity full" "$exec_bin" "$out/folded.json" --dry-run
sed 's/"kind":"gemm"/"kind":"gemmm"/' "$out/one.json" >"$out/bad.json"
expect 2 "/ranks/0/tasks/" "$exec_bin" "$out/bad.json" --dry-run
expect 2 "expected one of \"gemm\"" "$exec_bin" "$out/bad.json" --dry-run
# A group index past int (the fuzzer's 2^31) wrapped negative, passed the group check and
# crashed the plan (SIGSEGV); now exit 2 naming the key.
sed 's/"group":0,/"group":2147483648,/' "$out/full.json" >"$out/big_group.json"
expect 2 "/collective/group: expected an integer <= 2147483647" "$exec_bin" "$out/big_group.json" --dry-run
expect 2 "cannot open the Program file" "$exec_bin" "$out/missing.json" --dry-run
expect 2 "unknown option \"--fast\"" "$exec_bin" "$out/one.json" --fast
expect 2 "--gpus applies to --dry-run only" "$exec_bin" "$out/one.json" --gpus 2
expect 2 "--graph applies to a run on GPUs" "$exec_bin" "$out/one.json" --graph --dry-run
expect 2 "--graph applies to a run on GPUs" "$exec_bin" "$out/one.json" --graph --host
expect 2 "--untimed needs --graph" "$exec_bin" "$out/one.json" --untimed
expect 2 "--attention: expected fused or unfused, got \"flash\"" "$exec_bin" "$out/one.json" \
  --attention flash
expect 2 "--attention: needs a value" "$exec_bin" "$out/one.json" --attention
expect 2 "--attention applies to a run on GPUs" "$exec_bin" "$out/one.json" --attention unfused \
  --dry-run
expect 2 "--attention applies to a run on GPUs" "$exec_bin" "$out/one.json" --attention fused --host
expect 2 "--untimed needs --graph" "$exec_bin" "$out/one.json" --untimed --dry-run
exit $fail
