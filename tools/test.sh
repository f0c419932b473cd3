#!/usr/bin/env bash
# Builds everything and runs every test through CTest (the README's test command).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export STEPCAST_BUILD_DIR="${STEPCAST_BUILD_DIR:-$root/build}"
export STEPCAST_DEPS_ARGS="--test"
if [[ "${CI:-}" == "true" ]]; then
  export STEPCAST_CMAKE_ARGS="${STEPCAST_CMAKE_ARGS:-} -DSTEPCAST_WERROR=ON"
fi
"$root/tools/build.sh"
cd "$STEPCAST_BUILD_DIR"
ctest --output-on-failure -j"$(nproc)" --timeout 600 "$@"
