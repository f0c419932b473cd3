#!/usr/bin/env bash
# Renders the HTML report in headless Chromium, takes a screenshot, and checks that the DOM
# Chromium built holds the predicted numbers of the JSON result; checks the SVG parses as
# XML and holds one block per scheduled pipeline unit. Exit 77 (skipped) without Chromium.
set -euo pipefail
bin="$1"; src="$2"
chromium=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$chromium" ]]; then echo "chromium not installed: skipped"; exit 77; fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cat >"$out/s.yaml" <<'YAML'
name: html check
model: llama3-8b
cluster: {profile: h100-sxm, nodes: 1}
training: {seq_len: 2048, global_batch: 16, dtype: bf16, optimizer: adam}
parallel: {tp: 2, pp: 4, microbatch: 1, schedule: 1f1b, zero: 1, sequence_parallel: true, recompute: selective}
YAML
STEPCAST_PROFILES="$src/hw_profiles" "$bin" run "$out/s.yaml" --json "$out/r.json" --html "$out/r.html" --svg "$out/p.svg" >/dev/null
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
       --disable-component-update --disable-sync --user-data-dir="$out/profile")
timeout 120 "$chromium" "${flags[@]}" --dump-dom "file://$out/r.html" >"$out/dom.html" 2>"$out/chromium.log"
timeout 120 "$chromium" "${flags[@]}" --window-size=1300,1800 --screenshot="$out/shot.png" "file://$out/r.html" \
  >/dev/null 2>>"$out/chromium.log"
test -s "$out/shot.png" || { echo "no screenshot"; cat "$out/chromium.log"; exit 1; }
python3 - "$out" <<'PY'
import json, re, sys, xml.etree.ElementTree as ET
out = sys.argv[1]
r = json.load(open(f"{out}/r.json"))
dom = open(f"{out}/dom.html").read()
def cell(id_):
    m = re.search(r'id="%s"[^>]*>([^<]*)<' % re.escape(id_), dom)
    assert m, f"{id_} missing from the rendered DOM"
    return m.group(1)
step = float(cell("step-time").split()[0])
assert abs(step - r["step_time_s"]) <= 1e-6 * max(1.0, r["step_time_s"]), (step, r["step_time_s"])
assert abs(float(cell("mfu").split()[0]) - 100 * r["mfu"]) < 0.051
for k, v in r["breakdown_s"].items():
    assert abs(float(cell(f"breakdown-{k}").split()[0]) - v) <= 1e-6, k
# pp 4 sends activations beside the kernels: the interference line is there and agrees.
assert r["interference_s"] > 0
assert abs(float(cell("interference").split()[0]) - r["interference_s"]) <= 1e-6
# The loss stage waits on the host for each microbatch's loss (Megatron-Core's NaN check):
# the host line is there and agrees.
assert r["host_bound_s"] > 0
assert abs(float(cell("host-bound").split()[0]) - r["host_bound_s"]) <= 1e-6
for i, g in enumerate(r["memory_peak_gib_per_stage"]):
    assert abs(float(cell(f"memory-stage-{i}").split()[0]) - g) < 0.0051, i
svg = ET.parse(f"{out}/p.svg").getroot()
ns = "{http://www.w3.org/2000/svg}"
blocks = [e for e in svg.iter(ns + "rect") if e.get("class") == "block"]
stages = {b.get("data-stage") for b in blocks}
assert stages == {"0", "1", "2", "3"}, stages
# One forward block per microbatch per stage: 16 sequences / (dp 1 x mb 1) = 16 microbatches.
fwd = [b for b in blocks if b.get("data-kind") == "fwd"]
assert len(fwd) == 4 * 16, len(fwd)
print(f"ok: DOM holds the predicted numbers; SVG has {len(blocks)} blocks; screenshot taken")
PY

# The sweep table sorts in the browser: #sort=N clicks column N once (ascending).
cat >"$out/w.yaml" <<'YAML'
name: sweep check
model: llama3-8b
cluster: {profile: h100-sxm, nodes: 1}
training: {seq_len: 2048, global_batch: 16, dtype: bf16, optimizer: adam}
parallel: {tp: 2, pp: 4, microbatch: 1, schedule: 1f1b, zero: 1, sequence_parallel: true, recompute: selective}
sweep:
  parallel.microbatch: [4, 1, 2]
YAML
STEPCAST_PROFILES="$src/hw_profiles" "$bin" sweep "$out/w.yaml" --html "$out/w.html" >/dev/null
# Columns: parallel.microbatch, plan, step time (s), ... -> sort by column 2 (step time).
timeout 120 "$chromium" "${flags[@]}" --dump-dom "file://$out/w.html#sort=2" >"$out/wdom.html" 2>>"$out/chromium.log"
python3 - "$out" <<'PY'
import re, sys
dom = open(f"{sys.argv[1]}/wdom.html").read()
body = dom[dom.index("<tbody>"):dom.index("</tbody>")]
rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
assert len(rows) == 3, len(rows)
steps = [float(re.findall(r"<td[^>]*>([^<]*)</td>", r)[2]) for r in rows]
assert steps == sorted(steps), steps
print(f"ok: sweep table sorted by step time in the browser: {steps}")
PY
