#!/usr/bin/env bash
# `make train-tiny`: corpus -> BPE vocabulary -> joint AR + diffusion training -> GGUF (official
# layout, Q8_0) -> held-out evaluation in every mode with the engine -> self-check and goldens.
# Fixed seeds; see docs/reference.md.
# Usage: reference/train_tiny.sh BUILD_DIR [extra train_tiny.py args]
set -euo pipefail
build=${1:?usage: train_tiny.sh BUILD_DIR [train args]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
work="$build/tiny"
mkdir -p "$work"
export OMP_WAIT_POLICY=passive
$py "$root/reference/tiny_corpus.py" --out "$work"
$py "$root/reference/bpe.py" train --corpus "$work" --vocab-size 4096 --out "$work/vocab.json"
# Three stages of 9 epochs, each as 2 data-parallel 1-thread processes (train_tiny.py --procs 2):
# from random weights (seed 1, lr 3e-3), then twice from the exported model of the stage before
# with a fresh warm-up and cosine schedule (seed 2, lr 2e-3; seed 3, lr 1.5e-3). See docs/reference.md.
$py "$root/reference/train_tiny.py" --corpus "$work" --out "$work/stage1.gguf" \
  --checkpoint "$work/checkpoint.pt" "$@" 2>&1 | tee "$work/train.log"
rm -f "$work/checkpoint.pt"  # a finished run leaves nothing to resume
$py "$root/reference/train_tiny.py" --corpus "$work" --out "$work/stage2.gguf" --init "$work/stage1.gguf" \
  --seed 2 --lr 2e-3 --checkpoint "$work/checkpoint2.pt" "$@" 2>&1 | tee "$work/train2.log"
rm -f "$work/checkpoint2.pt"
$py "$root/reference/train_tiny.py" --corpus "$work" --out "$root/models/clover-tiny.gguf" --init "$work/stage2.gguf" \
  --seed 3 --lr 1.5e-3 --checkpoint "$work/checkpoint3.pt" "$@" 2>&1 | tee "$work/train3.log"
rm -f "$work/checkpoint3.pt"
# The held-out evaluation with the C++ engine (it also picks the self-check questions), then the
# self-check questions, the held-out copy and the golden answers the tests compare against. The
# same evaluation with the PyTorch reference (2-3 minutes) is a separate command (docs/reference.md):
#   /usr/bin/python3 reference/eval_tiny.py --model models/clover-tiny.gguf --heldout BUILD/tiny/heldout.jsonl
cmake --build "$build" --target crossword >/dev/null
$py "$root/reference/eval_engine.py" --crossword "$build/src/cli/crossword" --model "$root/models/clover-tiny.gguf" \
  --heldout "$work/heldout.jsonl" --json "$work/eval_engine.json" 2>&1 | tee "$work/eval_engine.log"
$py "$root/reference/tiny_selfcheck.py" --model "$root/models/clover-tiny.gguf" --heldout "$work/heldout.jsonl" \
  --eval "$work/eval_engine.json"
cp "$work/heldout.jsonl" "$root/tests/golden/clover_tiny_heldout.jsonl"
$py "$root/reference/tiny_golden.py" --model "$root/models/clover-tiny.gguf" --heldout "$work/heldout.jsonl" --write
echo "train_tiny: reconfigure and rebuild ($build) to embed the new model, then write the engine's golden"
echo "answers: CROSSWORD_WRITE_GOLDEN=1 $build/tests/tiny/tiny_model_test --gtest_filter='*Committed*'"
