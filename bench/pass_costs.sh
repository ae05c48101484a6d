#!/usr/bin/env bash
# Issue 5's pass costs: on the 4-layer real-width Q4_0 synth file, the time of one 32-slot denoise
# pass and of one 32-token verify pass relative to one AR decode step (2 threads), and the cost of
# a GDN rollback (SequenceState::RollbackTo, replaying the kept tokens); then (issue 18) the sweep
# of AR-step / verify / denoise passes over 1-32 rows against their floors, as a table and as JSON
# lines (BUILD_DIR/bench-cache/sweep-TYPE.jsonl) that bench/project_speedup.py reads for its
# projection. Not part of make test.
# Usage: bench/pass_costs.sh [BUILD_DIR]   env: TYPE=Q4_0 CTX=512 BLOCK=32 REPS=7 THREADS=2
set -euo pipefail
build=${1:-build}
build=$(cd "$build" && pwd)
type=${TYPE:-Q4_0}
ctx=${CTX:-512}
block=${BLOCK:-32}
reps=${REPS:-7}
threads=${THREADS:-2}
cw="$build/src/cli/crossword"
cmake --build "$build" --target crossword -j2 >/dev/null
model="$build/bench-cache/models/synth4-$type-qwen35moe.gguf"
mkdir -p "$(dirname "$model")"
if [[ ! -f $model ]]; then
  echo "pass_costs: writing $model (a few minutes)"
  "$cw" gguf synth --preset clover-35b-a3b --layers 4 --type "$type" --arch qwen35moe --layout upstream \
    --threads "$threads" -o "$model" >/dev/null
fi
echo "pass_costs: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
# -p sets the committed context the passes run at (and times that prompt too); medians of REPS.
"$cw" bench -m "$model" -p "$ctx" -n 0 -t "$threads" -r "$reps" --warmup 1 --passes --block "$block" \
  --log-level warn
"$cw" bench -m "$model" -p "$ctx" -n 0 -t "$threads" -r "$reps" --warmup 1 --sweep --log-level warn
"$cw" bench -m "$model" -p "$ctx" -n 0 -t "$threads" -r "$reps" --warmup 1 --sweep -o json \
  --log-level warn >"$build/bench-cache/sweep-$type.jsonl"
/usr/bin/python3 "$(dirname "$0")/project_speedup.py" --sweep "$build/bench-cache/sweep-$type.jsonl" \
  --type "$type"
