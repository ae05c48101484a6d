#!/usr/bin/env bash
# The multi-row VNNI kernels fetch the next chunk of a load-time tile copy while they multiply the
# current one (kernels/vnni_util.h SpreadPrefetch, prefetcht1). GCC 12 once deleted those
# requests as dead code with no error (a loop of _mm_prefetch through a pointer held in an
# object), which made an 8-row product of the Q6_K head 1.3-1.6x slower: this checks that each
# object file still holds them.
# Usage: prefetch_check.sh OBJECT_FILE... (those named vnni_*.o are checked, the others skipped)
set -u
command -v objdump >/dev/null || { echo "prefetch_check: objdump is not installed (binutils)"; exit 1; }
[[ $# -gt 0 ]] || { echo "prefetch_check: no object files given"; exit 2; }
rc=0
checked=0
for o in "$@"; do
  [[ $(basename "$o") == vnni_*.o ]] || continue
  checked=$((checked + 1))
  n=$(objdump -d --no-show-raw-insn "$o" | grep -c 'prefetcht1')
  if [[ $n -eq 0 ]]; then
    echo "prefetch_check: $o has no prefetcht1: the tile kernels' prefetches were compiled out"
    rc=1
  else
    echo "prefetch_check: $o: $n prefetcht1"
  fi
done
[[ $checked -gt 0 ]] || { echo "prefetch_check: no vnni_*.o among the objects given"; exit 1; }
exit $rc
