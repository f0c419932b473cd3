#!/usr/bin/env bash
# Installs the Debian packages stepcast needs to build and test, when missing.
# As root: apt-get installs them. Otherwise: prints the exact command and exits 2.
# Usage: tools/deps.sh [--test]   (--test adds what the test suite needs)
set -euo pipefail
pkgs=(cmake g++ make pkg-config libyaml-cpp-dev libeigen3-dev libboost-graph-dev
      libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev)
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(chromium libopenmpi-dev openmpi-bin)  # browser test; MPI build of stepcast-bench
fi
# Extra package names (tests use a name that is never installed to exercise the paths below).
if [[ -n "${STEPCAST_DEPS_EXTRA:-}" ]]; then
  read -r -a extra <<<"$STEPCAST_DEPS_EXTRA"
  pkgs+=("${extra[@]}")
fi
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "stepcast: missing Debian packages: ${missing[*]}" >&2
  echo "stepcast: install them as root with:" >&2
  echo "  sudo sh -c '$cmd'" >&2
  exit 2
fi
echo "stepcast: installing ${missing[*]} ..." >&2
if ! sh -c "$cmd" >/tmp/stepcast-apt.log 2>&1; then
  echo "stepcast: apt-get failed; see /tmp/stepcast-apt.log" >&2
  tail -n 20 /tmp/stepcast-apt.log >&2
  exit 2
fi
