#!/usr/bin/env bash
# `make install`'s prefix is what the Dockerfile's runtime stage (debian:12-slim) copies: check that
# the installed binary runs and finds every shared library either in PREFIX/lib or among the ones
# every Debian 12 image has (glibc, the GCC runtime, zlib: dependencies of dpkg and apt).
#   tests/k8s/install_check.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: install_check.sh BUILD_DIR}
prefix="$(cd "$build" && pwd)/install-check"
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
bin="$prefix/bin/crossword"
"$bin" --help >/dev/null
base='^(linux-vdso\.so|libc\.so|libm\.so|libstdc\+\+\.so|libgcc_s\.so|ld-linux-x86-64\.so|libz\.so)'
bad=0
while read -r lib arrow path _; do
  [[ "$arrow" == "=>" ]] || continue  # the vdso and the loader lines have no arrow
  if [[ "$path" == "not" ]]; then echo "FAIL $lib not found"; bad=1; continue; fi
  if [[ "$path" == "$prefix/bin/../lib/"* ]]; then continue; fi
  if [[ "$lib" =~ $base ]]; then continue; fi
  echo "FAIL $lib comes from $path, outside the install prefix and the base image"
  bad=1
done < <(ldd "$bin")
n=$(ls "$prefix/lib" | wc -l)
[[ $bad -eq 0 ]] && echo "ok   $bin runs; $n files in lib/, the rest from the base image"
rm -rf "$prefix"
exit $bad
