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
expect 0 "rendezvous 368 collectives, 32 send/recv pairs" "$exec_bin" "$out/full.json" --dry-run
expect 0 "issue order 2176 steps, no deadlock" "$exec_bin" "$out/full.json" --dry-run --gpus 8
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
exit $fail
