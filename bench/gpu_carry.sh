#!/usr/bin/env bash
# Packs what bench/gpu_check.sh needs on a GPU machine that has NVIDIA's driver but no package
# registry (the device tool's machines): the binaries built here, the shared libraries they need
# beyond an Ubuntu/Debian base image, and Debian's Vulkan loader, glvnd and validation-layer
# packages. Writes ROOT/.gpu (ignored by git; about 40 MB) and prints the command to run there
# with `.gpu` carried.
#
#   bench/gpu_carry.sh [BUILD_DIR]        (default: build; builds the needed targets first)
#
# The first H200 run (2026-12-04, docs/gpu.md) used exactly this layout: .gpu/build/<binaries>,
# .gpu/lib/*.so*, .gpu/gl/*.deb (unpacked into / there, as the device README says, for the
# loader and glvnd the NVIDIA ICD needs), .gpu/deb/vulkan-validationlayers_*.deb (unpacked by
# gpu_check.sh into a temporary directory).
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
[[ -z "${1:-}" || -d "$1" ]] || { echo "gpu_carry: no build directory '$1' (usage: bench/gpu_carry.sh [BUILD_DIR])" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=$root/.gpu
mapfile -t bins < <("$root/bench/gpu_check.sh" --binaries)
targets=()
for b in "${bins[@]}"; do targets+=("$(basename "$b")"); done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null

rm -rf "$out/build" "$out/lib"
mkdir -p "$out/lib" "$out/gl" "$out/deb"
for b in "${bins[@]}"; do
  mkdir -p "$out/build/$(dirname "$b")"
  cp "$build/$b" "$out/build/$b"
done
# Libraries from this machine that a CUDA base image lacks; the C/C++ runtime, libm, zlib and
# OpenSSL are left to the image (a newer glibc/libstdc++ there runs binaries built here).
keep='libhwy|libfmt|libcpp-httplib|libpcre2-8|libbrotli'
for b in "${bins[@]}"; do ldd "$build/$b"; done | awk '/=> \// {print $3}' | sort -u |
  grep -E "/($keep)[^/]*$" | while read -r lib; do cp -L "$lib" "$out/lib/"; done
# Debian's packages, downloaded (not installed) from this machine's apt sources.
(cd "$out/gl" && [[ -n $(ls ./*.deb 2>/dev/null) ]] ||
  apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null 2>&1)
(cd "$out/deb" && [[ -n $(ls ./vulkan-validationlayers_*.deb 2>/dev/null) ]] ||
  apt-get download vulkan-validationlayers >/dev/null 2>&1)
[[ -n $(ls "$out"/gl/libvulkan1_*.deb 2>/dev/null) ]] ||
  { echo "gpu_carry: could not download libvulkan1 (apt-get download)" >&2; exit 1; }
echo "gpu_carry: $(du -sh "$out" | cut -f1) in $out ($(ls "$out/lib" | wc -l) libraries)" >&2
cat <<'CMD'
device run, carry [".gpu"], timeout_s 450 (the script itself takes 1-3 minutes on an H200):
for f in .gpu/gl/*.deb; do dpkg -x $f /; done; ldconfig; I=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; [ -e $I ] && export VK_ICD_FILENAMES=$I VK_DRIVER_FILES=$I; export CROSSWORD_BUILD=.gpu/build; timeout 420 bench/gpu_check.sh $OUT; echo "exit $?"; grep -E 'rc=|wrote' $OUT/gpu_check.log
CMD
