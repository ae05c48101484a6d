#!/usr/bin/env python3
"""Paired eval of two crossword builds: which one decodes faster, measured at the same moments.

Usage: /usr/bin/python3 bench/paired_eval.py --a OLD_BINARY --b NEW_BINARY [--reps 7]
           [--heldout tests/golden/clover_tiny_heldout.jsonl] [--threads 2] [--json out.json]

Starts one `crossword serve` per build (embedded model, -np 1) and asks both the held-out
questions of reference/eval_engine.py in every mode (ar, diffusion at τ 0.95 and 0.9, spec at
draft_max 15 and draft_p_min 0 as eval_engine.py's `spec` row (reference/eval_tiny.py SPEC_DRAFT;
the server's own default is auto), spec --draft-max auto), greedy, without penalties. The servers and
modes take turns over chunks of 6 questions, in a shuffled order per chunk, so each build's run
of a mode meets the same moments of the machine as the other's: this VM's speed moves within
seconds, and evals of two builds run one after the other differed by more than the changes they
were meant to measure (docs/pass-cost-log.md, "Twentieth stop"). Prints per rep the tokens/s ratio of
each mode to the same build's `ar`, then the medians of those ratios and the median of the
per-rep ratios B / A of each mode's tokens/s (tokens/s: predicted_n / predicted_ms summed over the
questions, as eval_engine.py). Fails when an answer differs between the builds or a spec answer
differs from `ar`'s: both changes under test must leave the answers alone.

Read the B / A column. The ratios to `ar` run lower side by side than with one server alone (the
idle server's pool thread yields for a few milliseconds after its turn, beside the other's two
threads), so they compare the builds with each other, not with eval_engine.py's figures. Identical
binaries gave B / A of 0.95-1.06 at 3 reps on a 2-core VM: use many reps (21 took 2 minutes).
"""
import argparse
import json
import os
import random
import statistics
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reference"))
from eval_engine import CHUNK, post, start_server  # noqa: E402
from eval_tiny import SPEC_DRAFT, is_correct  # noqa: E402

MODES = [("ar", "ar", {}), ("diffusion@0.95", "diffusion", {"threshold": 0.95}),
         ("diffusion@0.9", "diffusion", {"threshold": 0.9}), ("spec", "spec", SPEC_DRAFT),
         ("spec-auto", "spec", {"draft_max": "auto"})]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="crossword binary A (the baseline)")
    ap.add_argument("--b", required=True, help="crossword binary B")
    ap.add_argument("--heldout", default=str(Path(__file__).resolve().parent.parent /
                                             "tests/golden/clover_tiny_heldout.jsonl"),
                    help="questions, one JSON object per line (eval_engine.py's format)")
    ap.add_argument("--threads", type=int, default=2, help="threads of each server (-t)")
    ap.add_argument("--reps", type=int, default=7, help="runs over all questions and modes")
    ap.add_argument("--max-tokens", type=int, default=160, help="tokens per answer at most")
    ap.add_argument("--json", help="write the per-rep tokens/s here")
    ap.add_argument("--may-differ", default="",
                    help="comma-separated modes (e.g. diffusion@0.95,diffusion@0.9) whose answers may "
                         "differ between the builds (a change of a decoding rule): their accuracy is "
                         "printed per build instead")
    a = ap.parse_args()
    may_differ = {m for m in a.may_differ.split(",") if m}
    unknown = may_differ - {name for name, _, _ in MODES}
    if unknown:
        raise SystemExit(f"paired_eval: --may-differ: unknown modes {sorted(unknown)}")
    with open(a.heldout, encoding="utf-8") as f:
        items = [json.loads(line) for line in f]
    for k, binary in (("A", a.a), ("B", a.b)):
        if not os.access(binary, os.X_OK):
            raise SystemExit(f"paired_eval: build {k}: {binary} is not an executable file")
    servers = {}
    try:
        for k, binary in (("A", a.a), ("B", a.b)):
            try:
                servers[k] = start_server(types.SimpleNamespace(crossword=binary, threads=a.threads, model=None))
            except SystemExit as e:
                raise SystemExit(f"paired_eval: build {k} ({binary}) did not start a server: {e}") from None
        port_a = servers["A"][1]
        prompts = [post(port_a, "/tokenize", {"content": it["prompt"], "parse_special": True})["tokens"]
                   for it in items]
        runs = {(k, m[0]): [] for k in servers for m in MODES}
        answers = {}
        order = [(k, m) for m in MODES for k in servers]
        for rep in range(a.reps):
            acc = {key: [0, 0.0] for key in runs}
            for q0 in range(0, len(items), CHUNK):
                turns = list(order)
                random.Random(1000 * rep + q0).shuffle(turns)  # as eval_engine.py: no fixed predecessor
                for k, (name, mode, kw) in turns:
                    for q in range(q0, min(len(items), q0 + CHUNK)):
                        body = {"prompt": prompts[q], "max_tokens": a.max_tokens, "temperature": 0,
                                "presence_penalty": 0, "frequency_penalty": 0, "repeat_penalty": 1.0,
                                "crossword": {"mode": mode, **kw}}
                        r = post(servers[k][1], "/v1/completions", body)
                        t = r["timings"]
                        acc[(k, name)][0] += t["predicted_n"]
                        acc[(k, name)][1] += t["predicted_ms"]
                        text = r["choices"][0]["text"]
                        if answers.setdefault((k, name, q), text) != text and name not in may_differ:
                            raise SystemExit(f"paired_eval: build {k} answered question {q} differently in {name}")
            for key, (n, ms) in acc.items():
                runs[key].append(n / ms * 1e3 if ms else 0.0)
            print(f"rep {rep + 1}: ar tokens/s A {runs[('A', 'ar')][-1]:.0f} B {runs[('B', 'ar')][-1]:.0f} | "
                  + "  ".join(f"{name} {runs[('A', name)][-1] / runs[('A', 'ar')][-1]:.3f}/"
                              f"{runs[('B', name)][-1] / runs[('B', 'ar')][-1]:.3f}" for name, _, _ in MODES[1:]),
                  flush=True)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()
    for q in range(len(items)):
        for name, mode, _ in MODES:
            if answers[("A", name, q)] != answers[("B", name, q)] and name not in may_differ:
                raise SystemExit(f"paired_eval: the builds answered question {q} differently in {name}")
            if mode == "spec" and answers[("A", name, q)] != answers[("A", "ar", q)]:
                raise SystemExit(f"paired_eval: {name} differs from ar on question {q}")
    print(f"answers: the same in both builds{' (but ' + ', '.join(sorted(may_differ)) + ')' if may_differ else ''};"
          f" spec and spec-auto == ar on {len(items)}/{len(items)}")
    for name in sorted(may_differ):
        right = {k: sum(is_correct(it["kind"], answers[(k, name, q)], it["expected"]) for q, it in enumerate(items))
                 for k in servers}
        same = sum(answers[("A", name, q)] == answers[("B", name, q)] for q in range(len(items)))
        print(f"{name}: accuracy A {right['A']}/{len(items)}, B {right['B']}/{len(items)}; "
              f"same answer on {same}/{len(items)}")
    print("mode             B / A tokens/s (median, range)   / ar, A (median)  / ar, B (median)")
    for name, _, _ in MODES:
        ra = statistics.median(x / y for x, y in zip(runs[("A", name)], runs[("A", "ar")]))
        rb = statistics.median(x / y for x, y in zip(runs[("B", name)], runs[("B", "ar")]))
        ba = [y / x for x, y in zip(runs[("A", name)], runs[("B", name)])]
        print(f"{name:16s} {statistics.median(ba):.3f} ({min(ba):.3f}-{max(ba):.3f}){'':17s}{ra:15.3f}  {rb:15.3f}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({f"{k}:{name}": v for (k, name), v in runs.items()}, f, indent=1)


if __name__ == "__main__":
    main()
