"""Held-out known-answer evaluation of a tiny Clover GGUF with the C++ engine (`crossword serve`),
in every mode, with the same questions and the same correctness rule as eval_tiny.py (the PyTorch
reference): accuracy, tokens per forward pass, drafts accepted per spec round, generation tokens/s.

  eval_engine.py --crossword build/src/cli/crossword [--model M.gguf] --heldout heldout.jsonl
                 [--threads 2] [--max-tokens 160] [--json OUT] [--extra MODE ...] [--reps N]

--extra adds spec variants (EXTRA_MODES: spec-auto = --draft-max auto, spec-budget = the draft
expert budget, spec-auto-budget, spec-d3 / spec-d7 / spec-d23 / spec-d31 = --draft-max 3 / 7 /
23 / 31, spec-nochunk = verify without chunks, --verify-chunk 0, spec-noskip / spec-auto-noskip =
spec / spec-auto with drafts through every layer, "draft_skip_ffn": []); --reps N runs every mode N
times and reports the median tokens/s with its range and the median of the per-run ratios to ar
(answers must not change).
Within a run the modes take turns over chunks of 6 questions, in a shuffled order per chunk, so
every mode meets the same machine and follows every other mode about equally often.

Greedy without penalties (as the reference decodes); each prompt is the held-out item's rendered
chat prompt, tokenized by the server with special tokens parsed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from eval_tiny import MODES, is_correct  # noqa: E402


def post(port: int, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def start_server(a) -> tuple[subprocess.Popen, int]:
    cmd = [a.crossword, "serve", "--port", "0", "-np", "1", "-t", str(a.threads), "--log-level", "info"]
    if a.model:
        cmd[2:2] = ["-m", a.model]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in proc.stderr:
        m = re.search(r"listening on \S+:(\d+)", line)
        if m:
            port = int(m.group(1))
            # Keep reading its log: a full pipe would block the server's request logging.
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            for _ in range(600):  # the port is bound before the model has loaded (503 "loading")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                        if r.status == 200:
                            return proc, port
                except OSError:
                    pass
                time.sleep(0.1)
            break
    raise SystemExit("eval_engine: the server exited before listening")


CHUNK = 6  # questions a mode answers before the next mode's turn (see main)

EXTRA_MODES = {
    "spec-auto": ("spec", {"draft_max": "auto"}),
    "spec-budget": ("spec", {"draft_expert_budget": True}),
    "spec-auto-budget": ("spec", {"draft_max": "auto", "draft_expert_budget": True}),
    "spec-d3": ("spec", {"draft_max": 3}),
    "spec-d7": ("spec", {"draft_max": 7}),
    "spec-d23": ("spec", {"draft_max": 23}),
    "spec-d31": ("spec", {"draft_max": 31}),
    "spec-nochunk": ("spec", {"verify_chunk": 0}),
    # Draft passes with every FFN block (the embedded model's drafts skip layers 2-4 by default;
    # docs/decoding.md, "Draft passes that skip FFN blocks"): D 15 as `spec`, and auto.
    "spec-noskip": ("spec", {"draft_max": 15, "draft_p_min": 0.0, "draft_skip_ffn": []}),
    "spec-auto-noskip": ("spec", {"draft_max": "auto", "draft_skip_ffn": []}),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--crossword", required=True)
    ap.add_argument("--model", help="GGUF file (default: the embedded model)")
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--extra", nargs="*", default=[], choices=sorted(EXTRA_MODES))
    ap.add_argument("--reps", type=int, default=1, help="runs of every mode (median tokens/s)")
    a = ap.parse_args()
    modes = list(MODES) + [(n, *EXTRA_MODES[n]) for n in a.extra]
    with open(a.heldout, encoding="utf-8") as f:
        items = [json.loads(line) for line in f]
    proc, port = start_server(a)
    out = {}
    try:
        prompts = [post(port, "/tokenize", {"content": it["prompt"], "parse_special": True})["tokens"]
                   for it in items]
        for rep in range(a.reps):
            # The modes take turns over chunks of CHUNK questions: each mode's run then samples the
            # same moments of the machine, whose speed moves within seconds on a shared VM (per-run
            # ratios to ar spread 0.63-1.10 when each mode ran its 174 questions in turn). The
            # order is shuffled per chunk (seeded), not rotated: in a fixed cycle each mode always
            # follows the same one, and a mode's speed depends on what ran before it
            # (docs/pass-cost-log.md, "Twentieth stop": 4 alternated runs, spec 1.04 / 1.12 / 1.12 /
            # 1.10x after diffusion and 1.02 / 1.03 / 0.99 / 1.11x after ar; two identical spec
            # modes 5-8 % apart). Chunks, not single questions: a question asked again at once
            # would find its prompt in the server's cache and skip the prefill, which also wakes
            # the thread pool before the timed passes.
            acc_of = {name: {"right": 0, "gen": 0, "passes": 0, "gen_ms": 0.0, "acc": 0.0, "rounds": 0,
                             "wall": 0.0, "answers": [None] * len(items), "per_kind": {}}
                      for name, _, _ in modes}
            for q0 in range(0, len(items), CHUNK):
                order = list(modes)
                random.Random(1000 * rep + q0).shuffle(order)
                for name, mode, kw in order:
                    c = acc_of[name]
                    for q in range(q0, min(len(items), q0 + CHUNK)):
                        it, ids = items[q], prompts[q]
                        body = {"prompt": ids, "max_tokens": a.max_tokens, "temperature": 0,
                                "presence_penalty": 0, "frequency_penalty": 0, "repeat_penalty": 1.0,
                                "crossword": {"mode": mode, **kw}}
                        t0 = time.time()
                        r = post(port, "/v1/completions", body)
                        c["wall"] += time.time() - t0
                        text, t = r["choices"][0]["text"], r["timings"]
                        ok = is_correct(it["kind"], text, it["expected"])
                        c["right"] += ok
                        k = c["per_kind"].setdefault(it["kind"], [0, 0])
                        k[0] += ok
                        k[1] += 1
                        c["gen"] += t["predicted_n"]
                        c["passes"] += t["forward_passes"]
                        c["gen_ms"] += t["predicted_ms"]
                        c["rounds"] += t["rounds"]
                        c["acc"] += t["mean_accepted"] * t["rounds"]
                        c["answers"][q] = text
            for name, mode, kw in modes:
                c = acc_of[name]
                right, gen, passes, gen_ms, answers = c["right"], c["gen"], c["passes"], c["gen_ms"], c["answers"]
                res = {"accuracy": right / len(items), "right": right, "n": len(items),
                       "tokens_per_pass": gen / max(1, passes), "generated": gen, "forward_passes": passes,
                       "tokens_per_s": gen / (gen_ms / 1e3) if gen_ms else 0.0, "wall_s": c["wall"],
                       "per_kind": c["per_kind"], "answers": answers}
                if mode == "spec":
                    res["mean_accepted"] = c["acc"] / max(1, c["rounds"])
                if name in out:
                    if out[name]["answers"] != answers:
                        raise SystemExit(f"eval_engine: {name} answered differently in run {rep + 1}")
                    res["tokens_per_s_runs"] = out[name]["tokens_per_s_runs"] + [res["tokens_per_s"]]
                else:
                    res["tokens_per_s_runs"] = [res["tokens_per_s"]]
                runs = sorted(res["tokens_per_s_runs"])
                res["tokens_per_s_median"] = (runs[len(runs) // 2] if len(runs) % 2
                                              else 0.5 * (runs[len(runs) // 2 - 1] + runs[len(runs) // 2]))
                out[name] = res
                print(f"eval_engine {name:16s} accuracy {right}/{len(items)} = {100 * right / len(items):5.1f}%  "
                      f"TPF {res['tokens_per_pass']:.2f}  tok/s {res['tokens_per_s']:.1f}"
                      + (f"  mean accepted {res['mean_accepted']:.2f}" if mode == "spec" else ""), flush=True)
        for name, _, _ in modes:
            if name.startswith("spec"):
                same = sum(x == y for x, y in zip(out["ar"]["answers"], out[name]["answers"]))
                print(f"eval_engine {name} == ar on {same}/{len(items)} answers")
                out[f"{name}_equals_ar"] = same
        ar_runs = out["ar"]["tokens_per_s_runs"]
        for name, _, _ in modes:
            r = out[name]
            # Run i of every mode ran interleaved chunk by chunk, so its ratio to ar's run i
            # shares the machine's state; the median of those ratios is the figure to quote.
            ratios = sorted(x / y for x, y in zip(r["tokens_per_s_runs"], ar_runs))
            mid = len(ratios) // 2
            r["ratio_to_ar_median"] = ratios[mid] if len(ratios) % 2 else 0.5 * (ratios[mid - 1] + ratios[mid])
            print(f"eval_engine {name:16s} median tok/s {r['tokens_per_s_median']:.1f} "
                  f"({min(r['tokens_per_s_runs']):.1f}-{max(r['tokens_per_s_runs']):.1f}, {len(r['tokens_per_s_runs'])} runs)"
                  f"  per-run ratio to ar: median {r['ratio_to_ar_median']:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})",
                  flush=True)
    finally:
        proc.terminate()
        proc.wait()
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
