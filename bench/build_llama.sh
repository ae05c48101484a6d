#!/usr/bin/env bash
# Builds one llama.cpp tool (llama-bench or llama-server) natively (GGML_NATIVE) from the source that
# the node-llama-cpp npm package ships as a git bundle; a benchmark peer only, never part of
# crossword's build.
# Usage: bench/build_llama.sh BUILD_DIR llama-bench|llama-server [native|noamx]   (prints its path)
#   native: -march=native as the lead's build; noamx: the same minus AMX (-mno-amx-*), for
#   machines where ggml's AMX kernels die with SIGILL (seen on AMX VMs: tile config lost).
#   env: LLAMA_CACHE=DIR where the clone and its builds live (default BUILD_DIR/bench-cache/llama.cpp);
#        JOBS=2 (the build runs under nice).
# The clone and builds are cached and reused: a first build takes 5-40 minutes on 2 cores.
set -euo pipefail
usage="usage: build_llama.sh BUILD_DIR llama-bench|llama-server [native|noamx]"
build=${1:?$usage}
target=${2:?$usage}
variant=${3:-native}
build=$(cd "$build" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${LLAMA_CACHE:-$build/bench-cache/llama.cpp}
case "$target" in
  llama-bench) server=OFF ;;
  llama-server) server=ON ;;
  *) echo "build_llama: unknown target '$target' (llama-bench or llama-server)" >&2; exit 2 ;;
esac
case "$variant" in
  native) bdir="$cache/build"; flags="" ;;
  noamx) bdir="$cache/build-noamx"; flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
  *) echo "build_llama: unknown variant '$variant' (native or noamx)" >&2; exit 2 ;;
esac
# The server needs its own configuration (LLAMA_BUILD_SERVER=ON); keep it beside the bench build.
[[ $server == ON ]] && bdir="$bdir-server"
bin="$bdir/bin/$target"
if [[ -x "$bin" ]]; then echo "$bin"; exit 0; fi
bundle="$build/oracles/node_modules/node-llama-cpp/llama/gitRelease.bundle"
[[ -f "$bundle" ]] || "$repo/scripts/setup-oracles" "$build" >&2
[[ -f "$bundle" ]] || { echo "build_llama: no $bundle (setup-oracles failed?)" >&2; exit 2; }
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9
if [[ ! -d "$cache/.git" ]]; then
  rm -rf "$cache"
  git clone -q "$bundle" "$cache" >&2
fi
echo "build_llama: building $target ($variant) in $bdir" >&2
cmake -S "$cache" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=$server "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" >/dev/null
nice -n 10 cmake --build "$bdir" --target "$target" -j"${JOBS:-2}" >&2
echo "$bin"
