#!/usr/bin/env bash
# tools/deps.sh on a machine that lacks a package: as a user who is not root it installs
# nothing, prints the exact apt-get command naming the missing package, and exits 2; with
# everything present it exits 0 silently. Skipped (77) when no unprivileged user can be used.
set -uo pipefail
src="$1"
out=$(bash "$src/tools/deps.sh" 2>&1); code=$?
[[ $code -eq 0 && -z "$out" ]] || { echo "with everything installed: exit $code, output: $out"; exit 1; }
if [[ $(id -u) -ne 0 ]]; then
  runas=(bash -c)
elif command -v setpriv >/dev/null; then
  runas=(setpriv --reuid=65534 --regid=65534 --clear-groups bash -c)
else
  echo "no way to drop root: skipped"; exit 77
fi
tmp=$(mktemp -d); cp "$src/tools/deps.sh" "$tmp/deps.sh"; chmod -R a+rx "$tmp"
out=$("${runas[@]}" "STEPCAST_DEPS_EXTRA=stepcast-no-such-package bash $tmp/deps.sh" 2>&1); code=$?
rm -rf "$tmp"
[[ $code -eq 2 ]] || { echo "expected exit 2, got $code: $out"; exit 1; }
grep -q "missing Debian packages: stepcast-no-such-package" <<<"$out" || { echo "no missing list: $out"; exit 1; }
grep -q "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends stepcast-no-such-package" <<<"$out" \
  || { echo "no exact command: $out"; exit 1; }
echo "ok: $out"
