#!/usr/bin/env bash
# Builds llama.cpp's llama-bench natively (GGML_NATIVE) from the source that the node-llama-cpp
# npm package ships as a git bundle; a benchmark peer only, never part of crossword's build.
# Usage: bench/build_llama_bench.sh BUILD_DIR [native|noamx]   (prints the llama-bench path)
#   native: -march=native as the lead's build; noamx: the same minus AMX (-mno-amx-*), for
#   machines where ggml's AMX kernels die with SIGILL (seen on AMX VMs: tile config lost).
# The clone and builds are cached under BUILD_DIR/bench-cache/llama.cpp and reused.
set -euo pipefail
build=${1:?usage: build_llama_bench.sh BUILD_DIR [native|noamx]}
variant=${2:-native}
build=$(cd "$build" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
cache="$build/bench-cache/llama.cpp"
case "$variant" in
  native) bdir="$cache/build"; flags="" ;;
  noamx) bdir="$cache/build-noamx"; flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
  *) echo "build_llama_bench: unknown variant '$variant' (native or noamx)" >&2; exit 2 ;;
esac
bin="$bdir/bin/llama-bench"
if [[ -x "$bin" ]]; then echo "$bin"; exit 0; fi
"$repo/scripts/setup-oracles" "$build" >&2
bundle="$build/oracles/node_modules/node-llama-cpp/llama/gitRelease.bundle"
[[ -f "$bundle" ]] || { echo "build_llama_bench: no $bundle (setup-oracles failed?)" >&2; exit 2; }
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9
if [[ ! -d "$cache/.git" ]]; then
  rm -rf "$cache"
  git clone -q "$bundle" "$cache" >&2
fi
echo "build_llama_bench: building llama-bench ($variant) in $bdir (5-30 minutes on 2 cores)" >&2
cmake -S "$cache" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" >/dev/null
cmake --build "$bdir" --target llama-bench -j"${JOBS:-2}" >&2
echo "$bin"
