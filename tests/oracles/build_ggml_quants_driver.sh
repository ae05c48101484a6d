#!/usr/bin/env bash
# Builds the ggml reference-quantization oracle (tests/oracles/ggml_quants_driver.c) against the
# llama.cpp source that the npm package node-llama-cpp ships as a git bundle.
# Usage: tests/oracles/build_ggml_quants_driver.sh BUILD_DIR  -> BUILD_DIR/oracles/bin/ggml_quants_driver
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: build_ggml_quants_driver.sh BUILD_DIR}" && pwd)
"$root/scripts/setup-oracles" "$build"
oracles="$build/oracles"
bundle="$oracles/node_modules/node-llama-cpp/llama/gitRelease.bundle"
src="$oracles/llama.cpp-src"
out="$oracles/bin/ggml_quants_driver"
exec 8>"$oracles/.llama-src.lock"
flock 8
if [[ ! -f "$src/ggml/src/ggml-quants.c" ]]; then
  rm -rf "$src.tmp"
  git clone -q "$bundle" "$src.tmp" 2>/dev/null
  mv "$src.tmp" "$src"
fi
driver="$root/tests/oracles/ggml_quants_driver.c"
if [[ ! -x "$out" || "$driver" -nt "$out" ]]; then
  mkdir -p "$oracles/bin"
  g="$src/ggml"
  # No -march: plain SSE2 float math without FMA contraction, like the reference definition.
  gcc -O2 -std=gnu11 -ffp-contract=off -I"$g/src" -I"$g/include" -I"$g/src/ggml-cpu" \
    "$driver" "$g/src/ggml-quants.c" -lm -o "$out.tmp"
  mv "$out.tmp" "$out"
fi
