#!/usr/bin/env bash
# Edges of the CLI found by issue 24's hostile pass: each bad value is a clear error with exit
# code 2 (before any damage), each questionable one a warning; Ctrl-C in `run` still prints the
# answer's final newline and the stats line (exit 130); a long prompt shows its progress on a
# terminal. Usage: cli_edges_test.sh CROSSWORD_BINARY
set -u
cw=$1
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
expect() {  # expect CODE PATTERN ARGS...: exit code CODE and PATTERN (grep -E) in stderr+stdout
  local code=$1 pattern=$2
  shift 2
  local out rc
  out=$(timeout 120 "$cw" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $code ]] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: crossword $* -> exit $rc (want $code), output: ${out:0:400}"
    fail=1
  fi
}
hw=$(nproc)
# -n large enough to overflow prompt + n into a negative context.
expect 2 "-n must be in \[1, 2147483647\], or -1 \(until the context is full\) \(got 9223372036854775807\)" run -p hi -n 9223372036854775807
expect 2 "-n must be in \[1, 2147483647\], or -1 \(until the context is full\) \(got 0\)" run -p hi -n 0
# An empty -p is named as such (not "no prompt given"); so is an empty file.
expect 2 "the prompt \(-p\) is empty" run -p ""
: >"$dir/empty.txt"
expect 2 "the prompt file '.*empty.txt' is empty" run -f "$dir/empty.txt"
expect 2 "give exactly one of -p TEXT or -f FILE" run
# Context size: at least 1, at most 2^24 tokens, in every model-running command.
# -c 0 (run's default) is the model's training context (at most 4096): no warning about exceeding
# it unless -c asks for more.
out=$("$cw" run -p hi -n 2 -c 0 --log-level warn 2>&1) || { echo "FAIL: run -c 0 -> $out"; fail=1; }
if grep -q "this model was trained on" <<<"$out"; then echo "FAIL: run's default context warns: $out"; fail=1; fi
expect 2 "ctx-size: Value -5 not in range" run -p hi -c -5
expect 2 "ctx-size: Value 99999999999 not in range" run -p hi -c 99999999999
expect 2 "ctx-size: Value 0 not in range" bench -c 0
# run --stats: a pass kind of the mode that ran no pass shows "-", not a time or expert count of 0
# (this answer fits one diffusion block: no commit pass).
expect 0 "ms per pass: prefill [0-9.]+, denoise [0-9.]+, commit -$" run -t 1 --mode diffusion --chat -p "What is 7 plus 5?" --stats
expect 0 "\(U\): prefill [0-9.]+, denoise [0-9.]+, commit - \(of" run -t 1 --mode diffusion --chat -p "What is 7 plus 5?" --stats
# --threshold and --block-size: 0 is out of range, not "the model's default".
expect 2 "--threshold must be in \(0, 1\] \(got 0\)" run -p hi --mode diffusion --threshold 0
expect 2 "--threshold must be in \(0, 1\] \(got 0\)" serve --port 0 --threshold 0
# Positive but 0 as a float: named as the server names it, not "got 0".
expect 2 "--threshold is 0 as a 32-bit float \(got 1e-300; the smallest is about 1.4e-45\)" run -p hi --mode diffusion --threshold 1e-300
expect 2 "--block-size must be in \[2, 256\] \(got 0\)" run -p hi --mode diffusion --block-size 0
# More drafts than a block holds: said, and the run goes on (drafting block size - 1).
expect 0 "spec's draft length 100 \(--draft-max\) is above --block-size 16 - 1: a round drafts 15 tokens at most" run -p hi -n 4 --mode spec --block-size 16 --draft-max 100
# Threads: refused beyond 4 per hardware thread (before any is started), a warning above 1.
expect 2 "-t 1000 is more than 4 threads per hardware thread \($hw here\)" run -p hi -t 1000
expect 2 "threads: Value -3 not in range" run -p hi -t -3
expect 0 "-t $((hw + 1)) exceeds the $hw hardware threads" run -p hi -n 2 -t $((hw + 1))
# A context beyond the model's training context: a warning, and the run goes on.
expect 0 "-c 1000000 exceeds the [0-9]+ tokens this model was trained on" run -p hi -n 2 -c 1000000
# bench with nothing to measure.
expect 2 "-p 0 and -n 0 leave nothing to measure" bench -p 0 -n 0
expect 2 "-p and -n must be at most 16777216" bench -p 99999999 -n 1

# Ctrl-C: the answer so far, a final newline, the stats line with finish: cancelled, exit 130.
# A grammar that lets the answer end only after 20,000 characters keeps the model generating for
# seconds on any machine (1,000 characters once finished inside the 0.1 s poll on a fast run).
printf 'root ::= w{4000}\nw ::= [a-z ]{5}\n' >"$dir/long.gbnf"
"$cw" run -p "Tell me a story." -n 16000 -c 16384 --grammar-file "$dir/long.gbnf" \
  >"$dir/out" 2>"$dir/err" &
pid=$!
for _ in $(seq 1 3000); do
  [[ $(stat -c %s "$dir/out" 2>/dev/null || echo 0) -ge 20 ]] && break
  sleep 0.02
done
kill -INT $pid
wait $pid
rc=$?
if [[ $rc -ne 130 ]]; then
  echo "FAIL: run after Ctrl-C exited $rc (want 130); stderr: $(head -c 400 "$dir/err")"
  fail=1
fi
if [[ $(tail -c 1 "$dir/out" | od -An -c | tr -d ' ') != '\n' ]]; then
  echo "FAIL: run after Ctrl-C: the answer does not end with a newline"
  fail=1
fi
if ! grep -q "generated [0-9]* tokens.*finish: cancelled" "$dir/err"; then
  echo "FAIL: run after Ctrl-C printed no stats line: $(tail -c 400 "$dir/err")"
  fail=1
fi

# Prompt-processing progress on a terminal (script(1) gives the command a pty): a prompt of
# several prefill chunks draws "prompt N/M tokens (P%), R tokens/s, ETA S s".
for i in $(seq 1 200); do printf 'The quick brown fox jumps over the lazy dog number %d. ' "$i"; done >"$dir/long.txt"
script -qec "$cw run -f $dir/long.txt -n 1 -c 8192" /dev/null >"$dir/tty" 2>&1
if ! grep -qE "prompt [0-9]+/[0-9]+ tokens \([0-9]+%\), [0-9.]+ tokens/s, ETA [0-9]+ s" "$dir/tty"; then
  echo "FAIL: run on a terminal showed no prompt progress: $(head -c 400 "$dir/tty")"
  fail=1
fi
# ... and none when stderr is not a terminal.
timeout 120 "$cw" run -f "$dir/long.txt" -n 1 -c 8192 >/dev/null 2>"$dir/notty"
if grep -q "tokens/s, ETA" "$dir/notty"; then
  echo "FAIL: run drew progress on a non-terminal stderr"
  fail=1
fi
# Integer flags read leading zeros as decimal, as llama.cpp's std::stoi (CLI11 alone read -n 010
# as octal 8 and refused -n 08).
expect 0 "\| tg10 " bench -p 0 -n 010 -r 1
expect 0 "\| tg8 " bench -p 0 -n 08 -r 1
expect 0 "\| pp9 " bench -p 009 -n 0 -r 1
# ... also the options with a range or sign check (CLI11 names them INT:...): -c, -t.
expect 0 "generated 99 tokens" run -p hi -n -1 -c 0100 --stats
expect 0 "\| 2 \| tg2 " bench -p 0 -n 2 -r 1 -t 02
# A base prefix is refused, not read as hex (std::stoi would read 0x10 as 0).
expect 2 "expects a decimal integer \(got 0x10\)" run -p hi -n 0x10
expect 2 "expects a decimal integer \(got 0b11\)" bench -t 0b11
[[ $fail -eq 0 ]] && echo "cli_edges_test: all cases passed"
exit $fail
