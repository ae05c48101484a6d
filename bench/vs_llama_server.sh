#!/usr/bin/env bash
# crossword serve and llama.cpp's llama-server side by side (issue 20): the same GGUF file (a
# synthesized 4-layer qwen35moe file with the real widths of Clover-35B-A3B, random weights), the
# same slots, context, threads and load, measured by `crossword bench serve --spawn` (the
# benchmark_serving method: TTFT, TPOT, ITL, E2EL, throughput; a fresh server per step, its peak
# resident memory). Runs of the two servers are interleaved (crossword, llama-server, crossword,
# ...) so both see the same machine state; the table gives medians over REPS and the ratios.
# Not part of make test.
# Usage: bench/vs_llama_server.sh [BUILD_DIR]
#   env: MODEL=FILE (default: BUILD/bench-cache/models/synth4-Q8_0-qwen35moe.gguf, written once)
#        THREADS=2 SLOTS=4 CTX=16384 REPS=3 NUM_PROMPTS=8 OUTPUT_LEN=64
#        CONC="1,2,4,8" (steps at CONC_INPUT prompt tokens)  CONC_INPUT=128
#        LADDER="512,2048" (context ladder: prompt tokens at concurrency 1)
#        LLAMA_CACHE=DIR (llama.cpp clone + build, see bench/build_llama.sh)
#        LLAMA_SERVER=BIN (an existing llama-server instead of the build)
#        CROSSWORD=BIN (an existing crossword binary instead of BUILD_DIR's, not rebuilt)
#        MAX_LOAD=2.5 (warn above this 1-minute load average)  GUARD=0.5 (bench serve's load guard)
set -euo pipefail
build=${1:-build}
build=$(cd "$build" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
threads=${THREADS:-2}
slots=${SLOTS:-4}
ctx=${CTX:-16384}
reps=${REPS:-3}
num=${NUM_PROMPTS:-8}
out_len=${OUTPUT_LEN:-64}
conc=${CONC:-1,2,4,8}
conc_input=${CONC_INPUT:-128}
ladder=${LADDER:-512,2048}
max_load=${MAX_LOAD:-2.5}
guard=${GUARD:-0.5}
py=/usr/bin/python3

if [[ -n ${CROSSWORD:-} ]]; then
  cw=$CROSSWORD
else
  cw="$build/src/cli/crossword"
  cmake --build "$build" --target crossword -j2 >/dev/null
fi
ls=${LLAMA_SERVER:-$("$repo/bench/build_llama.sh" "$build" llama-server)}
model=${MODEL:-$build/bench-cache/models/synth4-Q8_0-qwen35moe.gguf}
if [[ ! -f $model ]]; then
  mkdir -p "$(dirname "$model")"
  echo "vs_llama_server: writing $model (a few minutes)"
  "$cw" gguf synth --preset clover-35b-a3b --layers 4 --type Q8_0 --arch qwen35moe \
    --layout upstream --threads "$threads" -o "$model" >/dev/null
fi
out="$build/bench-cache/vs-llama-server-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"

load1() { cut -d' ' -f1 /proc/loadavg; }
echo "vs_llama_server: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
if ! $py -c "import sys; sys.exit(0 if float('$(load1)') <= float('$max_load') else 1)"; then
  echo "vs_llama_server: WARNING: 1-minute load $(load1) > $max_load: other processes share the CPUs; figures will be low and noisy"
fi
echo "vs_llama_server: crossword $cw; llama-server $ls; model $model; results in $out"

# Same slots, total context (both split -c over -np), threads; greedy and ignore_eos come with
# every request from bench serve. Each server gets a fresh process per step (--spawn).
cw_cmd="$cw serve -m $model --port {port} --host 127.0.0.1 -np $slots -c $ctx -t $threads --log-level warn"
ls_cmd="$ls -m $model --port {port} --host 127.0.0.1 -np $slots -c $ctx -t $threads -tb $threads --no-webui"
# --no-known-answer: the synthesized file has random weights (no question has a known answer).
common=(--no-known-answer --dataset bible --num-prompts "$num" --output-len "$out_len" --warmup 1 --runs 1
        --guard-max-other "$guard" --percentiles 50,90,99)

for i in $(seq 1 "$reps"); do
  for engine in crossword llama-server; do
    cmd=$cw_cmd
    [[ $engine == llama-server ]] && cmd=$ls_cmd
    "$cw" bench serve --spawn "$cmd" --spawn-log "$out/$engine.log" "${common[@]}" \
      --input-len "$conc_input" --max-concurrency "$conc" --label "$engine conc rep $i" \
      --result-file "$out/$engine-conc-$i.json" >"$out/$engine-conc-$i.md"
    "$cw" bench serve --spawn "$cmd" --spawn-log "$out/$engine.log" "${common[@]}" \
      --input-len "$ladder" --max-concurrency 1 --label "$engine ladder rep $i" \
      --result-file "$out/$engine-ladder-$i.json" >"$out/$engine-ladder-$i.md"
    echo "  rep $i $engine done, load $(load1)"
  done
done

$py - "$out" "$reps" "$model" "$threads" "$slots" "$ctx" <<'EOF'
import json, statistics, sys
out, reps, model, threads, slots, ctx = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
engines = ["crossword", "llama-server"]
rows = {}  # (part, input_len, conc) -> engine -> metric -> [values over reps]
loads = []
for e in engines:
    for part in ["conc", "ladder"]:
        for i in range(1, reps + 1):
            r = json.load(open(f"{out}/{e}-{part}-{i}.json"))
            loads += [r["contract"]["loadavg_start"], r["contract"]["loadavg_end"]]
            for s in r["steps"]:
                run = s["runs"][0]
                key = (part, s["input_len"], s["max_concurrency"])
                m = rows.setdefault(key, {}).setdefault(e, {})
                vals = {
                    "out_tps": run["output_throughput"],
                    "req_s": run["request_throughput"],
                    "ttft": run["median_ttft_ms"],
                    "tpot": run["median_tpot_ms"],
                    "itl": run["median_itl_ms"],
                    "e2el": run["median_e2el_ms"],
                    "decode": 1000.0 / run["median_tpot_ms"] if run["median_tpot_ms"] > 0 else 0,
                    "prefill": s["input_len"] / (run["median_ttft_ms"] / 1000.0),
                    "rss": s.get("server_peak_rss_mib", 0),
                    "busy": sum(1 for g in run["guard"] if g["busy"]),
                }
                for k, v in vals.items():
                    m.setdefault(k, []).append(v)
med = statistics.median
print()
print(f"model {model}; -np {slots} -c {ctx} -t {threads}; medians of {reps} interleaved runs; "
      f"load average during the runs {min(loads):.1f}-{max(loads):.1f}")
print()
print("| step | prompt | conc | output tok/s cw / llama (ratio) | TTFT ms cw / llama | TPOT ms cw / llama "
      "| decode tok/s (1000/TPOT) cw / llama | prefill tok/s (prompt/TTFT) cw / llama | peak RSS MiB cw / llama | guard repeats |")
print("|---|---:|---:|---|---|---|---|---|---|---:|")
for key in sorted(rows, key=lambda k: (k[0] != "conc", k[1], k[2])):
    part, n_in, c = key
    a, b = rows[key]["crossword"], rows[key]["llama-server"]
    f = lambda m, k, d=1: f"{med(m[k]):.{d}f}"
    ratio = med(a["out_tps"]) / med(b["out_tps"]) if med(b["out_tps"]) > 0 else float("nan")
    print(f"| {part} | {n_in} | {c} | {f(a,'out_tps')} / {f(b,'out_tps')} ({ratio:.2f}) "
          f"| {f(a,'ttft',0)} / {f(b,'ttft',0)} | {f(a,'tpot')} / {f(b,'tpot')} "
          f"| {f(a,'decode')} / {f(b,'decode')} | {f(a,'prefill')} / {f(b,'prefill')} "
          f"| {f(a,'rss',0)} / {f(b,'rss',0)} | {sum(a['busy']) + sum(b['busy'])} |")
EOF
