#!/usr/bin/env bash
# One prepared check for a GPU machine with no network (one or more GPUs; sized for one H200
# in under 9 minutes): builds only the GPU programs (stepcast-bench, stepcast-exec;
# standalone CMake builds, sm_90 unless CUDA_ARCH says otherwise, -j every core, both at
# once), then runs, each step under its own timeout and whatever the others did:
#   1. bench gemm    the GEMM grid (--quick: 512/2048/8192 x bf16/fp16/fp8) and the quick
#                    grid of grouped expert GEMMs (84 a dtype, bf16 and fp8), plus the exact
#                    GEMMs of mcore_1.7B_1gpu's Program when it is lowered (called as the
#                    executor calls them), and those again after the grid
#   2. bench memory  HBM bandwidth, launch overhead
#   3. bench nccl + overlap   with 2+ GPUs only
#   4. attention     fused attention by sequence length (bench/attention_sdpa.py: PyTorch's
#                    cuDNN and flash SDPA), where python3 imports torch with CUDA; also as
#                    measurements-attention.json, so that `stepcast fit OUT/measurements-*.json`
#                    fits GEMM, memory and attention at once
#   5. the executor on the 1-GPU cases of tests/data/exec (tiny_1gpu, mcore_1.7B_1gpu),
#      issued on streams (attention fused through cuDNN where the build has it: summary.txt
#      says how each case's ran), again with every attention task unfused, then as a CUDA
#      graph with and without the task events (--untimed):
#      Programs and predictions from LOWERED=DIR (made elsewhere by
#      `LOWER_ONLY=1 calibrate/run_on_gpu.sh DIR`) or lowered here by $STEPCAST /
#      build/stepcast when one exists; `stepcast validate` when the CLI is here.
# Everything goes under OUT: measurements-*.json, *.log, exec/, summary.txt (one line per
# step: ok / failed (exit N) / timed out / skipped). Exit 0 when every step that ran passed.
# Usage: calibrate/verify_on_gpu.sh OUT
# Environment: CUDA_ARCH (default 90), BUILD_DIR (default OUT/build), LOWERED, STEPCAST,
#              BUDGET_S (whole-script budget, default 530 s: 9 minutes with a margin),
#              PREBUILT=DIR (stepcast-bench and stepcast-exec built elsewhere with the same
#              CUDA toolkit: used when both load here, else the script builds them).
set -uo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUT" >&2
  exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
mkdir -p "$1" && out=$(cd "$1" && pwd)
build=${BUILD_DIR:-$out/build}
arch=${CUDA_ARCH:-90}
jobs=$(nproc 2>/dev/null || echo 8)
budget=${BUDGET_S:-530}
t0=$SECONDS
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
summary=$out/summary.txt
: >"$summary"
failed=0
echo "verify_on_gpu: $(hostname), $ngpu GPU(s), sm_$arch, -j$jobs, budget ${budget}s" | tee -a "$summary"

# step NAME SECONDS CMD...: runs CMD under min(SECONDS, what is left of the budget), output to
# OUT/NAME.log; records the outcome and never stops the script.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - (SECONDS - t0)))
  if ((left < 10)); then
    echo "$name: skipped (budget spent)" | tee -a "$summary"
    failed=1
    return 1
  fi
  ((limit > left)) && limit=$left
  local s=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  local took=$((SECONDS - s))
  if ((rc == 0)); then
    echo "$name: ok (${took}s)" | tee -a "$summary"
  elif ((rc == 124 || rc == 137)); then
    echo "$name: timed out after ${limit}s (see $name.log)" | tee -a "$summary"
    failed=1
  else
    echo "$name: failed (exit $rc, ${took}s; see $name.log)" | tee -a "$summary"
    tail -n 5 "$out/$name.log" | sed 's/^/    /' >>"$summary"
    failed=1
  fi
  return $rc
}

# cuDNN for the executor's fused attention: the toolkit's, else a Python wheel's (the GPU
# images that carry it only beside PyTorch), found by CMake through CUDNN_HOME.
if [[ -z ${CUDNN_HOME:-} ]]; then
  CUDNN_HOME=$(python3 -c "import nvidia.cudnn as c; print(list(c.__path__)[0])" 2>/dev/null ||
    true)
  [[ -n $CUDNN_HOME ]] && export CUDNN_HOME
fi
build_one() {  # SRC DIR
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" &&
    cmake --build "$2" -j "$jobs"
}
export -f build_one
export arch jobs
bench=$build/bench/stepcast-bench
exec_bin=$build/exec/stepcast-exec
# Binaries built elsewhere: used when every library they need resolves here (ldd), so no
# device time goes to compiling; the NCCL and cuDNN of Python wheels are added to the search
# path first (GPU images that carry them only beside PyTorch).
if [[ -n ${PREBUILT:-} ]]; then
  wheel_libs=$(python3 -c "import glob, nvidia; print(':'.join(sorted({d for p in nvidia.__path__
    for d in glob.glob(p + '/*/lib')})))" 2>/dev/null || true)
  [[ -n $wheel_libs ]] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$wheel_libs
  if [[ -x $PREBUILT/stepcast-bench && -x $PREBUILT/stepcast-exec ]] &&
    ! ldd "$PREBUILT/stepcast-bench" "$PREBUILT/stepcast-exec" | grep -q 'not found'; then
    bench=$PREBUILT/stepcast-bench
    exec_bin=$PREBUILT/stepcast-exec
    echo "build: skipped (PREBUILT=$PREBUILT loads here)" | tee -a "$summary"
  else
    echo "PREBUILT=$PREBUILT does not load here; building" | tee -a "$summary"
    ldd "$PREBUILT"/stepcast-* 2>&1 | grep 'not found' | sed 's/^/    /' >>"$summary"
  fi
fi
bench_built=0
exec_built=0
if [[ $bench == $build/* ]]; then
  # Both builds at once (each -j all cores: the link steps and the nvcc front ends overlap).
  step build-bench 240 bash -c "build_one '$here/bench' '$build/bench'" &
  bench_pid=$!
  step build-exec 240 bash -c "build_one '$here/exec' '$build/exec'"
  exec_built=$?
  wait $bench_pid
  bench_built=$?
  ((bench_built == 0)) || failed=1
fi

stepcast=${STEPCAST:-}
if [[ -z $stepcast && -x $root/build/stepcast ]]; then stepcast=$root/build/stepcast; fi
export STEPCAST_PROFILES=${STEPCAST_PROFILES:-$root/hw_profiles}
mkdir -p "$out/exec"
# The Programs and predictions first: the GEMM step also times the 1.7B Program's shapes.
cases=()
for c in tiny_1gpu mcore_1.7B_1gpu; do
  o=$out/exec/$c
  if [[ -n ${LOWERED:-} && -f ${LOWERED}/$c.program.json ]]; then
    cp "$LOWERED/$c.program.json" "$LOWERED/$c.predicted.json" "$out/exec/" && cases+=("$c")
  elif [[ -n $stepcast ]]; then
    step "lower-$c" 60 bash -c "'$stepcast' lower '$root/tests/data/exec/$c.yaml' --fidelity full \
      -o '$o.program.json' && '$stepcast' run '$root/tests/data/exec/$c.yaml' \
      --json '$o.predicted.json'" && cases+=("$c")
  else
    echo "exec-$c: skipped (no LOWERED=DIR and no stepcast CLI here)" | tee -a "$summary"
  fi
done

if ((bench_built == 0)); then
  shapes=()
  [[ -f $out/exec/mcore_1.7B_1gpu.program.json ]] &&
    shapes=(--program "$out/exec/mcore_1.7B_1gpu.program.json")
  step bench-gemm 150 "$bench" gemm --quick --repeats 10 "${shapes[@]}" \
    -o "$out/measurements-gemm.json"
  # The Program's GEMMs once more, after the grid: one point per call measured at two
  # moments tells a slow moment (clocks, power) from a slow kernel (docs/calibration.md).
  # gemm-program-again.json is not a measurements-*.json, so `stepcast fit` leaves it out.
  if ((${#shapes[@]} > 0)); then
    step bench-gemm-again 60 "$bench" gemm --dims 256 --dtypes bf16 --repeats 10 \
      --grouped-grid none "${shapes[@]}" -o "$out/gemm-program-again.json"
  fi
  step bench-memory 60 "$bench" memory --quick -o "$out/measurements-memory.json"
  if ((ngpu >= 2)); then
    step bench-nccl 120 "$bench" nccl overlap --quick --max-bytes 1073741824 \
      -o "$out/measurements-nccl.json"
  else
    echo "bench-nccl: skipped (one GPU)" | tee -a "$summary"
  fi
fi
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null
then
  step attention 120 python3 "$here/bench/attention_sdpa.py" "$out/attention-sdpa.csv" \
    --json "$out/measurements-attention.json"
else
  echo "attention: skipped (no python3 with PyTorch and CUDA)" | tee -a "$summary"
fi

if ((exec_built == 0)); then
  for c in "${cases[@]}"; do
    o=$out/exec/$c
    # mcore_1.7B_1gpu needs ~53 GB of GPU memory: exit 3 where it does not fit.
    step "exec-$c" 150 "$exec_bin" "$o.program.json" --warmup 2 --timeline \
      -o "$o.measured.json" || continue
    # How its attention ran (fused through cuDNN, or unfused and why), then the same Program
    # with every attention task unfused, for the difference.
    grep -o '"attention[a-z_]*": *"[^"]*"' "$o.measured.json" | sed "s/^/exec-$c: /" |
      tee -a "$summary"
    step "exec-$c-unfused" 150 "$exec_bin" "$o.program.json" --attention unfused --warmup 2 \
      -o "$o.unfused.measured.json"
    # Replayed as a CUDA graph, and again without the task events: the step training pays
    # (step_time_untimed_s) beside the timed one, whose events hold the stream ~1.3 us each.
    step "exec-$c-graph" 90 "$exec_bin" "$o.program.json" --graph --untimed --warmup 2 \
      --timeline -o "$o.graph.measured.json"
    if [[ -n $stepcast ]]; then
      "$stepcast" validate "$o.predicted.json" "$o.measured.json" >"$o.validate.txt" 2>&1 &&
        echo "validate-$c: ok (exec/$c.validate.txt)" | tee -a "$summary"
    fi
  done
fi
echo "verify_on_gpu: done in $((SECONDS - t0))s" | tee -a "$summary"
exit $failed
