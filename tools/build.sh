#!/usr/bin/env bash
# Configures (Release) and builds stepcast into build/ (or $STEPCAST_BUILD_DIR) when sources
# changed since the last build. Usage: tools/build.sh [cmake --build args...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${STEPCAST_BUILD_DIR:-$root/build}"
"$root/tools/deps.sh" ${STEPCAST_DEPS_ARGS:-}
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  mkdir -p "$build"  # its log goes inside, not beside it in the checkout
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release ${STEPCAST_CMAKE_ARGS:-} >"$build/configure.log" 2>&1 || {
    cat "$build/configure.log" >&2; exit 1; }
fi
cmake --build "$build" -j"$(nproc)" "$@"
