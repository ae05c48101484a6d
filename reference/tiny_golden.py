"""Golden answers of the trained tiny model for the C++ end-to-end tests: greedy answers to fixed
held-out prompts in every mode (tests/golden/clover_tiny_answers.json, with the model's sha256).

  tiny_golden.py --model models/clover-tiny.gguf --heldout BUILD/tiny/heldout.jsonl --write
  tiny_golden.py --model models/clover-tiny.gguf --check   # CTest: the reference reproduces them
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import decode  # noqa: E402
import eval_tiny  # noqa: E402
import golden  # noqa: E402
import model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANSWERS = os.path.join(ROOT, "tests", "golden", "clover_tiny_answers.json")
FORMAT = "crossword-tiny-answers/1"
# (kind, count) of held-out questions in the golden answers and in the self-check.
GOLDEN_KINDS = [("capital", 2), ("plus", 1), ("times", 1), ("next_day", 1), ("month_num", 1), ("json", 1),
                ("weather_call", 1)]
MAX_TOKENS = 160
MODES = [("ar", {}), ("diffusion", {"threshold": 0.95}), ("diffusion", {"threshold": 0.9}), ("spec", {})]


def pick(items, kinds, predicate=lambda it: True):
    out = []
    for kind, n in kinds:
        out += [it for it in items if it["kind"] == kind and predicate(it)][:n]
    return out


def run_all(m, tok, items):
    runs = []
    for it in items:
        ids = tok.encode(it["prompt"])
        entry = {"kind": it["kind"], "question": it["question"], "thinking": it["thinking"],
                 "tools": it.get("tools", False), "expected": it["expected"], "prompt": it["prompt"],
                 "prompt_ids": ids, "modes": []}
        for mode, kw in MODES:
            r = decode.Decoder(m, decode.Config(max_tokens=MAX_TOKENS, **kw)).run(mode, ids)
            text = tok.decode(r.tokens)
            entry["modes"].append({"mode": mode, **kw, "tokens": r.tokens, "text": text, "stop": r.stop,
                                   "forward_passes": r.forward_passes, "accepted": r.accepted,
                                   "correct": eval_tiny.is_correct(it["kind"], text, it["expected"])})
        runs.append(entry)
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "clover-tiny.gguf"))
    ap.add_argument("--heldout", help="heldout.jsonl from tiny_corpus.py (for --write)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true")
    g.add_argument("--check", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    m = model.Model.load(a.model, dtype=torch.float64)
    tok = eval_tiny.tokenizer_from_gguf(a.model)
    digest = golden.sha256(a.model)
    if a.write:
        with open(a.heldout, encoding="utf-8") as f:
            items = [json.loads(line) for line in f]
        doc = {"format": FORMAT, "model": {"path": "models/clover-tiny.gguf", "sha256": digest},
               "dtype": "float64", "max_tokens": MAX_TOKENS,
               "runs": run_all(m, tok, pick(items, GOLDEN_KINDS))}
        with open(ANSWERS, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
        print(f"tiny_golden: wrote {ANSWERS}")
        return
    with open(ANSWERS, encoding="utf-8") as f:
        want = json.load(f)
    if want["model"]["sha256"] != digest:
        raise SystemExit(f"tiny_golden: {a.model} (sha256 {digest}) is not the model of {ANSWERS} "
                         f"({want['model']['sha256']}); rerun tiny_golden.py --write after retraining")
    got = run_all(m, tok, [{k: r[k] for k in ("kind", "question", "thinking", "tools", "expected", "prompt")}
                           for r in want["runs"]])
    errors = golden.compare(want["runs"], got)
    if errors:
        print("tiny_golden: reference answers differ:\n  " + "\n  ".join(errors))
        raise SystemExit(1)
    for r in got:  # spec must equal AR (greedy)
        if r["modes"][0]["tokens"] != r["modes"][3]["tokens"]:
            raise SystemExit(f"tiny_golden: spec != ar for {r['question']!r}")
    print(f"tiny_golden: {len(got)} prompts x {len(MODES)} modes match {ANSWERS}")


if __name__ == "__main__":
    main()
