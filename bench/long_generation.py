#!/usr/bin/env python3
"""Long generations through the server (issue 18, docs/pass-cost-log.md "Sixth stop"): generation
tokens/s of ar, spec (`draft_max` auto by default, the server's default) and diffusion for
n_predict tokens with `ignore_eos`, greedy, against ar, for one or more crossword binaries run
alternately (the same prompts, one server per binary and pair).

  bench/long_generation.py [--pairs 2] [--n-predict 256] [--reps 3] [--threads 2]
                           [--draft-max auto] BIN [BIN ...]

Per binary and mode: the median over prompts x reps of predicted_n / predicted_ms (the server's
own `timings`), printed with its ratio to the same binary's ar in the same run. The embedded
model answers its questions in 5-60 tokens; with the end-of-generation tokens banned it goes on
with low-confidence text, which diffusion denoises in many passes, so this bench measures spec's
round control over long outputs, not diffusion's answer quality.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
import urllib.request

PROMPTS = [
    "Tell me about the history of the city.",
    "What is the capital of France?",
    "List some colors.",
    "Explain how rain forms.",
]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(binary: str, a: argparse.Namespace) -> dict[str, float]:
    port = free_port()
    server = subprocess.Popen(
        [binary, "serve", "--port", str(port), "-t", str(a.threads), "--log-level", "warn"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            if server.poll() is not None:
                raise SystemExit(f"long_generation: {binary} serve exited with {server.returncode}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise SystemExit(f"long_generation: {binary} serve did not answer /health in 20 s")
        out = {}
        for mode in ("ar", "spec", "diffusion"):
            rates = []
            for _ in range(a.reps):
                for prompt in PROMPTS:
                    body = {"prompt": prompt, "n_predict": a.n_predict, "ignore_eos": True,
                            "temperature": 0, "mode": mode}
                    if mode == "spec":
                        body["draft_max"] = a.draft_max if a.draft_max == "auto" else int(a.draft_max)
                    req = urllib.request.Request(
                        f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                        headers={"Content-Type": "application/json"})
                    t = json.load(urllib.request.urlopen(req, timeout=120))["timings"]
                    rates.append(t["predicted_n"] / (t["predicted_ms"] / 1000.0))
            out[mode] = statistics.median(rates)
        return out
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binaries", nargs="+", help="crossword binaries, measured alternately")
    ap.add_argument("--pairs", type=int, default=2, help="rounds over the binaries (default 2)")
    ap.add_argument("--n-predict", type=int, default=256, help="tokens per request (default 256)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the 4 prompts (default 3)")
    ap.add_argument("--threads", type=int, default=2, help="serve -t (default 2)")
    ap.add_argument("--draft-max", default="auto", help="spec requests' draft_max: auto or 0-255")
    a = ap.parse_args()
    if a.draft_max != "auto" and not (a.draft_max.isdigit() and int(a.draft_max) <= 255):
        ap.error("--draft-max must be auto or an integer in [0, 255]")
    for binary in a.binaries:
        if not os.access(binary, os.X_OK):
            ap.error(f"{binary} is not an executable file")
    for _ in range(a.pairs):
        for binary in a.binaries:
            o = measure(binary, a)
            print(os.path.basename(binary) + ": " + "  ".join(
                f"{m} {v:.0f} tok/s ({v / o['ar']:.2f}x)" for m, v in o.items()), flush=True)


if __name__ == "__main__":
    main()
