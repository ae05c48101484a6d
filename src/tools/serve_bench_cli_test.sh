#!/usr/bin/env bash
# `crossword bench serve` against `crossword serve` on the embedded model: a 2 x 2 step grid
# (input 32 / 64 tokens, concurrency 1 / 2), the chat endpoint on fortunes, a --spawn step with the
# server's peak memory, and usage errors. The JSON results are checked with Python.
# Usage: serve_bench_cli_test.sh CROSSWORD_BINARY
set -euo pipefail
cw=$1
source "$(dirname "$0")/serve_bench_test_server.sh"

"$cw" bench serve --url "$url" --input-len 32,64 --max-concurrency 1,2 --num-prompts 4 \
  --output-len 8 --warmup 1 --guard-max-other -1 --goodput "ttft:60000" \
  --result-file "$work/grid.json" >"$work/grid.md"
grep -q "Serving Benchmark Result\|Successful requests:" "$work/grid.md" ||
  { echo "FAIL: no report"; cat "$work/grid.md"; exit 1; }
# Warm-ups and measured runs send different prompts: no prompt-cache hit, so TTFT and prefill
# figures measure prefill (the warm-up once reused the first measured prompt).
cached=$(curl -s "$url/metrics" | sed -n 's/^crossword_prompt_tokens_cached_total //p')
[[ $cached == 0 ]] || { echo "FAIL: $cached prompt tokens came from the cache"; exit 1; }

"$cw" bench serve --url "$url" --endpoint /v1/chat/completions --dataset fortunes \
  --input-len 24 --num-prompts 3 --output-len 6 --request-rate 20 --warmup 0 \
  --guard-max-other -1 -o json >"$work/chat.json"

"$cw" bench serve --spawn "$cw serve --port {port} -np 1 -t 1" --spawn-log "$work/spawn.log" \
  --input-len 16 --num-prompts 2 \
  --output-len 4 --warmup 0 --guard-max-other -1 --result-file "$work/spawn.json" >/dev/null

$py - "$work" <<'PY'
import json, sys
work = sys.argv[1]
grid = json.load(open(f"{work}/grid.json"))
assert grid["tool"] == "crossword bench serve"
c = grid["contract"]
assert c["machine"]["cpus"] >= 1 and "bench serve" in c["command"], c
steps = grid["steps"]
assert [(s["input_len"], s["max_concurrency"]) for s in steps] == [(32, 1), (32, 2), (64, 1), (64, 2)], steps
for s in steps:
    r = s["runs"][0]
    assert r["completed"] == 4 and r["failed"] == 0, r
    assert r["total_input_tokens"] == 4 * s["input_len"], r  # exact prompt lengths (token ids)
    assert r["total_output_tokens"] == 4 * 8, r               # ignore_eos
    assert 1 <= r["max_concurrent_requests"] <= s["max_concurrency"], r
    assert 0 < r["median_ttft_ms"] <= r["median_e2el_ms"], r
    assert r["ttft_ms"]["n"] == 4 and r["tpot_ms"]["n"] == 4, r
    assert r["p99_ttft_ms"] >= r["median_ttft_ms"] and "p90_itl_ms" in r, r
    assert r["request_goodput"] is not None and r["good_completed"] == 4, r
    assert abs(r["output_throughput"] * r["duration"] - 32) < 1e-6, r
    assert r["tokens_per_pass"] is not None, r  # crossword reports its decoding counters
    assert s["median"]["output_throughput"] == r["output_throughput"], s
    assert s["server_pid_found"] and s["server_peak_rss_mib"] > 0, s
    assert r["guard"][0]["busy"] is False, r
    assert s["known_answer"]["checked"] and "paris" in s["known_answer"]["answer"].lower(), s
chat = json.load(open(f"{work}/chat.json"))
r = chat["steps"][0]["runs"][0]
assert r["completed"] == 3 and r["total_output_tokens"] == 18, r
assert r["total_input_tokens"] > 3 * 24 - 3, r  # the chat template adds tokens around the text
spawn = json.load(open(f"{work}/spawn.json"))
s = spawn["steps"][0]
assert s["runs"][0]["completed"] == 2 and s["server_peak_rss_mib"] > 1, s
assert "{port}" not in s["server_command"] and s["server_ready_s"] > 0, s
print("serve_bench_cli: ok", [round(x["median"]["output_throughput"], 1) for x in steps])
PY

# The known-answer guard: the embedded model answered (above, recorded in the result); a
# random-weight synthesized file does not, so no speeds unless --no-known-answer says so.
"$cw" gguf synth --preset tiny --type Q8_0 -o "$work/synth.gguf" >/dev/null 2>&1
synth_spawn="$cw serve -m $work/synth.gguf --port {port} -np 1 -t 1"
if "$cw" bench serve --spawn "$synth_spawn" --spawn-log "$work/synth.log" --input-len 8 \
  --num-prompts 1 --output-len 2 --warmup 0 --guard-max-other -1 >"$work/synth.out" 2>&1; then
  echo "FAIL: the known-answer guard let a random-weight model through"; exit 1
fi
grep -q "known-answer guard: asked" "$work/synth.out" || { echo "FAIL: no guard message"; cat "$work/synth.out"; exit 1; }
"$cw" bench serve --spawn "$synth_spawn" --spawn-log "$work/synth.log" --input-len 8 \
  --num-prompts 1 --output-len 2 --warmup 0 --guard-max-other -1 --no-known-answer \
  --result-file "$work/synth.json" >/dev/null
$py - "$work" <<'PY'
import json, sys
r = json.load(open(f"{sys.argv[1]}/synth.json"))
assert r["contract"]["known_answer_check"] is False, r["contract"]
s = r["steps"][0]
assert s["known_answer"]["checked"] is False and "no-known-answer" in s["known_answer"]["note"], s
assert s["runs"][0]["completed"] == 1, s
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
expect 2 "exactly one of --url and --spawn" bench serve
expect 2 "must contain {port}" bench serve --spawn "true"
expect 2 "not NAME:MS" bench serve --url "$url" --goodput ttft
expect 2 "is not random, bible, fortunes" bench serve --url "$url" --dataset nope
expect 2 "request-rate" bench serve --url "$url" --request-rate 0
expect 2 "no server answers at http://127.0.0.1:1 " bench serve --url http://127.0.0.1:1
exit $fail
