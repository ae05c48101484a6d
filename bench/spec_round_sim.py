#!/usr/bin/env python3
"""Deterministic spec-round simulator: draft-length policies priced without the VM's timing noise.

Usage (from the repository root; --sweep-rows takes every row count, 1 to 16, written out):
  /usr/bin/python3 bench/spec_round_sim.py collect --crossword build/src/cli/crossword \\
      [--heldout tests/golden/clover_tiny_heldout.jsonl] [--max-draft 15] --out table.json
  crossword bench -p 64 -n 0 -t 2 -r 200 --sweep -o json \\
      --sweep-rows 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 > sweep.json
  /usr/bin/python3 bench/spec_round_sim.py simulate --table table.json --sweep sweep.json

Greedy spec output is AR's answer A whatever the draft lengths, so a round is fixed by where it
starts and how many drafts it makes: with its seed at answer index n and d drafts it keeps
a(n, d) drafts and emits a(n, d) + 1 tokens (drafts and bonus). `collect` measures a(n, d) for every
held-out question, every n and every d <= --max-draft on a `crossword serve` (embedded model, one
slot, greedy, no penalties, as reference/eval_engine.py): a streamed request whose prompt is the
question's prompt plus A[:n] (the prefill picks A[n] as the seed, as AR did) and whose first
`verify` trace event (stream_options.crossword_trace) gives the drafts it kept; the `draft` event
gives its slots: `drafted` of them filled, the last one an end of generation when the draft ended
at one (then the verify pass takes the seed and the drafted - 1 drafts before it). `simulate` then
prices policies with pass costs from one `bench --sweep` run (a round with d drafts: a denoise
pass of d + 1 rows and a verify pass of d + 1 rows, or `drafted` rows for a draft that ended at an
end; d = 0: an AR step) and prints the
answers' tokens/s against AR's: fixed lengths, fixed lengths with the drafts capped at the end a
rejected round drafted (Generation's rule since 2026-12-07), and per-round oracles that know each
round's outcome (bounds, not policies). Timings do not enter the table, so two runs of `collect`
give the same table; the costs are one sweep's, so compare policies within one `simulate` run.
docs/pass-cost-log.md, "Twenty-third stop", has what it showed.
"""
import argparse
import functools
import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

GREEDY = {"temperature": 0, "presence_penalty": 0, "frequency_penalty": 0, "repeat_penalty": 1.0}


def serve(binary):
    p = subprocess.Popen([binary, "serve", "--port", "0", "-np", "1", "-t", "2", "--log-level", "info"],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in p.stderr:
        m = re.search(r"listening on \S+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    else:
        raise SystemExit("spec_round_sim: the server exited before listening")
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return p, port
        except OSError:
            time.sleep(0.05)
    raise SystemExit("spec_round_sim: the server did not load")


def collect(a):
    proc, port = serve(a.crossword)
    conn = http.client.HTTPConnection("127.0.0.1", port)

    def post(path, body):
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        return conn.getresponse().read().decode()

    # The embedded model's ends of generation, as the trace writes them.
    ends = {json.loads(post("/detokenize", {"tokens": [t]}))["content"]
            for t in json.loads(post("/tokenize", {"content": "<|im_end|><|endoftext|>",
                                                   "parse_special": True}))["tokens"]}

    def first_round(prompt, d):
        body = {"prompt": prompt, "max_tokens": d + 3, "stream": True, **GREEDY,
                "stream_options": {"crossword_trace": True}, "crossword": {"mode": "spec", "draft_max": d}}
        drafted = accepted = cut = None
        for line in post("/v1/completions", body).split("\n"):
            if not line.startswith("data: {"):
                continue
            t = json.loads(line[6:]).get("crossword_trace")
            if t and t["phase"] == "draft" and drafted is None:
                drafted = t["drafted"]
                cut = int(t["slots"][drafted] in ends)
            if t and t["phase"] == "verify" and accepted is None:
                accepted = t["accepted"]
        if drafted is None or accepted is None:
            raise SystemExit(f"spec_round_sim: no draft/verify trace for d = {d}")
        return [drafted, accepted, cut]

    out = []
    try:
        with open(a.heldout, encoding="utf-8") as f:
            items = [json.loads(line) for line in f]
        for q, it in enumerate(items):
            prompt = json.loads(post("/tokenize", {"content": it["prompt"], "parse_special": True}))["tokens"]
            r = json.loads(post("/completion", {"prompt": prompt, "n_predict": a.max_tokens, "return_tokens": True,
                                                "crossword": {"mode": "ar"}, **GREEDY}))
            answer = r["tokens"]
            rows = [[first_round(prompt + answer[:n], d) for d in range(1, a.max_draft + 1)]
                    for n in range(len(answer))]
            out.append({"q": q, "kind": it["kind"], "A": answer, "a": rows})
            print(f"spec_round_sim: question {q}: {len(answer)} tokens", file=sys.stderr, flush=True)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait()
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"max_draft": a.max_draft, "questions": out}, f)


class Sim:
    def __init__(self, table, sweep):
        self.T = table["questions"]
        self.dmax = table["max_draft"]
        self.cost = {}
        with open(sweep, encoding="utf-8") as f:
            for line in f:
                j = json.loads(line)
                t = j.get("test", "")
                if t == "ar step":
                    self.cost["v", 1] = self.cost["d", 1] = j["median_ms"]
                # draft{T} (the model's drafts skipping FFN blocks) when the sweep has it, after
                # denoise{T} so that it wins.
                for kind, name in (("v", "verify"), ("d", "denoise"), ("d", "draft")):
                    if t.startswith(name) and t[len(name):].isdigit():
                        self.cost[kind, int(t[len(name):])] = j["median_ms"]
        for kind in "dv":  # rows the sweep skipped: linear between its neighbours
            have = sorted(t for (k, t) in self.cost if k == kind)
            for t in range(1, self.dmax + 2):
                if (kind, t) not in self.cost:
                    lo = max(x for x in have if x < t)
                    hi = min(x for x in have if x > t)
                    self.cost[kind, t] = self.cost[kind, lo] + (self.cost[kind, hi] - self.cost[kind, lo]) * (t - lo) / (hi - lo)
        self.c1 = self.cost["v", 1]

    def round(self, r, n, d):
        """(tokens emitted, answer done, ms) of a round with its seed at n and d drafts."""
        if d == 0:
            return 1, n + 1 >= len(r["A"]), self.c1
        drafted, kept, cut = r["a"][n][d - 1]
        verified = drafted if cut else d + 1
        return kept + 1, n + kept + 1 >= len(r["A"]), self.cost["d", d + 1] + self.cost["v", verified]

    def run(self, plan):
        """tokens/s of a policy: plan(r, n, last) -> d, last = (n, d) of the previous round or None."""
        tokens = ms = 0.0
        for r in self.T:
            n, last = 0, None
            while True:
                d = plan(r, n, last)
                k, done, t = self.round(r, n, d)
                ms += t
                last = (n, d)
                n += k
                if done:
                    break
            tokens += len(r["A"])
        return tokens / ms * 1e3

    def capped(self, dmax):
        """Fixed length, capped at the end a rejected round drafted (Generation::StartBlock)."""
        def plan(r, n, last):
            if last is None or last[1] == 0:
                return dmax
            n0, d0 = last
            drafted, kept, cut = r["a"][n0][d0 - 1]
            end = n0 + drafted  # the drafted end's answer index
            if cut and end > n:  # ahead of the seed: a draft before it was rejected
                return min(dmax, end - n)
            return dmax
        return plan

    def oracle(self, lengths):
        """Per round the best of `lengths` knowing every round's outcome (a bound)."""
        @functools.lru_cache(maxsize=None)
        def best(q, n):
            r = self.T[q]
            if n >= len(r["A"]):
                return 0.0, 0
            opts = []
            for d in lengths:
                k, done, t = self.round(r, n, d)
                opts.append((t + (0.0 if done else best(q, n + k)[0]), d))
            return min(opts)
        index = {id(r): q for q, r in enumerate(self.T)}
        return lambda r, n, last: best(index[id(r)], n)[1]


def simulate(a):
    with open(a.table, encoding="utf-8") as f:
        sim = Sim(json.load(f), a.sweep)
    rel = lambda kind, t: sim.cost[kind, t] / sim.c1  # noqa: E731
    print("pass costs in AR steps (denoise / verify): " +
          " ".join(f"{t}:{rel('d', t):.2f}/{rel('v', t):.2f}" for t in range(2, sim.dmax + 2)))
    ar = sim.run(lambda r, n, last: 0)
    print(f"ar: {ar:.0f} tokens/s of simulated pass time")
    for d in range(1, sim.dmax + 1):
        print(f"d {d:2d}: fixed {sim.run(lambda r, n, last, d=d: d) / ar:.3f}x  "
              f"capped at a rejected drafted end {sim.run(sim.capped(d)) / ar:.3f}x")
    for lengths in ((0, sim.dmax), tuple(range(1, sim.dmax + 1)), tuple(range(0, sim.dmax + 1))):
        name = "{0, %d}" % sim.dmax if len(lengths) == 2 else f"{lengths[0]}..{lengths[-1]}"
        print(f"oracle over d in {name}: {sim.run(sim.oracle(lengths)) / ar:.3f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--crossword", required=True)
    c.add_argument("--heldout", default="tests/golden/clover_tiny_heldout.jsonl")
    c.add_argument("--max-draft", type=int, default=15)
    c.add_argument("--max-tokens", type=int, default=160)
    c.add_argument("--out", required=True)
    s = sub.add_parser("simulate")
    s.add_argument("--table", required=True)
    s.add_argument("--sweep", required=True)
    a = ap.parse_args()
    collect(a) if a.cmd == "collect" else simulate(a)


if __name__ == "__main__":
    main()
