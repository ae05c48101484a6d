#!/usr/bin/env bash
# Issue 4's speed benchmark: crossword vs llama.cpp's llama-bench on the same 4-layer synth files
# (real Clover widths, qwen35moe upstream layout), prompt processing and generation, runs of the two
# engines interleaved so both see the same machine state; medians and ratios. Not part of make test.
# Usage: bench/speed_vs_llama.sh [BUILD_DIR]
#   env: TYPES="Q8_0 Q4_0"  REPS=5 (measured runs per engine, after one warm-up run each)
#        THREADS=2  PP=512  TG=128  LAYERS=4  LLAMA_VARIANT=auto|native|noamx  MAX_LOAD=2.5
set -euo pipefail
build=${1:-build}
build=$(cd "$build" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
types=${TYPES:-"Q8_0 Q4_0"}
reps=${REPS:-5}
threads=${THREADS:-2}
pp=${PP:-512}
tg=${TG:-128}
layers=${LAYERS:-4}
variant=${LLAMA_VARIANT:-auto}
max_load=${MAX_LOAD:-2.5}
py=/usr/bin/python3

cw="$build/src/cli/crossword"
cmake --build "$build" --target crossword -j2 >/dev/null
models="$build/bench-cache/models"
mkdir -p "$models"
out="$build/bench-cache/speed-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"

load1() { cut -d' ' -f1 /proc/loadavg; }
echo "speed_vs_llama: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
if $py -c "import sys; sys.exit(0 if float('$(load1)') <= float('$max_load') else 1)"; then :; else
  echo "speed_vs_llama: WARNING: 1-minute load $(load1) > $max_load: other processes share the CPUs; figures will be low and noisy"
fi

# llama-bench: native build; where its AMX kernels crash (SIGILL), the same build without AMX.
pick_llama() {
  local model=$1 bin
  if [[ $variant != auto ]]; then "$repo/bench/build_llama.sh" "$build" llama-bench "$variant"; return; fi
  bin=$("$repo/bench/build_llama.sh" "$build" llama-bench native)
  if "$bin" -m "$model" -p 16 -n 0 -r 1 -t "$threads" -o jsonl >/dev/null 2>&1; then echo "$bin"; return; fi
  echo "speed_vs_llama: the native llama-bench failed on $model (rc $?; SIGILL = its AMX tiles); using the build without AMX" >&2
  "$repo/bench/build_llama.sh" "$build" llama-bench noamx
}

for t in $types; do
  model="$models/synth$layers-$t-qwen35moe.gguf"
  if [[ ! -f $model ]]; then
    echo "speed_vs_llama: writing $model (a few minutes)"
    "$cw" gguf synth --preset clover-35b-a3b --layers "$layers" --type "$t" --arch qwen35moe \
      --layout upstream --threads "$threads" -o "$model" >/dev/null
  fi
  lb=$(pick_llama "$model")
  echo "speed_vs_llama: $t: crossword $cw; llama-bench $lb"
  for i in $(seq 0 "$reps"); do  # run 0 is the warm-up of each engine (discarded)
    "$cw" bench -m "$model" -p "$pp" -n "$tg" -t "$threads" -r 1 --warmup 1 --log-level warn -o json \
      >"$out/cw-$t-$i.jsonl"
    "$lb" -m "$model" -p "$pp" -n "$tg" -t "$threads" -r 1 -o jsonl >"$out/lb-$t-$i.jsonl" 2>/dev/null
    echo "  run $i done, load $(load1)"
  done
done

$py - "$out" "$reps" "$pp" "$tg" "$types" <<'EOF'
import json, statistics, sys, glob, os
out, reps, pp, tg, types = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5].split()
print()
print(f"| type | test | crossword t/s (median of {reps}) | llama-bench t/s (median of {reps}) | ratio | crossword GB/s of weights |")
print("| --- | --- | ---: | ---: | ---: | --- |")
for t in types:
    cw = {"pp": [], "tg": []}; lb = {"pp": [], "tg": []}; extra = []
    for i in range(1, reps + 1):
        for line in open(os.path.join(out, f"cw-{t}-{i}.jsonl")):
            if not line.startswith("{"):  # load / sanity / bandwidth lines
                continue
            j = json.loads(line)
            key = "pp" if j["test"].startswith("pp") else "tg"
            cw[key].append(j["median"])
            if key == "tg": extra.append((j["median"], j["extra"]))
        for line in open(os.path.join(out, f"lb-{t}-{i}.jsonl")):
            j = json.loads(line)
            key = "pp" if j["n_prompt"] > 0 else "tg"
            lb[key].append(j["avg_ts"])
    for key, name in (("pp", "pp" + pp), ("tg", "tg" + tg)):
        a, b = statistics.median(cw[key]), statistics.median(lb[key])
        print(f"| {t} | {name} | {a:.2f} | {b:.2f} | {a / b:.2f}x | {sorted(extra)[len(extra) // 2][1] if key == 'tg' else ''} |")
print(f"\nraw results: {out}")
EOF
echo "speed_vs_llama: load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
