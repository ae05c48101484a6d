#!/usr/bin/env python3
"""`crossword run --device vulkan` against `--device cpu` on the embedded model, JSON out.

    bench/gpu_cli_check.py CROSSWORD_BINARY OUT.json [--questions N] [--modes ar,diffusion,spec]

For the first N questions of tests/golden/clover_tiny_answers.json and each mode, runs the CLI
(greedy, chat template, 64 tokens at most) once per device and records: whether the two answers
are identical, whether the AR answer holds the expected word, and the wall seconds of each run
(process start, model load and device set-up included: a smoke check, not a speed figure; speed
comes from crossword-vk-e2e). Exit status 0 only when every GPU answer equals the CPU answer and
every AR answer holds its expected word. Used by bench/gpu_check.sh.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(binary, device, mode, question):
    cmd = [binary, "run", "--device", device, "--mode", mode, "--chat", "-n", "64",
           "--temp", "0", "--log-level", "warn", "-p", question]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return {"rc": p.returncode, "text": p.stdout, "stderr": p.stderr[-400:],
            "seconds": round(time.monotonic() - t0, 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("out")
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--modes", default="ar,diffusion,spec")
    a = ap.parse_args()
    with open(os.path.join(ROOT, "tests/golden/clover_tiny_answers.json")) as f:
        runs = json.load(f)["runs"]
    seen, questions = set(), []
    for r in runs:  # distinct questions, in file order
        if r["question"] not in seen:
            seen.add(r["question"])
            questions.append(r)
    questions = questions[:a.questions]
    rows, ok = [], True
    for q in questions:
        for mode in a.modes.split(","):
            gpu = run(a.binary, "vulkan", mode, q["question"])
            cpu = run(a.binary, "cpu", mode, q["question"])
            same = gpu["rc"] == 0 and cpu["rc"] == 0 and gpu["text"] == cpu["text"]
            holds = q["expected"] in gpu["text"] if mode == "ar" else None
            ok = ok and same and holds is not False
            rows.append({"question": q["question"], "mode": mode, "expected": q["expected"],
                         "gpu_equals_cpu": same, "ar_answer_holds_expected": holds,
                         "gpu": gpu, "cpu": {k: cpu[k] for k in ("rc", "seconds")},
                         **({} if same else {"cpu_text": cpu["text"]})})
            print(f"{mode:9s} gpu==cpu {same!s:5s} expected {holds!s:5s} "
                  f"gpu {gpu['seconds']:.1f}s cpu {cpu['seconds']:.1f}s  {q['question']}",
                  flush=True)
    with open(a.out, "w") as f:
        json.dump({"tool": "bench/gpu_cli_check.py", "all_ok": ok, "runs": rows}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
