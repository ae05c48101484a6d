"""Independent checks of the trained tiny model with llama.cpp (node-llama-cpp via
tests/oracles/llama_oracle.mjs). llama.cpp does not know `clover_moe`, so the same weights are
rewritten as `qwen35moe` in upstream layout (F32). Checks:
  1. llama.cpp's tokenizer (from the GGUF vocabulary + merges, qwen35 pre-tokenizer) gives the
     ids of reference/bpe.py on every held-out prompt and answer;
  2. llama.cpp's greedy AR answers equal the reference's on the golden prompts.
Usage: tiny_llama_check.py --oracles BUILD/oracles [--model models/clover-tiny.gguf]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import decode  # noqa: E402
import eval_tiny  # noqa: E402
import export  # noqa: E402
import gguf  # noqa: E402
import model  # noqa: E402
from gguf import GgmlType  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def oracle(oracles, path, *args):
    cmd = ["node", os.path.join(ROOT, "tests", "oracles", "llama_oracle.mjs"), "--oracles", oracles,
           "--model", path, *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"tiny_llama_check: oracle failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def as_qwen35moe(src: str, dst: str):
    r = gguf.GGUFReader(src)
    m = model.Model.load(src, dtype=torch.float32)
    hp = m.hp
    hp.arch = "qwen35moe"
    w = {k: v.numpy() for k, v in m.w.items()}
    meta = r.metadata
    vocab = {"tokens": meta["tokenizer.ggml.tokens"], "token_type": list(meta["tokenizer.ggml.token_type"]),
             "merges": meta["tokenizer.ggml.merges"], "eos_token_id": int(meta["tokenizer.ggml.eos_token_id"]),
             "padding_token_id": int(meta["tokenizer.ggml.padding_token_id"]),
             "mask_token_id": int(meta["tokenizer.ggml.mask_token_id"])}
    export.write_gguf(dst, hp, w, vocab, "upstream", GgmlType.F32, name="clover-tiny as qwen35moe")
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracles", required=True)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "clover-tiny.gguf"))
    ap.add_argument("--answers", default=os.path.join(ROOT, "tests", "golden", "clover_tiny_answers.json"))
    ap.add_argument("--heldout", default=os.path.join(ROOT, "tests", "golden", "clover_tiny_heldout.jsonl"),
                    help="held-out questions (their prompts are tokenized by both)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    tok = eval_tiny.tokenizer_from_gguf(a.model)
    with open(a.answers, encoding="utf-8") as f:
        runs = json.load(f)["runs"]
    with open(a.heldout, encoding="utf-8") as f:
        questions = [json.loads(line) for line in f]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        q35 = os.path.join(tmp, "tiny_qwen35moe.gguf")
        m = as_qwen35moe(a.model, q35)
        # 1. Tokenizer: one oracle call; <|endoftext|> separators keep the texts independent.
        texts = [q["prompt"] for q in questions] + [r["prompt"] + r["modes"][0]["text"] for r in runs]
        sep = "<|endoftext|>"
        got = oracle(a.oracles, q35, "--tokenize", sep.join(texts), "--special")["tokens"]
        want = []
        for i, t in enumerate(texts):
            if i:
                want.append(tok.token_id(sep))
            want += tok.encode(t)
        same = got == want
        failed |= not same
        print(f"tiny_llama_check: tokenizer on {len(texts)} texts ({len(want)} tokens): "
              f"{'identical' if same else 'DIFFERENT'}", flush=True)
        # 2. Greedy AR answers.
        agree = 0
        for r in runs:
            ref = decode.Decoder(m, decode.Config(max_tokens=48)).ar(r["prompt_ids"])
            o = oracle(a.oracles, q35, "--tokens", ",".join(map(str, r["prompt_ids"])),
                       "--generate", str(len(ref.tokens) + 1), "--top", "1")
            gen = o["generated"]
            # llama.cpp keeps generating past the end token; compare up to the reference's stop.
            n = len(ref.tokens)
            ok = gen[:n] == ref.tokens and (ref.stop != "eog" or gen[n] in m.hp.eog_ids)
            agree += ok
            if not ok:
                print(f"  differs: {r['question']!r}: ref {tok.decode(ref.tokens)!r} llama "
                      f"{tok.decode(gen)!r}")
        failed |= agree != len(runs)
        print(f"tiny_llama_check: greedy AR answers identical to llama.cpp on {agree}/{len(runs)} prompts",
              flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
