#!/usr/bin/env bash
# Usage errors of the crossword CLI exit with 2 and say what is wrong; --help and --version exit 0;
# tokenize and template fall back to the embedded model without -m.
# Usage: cli_usage_test.sh CROSSWORD_BINARY
set -u
cw=$1
fail=0
expect() {  # expect CODE PATTERN ARGS...: exit code CODE and PATTERN somewhere in stderr+stdout
  local code=$1 pattern=$2
  shift 2
  local out rc
  out=$("$cw" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $code ]] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: crossword $* -> exit $rc (want $code), output: ${out:0:300}"
    fail=1
  fi
}
expect 2 "subcommand" # no subcommand
expect 2 "Could not convert" bench -p abc
expect 2 "unknown command .not-a-command.; commands: run" not-a-command
expect 2 "unknown decoding mode" run --mode bogus -p hi
expect 2 "cannot open" run -m /nonexistent.gguf -p hi
expect 2 "draft-max must be in" run --mode spec --draft-max 300 -p hi
expect 2 "draft-p-min must be in" run --mode spec --draft-p-min 1.5 -p hi
expect 2 "draft-max must be in" serve --port 0 --draft-max -1
expect 2 "block-size must be in" serve --port 0 --block-size 1
# Flags are checked before the port is bound: no "listening" line for a bad one.
out=$("$cw" serve --port 0 --draft-p-min 2 2>&1)
if grep -q "listening" <<<"$out"; then
  echo "FAIL: serve with a bad flag bound its port first: ${out:0:300}"
  fail=1
fi
expect 0 "Usage" --help
expect 0 "crossword 0.1.0" --version
msgs=$(mktemp)
trap 'rm -f "$msgs"' EXIT
echo '[{"role": "user", "content": "Hi"}]' >"$msgs"
expect 0 '^\[[0-9]' tokenize -p "Hello world"
expect 0 "<|im_start|>assistant" template --messages "$msgs"
expect 2 "cannot open" tokenize -m /nonexistent.gguf -p hi
[[ $fail -eq 0 ]] && echo "cli_usage_test: all cases passed"
exit $fail
