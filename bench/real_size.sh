#!/usr/bin/env bash
# Issue 4's real-size run: a full-depth (40-layer) clover-35b-a3b Q4_0 synth file (~19.6 GB, more
# than this machine's free RAM: it runs from the mmap'ed page cache) must load and generate.
# Reports load time, peak RSS (/usr/bin/time -v) and decode tokens/s; deletes the file at the end
# (KEEP=1 keeps it). Not part of make test. Needs ~20 GB of free disk; writing takes ~12 minutes.
# Usage: bench/real_size.sh [BUILD_DIR]   env: TYPE=Q4_0 THREADS=2 PP=64 TG=32 REPS=3 DIR=BUILD/bench-cache
set -euo pipefail
build=${1:-build}
build=$(cd "$build" && pwd)
type=${TYPE:-Q4_0}
threads=${THREADS:-2}
pp=${PP:-64}
tg=${TG:-32}
reps=${REPS:-3}
dir=${DIR:-$build/bench-cache}
cw="$build/src/cli/crossword"
cmake --build "$build" --target crossword -j2 >/dev/null
mkdir -p "$dir"
model="$dir/clover-35b-a3b-full-$type.gguf"
cleanup() { [[ ${KEEP:-0} == 1 ]] || rm -f "$model" "$model".tmp-*; }
trap cleanup EXIT
echo "real_size: $(nproc) CPUs, $(free -g | awk '/Mem:/{print $2 " GiB RAM, " $7 " GiB available"}'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ ! -f $model ]]; then
  start=$(date +%s)
  /usr/bin/time -f "real_size: synth: %e s wall, peak RSS %M KiB" \
    "$cw" gguf synth --preset clover-35b-a3b --type "$type" --threads "$threads" -o "$model" 2>&1 | tail -2
  echo "real_size: wrote $(stat -c %s "$model") bytes in $(( $(date +%s) - start )) s"
fi
# Load + pp + tg in one process; /usr/bin/time -v reports the peak RSS of all of it (mapped file
# pages that were touched count as RSS).
/usr/bin/time -v "$cw" bench -m "$model" -p "$pp" -n "$tg" -t "$threads" -r "$reps" --warmup 1 \
  --log-level info 2>"$dir/real_size.time" | tee "$dir/real_size.out"
grep -E "loaded|load" "$dir/real_size.time" | grep -v "^\s*Page" | head -5 || true
grep -E "Maximum resident set size|Elapsed \(wall clock\)|Major \(requiring I/O\) page faults" "$dir/real_size.time"
echo "real_size: load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
