#!/usr/bin/env bash
# `crossword bench --sweep -o json` (issue 18's instrument) on the embedded model: every pass row
# has a positive median, the AR row is the unit of "x AR step", and on the CPU executor each row
# carries the experts, head rows and last-layer rows it used and its floors; with --device vulkan (lavapipe in
# make test) the floors, which are the host CPU's, are null, not numbers that would pass for the
# device's. On the CPU, the Markdown output's tables stand between blank lines (below).
# Usage: bench_sweep_test.sh CROSSWORD_BINARY [vulkan]
set -euo pipefail
cw=$1
device=${2:-cpu}
if [[ $device == vulkan ]] && ! "$cw" run --list-devices 2>/dev/null | grep -q '^vulkan:'; then
  echo "SKIP: no Vulkan device on this machine (crossword run --list-devices lists none)"
  exit 77
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
timeout 300 "$cw" bench --device "$device" -p 16 -n 0 -r 2 --warmup 0 --sweep --sweep-rows 1,4 \
  -o json --log-level warn >"$out"
/usr/bin/python3 - "$out" "$device" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{") and "median_ms" in l]
device = sys.argv[2]
names = [r["test"] for r in rows]
assert "ar step" in names and "verify4" in names and "denoise4" in names, names
# The embedded model's spec drafts skip FFN blocks (layers 2-4): draft4 is its denoise4 so run.
assert "draft4" in names, names
ar = next(r for r in rows if r["test"] == "ar step")
assert abs(ar["x_ar_step"] - 1.0) < 1e-9, ar
for r in rows:
    assert r["median_ms"] > 0 and len(r["samples_ms"]) == 2, r
    assert abs(r["x_ar_step"] - r["median_ms"] / ar["median_ms"]) < 1e-6, r
    assert r["device"] == device, r
    if device == "cpu" and r["test"] == "draft4":
        # Floors assume every layer, so a pass that skips some has none; its skipped layers read
        # no expert, so it averages fewer per MoE layer than the same pass with every layer.
        den = next(d for d in rows if d["test"] == "denoise4")
        assert r["x_floor"] is None and r["bytes"] is None and r["head_rows"] == 3, r
        assert 0 < r["experts_per_layer"] < den["experts_per_layer"], (r, den)
    elif device == "cpu":
        assert r["experts_per_layer"] > 0 and r["x_floor"] > 0, r
        assert r["head_rows"] == {"ar step": 1, "verify4": 4, "denoise4": 3}.get(r["test"], r["head_rows"]), r
        # The last layer runs on the rows whose output is read: a verify's all, a commit's one.
        want = {"ar step": 1, "verify4": 4, "denoise4": 3, "commit4": 1}.get(r["test"])
        assert want is None or r["last_layer_rows"] == want, r
    else:
        assert r["x_floor"] is None and r["bytes_floor_ms"] is None, r
print(f"ok: {len(rows)} rows on {device}")
PY
# The Markdown output: the llama-bench table and the sweep table each stand between blank lines (a
# line right after a table renders as one more row of it), every row has its header's cell count,
# and a model under 1 GiB shows its size in MiB and its parameters in M, as llama-bench does.
[[ $device == cpu ]] || exit 0
timeout 300 "$cw" bench -p 16 -n 2 -r 1 --warmup 0 --sweep --sweep-rows 1,2 --log-level warn >"$out"
/usr/bin/python3 - "$out" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
tables, cells = 0, None
for i, line in enumerate(lines):
    is_row = line.startswith("|")
    prev_row = i > 0 and lines[i - 1].startswith("|")
    if is_row and not prev_row:
        tables += 1
        assert i > 0 and lines[i - 1] == "", f"no blank line before line {i + 1}: {lines[i - 1]!r}"
        cells = line.count("|")
    if is_row:
        assert line.count("|") == cells, f"line {i + 1} has {line.count('|') - 1} cells: {line!r}"
    if prev_row and not is_row:
        assert line == "", f"no blank line after the table before line {i + 1}: {line!r}"
assert tables == 2, f"{tables} tables"
row = next(l for l in lines if l.startswith("| ") and "pp16" in l)
assert " MiB |" in row and " M |" in row, row
print("ok: Markdown tables")
PY
