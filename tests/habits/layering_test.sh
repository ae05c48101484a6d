#!/usr/bin/env bash
# The layering check passes on the tree and catches each kind of violation in a synthetic one.
# Usage: layering_test.sh SRC_DIR
set -u
here=$(dirname "$0")
check="/usr/bin/python3 $here/layering_check.py"
fail=0
$check "$1" || fail=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case_() {  # case_ WANT_RC FILE LINE: a tree with one file holding LINE
  local want=$1 file=$2 line=$3
  rm -rf "$tmp/src" && mkdir -p "$tmp/src/$(dirname "$file")"
  printf '%s\n' "$line" >"$tmp/src/$file"
  $check "$tmp/src" >"$tmp/out" 2>&1
  local rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL: $file with '$line': exit $rc, want $want: $(cat "$tmp/out")"
    fail=1
  fi
}
case_ 1 base/log.cc '#include "engine/engine.h"'
case_ 1 core/x.h '#include "gguf/gguf.h"'
case_ 1 kernels/x.cc '#include "tokenizer/tokenizer.h"'
case_ 1 chat/x.cc '#include "engine/engine.h"'
case_ 1 engine/x.cc '#include "server/api.h"'
case_ 1 server/x.cc '#include "cli/common.h"'
case_ 1 decode/CMakeLists.txt 'target_link_libraries(crossword_decode PUBLIC crossword_engine)'
case_ 1 newlayer/x.cc '// a folder without a layer'
case_ 1 model/x.cc '#include "backends/registry.h"'
case_ 0 backends/cpu/x.h '#include "model/model.h"'
case_ 0 decode/x.cc '#include "grammar/grammar.h"'
case_ 0 engine/x.cc '#include "chat/template.h"'
case_ 0 cli/x.cc '#include "server/server.h"'
case_ 0 model/model_test.cc '#include "tools/synth.h"'
case_ 0 decode/CMakeLists.txt 'target_link_libraries(crossword_decode PUBLIC crossword_model crossword_grammar)'
[[ $fail -eq 0 ]] && echo "layering_test: ok"
exit $fail
