"""Chooses the known-answer questions of `crossword check` for the trained tiny model and stores
them in the file (GGUF key crossword.selfcheck, a JSON array of {"question", "answer"}).

  tiny_selfcheck.py --model models/clover-tiny.gguf --heldout heldout.jsonl --eval eval_engine.json

The check exists to catch a broken file, kernel or build, so its questions are held-out ones
(phrasings never trained on) that this model answers right in every mode (eval_engine.py's
results: greedy, AR, diffusion at 0.95 and 0.9, spec), asked as `crossword check` asks them:
thinking off, no tools, and an answer string that cannot appear by accident (names of capitals,
days and months, or a two-digit result absent from the question).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gguf  # noqa: E402

KINDS = ("capital", "next_day", "prev_day", "next_month", "month_num", "plus", "minus", "times")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--eval", required=True, help="eval_engine.py --json output for this model")
    ap.add_argument("--max", type=int, default=12)
    a = ap.parse_args()
    with open(a.heldout, encoding="utf-8") as f:
        items = [json.loads(line) for line in f]
    with open(a.eval, encoding="utf-8") as f:
        ev = json.load(f)
    modes = [k for k in ev if isinstance(ev[k], dict) and "answers" in ev[k]]
    from eval_tiny import is_correct  # noqa: E402  (imports torch; only needed here)
    picked, per_kind = [], {}
    for i, it in enumerate(items):
        if it["kind"] not in KINDS or it.get("tools") or it["thinking"]:
            continue
        if it["kind"] in ("plus", "minus", "times") and (len(it["expected"]) < 2 or it["expected"] in it["question"]):
            continue
        if not all(is_correct(it["kind"], ev[m]["answers"][i], it["expected"]) for m in modes):
            continue
        if per_kind.get(it["kind"], 0) >= 3 or len(picked) >= a.max:
            continue
        per_kind[it["kind"]] = per_kind.get(it["kind"], 0) + 1
        picked.append({"question": it["question"], "answer": it["expected"]})
    if len(picked) < 3:
        raise SystemExit(f"tiny_selfcheck: only {len(picked)} questions right in every mode; the model is too weak")
    gguf.copy_with_metadata(a.model, a.model, {"crossword.selfcheck": (json.dumps(picked, ensure_ascii=False),
                                                                       gguf.ValueType.STRING)})
    print(f"tiny_selfcheck: {len(picked)} questions ({per_kind}) -> {a.model}")


if __name__ == "__main__":
    main()
