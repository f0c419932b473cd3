#!/usr/bin/env bash
# Checks every #include of model/ and sim/ against the layering table of sim/README.md
# ("## Layering": rows "| `stage/` | uses, ... |"): a sim stage includes only its own
# headers, model/ and the stages of its row; model/ includes nothing of sim/; neither
# includes calibrate/ or tools/. Prints one line per include against it (file:line) and
# exits 1 when there is any, 2 when the table cannot be read. Usage: check_layering.sh ROOT
set -euo pipefail
root="${1:?usage: check_layering.sh ROOT}"
readme="$root/sim/README.md"
[[ -f "$readme" ]] || { echo "$readme: not found" >&2; exit 2; }

declare -A uses=()
while IFS='|' read -r stage deps; do
  uses["$stage"]="$deps"
done < <(awk '
  /^## / { in_table = ($0 ~ /^## Layering/) ; next }
  in_table && /^\| `[a-z_]+\/` \|/ {
    split($0, col, "|"); st = col[2]; gsub(/[ `\/]/, "", st)
    d = col[3]; gsub(/ /, "", d); print st "|" d
  }' "$readme")
if [[ ${#uses[@]} -eq 0 ]]; then
  echo "$readme: no layering table (## Layering, rows | \`stage/\` | uses |)" >&2
  exit 2
fi

bad=0
check() {  # file, allowed-prefix regex, what the file is
  local f="$1" allowed="$2" what="$3" line inc
  while IFS=: read -r line inc; do
    inc="${inc#*\"}"; inc="${inc%%\"*}"
    if [[ ! "$inc" =~ $allowed ]]; then
      echo "${f#$root/}:$line: includes \"$inc\", against the layering of sim/README.md ($what)"
      bad=1
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" || true)
}

shopt -s nullglob
for f in "$root"/model/*.h "$root"/model/*.cc; do
  check "$f" '^model/' "model/ includes only model/"
done
for dir in "$root"/sim/*/; do
  stage="$(basename "$dir")"
  if [[ -z "${uses[$stage]+x}" ]]; then
    if compgen -G "$dir*.h" >/dev/null || compgen -G "$dir*.cc" >/dev/null; then
      echo "sim/$stage/: a stage not in the layering table of sim/README.md"; bad=1
    fi
    continue
  fi
  allowed="^(model/|sim/$stage/"
  IFS=',' read -ra deps <<< "${uses[$stage]}"
  for d in "${deps[@]}"; do
    [[ -n "$d" && "$d" != model ]] && allowed+="|sim/$d/"
  done
  allowed+=")"
  for f in "$dir"*.h "$dir"*.cc; do
    check "$f" "$allowed" "sim/$stage may use: ${uses[$stage]}"
  done
done
exit $bad
