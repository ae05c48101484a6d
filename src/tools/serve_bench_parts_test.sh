#!/usr/bin/env bash
# `crossword bench serve --parts` against `crossword serve` on the embedded model at small sizes:
# guard, decode, prefill, conc, ctx (a 1K and 2K ladder: 2,000 + 4 tokens fit the model's 2,048) and
# needle on a --url server; mem on a server spawned per
# context size ({ctx} in the command); --charts (SVG parsed as XML, series counted) and --compare
# (the side-by-side table, ratios checked). Usage: serve_bench_parts_test.sh CROSSWORD_BINARY
set -euo pipefail
cw=$1
source "$(dirname "$0")/serve_bench_test_server.sh"

common=(--warmup 0 --runs 1 --guard-max-other -1 --output-len 4 --ctx-output-len 4)
"$cw" bench serve --url "$url" "${common[@]}" --parts guard,decode,prefill,conc,ctx,needle \
  --decode-input-len 16 --prefill-len 48 --conc-levels 1,2 --conc-input-len 16 \
  --ctx-ladder 1024,2000 --needle-ctx 192,384 --needle-depths 0.25,0.75 --label A \
  --result-file "$work/a.json" --charts "$work/charts-a" >"$work/a.md" 2>"$work/a.err"
grep -q "needle: context 192 depth 0.25" "$work/a.md" || { echo "FAIL: no needle line"; cat "$work/a.md"; exit 1; }

# mem needs a server started afresh per size.
if "$cw" bench serve --url "$url" --parts mem --ctx-ladder 64 >"$work/memurl.out" 2>&1; then
  echo "FAIL: --parts mem ran on --url"; exit 1
fi
grep -q "mem needs --spawn" "$work/memurl.out" || { echo "FAIL: no mem message"; cat "$work/memurl.out"; exit 1; }
"$cw" bench serve --spawn "$cw serve --port {port} -np 1 -t 1 -c {ctx}" --spawn-log "$work/spawn.log" \
  "${common[@]}" --parts mem --ctx-ladder 64,512 --label A --result-file "$work/mem.json" >"$work/mem.md"

$py - "$work" <<'PY'
import json, sys
work = sys.argv[1]
a = json.load(open(f"{work}/a.json"))
assert a["config"]["parts"] == ["guard", "decode", "prefill", "conc", "ctx", "needle"], a["config"]
steps = a["steps"]
parts = [s["part"] for s in steps]
assert parts == ["guard", "decode", "prefill", "conc", "conc", "ctx", "ctx"] + ["needle"] * 4, parts
assert steps[0]["known_answer"]["checked"] and "paris" in steps[0]["known_answer"]["answer"].lower()
by = lambda p: [s for s in steps if s["part"] == p]
d = by("decode")[0]
r = d["runs"][0]
assert d["input_len"] == 16 and r["total_input_tokens"] == 16 and r["total_output_tokens"] == 4, d
assert abs(d["median"]["decode_tok_s"] - 1000 / r["median_tpot_ms"]) < 1e-6, d
p = by("prefill")[0]["runs"][0]
assert p["total_input_tokens"] == 48 and p["total_output_tokens"] == 1, p
assert abs(p["prefill_tok_s"] - 48 * 1000 / p["median_ttft_ms"]) < 1e-6, p
assert "median_tpot_ms" not in by("prefill")[0]["median"], by("prefill")[0]  # 1 token: no TPOT
conc = by("conc")
assert [(s["max_concurrency"], s["runs"][0]["completed"]) for s in conc] == [(1, 1), (2, 2)], conc
assert conc[1]["runs"][0]["total_output_tokens"] == 8, conc[1]
ctx = by("ctx")
assert [s["input_len"] for s in ctx] == [1024, 2000], ctx
assert [s["runs"][0]["total_input_tokens"] for s in ctx] == [1024, 2000], ctx
for s in ctx:
    assert s["median"]["median_ttft_ms"] > 0 and s["median"]["prefill_tok_s"] > 0, s
needle = by("needle")
assert [(s["input_len"], s["depth"]) for s in needle] == [(192, .25), (192, .75), (384, .25), (384, .75)]
codes = set()
for s in needle:
    assert isinstance(s["pass"], bool) and "answer" in s and len(s["code"]) == 5, s
    assert s["pass"] == (s["code"] in s["answer"]), s
    # The chat prompt is the asked size within a few tokens (text re-tokenized at the joins).
    assert abs(s["prompt_tokens"] - s["input_len"]) <= 8, s
    codes.add(s["code"])
assert len(codes) == 4, codes
mem = json.load(open(f"{work}/mem.json"))["steps"]
assert [(s["part"], s["input_len"], s["server_ctx"]) for s in mem] == [("mem", 64, 68), ("mem", 512, 516)], mem
for s in mem:
    assert s["ok"] and s["prompt_tokens"] == s["input_len"] and s["output_tokens"] == 4, s
    assert s["server_command"].endswith(f"-c {s['server_ctx']}"), s
    assert 1 < s["idle_rss_mib"] <= s["peak_rss_mib"] and s["rss_mib"] <= s["peak_rss_mib"], s
print("parts: ok; needle", [s["pass"] for s in needle], "mem MiB", [round(s["peak_rss_mib"], 1) for s in mem])

# A second server "B": the same result with half the output throughput and decode speed, twice
# the TTFT, a failed needle and more memory; then the side-by-side table must show ratio 2.00.
b = json.loads(json.dumps(a))
b["config"]["label"] = "B"
for s in b["steps"]:
    if "median" in s:
        for k in ("output_throughput", "decode_tok_s", "prefill_tok_s"):
            if k in s["median"]:
                s["median"][k] /= 2
        s["median"]["median_ttft_ms"] *= 2
    if s["part"] == "needle":
        s["pass"] = not s["pass"]
json.dump(b, open(f"{work}/b.json", "w"))
mb = json.load(open(f"{work}/mem.json"))
mb["config"]["label"] = "B"
for s in mb["steps"]:
    s["peak_rss_mib"] *= 4
json.dump(mb, open(f"{work}/memb.json", "w"))
PY

"$cw" bench serve --compare "$work/a.json" "$work/mem.json" "$work/b.json" "$work/memb.json" \
  --charts "$work/charts-ab" >"$work/compare.md"

$py - "$work" <<'PY'
import json, os, sys, xml.etree.ElementTree as ET
work = sys.argv[1]
NS = "{http://www.w3.org/2000/svg}"
def svg(path, series):
    root = ET.parse(path).getroot()  # well-formed XML or an exception
    assert root.tag == NS + "svg", root.tag
    groups = [g for g in root.iter(NS + "g") if g.get("class") == "series"]
    assert len(groups) == series, (path, len(groups))
    for g in groups:
        assert g.find(NS + "polyline") is not None and len(g.findall(NS + "circle")) >= 1, path
    texts = " ".join(t.text or "" for t in root.iter(NS + "text"))
    return [g.get("data-name") for g in groups], texts
one = f"{work}/charts-a"
assert sorted(os.listdir(one)) == ["conc_throughput.svg", "conc_ttft.svg", "ctx_decode.svg",
                                   "ctx_prefill.svg", "ctx_ttft.svg", "report.md"], os.listdir(one)
names, texts = svg(f"{one}/conc_throughput.svg", 1)
assert names == ["A"] and "requests at once" in texts and "tokens/s" in texts, texts
two = f"{work}/charts-ab"
for f in ["conc_throughput.svg", "ctx_decode.svg", "ctx_prefill.svg", "ctx_ttft.svg", "mem_rss.svg"]:
    names, texts = svg(f"{two}/{f}", 2)
    assert names == ["A", "B"], (f, names)
names, texts = svg(f"{two}/conc_ttft.svg", 4)
assert names == ["A median", "A p99", "B median", "B p99"] and "TTFT (ms)" in texts, (names, texts)
_, texts = svg(f"{two}/ctx_ttft.svg", 2)
assert "TTFT (ms)" in texts and "prompt tokens" in texts, texts
_, texts = svg(f"{two}/mem_rss.svg", 2)
assert "MiB" in texts and "512" in texts, texts
md = open(f"{work}/compare.md").read()
report = open(f"{two}/report.md").read()
assert report.startswith(md) and "![mem_rss.svg](mem_rss.svg)" in report, report
rows = [l for l in md.splitlines() if l.startswith("| conc | 16 | 4 | 2 |")]
assert len(rows) == 1, md
cells = [c.strip() for c in rows[0].split("|")[1:-1]]
assert cells[4].endswith("(2.00)") and cells[5].endswith("(2.00)"), cells  # output, decode tok/s
assert cells[7].endswith("(0.50)"), cells  # TTFT A / B
assert "| 64 | 68 |" in md and "(0.25)" in md, md  # memory: A's peak RSS / B's
needle = [l for l in md.splitlines() if l.startswith("| 192 | 0.25 |")]
assert len(needle) == 1 and sorted(c.strip() for c in needle[0].split("|")[3:5]) == ["FAIL", "pass"], needle
print("charts and compare: ok")
PY

fail=0
expect() {  # expect CODE PATTERN ARGS...
  local code=$1 pattern=$2 out rc
  shift 2
  out=$(timeout 60 "$cw" "$@" 2>&1) && rc=0 || rc=$?
  if [[ $rc -ne $code ]] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: crossword $* -> exit $rc (want $code): ${out:0:300}"
    fail=1
  fi
}
expect 2 "is not one of guard" bench serve --url "$url" --parts decode,nope
expect 2 "not a bench serve result" bench serve --compare "$work/server.log"
expect 2 "no --url or --spawn" bench serve --url "$url" --compare "$work/a.json"
exit $fail
