#!/usr/bin/env bash
# CLI checks for `crossword gguf`: inspect text/JSON verdicts, patch exit codes (0 done, 0 already
# upstream with OUT a copy, 2 not Clover, 2 same file), no output left behind on refusal.
# Usage: gguf_cli_test.sh PATH/TO/crossword
set -euo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "gguf_cli_test: $*" >&2; exit 1; }

"$bin" gguf synth --preset tiny --type Q8_0 -o "$dir/off.gguf" 2>/dev/null
# (Output goes to files first: `| grep -q` would SIGPIPE the writer under pipefail.)
"$bin" gguf inspect "$dir/off.gguf" >"$dir/off.txt"
grep -q "layout:        official (fork) layout" "$dir/off.txt" || fail "inspect text verdict"
"$bin" gguf inspect --json "$dir/off.gguf" >"$dir/off.json"
/usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["layout"]["verdict"] == "official (fork) layout", d["layout"]
assert len(d["layout"]["differences"]) == 3
assert d["architecture"] == "clover_moe"
assert {m["type"] for m in d["quant_mix"]} == {"F32", "Q8_0"}
' <"$dir/off.json" || fail "inspect --json"

"$bin" gguf patch "$dir/off.gguf" "$dir/up.gguf" 2>"$dir/log" || fail "patch exit $?"
grep -q "MB/s" "$dir/log" || fail "patch prints no throughput"
"$bin" gguf inspect "$dir/up.gguf" >"$dir/up.txt"
grep -q "layout:        upstream layout" "$dir/up.txt" || fail "patched verdict"

"$bin" gguf patch "$dir/up.gguf" "$dir/again.gguf" 2>"$dir/log" || fail "nothing-to-do exit $?"
grep -q "already has the upstream layout: nothing to fix; copied it unchanged" "$dir/log" ||
  fail "nothing-to-do message: $(cat "$dir/log")"
cmp -s "$dir/up.gguf" "$dir/again.gguf" || fail "nothing-to-do: OUT is not a copy of IN"

# A valid GGUF of another architecture: refused with exit 2.
/usr/bin/python3 -c '
import struct, sys
key, val = b"general.architecture", b"llama"
sys.stdout.buffer.write(struct.pack("<IIQQ", 0x46554747, 3, 0, 1) + struct.pack("<Q", len(key)) + key
                        + struct.pack("<IQ", 8, len(val)) + val)' >"$dir/llama.gguf"
set +e
"$bin" gguf patch "$dir/llama.gguf" "$dir/x.gguf" 2>"$dir/log"; rc=$?
set -e
[[ $rc -eq 2 ]] || fail "non-Clover exit $rc, expected 2"
grep -q "not a Clover GGUF file" "$dir/log" || fail "non-Clover message: $(cat "$dir/log")"
[[ -z "$(ls "$dir" | grep '^x.gguf')" ]] || fail "refusal left a file"

cp "$dir/off.gguf" "$dir/keep.gguf"
set +e
"$bin" gguf patch "$dir/off.gguf" "$dir/off.gguf" 2>/dev/null; rc=$?
set -e
[[ $rc -eq 2 ]] || fail "same-file exit $rc, expected 2"
cmp -s "$dir/off.gguf" "$dir/keep.gguf" || fail "input was modified"
echo "gguf_cli_test: ok"
