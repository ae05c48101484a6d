#!/usr/bin/env bash
# `crossword run --device vulkan` on the embedded tiny model: the answers of the CLI (AR and spec,
# greedy) are the CPU engine's, word for word, and the AR answer is right. Diffusion is left out:
# its threshold decisions may flip on near-ties within the logits bounds (int8 activations on the
# GPU), so its text is not required to match.
# Exit 77 (ctest: skipped, with the reason printed) only where no Vulkan device exists.
set -uo pipefail
crossword=$1
if ! "$crossword" run --list-devices 2>/dev/null | grep -q '^vulkan:'; then
  echo "SKIP: no Vulkan device on this machine (crossword run --list-devices lists none)"
  exit 77
fi
fail=0
ask() {  # device mode prompt -> the answer text (stdout), the process status checked
  local out
  out=$("$crossword" run --device "$1" --mode "$2" -n 32 -p "$3" 2>/tmp/run_device.$$.err) || {
    echo "FAIL: run --device $1 --mode $2 exited $?: $(tail -1 /tmp/run_device.$$.err)"
    fail=1
  }
  printf '%s' "$out"
}
for prompt in "What is the capital of France?" "What is 2 plus 2?"; do
  for mode in ar spec; do
    cpu=$(ask cpu "$mode" "$prompt")
    gpu=$(ask vulkan "$mode" "$prompt")
    if [[ "$cpu" != "$gpu" ]]; then
      echo "FAIL: $mode '$prompt': cpu and vulkan differ"
      echo "  cpu:    ${cpu//$'\n'/ }"
      echo "  vulkan: ${gpu//$'\n'/ }"
      fail=1
    else
      echo "ok   $mode '$prompt': identical (${#cpu} bytes)"
    fi
  done
done
answer=$(ask vulkan ar "What is the capital of France?")
if [[ "$answer" != *Paris* ]]; then
  echo "FAIL: the AR answer on the GPU does not name Paris: ${answer//$'\n'/ }"
  fail=1
fi
rm -f /tmp/run_device.$$.err
exit $fail
