#!/usr/bin/env bash
# `mpirun -np N stepcast search|sweep` (docs/usage.md, "Several processes (MPI)";
# tools/distributed.h). Built with MPI: the table, CSV and HTML of 3 ranks (2 threads each)
# are byte for byte those of one process, for a search (Llama 3 8B on 8 GPUs, global batch
# 16) and for the what-if sweep; bad input is reported once with exit 2; other subcommands
# are refused with exit 2, and tools/stepcast does not build under mpirun. Built without
# MPI: `mpirun -np 2 stepcast search` is refused (exit 2) instead of running the search
# twice. Exit 77 (skipped) without mpirun.
# Usage: mpi_split_test.sh STEPCAST SOURCE_DIR with-mpi|without-mpi
set -euo pipefail
stepcast=$1
src=$2
mode=$3
command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpi=(timeout 300 mpirun --oversubscribe)
[[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
sed 's/^\(  global_batch:\).*/\1 16/' "$src/scenarios/llama3-8b-1node-h100.yaml" >"$out/search.yaml"
grep -q '^  global_batch: 16$' "$out/search.yaml" || { echo "could not set the global batch"; exit 1; }

# Runs "$@" and checks its exit status is $1 (the rest is the command).
expect_rc() {
  local want=$1; shift
  set +e
  "$@" >"$out/stdout" 2>"$out/stderr"
  local rc=$?
  set -e
  if [[ $rc -ne $want ]]; then
    echo "expected exit $want, got $rc: $*"; cat "$out/stdout" "$out/stderr"; exit 1
  fi
}

if [[ $mode == without-mpi ]]; then
  expect_rc 2 "${mpi[@]}" -np 2 "$stepcast" search "$out/search.yaml"
  grep -q "built without MPI" "$out/stderr" || { cat "$out/stderr"; exit 1; }
  [[ ! -s "$out/stdout" ]] || { echo "printed a table although refused:"; cat "$out/stdout"; exit 1; }
  echo "without MPI: mpirun -np 2 refused with exit 2"
  exit 0
fi

# The same files from one process and from 3 ranks.
compare() {  # compare NAME SUBCOMMAND SCENARIO
  local name=$1 sub=$2 scen=$3
  "$stepcast" "$sub" "$scen" --threads 2 --csv "$out/$name.1.csv" --html "$out/$name.1.html" \
    >"$out/$name.1.txt"
  expect_rc 0 "${mpi[@]}" -np 3 "$stepcast" "$sub" "$scen" --threads 2 --csv "$out/$name.3.csv" \
    --html "$out/$name.3.html"
  cp "$out/stdout" "$out/$name.3.txt"
  for ext in txt csv html; do
    cmp "$out/$name.1.$ext" "$out/$name.3.$ext" || {
      echo "$name: 3 ranks differ from one process in .$ext"; diff "$out/$name.1.$ext" "$out/$name.3.$ext" | head -20; exit 1; }
  done
  [[ $(wc -l <"$out/$name.1.txt") -ge 3 ]] || { echo "$name: empty table"; cat "$out/$name.1.txt"; exit 1; }
}
compare search search "$out/search.yaml"
compare sweep sweep "$src/scenarios/llama3-70b-whatif-sweep.yaml"

# Bad input: one message (from rank 0), exit 2.
printf 'name: x\nmodel: {layers: 2}\n' >"$out/bad.yaml"
expect_rc 2 "${mpi[@]}" -np 3 "$stepcast" search "$out/bad.yaml"
n=$(grep -c "bad.yaml:1:1: cluster: missing required key" "$out/stderr" || true)
[[ $n -eq 1 ]] || { echo "expected the error once, got $n times"; cat "$out/stderr"; exit 1; }

# Only search and sweep split; the others say so.
expect_rc 2 "${mpi[@]}" -np 2 "$stepcast" run "$src/scenarios/llama3-8b-1node-h100.yaml"
grep -q "only search and sweep split across MPI ranks" "$out/stderr" || { cat "$out/stderr"; exit 1; }
[[ ! -s "$out/stdout" ]] || { echo "run printed although refused"; cat "$out/stdout"; exit 1; }
# tools/stepcast under mpirun does not build (the copies would race): with no binary it
# says to build first, exit 2.
expect_rc 2 env STEPCAST_BUILD_DIR="$out/no-build" "${mpi[@]}" -np 2 "$src/tools/stepcast" \
  search "$out/search.yaml"
grep -q "build it first without mpirun" "$out/stderr" || { cat "$out/stderr"; exit 1; }
[[ ! -e "$out/no-build" ]] || { echo "tools/stepcast built under mpirun"; exit 1; }
echo "MPI split: search and sweep on 3 ranks match one process byte for byte"
