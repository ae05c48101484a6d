"""Byte-level BPE for the tiny model: trainer, encoder and decoder with the `qwen35` pre-tokenizer
(GPT-2 byte-to-unicode symbols, merges applied lowest rank first, special tokens matched first).
Train: bpe.py train --corpus DIR --vocab-size N --out DIR/vocab.json
"""

from __future__ import annotations

import argparse
import collections
import heapq
import json
import os
from typing import Dict, Iterable, List, Tuple

import regex

# llama.cpp's qwen35 pre-tokenizer regex (contractions spelled out case-insensitively).
QWEN35_PATTERN = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+"
                  r"|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE = regex.compile(QWEN35_PATTERN)

# Special tokens of the family, in id order after the BPE tokens. Type 3 = CONTROL (never shown
# as text), 4 = USER_DEFINED (shown as text, so reasoning/tool-call parsers see them).
SPECIAL_TOKENS = [
    ("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3),
    ("<tool_call>", 4), ("</tool_call>", 4), ("<tool_response>", 4), ("</tool_response>", 4),
    ("<think>", 4), ("</think>", 4), ("<|mask|>", 3),
]


def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's reversible byte -> printable unicode symbol map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()
U2B = {u: b for b, u in B2U.items()}


def pretokenize(text: str) -> List[str]:
    return PRE.findall(text)


def to_symbols(piece: str) -> str:
    return "".join(B2U[b] for b in piece.encode("utf-8"))


def train(texts: Iterable[str], vocab_size: int) -> dict:
    """Learns merges until len(bytes) + len(merges) + len(specials) == vocab_size.

    Returns {"tokens", "token_type", "merges"} ready for GGUF (types: 1 normal, 3/4 special).
    Ties between equally frequent pairs go to the lexicographically smallest pair (deterministic).
    """
    words = collections.Counter()
    for text in texts:
        for seg in split_specials(text):
            if isinstance(seg, str):
                for p in pretokenize(seg):
                    words[to_symbols(p)] += 1
    n_merges = vocab_size - 256 - len(SPECIAL_TOKENS)
    if n_merges < 0:
        raise ValueError(f"vocab size {vocab_size} smaller than 256 bytes + {len(SPECIAL_TOKENS)} specials")
    seqs = {w: list(w) for w in words}
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for w, s in seqs.items():
        for a, b in zip(s, s[1:]):
            pairs[(a, b)] += words[w]
            where[(a, b)].add(w)
    # Max-heap of (count, pair) with lazy invalidation: an entry is valid if its count is current.
    heap = [(-c, p) for p, c in pairs.items()]
    heapq.heapify(heap)
    merges: List[Tuple[str, str]] = []
    while len(merges) < n_merges and heap:
        negc, (a, b) = heapq.heappop(heap)
        if pairs.get((a, b), 0) != -negc:
            continue
        if -negc < 2:
            break
        merges.append((a, b))
        ab = a + b
        changed = set()
        for w in where.pop((a, b), ()):
            s, f = seqs[w], words[w]
            if not any(x == a and y == b for x, y in zip(s, s[1:])):
                continue
            for x, y in zip(s, s[1:]):
                pairs[(x, y)] -= f
                changed.add((x, y))
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(ab)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
            for x, y in zip(out, out[1:]):
                pairs[(x, y)] += f
                where[(x, y)].add(w)
                changed.add((x, y))
        for p in changed:
            if pairs.get(p, 0) > 0:
                heapq.heappush(heap, (-pairs[p], p))
            else:
                pairs.pop(p, None)
    tokens = [B2U[b] for b in range(256)] + [a + b for a, b in merges]
    if len(set(tokens)) != len(tokens):
        raise AssertionError("duplicate BPE token")
    types = [1] * len(tokens) + [t for _, t in SPECIAL_TOKENS]
    tokens += [s for s, _ in SPECIAL_TOKENS]
    return {"tokens": tokens, "token_type": types, "merges": [f"{a} {b}" for a, b in merges]}


def split_specials(text: str):
    """Splits text into plain strings and special-token ids (ints, index into SPECIAL_TOKENS)."""
    specials = sorted((s for s, _ in SPECIAL_TOKENS), key=len, reverse=True)
    pat = regex.compile("(" + "|".join(regex.escape(s) for s in specials) + ")")
    names = [s for s, _ in SPECIAL_TOKENS]
    out = []
    for part in pat.split(text):
        if not part:
            continue
        out.append(names.index(part) if part in names else part)
    return out


class Tokenizer:
    """Encoder/decoder for a vocabulary written by train(); special tokens parsed in text."""

    def __init__(self, vocab: dict):
        self.tokens = vocab["tokens"]
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(vocab["merges"])}
        self.special_ids = [self.ids[s] for s, _ in SPECIAL_TOKENS]
        self.cache: Dict[str, List[int]] = {}

    @classmethod
    def load(cls, path: str) -> "Tokenizer":
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f))

    def token_id(self, text: str) -> int:
        return self.ids[text]

    def _bpe(self, piece: str) -> List[int]:
        if piece in self.cache:
            return self.cache[piece]
        s = list(to_symbols(piece))
        while len(s) > 1:
            ranked = [(self.ranks.get((x, y), 1 << 30), i) for i, (x, y) in enumerate(zip(s, s[1:]))]
            r, i = min(ranked)
            if r == 1 << 30:
                break
            s = s[:i] + [s[i] + s[i + 1]] + s[i + 2:]
        ids = [self.ids[x] for x in s]
        self.cache[piece] = ids
        return ids

    def encode(self, text: str) -> List[int]:
        out = []
        for seg in split_specials(text):
            if isinstance(seg, int):
                out.append(self.special_ids[seg])
            else:
                for p in pretokenize(seg):
                    out.extend(self._bpe(p))
        return out

    def decode(self, ids: List[int]) -> str:
        data = bytearray()
        for i in ids:
            t = self.tokens[i]
            if i in self.special_ids:
                data += t.encode("utf-8")
            else:
                data += bytes(U2B[c] for c in t)
        return data.decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser(description="train the tiny model's byte-level BPE vocabulary")
    ap.add_argument("cmd", choices=["train"])
    ap.add_argument("--corpus", required=True, help="corpus directory written by tiny_corpus.py")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    texts = []
    with open(os.path.join(a.corpus, "train.jsonl"), encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            texts.append(r["prompt"] + r["answer"])
    with open(os.path.join(a.corpus, "text.jsonl"), encoding="utf-8") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
    vocab = train(texts, a.vocab_size)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    print(f"bpe: {len(vocab['tokens'])} tokens ({len(vocab['merges'])} merges) -> {a.out}")


if __name__ == "__main__":
    main()
