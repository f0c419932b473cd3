#!/usr/bin/env bash
# Formats the tracked C++ sources with clang-format 14 and the tree's .clang-format.
# Usage: tools/format.sh            formats the files changed since the branch left main
#        tools/format.sh --all      formats every tracked C++ file
#        tools/format.sh --check    lists the files that differ, exit 1 if any (77 when
#                                   clang-format 14 is not installed: the CTest `format`
#                                   is then skipped, since other versions format differently)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cf=""
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null && "$c" --version | grep -q 'version 14\.'; then cf="$c"; break; fi
done
if [[ -z "$cf" ]]; then
  echo "clang-format 14 not found (apt-get install clang-format-14): not checked" >&2
  exit 77
fi
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' 2>/dev/null || true)
if [[ ${#files[@]} -eq 0 ]]; then
  # Not a git checkout (a source archive): every C++ file outside build folders.
  mapfile -t files < <(find model sim calibrate tools tests -name '*.h' -o -name '*.cc' -o -name '*.cu' | sort)
fi
if [[ "${1:-}" == "--check" ]]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$cf" --style=file "$f" | cmp -s - "$f"; then echo "not formatted: $f"; bad=1; fi
  done
  [[ $bad -eq 0 ]] || echo "run tools/format.sh to format them" >&2
  exit $bad
fi
if [[ "${1:-}" != "--all" ]]; then
  base="$(git merge-base HEAD main 2>/dev/null || true)"
  if [[ -z "$base" ]]; then
    echo "no branch main to compare with: use --all" >&2
    exit 2
  fi
  mapfile -t files < <({ git diff --name-only "$base"; git ls-files --others --exclude-standard; } |
                       grep -E '\.(h|cc|cu)$' | sort -u | while read -r f; do [[ -f "$f" ]] && echo "$f"; done)
  [[ ${#files[@]} -gt 0 ]] || exit 0
fi
"$cf" --style=file -i "${files[@]}"
