#!/usr/bin/env bash
# Builds the unit tests with AddressSanitizer and UndefinedBehaviorSanitizer into
# build-asan/ (or $STEPCAST_ASAN_BUILD_DIR) and runs them through CTest. The GPU programs,
# the benchmarks and the end-to-end runs of whole validation sets are left out: the first
# need a GPU, the others repeat under the sanitizers what the unit tests cover, at 2-3x the
# time (see docs/contributing.md).
# Usage: tools/sanitize.sh [--ci] [ctest args...]
#   --ci  only the programs whose code a sanitizer guards best, as CI runs it after
#         tools/test.sh (.ci/run): the engine with its own allocator (huge-page task arrays,
#         copy-on-write task lists), the readers of every input format under their fuzz
#         tests (scenario, program JSON, measurement JSON, profile patcher), and the threaded
#         host executor. A whole run (no --ci) takes about 25 CPU-minutes on 2 cores, the
#         --ci run about a third of it (measured 2026-12-04, docs/contributing.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${STEPCAST_ASAN_BUILD_DIR:-$root/build-asan}"
ci_suites=(engine_test program_test scenario_fuzz_test calibrate_json_fuzz_test
           calibrate_yaml_patch_test calibrate_exec_host_test model_test)
targets=()
labels=()
if [[ "${1:-}" == "--ci" ]]; then
  shift
  targets=(--target "${ci_suites[@]}")
  labels=(-L "^suite:($(IFS='|'; echo "${ci_suites[*]}"))\$")
fi
"$root/tools/deps.sh" --test
flags="-O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Sanitize -DSTEPCAST_CUDA=OFF \
    -DSTEPCAST_BUILD_BENCH=OFF -DSTEPCAST_WERROR="${STEPCAST_WERROR:-OFF}" \
    -DCMAKE_CXX_FLAGS_SANITIZE="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS_SANITIZE="-fsanitize=address,undefined" \
    >"$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 1; }
fi
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
cd "$build"
# halt_on_error: the first report fails the test; detect_leaks: leaks are reported too.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# Left out (tools/test.sh runs them): whole-set end-to-end runs and the browser test.
# Also left out: the tests that compare whole searches or replay every shipped scenario. They
# run the same search and engine code as the shorter tests kept here, 100-900 s each under
# the sanitizers on 2 cores (measured 2026-12-03) against 20-45 s unsanitized.
e2e='^(regress_scenarios|validation_mape_ratchet|validation_mape_ratchet_all|html_report_in_chromium|format'
e2e+='|Search\.StateWithoutLoweringEqualsTheLoweredAllocations|Search\.SkippingPlansThatCannot.*'
e2e+='|Search\.SlicesSentAsCborRebuildTheSameSearch|Search\.MoePlansSearchExpertParallelism'
e2e+='|ExecHost\.EveryShippedScenarioReproducesThePrediction)$'
ctest --output-on-failure -j"$(nproc)" --timeout 900 -LE 'gpu|mpi|slow' -E "$e2e" "${labels[@]}" "$@"
