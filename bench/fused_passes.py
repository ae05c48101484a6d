#!/usr/bin/env python3
"""Fused passes (issue 18, docs/decoding.md "Fused passes"): forward passes per generated token and
generation tokens/s of spec and diffusion with and without --fuse-passes, against ar, in one
interleaved run of `crossword run --stats` (2 threads by default).

  bench/fused_passes.py [--crossword build/src/cli/crossword] [--model M.gguf] [--reps 5]
                        [--threads 2] [--max-tokens 160] [--prompt TEXT ...] [--heldout FILE --kind K]
                        [--modes M ...]
                        [--extra-args "..."] [--json OUT]

Prompts: without --model, the golden questions of tests/golden/clover_tiny_answers.json that
use no tools, in the chat template (greedy, no penalties, as the reference decodes); with
--heldout, the held-out questions of one kind (default json: the longest answers); with --prompt
(repeatable), those plain texts. Per mode and repetition: generated tokens / generation seconds summed
over the prompts. Printed per mode: the median over repetitions with its range, the median ratio
to ar and (fused modes) to the same mode unfused (ratios taken within one repetition, so the load
is shared), passes per generated token, and fused passes with the tails used. Fusion must not change any answer (checked: exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = {
    "ar": ["--mode", "ar"],
    "spec": ["--mode", "spec"],
    "spec-fused": ["--mode", "spec", "--fuse-passes"],
    "diffusion-0.95": ["--mode", "diffusion", "--threshold", "0.95"],
    "diffusion-0.95-fused": ["--mode", "diffusion", "--threshold", "0.95", "--fuse-passes"],
    "diffusion-0.9": ["--mode", "diffusion", "--threshold", "0.9"],
    "diffusion-0.9-fused": ["--mode", "diffusion", "--threshold", "0.9", "--fuse-passes"],
}
GEN = re.compile(r"generated (\d+) tokens, ([\d.]+) tokens/s")
# "passes: prefill P, <kind> N, <kind> N": the kinds of the run's mode (ar; denoise, commit; draft, verify).
PASSES = re.compile(r"passes: prefill \d+((?:, [a-z]+ \d+)+)")
FUSED = re.compile(r"fused passes (\d+), their tail used (\d+)")


def prompts(a) -> list[list[str]]:
    if a.prompt:
        return [["-p", p] for p in a.prompt]
    if a.heldout:  # reference/tiny_corpus.py's held-out questions of one kind
        with open(a.heldout, encoding="utf-8") as f:
            runs = [json.loads(line) for line in f if line.strip()]
        runs = [r for r in runs if r["kind"] == a.kind]
    else:
        with open(os.path.join(ROOT, "tests/golden/clover_tiny_answers.json"), encoding="utf-8") as f:
            runs = json.load(f)["runs"]
    out = []
    for run in runs:
        if run["tools"]:
            continue
        args = ["--chat", "-p", run["question"]]
        if not run["thinking"]:
            args.append("--no-think")
        out.append(args)
    return out


def run_one(a, mode: str, prompt: list[str]) -> dict:
    cmd = [a.crossword, "run", "-t", str(a.threads), "-n", str(a.max_tokens), "--stats",
           "--presence-penalty", "0", "--repeat-penalty", "1", *MODES[mode], *prompt]
    if a.model:
        cmd[2:2] = ["-m", a.model]
    cmd += a.extra_args.split()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"fused_passes: {' '.join(cmd)} failed:\n{r.stderr}")
    g = GEN.search(r.stderr)
    p = PASSES.search(r.stderr)
    fz = FUSED.search(r.stderr)
    n, tps = int(g.group(1)), float(g.group(2))
    return {"text": r.stdout, "tokens": n, "seconds": n / tps if tps > 0 else 0.0,
            "passes": sum(int(x) for x in re.findall(r"\d+", p.group(1))),
            "fused": int(fz.group(1)) if fz else 0, "hits": int(fz.group(2)) if fz else 0}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--crossword", default=os.path.join(ROOT, "build/src/cli/crossword"))
    ap.add_argument("--model")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--prompt", action="append", help="plain prompt (repeatable)")
    ap.add_argument("--heldout", help="held-out questions (reference/tiny_corpus.py --out DIR)")
    ap.add_argument("--kind", default="json", help="the held-out kind to ask (with --heldout)")
    ap.add_argument("--modes", nargs="*", default=list(MODES), choices=list(MODES))
    ap.add_argument("--extra-args", default="")
    ap.add_argument("--json")
    a = ap.parse_args()
    ps = prompts(a)
    with open("/proc/loadavg", encoding="utf-8") as f:
        load0 = f.read().split()[:3]
    reps: dict[str, list[dict]] = {m: [] for m in a.modes}
    texts: dict[str, list[str]] = {}
    for _ in range(a.reps):
        for m in a.modes:  # interleaved: every repetition runs every mode under the same load
            rs = [run_one(a, m, p) for p in ps]
            texts.setdefault(m, [r["text"] for r in rs])
            tot = {k: sum(r[k] for r in rs) for k in ("tokens", "seconds", "passes", "fused", "hits")}
            reps[m].append(tot)
    with open("/proc/loadavg", encoding="utf-8") as f:
        load1 = f.read().split()[:3]
    bad = 0
    for m in a.modes:
        if m.endswith("-fused") and m[: -len("-fused")] in texts:
            if texts[m] != texts[m[: -len("-fused")]]:
                print(f"fused_passes: {m} changed an answer", file=sys.stderr)
                bad = 1
    print(f"load average before {' '.join(load0)}, after {' '.join(load1)}; {len(ps)} prompts, "
          f"{a.reps} repetitions, {a.threads} threads")
    print("| mode | tokens | passes per token | fused passes, tails used | median tok/s (range) "
          "| vs ar | fused vs unfused |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for m in a.modes:
        tps = [t["tokens"] / t["seconds"] for t in reps[m]]
        t0 = reps[m][0]
        ratio = ""
        if "ar" in reps:
            ratios = [x / (ar["tokens"] / ar["seconds"]) for x, ar in zip(tps, reps["ar"])]
            ratio = f"{statistics.median(ratios):.2f}"
        vs_unfused = ""
        base = m[: -len("-fused")] if m.endswith("-fused") else None
        if base in reps:
            rs = [x / (b["tokens"] / b["seconds"]) for x, b in zip(tps, reps[base])]
            vs_unfused = f"{statistics.median(rs):.2f} ({min(rs):.2f}-{max(rs):.2f})"
        row = {"mode": m, "tokens": t0["tokens"], "passes_per_token": t0["passes"] / t0["tokens"],
               "fused": t0["fused"], "hits": t0["hits"], "tps_median": statistics.median(tps),
               "tps_min": min(tps), "tps_max": max(tps), "vs_ar": ratio,
               "fused_vs_unfused": vs_unfused}
        rows.append(row)
        print(f"| {m} | {t0['tokens']} | {row['passes_per_token']:.3f} | {t0['fused']}, "
              f"{t0['hits']} | {row['tps_median']:.1f} ({min(tps):.1f}-{max(tps):.1f}) | {ratio} "
              f"| {vs_unfused} |")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"load_before": load0, "load_after": load1, "rows": rows}, f, indent=1)
    return bad


if __name__ == "__main__":
    sys.exit(main())
