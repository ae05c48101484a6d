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
  # A timeout: a serve whose bad flag went unnoticed would otherwise serve forever.
  out=$(timeout 60 "$cw" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $code ]] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: crossword $* -> exit $rc (want $code), output: ${out:0:300}"
    fail=1
  fi
}
expect 2 "subcommand" # no subcommand
expect 2 "crossword: error: Could not convert" bench -p abc
expect 2 "crossword: error: The following argument was not expected: --bogus" run --bogus
expect 2 "unknown command .not-a-command.; commands: run" not-a-command
expect 2 "--mode must be ar, diffusion or spec (got 'bogus')" run --mode bogus -p hi
expect 2 "cannot open" run -m /nonexistent.gguf -p hi
expect 2 "--modes must be ar, diffusion or spec (got 'bogus')" check --modes ar bogus
expect 2 "draft-max must be in \[0, 255\] or auto (got 300)" run --mode spec --draft-max 300 -p hi
expect 0 "" run --mode spec --draft-max AUTO -p hi -n 2  # auto in any case, like the help's INT|auto
expect 0 "--draft-max INT|auto" run --help
expect 2 "verify-chunk must be in" run --mode spec --verify-chunk 300 -p hi
expect 2 "verify-chunk must be in" run --mode spec --verify-chunk " -1" -p hi
expect 2 "verify-chunk must be in" run --mode spec --verify-chunk "" -p hi
expect 2 "verify-chunk must be in" run --mode spec --verify-chunk abc -p hi
expect 2 "draft-p-min must be in" run --mode spec --draft-p-min 1.5 -p hi
# Structured output: a bad grammar or schema fails before the model loads, naming the problem;
# a good one constrains the answer.
gdir=$(mktemp -d)
printf 'root ::= "a" (\n' >"$gdir/bad.gbnf"
printf '{"type": "object", "properties": {"x": {"not": {}}}}' >"$gdir/bad.json"
printf 'root ::= ("yes" | "no") "."\n' >"$gdir/yn.gbnf"
printf '{"type": "array", "items": {"enum": ["north", "south"]}, "minItems": 2, "maxItems": 2}' >"$gdir/dirs.json"
expect 2 "expected ')' to close the group at line 1" run -p hi --grammar-file "$gdir/bad.gbnf" --log-level info
expect 2 "keyword 'not' is not supported" run -p hi --json-schema "$gdir/bad.json"
expect 2 "cannot read grammar file" run -p hi --grammar-file "$gdir/none.gbnf"
expect 2 "excludes" run -p hi --grammar-file "$gdir/yn.gbnf" --json-schema "$gdir/dirs.json"
expect 0 '^\(yes\|no\)\.$' run -p "Is it raining?" --grammar-file "$gdir/yn.gbnf" --log-level warn
expect 0 '^\["\(north\|south\)","\(north\|south\)"\]$' run --chat --no-think -p "Which ways?" --json-schema "$gdir/dirs.json" --mode diffusion --log-level warn
rm -rf "$gdir"
# serve checks its flags before binding the port: exit 2 and no "listening" line.
expect_serve() {  # expect_serve PATTERN ARGS...
  local pattern=$1
  shift
  expect 2 "$pattern" serve --port 0 "$@"
  if timeout 60 "$cw" serve --port 0 "$@" 2>&1 | grep -q "listening"; then
    echo "FAIL: crossword serve $* bound its port before rejecting the flag"
    fail=1
  fi
}
expect_serve "draft-max must be in" --draft-max -1
expect_serve "--mode must be ar, diffusion or spec" --mode bogus
expect_serve "draft-p-min must be in" --draft-p-min 2
expect_serve "block-size must be in" --block-size 1
expect_serve "max-block-size must be" --max-block-size 1
expect_serve "exceeds --max-block-size" --block-size 64 --max-block-size 32
expect_serve "\-b must be" -b 0
expect_serve "at least 16 per slot" -c 10
expect_serve "ctx-checkpoints must be" --ctx-checkpoints 0
expect_serve "metrics-compat must be none or vllm" --metrics-compat sglang
expect_serve "drain-timeout must be in" --drain-timeout -1
expect 0 "Usage" --help
expect 0 "crossword 0.1.0" --version
msgs=$(mktemp)
trap 'rm -f "$msgs"' EXIT
echo '[{"role": "user", "content": "Hi"}]' >"$msgs"
expect 0 '^\[[0-9]' tokenize -p "Hello world"
expect 0 "<|im_start|>assistant" template --messages "$msgs"
expect 2 "cannot open" tokenize -m /nonexistent.gguf -p hi
# bench -o json: stdout is one JSON object per line (load, sanity and bandwidth lines go to stderr).
json_out=$(timeout 120 "$cw" bench -p 8 -n 4 -r 1 --warmup 0 -o json --log-level silent 2>/dev/null)
if [[ -z $json_out ]] || grep -qv '^{' <<<"$json_out"; then
  echo "FAIL: bench -o json printed lines that are not JSON objects: ${json_out:0:300}"
  fail=1
fi
# The backend names the weights' tile copy, so a --no-repack figure cannot pass for a repacked one.
# The tiles exist on the AVX3_DL (VNNI) target only; elsewhere the bare target is right.
if grep -q '"backend":"CPU AVX3_DL' <<<"$json_out" && ! grep -q '"backend":"CPU AVX3_DL tiles"' <<<"$json_out"; then
  echo "FAIL: bench -o json does not say the embedded model's weights were repacked: ${json_out:0:300}"
  fail=1
fi
plain_out=$(timeout 120 "$cw" bench -p 8 -n 0 -r 1 --warmup 0 -o json --no-repack --log-level silent 2>/dev/null)
if grep -q 'tiles' <<<"$plain_out" || ! grep -q '"backend":"CPU ' <<<"$plain_out"; then
  echo "FAIL: bench --no-repack -o json: backend should be the bare CPU target: ${plain_out:0:300}"
  fail=1
fi
# run: a bad decoding flag fails before the model loads (no load log lines), as serve's do.
early=$(timeout 60 "$cw" run -p hi --block-size 1 --log-level info 2>&1)
if [[ $? -ne 2 ]] || grep -q "repacked" <<<"$early"; then
  echo "FAIL: run --block-size 1 should exit 2 before loading the model: ${early:0:300}"
  fail=1
fi
# check on a random-weight synth file: no known answers, said plainly (not "wrong results").
synth=$(mktemp --suffix=.gguf)
"$cw" gguf synth --preset tiny --type Q8_0 -o "$synth" >/dev/null 2>&1
expect 2 "synth file (random weights): it has no known answers" check -m "$synth"
rm -f "$synth"
# --log-level silent: run writes the answer and nothing to stderr.
err=$(timeout 60 "$cw" run -p hi -n 2 --log-level silent 2>&1 >/dev/null)
if [[ -n $err ]]; then
  echo "FAIL: run --log-level silent wrote to stderr: ${err:0:300}"
  fail=1
fi
[[ $fail -eq 0 ]] && echo "cli_usage_test: all cases passed"
exit $fail
