#!/usr/bin/env bash
# Tokenizer speed benchmark (not a test): single-core encode of English prose (bible-kjv +
# fortunes-min, ~4.5 MB) by crossword and by HF tokenizers' native build, same text, same run.
# Usage: tests/oracles/tok_bench.sh BUILD_DIR [REPEAT]   (needs the `crossword` target built)
# Both run pinned to CPU 0; each reports wall-clock and process-CPU MB/s (medians of REPEAT passes
# after one cold pass). The ratio line divides crossword's figures by HF's.
set -euo pipefail
build=$(cd "${1:?usage: tok_bench.sh BUILD_DIR [REPEAT]}" && pwd)
repeat=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out="$build/tok_bench"
mkdir -p "$out"
"$root/scripts/setup-oracles" "$build"
export ORACLE_DIR="$build/oracles"
/usr/bin/python3 "$here/tok_corpus.py" "$out/corpus.json" --english "$out/english.txt"
node "$here/hf_tokenizer.mjs" export "$out"
"$build/src/cli/crossword" tokenizer convert-hf "$out/qwen35.json" \
  --config "$out/tokenizer_config.json" -o "$out/qwen35.gguf"
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)
# HF: one sequence per call is single-threaded; keep rayon from spawning helpers anyway.
ours=$("${pin[@]}" "$build/src/cli/crossword" tokenizer bench -m "$out/qwen35.gguf" \
  -f "$out/english.txt" --repeat "$repeat")
hf=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false "${pin[@]}" \
  node "$here/hf_tokenizer.mjs" bench "$out/qwen35.json" "$out/english.txt" "$repeat")
echo "$ours"
echo "$hf"
/usr/bin/python3 - "$ours" "$hf" <<'EOF'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert a["bytes"] == b["bytes"] and a["tokens"] == b["tokens"], "different inputs or token counts"
print(json.dumps({"ratio_wall": round(a["mb_per_s"] / b["mb_per_s"], 2),
                  "ratio_cpu": round(a["cpu_mb_per_s"] / b["cpu_mb_per_s"], 2),
                  "same_token_count": a["tokens"] == b["tokens"]}))
EOF
