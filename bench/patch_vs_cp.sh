#!/usr/bin/env bash
# Measures `crossword gguf patch` against `cp` of the same official-layout file, in one run.
# Both outputs are flushed to disk (patch fsyncs before its rename; cp is followed by `sync FILE`),
# the input is read once beforehand (warm page cache for both), and runs alternate cp / patch.
# Usage: bench/patch_vs_cp.sh BUILD_DIR WORK_DIR [LAYERS=8] [RUNS=3]
#   LAYERS=8 of clover-35b-a3b in Q4_0 gives a 4.4 GB file. Needs ~3x that free in WORK_DIR.
set -euo pipefail
build=${1:?usage: patch_vs_cp.sh BUILD_DIR WORK_DIR [LAYERS] [RUNS]}
work=${2:?usage: patch_vs_cp.sh BUILD_DIR WORK_DIR [LAYERS] [RUNS]}
layers=${3:-8}
runs=${4:-3}
bin="$build/src/cli/crossword"
mkdir -p "$work"
in="$work/official.gguf"
trap 'rm -f "$work/official.gguf" "$work/cp.gguf" "$work/patched.gguf"' EXIT

now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.3f\", $1 }"; }
echo "synthesizing clover-35b-a3b Q4_0, $layers layers, official layout ..." >&2
t0=$(now)
"$bin" gguf synth --preset clover-35b-a3b --type Q4_0 --layers "$layers" --layout official -o "$in" 2>/dev/null
t1=$(now)
size=$(stat -c %s "$in")
echo "synth: $size bytes in $(calc "$t1 - $t0") s" >&2
cat "$in" >/dev/null  # warm the page cache for both contenders

cp_times=() patch_times=()
for ((r = 1; r <= runs; r++)); do
  rm -f "$work/cp.gguf" "$work/patched.gguf"; sync
  t0=$(now); cp "$in" "$work/cp.gguf"; sync "$work/cp.gguf"; t1=$(now)
  cp_times+=("$(calc "$t1 - $t0")")
  rm -f "$work/cp.gguf"; sync
  t0=$(now); "$bin" gguf patch "$in" "$work/patched.gguf" 2>/dev/null; t1=$(now)
  patch_times+=("$(calc "$t1 - $t0")")
  echo "run $r: cp+sync ${cp_times[-1]} s, patch ${patch_times[-1]} s" >&2
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
cp_med=$(median "${cp_times[@]}")
patch_med=$(median "${patch_times[@]}")
out_size=$(stat -c %s "$work/patched.gguf")
echo "input $size bytes, patched output $out_size bytes, $runs runs, warm cache"
echo "cp+sync median ${cp_med} s ($(calc "$size / $cp_med / 1e6") MB/s)"
echo "patch   median ${patch_med} s ($(calc "$out_size / $patch_med / 1e6") MB/s)"
echo "ratio patch/cp: $(calc "$patch_med / $cp_med")"
