#!/usr/bin/env bash
# clang-format check: every tracked C++ file is formatted by the repository's .clang-format
# (a commit that is not fails `make test`; run `clang-format -i FILE` on what it lists).
# Usage: format_check.sh REPO_DIR
set -u
cd "$1" || exit 2
command -v clang-format >/dev/null ||
  { echo "format_check: clang-format is not installed (scripts/install-deps)"; exit 1; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cpp' '*.hpp')
[[ ${#files[@]} -gt 0 ]] || { echo "format_check: no C++ files found (not a git checkout?)"; exit 1; }
# One process for all files; each unformatted file is named in clang-format's warnings.
out=$(clang-format --dry-run --Werror "${files[@]}" 2>&1)
rc=$?
if [[ $rc -ne 0 ]]; then
  grep -oE '^[^:]+\.(cc|h|cpp|hpp):' <<<"$out" | sort -u | sed 's/:$//; s/^/format_check: not clang-format clean: /'
  exit 1
fi
echo "format_check: ${#files[@]} files clean"
