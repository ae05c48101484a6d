#!/usr/bin/env bash
# Builds llama.cpp's llama-server natively (GGML_NATIVE) from the source that the node-llama-cpp
# npm package ships as a git bundle; a benchmark peer only, never part of crossword's build.
# Usage: bench/build_llama_server.sh BUILD_DIR   (prints the llama-server path)
#   env: LLAMA_CACHE=DIR  where the clone and its build live (default BUILD_DIR/bench-cache/llama.cpp,
#        shared with build_llama_bench.sh); JOBS=2 (the build runs under nice).
# The clone and the build are cached and reused: the first build takes 10-40 minutes on 2 cores.
set -euo pipefail
build=${1:?usage: build_llama_server.sh BUILD_DIR}
build=$(cd "$build" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${LLAMA_CACHE:-$build/bench-cache/llama.cpp}
bdir="$cache/build-server"
bin="$bdir/bin/llama-server"
if [[ -x "$bin" ]]; then echo "$bin"; exit 0; fi
bundle="$build/oracles/node_modules/node-llama-cpp/llama/gitRelease.bundle"
if [[ ! -f $bundle ]]; then
  "$repo/scripts/setup-oracles" "$build" >&2
fi
[[ -f "$bundle" ]] || { echo "build_llama_server: no $bundle (setup-oracles failed?)" >&2; exit 2; }
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9
if [[ ! -d "$cache/.git" ]]; then
  rm -rf "$cache"
  git clone -q "$bundle" "$cache" >&2
fi
echo "build_llama_server: building llama-server in $bdir (10-40 minutes on 2 cores)" >&2
cmake -S "$cache" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON >/dev/null
nice -n 10 cmake --build "$bdir" --target llama-server -j"${JOBS:-2}" >&2
echo "$bin"
