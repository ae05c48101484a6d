"""Reference decoding loops: AR, block diffusion (LowConfidence) and lossless self-speculation,
exactly as docs/decoding.md defines them, with counters (forward passes, commits per pass,
accepted drafts per round). Written for clarity; one sequence at a time.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

import torch

from model import Model, ModelError, State, VerifyRecord, forward, rollback


@dataclasses.dataclass
class Config:
    """Decoding parameters. None means "from the model file" (block size, threshold)."""
    max_tokens: int = 256
    block_size: Optional[int] = None
    threshold: Optional[float] = None
    temperature: float = 0.0        # 0 = greedy
    seed: int = 0                   # RNG seed when temperature > 0
    dllm_biases: bool = True        # Clover's length / think-end logit ramps
    length_penalty: tuple = (10.0, 8192, 8192)   # (value, start, window) towards EOG
    think_end_bias: tuple = (10.0, 4096, 4096)   # (value, start, window) towards </think>
    draft_max: int = 0              # spec: drafts per round at most (0: block size - 1)
    draft_p_min: float = 0.0        # spec: verify only the leading drafts whose top confidence >= this


@dataclasses.dataclass
class Result:
    """Outcome of one generation.

    tokens: the answer (EOG excluded). stop: "eog" | "limit" (max_tokens or context full).
    forward_passes: passes after prefill (denoise, commit, AR step, draft, verify all count).
    passes: per pass {"kind", "block", "committed": [(slot, token)], ...}; accepted: per spec
    round the number c of accepted draft tokens (the round emits c + 1 tokens).
    """
    tokens: List[int]
    stop: str
    eog_token: Optional[int] = None   # the end-of-generation token that ended the answer
    forward_passes: int = 0
    passes: list = dataclasses.field(default_factory=list)
    accepted: List[int] = dataclasses.field(default_factory=list)

    @property
    def tpf(self) -> float:
        """Tokens per forward pass: answer tokens (EOG excluded) / passes after the prompt
        (commit passes counted), as docs/decoding.md defines it."""
        return len(self.tokens) / self.forward_passes if self.forward_passes else float("nan")


class Decoder:
    """Runs the three modes on one model. `prompt` is a list of token ids (at least one)."""

    def __init__(self, model: Model, cfg: Config):
        self.m, self.hp, self.cfg = model, model.hp, cfg
        self.B = cfg.block_size or self.hp.block_size
        self.tau = self.hp.threshold if cfg.threshold is None else cfg.threshold
        self.eog = set(self.hp.eog_ids)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.think_start = self.hp.think_start_id
        self.think_end = self.hp.think_end_id

    # -- logit processing ------------------------------------------------------------------

    def biased(self, row: torch.Tensor, t: int, context: List[int]) -> torch.Tensor:
        """Adds Clover's ramps: bias(t) = value * clamp((t - start) / window, 0, 1), t = answer
        tokens before the predicted position; the </think> one only while <think> is open."""
        if not self.cfg.dllm_biases:
            return row
        row = row.clone()
        val, start, win = self.cfg.length_penalty
        ramp = min(max((t - start) / win, 0.0), 1.0)
        if ramp > 0:
            for e in self.eog:
                row[e] += val * ramp
        val, start, win = self.cfg.think_end_bias
        ramp = min(max((t - start) / win, 0.0), 1.0)
        if ramp > 0 and self.think_end is not None and self._think_open(context):
            row[self.think_end] += val * ramp
        return row

    def _think_open(self, context: List[int]) -> bool:
        if self.think_start is None:
            return False
        for tok in reversed(context):
            if tok == self.think_end:
                return False
            if tok == self.think_start:
                return True
        return False

    def pick_ar(self, row: torch.Tensor) -> int:
        """AR choice from a (biased) logit row: argmax, or a sample at temperature > 0."""
        if self.cfg.temperature <= 0:
            return int(torch.argmax(row))
        p = torch.softmax(row / self.cfg.temperature, -1)
        return int(torch.multinomial(p, 1, generator=self.gen))

    def candidate(self, row: torch.Tensor):
        """Masked-slot candidate (mask token excluded) and its confidence (plain softmax
        probability over the full vocabulary). Returns (token, confidence, draft distribution)."""
        probs = torch.softmax(row, -1)
        excl = row.clone()
        excl[self.hp.mask_token_id] = float("-inf")
        if self.cfg.temperature <= 0:
            tok = int(torch.argmax(excl))
            q = None
        else:
            q = torch.softmax(excl / self.cfg.temperature, -1)
            tok = int(torch.multinomial(q, 1, generator=self.gen))
        return tok, float(probs[tok]), q

    def top_confidence(self, row: torch.Tensor) -> float:
        """Softmax probability (full vocabulary) of the row's best non-mask token."""
        excl = row.clone()
        excl[self.hp.mask_token_id] = float("-inf")
        return float(torch.softmax(row, -1)[int(torch.argmax(excl))])

    # -- helpers ---------------------------------------------------------------------------

    def _limit(self, n_prompt: int) -> int:
        # Every answer token occupies one context position: at most n_ctx - n_prompt tokens.
        return min(self.cfg.max_tokens, self.hp.n_ctx - n_prompt)

    def _prefill(self, prompt: List[int]):
        if not prompt:
            raise ModelError("empty prompt: at least one token is needed to seed generation")
        state = State(self.m)
        logits = forward(self.m, state, list(prompt), "causal")
        return state, logits[-1]

    def _need_mask(self):
        if self.hp.mask_token_id is None:
            raise ModelError("tokenizer.ggml.mask_token_id missing: diffusion and spec modes need a mask token")
        if not self.hp.shift_logits:
            raise ModelError("diffusion.shift_logits is false; only shifted logits are implemented")

    # -- modes -----------------------------------------------------------------------------

    def ar(self, prompt: List[int]) -> Result:
        """Plain autoregressive decoding: one causal pass per token."""
        state, row = self._prefill(prompt)
        limit, ans, res = self._limit(len(prompt)), [], Result([], "limit")
        while len(ans) < limit:
            tok = self.pick_ar(self.biased(row, len(ans), prompt + ans))
            if tok in self.eog:
                res.stop, res.eog_token = "eog", tok
                break
            ans.append(tok)
            if len(ans) >= limit:
                break
            row = forward(self.m, state, [tok], "causal")[-1]
            res.forward_passes += 1
            res.passes.append({"kind": "ar", "committed": [(0, tok)]})
        res.tokens = ans
        return res

    def diffusion(self, prompt: List[int], state_out: Optional[list] = None) -> Result:
        """Block diffusion with the LowConfidence commit rule (docs/decoding.md steps 1-6).

        If `state_out` is a list, the committed State is appended to it after every commit pass
        (for leak tests)."""
        self._need_mask()
        mask = self.hp.mask_token_id
        state, row = self._prefill(prompt)
        limit, ans, res = self._limit(len(prompt)), [], Result([], "limit")
        if limit <= 0:
            return res
        seed = self.pick_ar(self.biased(row, 0, prompt))
        n_block = 0
        while True:
            if seed in self.eog:
                res.stop, res.eog_token = "eog", seed
                break
            g = len(ans)
            L = min(self.B, limit - g)  # the last block may be shorter (max_tokens / context)
            block = [seed] + [mask] * (L - 1)
            masked = set(range(1, L))
            end = None
            while masked:
                logits = forward(self.m, state, block, "denoise")
                res.forward_passes += 1
                cand = {}
                # History for biases: prompt, answer, and the block's leading emitted slots (those
                # before the first mask); committed slots after a mask are not emitted yet.
                lead = min(masked)
                ctx = prompt + ans + block[:lead]
                for j in sorted(masked):
                    cand[j] = self.candidate(self.biased(logits[j - 1], g + j, ctx))[:2]
                chosen = [j for j in sorted(masked) if cand[j][1] >= self.tau]
                if not chosen:  # fallback: the single most confident slot (lowest slot on ties)
                    chosen = [max(sorted(masked), key=lambda j: (cand[j][1], -j))]
                for j in chosen:
                    block[j] = cand[j][0]
                    masked.discard(j)
                # The block ends at its first committed EOG: the answer ends there or before, so
                # the slots after it are dropped (docs/decoding.md, block diffusion step 2).
                cut = next((j for j in range(1, L) if j not in masked and block[j] in self.eog), L - 1)
                if cut + 1 < L:
                    L = cut + 1
                    del block[L:]
                    masked = {j for j in masked if j < L}
                res.passes.append({"kind": "denoise", "block": n_block,
                                   "committed": [(j, block[j]) for j in chosen if j < L],
                                   "logits": logits})
                for j in range(1, L):  # EOG with no mask before it ends the answer
                    if j in masked:
                        break
                    if block[j] in self.eog:
                        end = j
                        break
                if end is not None:
                    break
            if end is not None:
                ans += block[:end]
                res.stop, res.eog_token = "eog", block[end]
                break
            ans += block
            if len(ans) >= limit:
                break
            logits = forward(self.m, state, block, "causal")  # commit pass
            res.forward_passes += 1
            res.passes.append({"kind": "commit", "block": n_block, "committed": []})
            if state_out is not None:
                state_out.append(state.clone())
            seed = self.pick_ar(self.biased(logits[-1], len(ans), prompt + ans))
            n_block += 1
        res.tokens = ans
        return res

    def spec(self, prompt: List[int]) -> Result:
        """Self-speculative decoding: one draft (denoise) + one verify (causal) pass per round;
        greedy output equals AR; temperature > 0 uses the speculative-sampling rule."""
        self._need_mask()
        mask = self.hp.mask_token_id
        state, row = self._prefill(prompt)
        limit, ans, res = self._limit(len(prompt)), [], Result([], "limit")
        if limit <= 0:
            return res
        seed = self.pick_ar(self.biased(row, 0, prompt))
        greedy = self.cfg.temperature <= 0
        n_round = 0
        while True:
            if seed in self.eog:
                res.stop, res.eog_token = "eog", seed
                break
            g = len(ans)
            L = min(self.B, self.cfg.draft_max + 1 if self.cfg.draft_max else self.B, limit - g)
            if L == 1:  # no room for drafts: the seed is the last token
                ans.append(seed)
                break
            dl = forward(self.m, state, [seed] + [mask] * (L - 1), "denoise")
            drafts, qs = [seed], [None]
            for j in range(1, L):  # every draft slot is masked: the history ends at the seed
                row = self.biased(dl[j - 1], g + j, prompt + ans + [seed])
                # Like llama.cpp's --draft-p-min, the draft ends before its first slot whose top
                # candidate is unsure; the verify pass then runs only rows likely to be accepted.
                if self.cfg.draft_p_min > 0 and self.top_confidence(row) < self.cfg.draft_p_min:
                    break
                tok, _, q = self.candidate(row)
                drafts.append(tok)
                qs.append(q)
            V = len(drafts)  # verified rows: the seed and the kept drafts
            rec = VerifyRecord()
            vl = forward(self.m, state, drafts, "causal", rec)
            res.forward_passes += 2
            c, nxt = 0, None
            while c < V - 1:
                row = self.biased(vl[c], g + c + 1, prompt + ans + drafts[:c + 1])
                d = drafts[c + 1]
                if greedy:
                    a = int(torch.argmax(row))
                    if a != d:
                        nxt = a
                        break
                else:
                    p = torch.softmax(row / self.cfg.temperature, -1)
                    q = qs[c + 1]
                    if torch.rand((), generator=self.gen).item() >= min(1.0, float(p[d] / q[d])):
                        resid = torch.clamp(p - q, min=0)
                        nxt = int(torch.multinomial(resid / resid.sum(), 1, generator=self.gen))
                        break
                c += 1
            if nxt is None:  # every draft accepted: bonus token from the last verify row
                nxt = self.pick_ar(self.biased(vl[V - 1], g + V, prompt + ans + drafts))
            emitted = drafts[:c + 1]
            stop = next((i for i, t in enumerate(emitted) if t in self.eog), None)
            # Drafts that matched after an end-of-generation token are never emitted, and the
            # EOG itself is not counted either: the engine's statistic counts emitted drafts.
            res.accepted.append(c if stop is None else stop - 1)
            res.passes.append({"kind": "draft", "round": n_round, "drafts": drafts[1:], "verified": V})
            res.passes.append({"kind": "verify", "round": n_round, "committed": list(enumerate(emitted))})
            rollback(self.m, state, rec, c + 1)
            if stop is not None:
                ans += emitted[:stop]
                res.stop, res.eog_token = "eog", emitted[stop]
                break
            ans += emitted
            if len(ans) >= limit:
                break
            seed = nxt
            n_round += 1
        res.tokens = ans
        return res

    def run(self, mode: str, prompt: List[int]) -> Result:
        if mode == "ar":
            return self.ar(prompt)
        if mode == "diffusion":
            return self.diffusion(prompt)
        if mode == "spec":
            return self.spec(prompt)
        raise ValueError(f"mode {mode!r}; expected ar, diffusion or spec")
