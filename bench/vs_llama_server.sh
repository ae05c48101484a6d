#!/usr/bin/env bash
# crossword serve and llama.cpp's llama-server side by side (issue 20): the same GGUF file (a
# synthesized 4-layer qwen35moe file with the real widths of Clover-35B-A3B, random weights), the
# same slots, context, threads and load, measured by `crossword bench serve --spawn --parts`
# (the reference method: decode, prefill, requests at once, a context ladder, memory per context
# size on a fresh server; TTFT, TPOT, ITL, E2EL, throughput; a fresh server per step). Runs of the
# two servers are interleaved (crossword, llama-server, crossword, ...) so both see the same
# machine state; `bench serve --compare` gives medians over REPS, the ratios and SVG charts.
# Not part of make test.
# Usage: bench/vs_llama_server.sh [BUILD_DIR]
#   env: MODEL=FILE (default: BUILD/bench-cache/models/synth4-Q8_0-qwen35moe.gguf, written once)
#        THREADS=2 SLOTS=4 CTX=16384 (total over the slots) REPS=3 OUTPUT_LEN=64
#        PARTS="decode,prefill,conc,ctx,mem"  DECODE_INPUT=128 PREFILL_LEN=512
#        CONC="1,2,4,8" (requests sent together, CONC_INPUT prompt tokens each)  CONC_INPUT=128
#        LADDER="512,2048" (context ladder and mem sizes: prompt tokens; each must fit CTX/SLOTS
#        with OUTPUT_LEN; mem starts a server with -np 1 -c prompt+answer per size)
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
out_len=${OUTPUT_LEN:-64}
parts=${PARTS:-decode,prefill,conc,ctx,mem}
decode_input=${DECODE_INPUT:-128}
prefill_len=${PREFILL_LEN:-512}
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
# Both servers get a logit_bias that bans the tokens that are not whole UTF-8 by themselves:
# llama-server fails an answer whose text ends inside a UTF-8 sequence (HTTP 500, "does not match
# the expected Content-only format"), which a random-weight model produces often
# (bench/utf8_fragment_bias.py says why and how; 128 byte tokens on the synthesized vocabulary).
bias=$model.utf8-fragment-bias.json
if [[ ! -s $bias ]]; then
  gguf_py=$(dirname "$(dirname "$(dirname "$ls")")")/gguf-py
  [[ -d $gguf_py ]] || gguf_py=${LLAMA_CACHE:-$build/bench-cache/llama.cpp}/gguf-py
  $py "$repo/bench/utf8_fragment_bias.py" "$model" "$gguf_py" >"$bias.tmp" && mv "$bias.tmp" "$bias"
fi
extra_body="{\"logit_bias\": $(cat "$bias")}"
out="$build/bench-cache/vs-llama-server-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"

load1() { cut -d' ' -f1 /proc/loadavg; }
echo "vs_llama_server: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
if ! $py -c "import sys; sys.exit(0 if float('$(load1)') <= float('$max_load') else 1)"; then
  echo "vs_llama_server: WARNING: 1-minute load $(load1) > $max_load: other processes share the CPUs; figures will be low and noisy"
fi
echo "vs_llama_server: crossword $cw; llama-server $ls; model $model; results in $out"

# Same slots, total context (both split -c over -np), threads; greedy and ignore_eos come with
# every request from bench serve. Each server gets a fresh process per step (--spawn); the mem part
# starts one slot with exactly the context of each size ({ctx} = prompt + answer tokens).
cw_cmd="$cw serve -m $model --port {port} --host 127.0.0.1 -np $slots -c $ctx -t $threads --log-level warn"
ls_cmd="$ls -m $model --port {port} --host 127.0.0.1 -np $slots -c $ctx -t $threads -tb $threads --no-webui"
cw_mem="$cw serve -m $model --port {port} --host 127.0.0.1 -np 1 -c {ctx} -t $threads --log-level warn"
ls_mem="$ls -m $model --port {port} --host 127.0.0.1 -np 1 -c {ctx} -t $threads -tb $threads --no-webui"
# --no-known-answer: the synthesized file has random weights (no question has a known answer).
common=(--no-known-answer --dataset bible --parts "$parts" --output-len "$out_len"
        --ctx-output-len "$out_len" --decode-input-len "$decode_input" --prefill-len "$prefill_len"
        --conc-levels "$conc" --conc-input-len "$conc_input" --ctx-ladder "$ladder"
        --warmup 1 --runs 1 --guard-max-other "$guard" --percentiles 50,90,99 --model-file "$model"
        --extra-body "$extra_body")

for i in $(seq 1 "$reps"); do
  for engine in crossword llama-server; do
    cmd=$cw_cmd mem=$cw_mem
    [[ $engine == llama-server ]] && cmd=$ls_cmd mem=$ls_mem
    "$cw" bench serve --spawn "$cmd" --mem-spawn "$mem" --spawn-log "$out/$engine.log" \
      "${common[@]}" --label "$engine" --result-file "$out/$engine-$i.json" >"$out/$engine-$i.md"
    echo "  rep $i $engine done, load $(load1)"
  done
done

# One table of medians over the REPS result files of each server, ratios crossword / llama-server,
# and the charts (tokens/s against requests at once and context, TTFT, peak memory).
"$cw" bench serve --compare "$out"/crossword-*.json "$out"/llama-server-*.json \
  --charts "$out/charts" >"$out/table.md"
echo
echo "model $model; -np $slots -c $ctx -t $threads; $reps interleaved runs per server"
cat "$out/table.md"
echo
echo "vs_llama_server: table and charts in $out/charts (report.md)"
