"""Held-out known-answer evaluation of a tiny Clover GGUF with the PyTorch reference decoder in every
mode (AR, block diffusion at several thresholds, self-speculative), plus tokens per forward pass
and accepted drafts per round.
Usage: eval_tiny.py --model models/clover-tiny.gguf --heldout DIR/heldout.jsonl [--limit N] [--json OUT]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bpe  # noqa: E402
import decode  # noqa: E402
import gguf  # noqa: E402
import model  # noqa: E402


def tokenizer_from_gguf(path: str) -> bpe.Tokenizer:
    r = gguf.GGUFReader(path)
    return bpe.Tokenizer({"tokens": r.metadata["tokenizer.ggml.tokens"],
                          "merges": r.metadata["tokenizer.ggml.merges"]})


def content_of(text: str) -> str:
    """The answer after the reasoning block (everything after the last </think>)."""
    return text.split("</think>")[-1].strip()


def tool_calls(text: str) -> dict:
    calls = collections.defaultdict(list)
    for fn, body in re.findall(r"<function=([^>\n]+)>\n(.*?)</function>", text, re.S):
        for name, value in re.findall(r"<parameter=([^>\n]+)>\n(.*?)\n</parameter>", body, re.S):
            calls[fn].append(value)
    return dict(calls)


def is_correct(kind: str, text: str, expected: str) -> bool:
    """Known-answer check of one generated answer (text without the EOG token)."""
    c = content_of(text)
    if kind in ("json",):
        try:
            return json.loads(c) == json.loads(expected)
        except ValueError:
            return False
    if kind in ("weather_call", "warmer_call"):
        return tool_calls(c) == json.loads(expected)
    if kind in ("plus", "minus", "times", "month_days"):
        nums = re.findall(r"-?\d+", c)
        return bool(nums) and nums[-1] == expected
    return re.search(r"(?<!\w)" + re.escape(expected) + r"(?!\w)", c) is not None


def evaluate(m, tok, items, modes, max_tokens, log=print):
    """Runs every item in every mode; returns {mode: summary}."""
    out = {}
    for name, mode, kw in modes:
        t0 = time.time()
        right, gen, passes, accepted = 0, 0, 0, []
        per_kind = collections.defaultdict(lambda: [0, 0])
        answers = []
        for it in items:
            d = decode.Decoder(m, decode.Config(max_tokens=max_tokens, **kw))
            r = d.run(mode, tok.encode(it["prompt"]))
            text = tok.decode(r.tokens)
            ok = is_correct(it["kind"], text, it["expected"])
            right += ok
            per_kind[it["kind"]][0] += ok
            per_kind[it["kind"]][1] += 1
            gen += len(r.tokens)
            passes += r.forward_passes
            accepted += r.accepted
            answers.append(text)
        s = {"accuracy": right / len(items), "correct": right, "n": len(items),
             "tokens": gen, "forward_passes": passes, "tpf": gen / max(1, passes),
             "per_kind": {k: f"{a}/{b}" for k, (a, b) in sorted(per_kind.items())},
             "seconds": round(time.time() - t0, 1), "answers": answers}
        if accepted:
            hist = collections.Counter(accepted)
            s["accepted_mean"] = sum(accepted) / len(accepted)
            s["tokens_per_round_mean"] = 1 + s["accepted_mean"]
            s["accepted_hist"] = {str(k): hist[k] for k in sorted(hist)}
        out[name] = s
        log(f"eval {name:14s} accuracy {right}/{len(items)} = {100 * s['accuracy']:.1f}%  "
            f"TPF {s['tpf']:.2f} ({gen} tokens / {passes} passes)"
            + (f"  accepted/round {s['accepted_mean']:.2f}" if accepted else "") + f"  [{s['seconds']} s]")
    return out


# Spec with the engine's default draft limits (src/engine/engine.h kDefaultDraftMax / PMin).
SPEC_DRAFT = {"draft_max": 15, "draft_p_min": 0.0}
MODES = [("ar", "ar", {}), ("diffusion@0.95", "diffusion", {"threshold": 0.95}),
         ("diffusion@0.9", "diffusion", {"threshold": 0.9}), ("spec", "spec", SPEC_DRAFT)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--limit", type=int, default=0, help="evaluate only the first N questions")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--modes", default="ar,diffusion@0.95,diffusion@0.9,spec")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m = model.Model.load(a.model, dtype=torch.float32)
    tok = tokenizer_from_gguf(a.model)
    with open(a.heldout, encoding="utf-8") as f:
        items = [json.loads(line) for line in f]
    if a.limit:
        items = items[:a.limit]
    want = a.modes.split(",")
    res = evaluate(m, tok, items, [x for x in MODES if x[0] in want], a.max_tokens)
    if "ar" in res and "spec" in res:
        same = sum(x == y for x, y in zip(res["ar"]["answers"], res["spec"]["answers"]))
        print(f"eval spec == ar on {same}/{len(items)} answers")
        res["spec_equals_ar"] = same
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(res, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
