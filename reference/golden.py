"""Golden files for the C++ decoder tests: AR tokens + top-k log-softmax, and per denoise pass of
block-diffusion runs the committed (slot, token) list and every slot row's top-k log-softmax, on
`crossword gguf synth --preset tiny` models. Format: docs/reference.md.

  golden.py --crossword BUILD/crossword --out tests/golden/reference_tiny.json   # (re)write
  golden.py --crossword BUILD/crossword --check tests/golden/reference_tiny.json # parity test
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import decode  # noqa: E402
import model  # noqa: E402

FORMAT = "crossword-reference-golden/1"
TOP_K = 4
MIN_MARGIN = 1e-4  # decisions closer than this could flip in a float32 engine: such prompts are skipped
SYNTH_ARGS = ["gguf", "synth", "--preset", "tiny", "--arch", "clover_moe", "--layout", "official",
              "--type", "F32", "--seed", "1"]

# (name, block size, threshold, max_tokens); prompts are chosen per run (see choose_prompt).
DIFFUSION_RUNS = [
    ("tau095_b16", 16, 0.95, 24),
    ("tau095_b32", 32, 0.95, 36),
    ("tau03_b32", 32, 0.3, 70),
    ("tau01_b8", 8, 0.1, 40),
]
AR_MAX_TOKENS = 24
SPEC_RUNS = [("spec_b8", 8, 40), ("spec_b32", 32, 70)]


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def synth(crossword: str, out: str):
    cmd = [crossword] + SYNTH_ARGS + ["-o", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"golden: `{' '.join(cmd)}` failed ({r.returncode}): {r.stderr.strip()}")


def prompt_candidates(hp, n: int):
    """Deterministic prompts of 1..12 ordinary (non-special) token ids."""
    rng = np.random.default_rng(1234)
    hi = min(hp.eog_ids + [hp.mask_token_id, hp.n_vocab])  # specials sit at the end of the vocab
    for _ in range(n):
        yield [int(t) for t in rng.integers(0, hi, size=int(rng.integers(1, 13)))]


def top_k(row: torch.Tensor, k: int = TOP_K):
    lp = torch.log_softmax(row, -1)
    v, i = torch.topk(lp, k)
    return [[int(a), round(float(b), 7)] for a, b in zip(i, v)]


def pass_margin(logits, committed_before, masked, tau, mask_id):
    """Smallest decision margin of one denoise pass: per masked slot the gap between the best and
    second-best candidate logits and |confidence - tau|; plus, when no slot reaches tau, the gap
    between the two highest confidences (the fallback choice)."""
    margins, confs = [], []
    for j in masked:
        row = logits[j - 1].clone()
        probs = torch.softmax(row, -1)
        row[mask_id] = float("-inf")
        v, i = torch.topk(row, 2)
        margins.append(float(v[0] - v[1]))
        c = float(probs[i[0]])
        confs.append(c)
        margins.append(abs(c - tau))
    if confs and max(confs) < tau and len(confs) > 1:
        s = sorted(confs, reverse=True)
        margins.append(s[0] - s[1])
    return min(margins) if margins else math.inf


def ar_margin(rows):
    m = math.inf
    for row in rows:
        v, _ = torch.topk(row, 2)
        m = min(m, float(v[0] - v[1]))
    return m


def run_ar(m, prompt):
    d = decode.Decoder(m, decode.Config(max_tokens=AR_MAX_TOKENS))
    state = model.State(m)
    prompt_rows = model.forward(m, state, prompt)
    r = d.ar(prompt)
    gen_rows = [prompt_rows[-1]]
    for t in r.tokens[:-1] if r.stop == "limit" else r.tokens:
        gen_rows.append(model.forward(m, state, [t])[-1])
    return {
        "prompt": prompt, "max_tokens": AR_MAX_TOKENS, "tokens": r.tokens, "stop": r.stop,
        "eog_token": r.eog_token,
        "prompt_top": [top_k(x) for x in prompt_rows],
        "generated_top": [top_k(x) for x in gen_rows],
        "min_margin": ar_margin(list(prompt_rows) + gen_rows),
    }


def run_diffusion(m, prompt, B, tau, max_tokens):
    d = decode.Decoder(m, decode.Config(max_tokens=max_tokens, block_size=B, threshold=tau))
    r = d.diffusion(prompt)
    passes, margin = [], math.inf
    masked_now = None
    for p in r.passes:
        if p["kind"] == "commit":
            passes.append({"kind": "commit", "block": p["block"]})
            masked_now = None
            continue
        L = p["logits"].shape[0]
        if masked_now is None:
            masked_now = set(range(1, L))
        masked_now = {j for j in masked_now if j < L}  # a block cut at a committed EOG
        margin = min(margin, pass_margin(p["logits"], None, sorted(masked_now), tau, m.hp.mask_token_id))
        passes.append({"kind": "denoise", "block": p["block"],
                       "committed": [[s, t] for s, t in p["committed"]],
                       "top": [top_k(x) for x in p["logits"]]})
        masked_now -= {s for s, _ in p["committed"]}
        if not masked_now:
            masked_now = None
    return {
        "prompt": prompt, "block_size": B, "threshold": tau, "max_tokens": max_tokens,
        "tokens": r.tokens, "stop": r.stop, "eog_token": r.eog_token,
        "forward_passes": r.forward_passes, "passes": passes, "min_margin": margin,
    }


def run_spec(m, prompt, B, max_tokens):
    r = decode.Decoder(m, decode.Config(max_tokens=max_tokens, block_size=B)).spec(prompt)
    return {"prompt": prompt, "block_size": B, "max_tokens": max_tokens, "tokens": r.tokens,
            "stop": r.stop, "eog_token": r.eog_token, "forward_passes": r.forward_passes,
            "accepted": r.accepted}


def build(model_path: str, synth_cmd: str, recorded: dict = None) -> dict:
    """Computes the golden document. Prompts come from `recorded` (a golden document: the check
    mode) or are chosen from deterministic candidates whose decision margins are >= MIN_MARGIN."""
    m = model.Model.load(model_path, dtype=torch.float64)
    hp = m.hp
    cands = list(prompt_candidates(hp, 64))
    out = {
        "format": FORMAT,
        "model": {"synth": synth_cmd, "sha256": sha256(model_path), "bytes": os.path.getsize(model_path),
                  "n_vocab": hp.n_vocab, "mask_token_id": hp.mask_token_id, "eog_ids": hp.eog_ids},
        "dtype": "float64", "top_k": TOP_K, "dllm_biases": "on (no effect below 4096 tokens)",
        "ar": [], "diffusion": {}, "spec": {},
    }
    used = [0]

    def choose(fn, ok=lambda r: True, tries=len(cands)):
        for _ in range(tries):
            if used[0] >= len(cands):
                break
            run = fn(cands[used[0]])
            used[0] += 1
            if run.get("min_margin", math.inf) >= MIN_MARGIN and ok(run):
                return run
        return None

    if recorded is not None:
        for r in recorded["ar"]:
            out["ar"].append(run_ar(m, r["prompt"]))
        for name, r in recorded["diffusion"].items():
            out["diffusion"][name] = run_diffusion(m, r["prompt"], r["block_size"], r["threshold"], r["max_tokens"])
        for name, r in recorded["spec"].items():
            out["spec"][name] = run_spec(m, r["prompt"], r["block_size"], r["max_tokens"])
        return out
    for _ in range(3):
        out["ar"].append(choose(lambda p: run_ar(m, p)))
    for name, B, tau, n in DIFFUSION_RUNS:
        out["diffusion"][name] = choose(lambda p: run_diffusion(m, p, B, tau, n))
    # A run whose answer ends with an EOG token committed inside a block (not as a seed).
    eog = choose(lambda p: run_diffusion(m, p, 16, 0.95, 48),
                 ok=lambda r: r["stop"] == "eog" and r["passes"] and r["passes"][-1]["kind"] == "denoise",
                 tries=24)
    if eog is not None:
        out["diffusion"]["eog_in_block"] = eog
    for name, B, n in SPEC_RUNS:
        out["spec"][name] = choose(lambda p: run_spec(m, p, B, n))
    return out


def compare(want: dict, got: dict, path: str = "", tol: float = 1e-6, errors=None):
    """Recursively compares two golden documents; floats within `tol`. Returns a list of errors."""
    errors = [] if errors is None else errors
    if len(errors) > 20:
        return errors
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got)):
            if k not in want or k not in got:
                errors.append(f"{path}/{k}: present in only one document")
            else:
                compare(want[k], got[k], f"{path}/{k}", tol, errors)
    elif isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            errors.append(f"{path}: length {len(got)}, golden {len(want)}")
        for i, (a, b) in enumerate(zip(want, got)):
            compare(a, b, f"{path}/{i}", tol, errors)
    elif isinstance(want, float) or isinstance(got, float):
        if path.endswith("min_margin"):
            return errors
        if not (isinstance(got, (int, float)) and abs(float(want) - float(got)) <= tol):
            errors.append(f"{path}: {got}, golden {want}")
    elif want != got:
        errors.append(f"{path}: {got!r}, golden {want!r}")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--crossword", required=True, help="path of the crossword binary (for gguf synth)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", help="write the golden file here")
    g.add_argument("--check", help="recompute and compare with this golden file")
    ap.add_argument("--model", help="use this GGUF instead of running synth (development only)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        path = a.model or os.path.join(tmp, "tiny.gguf")
        if not a.model:
            synth(a.crossword, path)
        synth_cmd = "crossword " + " ".join(SYNTH_ARGS)
        if a.check:
            with open(a.check) as f:
                want = json.load(f)
            if want.get("format") != FORMAT:
                raise SystemExit(f"golden: {a.check} has format {want.get('format')!r}, expected {FORMAT}")
            digest = sha256(path)
            if digest != want["model"]["sha256"]:
                raise SystemExit(
                    f"golden: `{synth_cmd}` now writes a different file (sha256 {digest}, golden "
                    f"{want['model']['sha256']}); if synth changed on purpose, regenerate with "
                    f"reference/golden.py --out {a.check}")
            got = build(path, synth_cmd, recorded=want)
            errors = compare(want, got)
            if errors:
                print("golden: reference output differs from " + a.check + ":\n  " + "\n  ".join(errors))
                raise SystemExit(1)
            n = len(want["ar"]) + len(want["diffusion"]) + len(want["spec"])
            print(f"golden: {n} runs match {a.check}")
        else:
            doc = build(path, synth_cmd)
            with open(a.out, "w") as f:
                json.dump(doc, f, separators=(",", ":"))
                f.write("\n")
            print(f"golden: wrote {a.out} ({os.path.getsize(a.out)} bytes)")


if __name__ == "__main__":
    main()
