"""PyTorch reference of the clover_moe / qwen35moe network: causal (AR / commit / verify) and
denoise (block diffusion) passes over one sequence, written for clarity rather than speed.
Formulas: /work/shared/qwen35moe-notes.md section 2 (llama.cpp's graph); passes: docs/decoding.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional

import numpy as np
import torch

import gguf

# The four GDN tensors of the official Clover file that only the (unpublished) diffusion math uses.
DIFFUSION_ONLY_SUFFIXES = ("ssm_bd_history.weight", "ssm_bd_history.bias",
                           "ssm_bd_logit_scale.weight", "ssm_conv1d.weight_right")


class ModelError(Exception):
    """A model file the reference cannot run (missing key/tensor, bad shape); message says which."""


@dataclasses.dataclass
class HParams:
    """Hyperparameters, named as in docs/architecture.md (llama.cpp's qwen35moe loader keys)."""
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int              # trunk layers (block_count minus nextn_predict_layers)
    n_head: int
    n_head_kv: int
    head_dim: int             # attention.key_length (= value_length)
    n_rot: int                # rope.dimension_count
    rope_base: float
    eps: float
    n_ctx: int
    recurrent: List[bool]     # per layer: True = Gated DeltaNet, False = gated full attention
    ssm_conv_kernel: int      # K
    ssm_d_state: int          # head_k_dim = head_v_dim
    ssm_n_group: int          # key heads Hk
    ssm_dt_rank: int          # value heads Hv
    ssm_d_inner: int          # Hv * head_v_dim
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_ff_shexp: int
    official_layout: bool     # True: ssm_a holds raw A_log (Clover fork files)
    mask_token_id: Optional[int]
    eog_ids: List[int]
    think_start_id: Optional[int]
    think_end_id: Optional[int]
    block_size: int = 32
    threshold: float = 0.95
    shift_logits: bool = True

    @property
    def key_dim(self) -> int:
        return self.ssm_n_group * self.ssm_d_state

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.ssm_d_inner


def _key(meta: dict, name: str, required: bool = True, default=None):
    if name in meta:
        return meta[name]
    if required:
        raise ModelError(f"metadata key {name!r} missing; the file is not a complete qwen35moe/clover_moe model")
    return default


def read_hparams(r: gguf.GGUFReader) -> HParams:
    """Reads and checks the hyperparameters of a qwen35moe / clover_moe GGUF file."""
    m = r.metadata
    arch = m.get("general.architecture")
    if arch not in ("clover_moe", "qwen35moe"):
        raise ModelError(f"general.architecture is {arch!r}; expected 'clover_moe' or 'qwen35moe'")
    p = arch + "."
    n_block = int(_key(m, p + "block_count"))
    n_layer = n_block - int(m.get(p + "nextn_predict_layers", 0))
    interval = int(m.get(p + "full_attention_interval", 4))
    if p + "attention.recurrent_layers" in m:
        rec = [bool(x) for x in np.asarray(m[p + "attention.recurrent_layers"]).reshape(-1)][:n_layer]
    else:
        rec = [(il + 1) % interval != 0 for il in range(n_layer)]
    n_head_kv = m[p + "attention.head_count_kv"]
    if isinstance(n_head_kv, np.ndarray):  # per-layer array form: attention layers share one value
        n_head_kv = int(max(n_head_kv))
    tokens = m.get("tokenizer.ggml.tokens", [])
    ids = {t: i for i, t in enumerate(tokens)}
    eog = set()
    if "tokenizer.ggml.eos_token_id" in m:
        eog.add(int(m["tokenizer.ggml.eos_token_id"]))
    for t in ("<|im_end|>", "<|endoftext|>"):
        if t in ids:
            eog.add(ids[t])
    has_bd = any(name.endswith(DIFFUSION_ONLY_SUFFIXES) for name in r.tensors)
    official = arch == "clover_moe" and (has_bd or p + "expert_shared_count" not in m)
    n_shexp = int(m.get(p + "expert_shared_count", 1))
    if n_shexp != 1:
        raise ModelError(f"{p}expert_shared_count is {n_shexp}; the reference supports exactly 1 shared expert")
    hp = HParams(
        arch=arch,
        n_vocab=int(r.tensors["token_embd.weight"].ne[1]),
        n_embd=int(_key(m, p + "embedding_length")),
        n_layer=n_layer,
        n_head=int(_key(m, p + "attention.head_count")),
        n_head_kv=int(n_head_kv),
        head_dim=int(_key(m, p + "attention.key_length")),
        n_rot=int(_key(m, p + "rope.dimension_count")),
        rope_base=float(_key(m, p + "rope.freq_base", False, 10000.0)),
        eps=float(_key(m, p + "attention.layer_norm_rms_epsilon")),
        n_ctx=int(_key(m, p + "context_length")),
        recurrent=rec,
        ssm_conv_kernel=int(_key(m, p + "ssm.conv_kernel")),
        ssm_d_state=int(_key(m, p + "ssm.state_size")),
        ssm_n_group=int(_key(m, p + "ssm.group_count")),
        ssm_dt_rank=int(_key(m, p + "ssm.time_step_rank")),
        ssm_d_inner=int(_key(m, p + "ssm.inner_size")),
        n_expert=int(_key(m, p + "expert_count")),
        n_expert_used=int(_key(m, p + "expert_used_count")),
        n_ff_exp=int(_key(m, p + "expert_feed_forward_length")),
        n_ff_shexp=int(_key(m, p + "expert_shared_feed_forward_length")),
        official_layout=official,
        mask_token_id=(int(m["tokenizer.ggml.mask_token_id"]) if "tokenizer.ggml.mask_token_id" in m else None),
        eog_ids=sorted(eog),
        think_start_id=ids.get("<think>"),
        think_end_id=ids.get("</think>"),
        block_size=int(m.get(p + "diffusion.block_size", 32)),
        threshold=float(m.get(p + "diffusion.threshold", 0.95)),
        shift_logits=bool(m.get(p + "diffusion.shift_logits", True)),
    )
    if m.get(p + "attention.value_length", hp.head_dim) != hp.head_dim:
        raise ModelError("attention.value_length differs from key_length; not a qwen35moe network")
    if hp.ssm_d_inner != hp.ssm_dt_rank * hp.ssm_d_state:
        raise ModelError(f"ssm.inner_size {hp.ssm_d_inner} != time_step_rank {hp.ssm_dt_rank} x "
                         f"state_size {hp.ssm_d_state}")
    if hp.ssm_dt_rank % hp.ssm_n_group:
        raise ModelError(f"value heads {hp.ssm_dt_rank} not a multiple of key heads {hp.ssm_n_group}")
    return hp


class Model:
    """Weights (torch, `dtype`) and hyperparameters of one file.

    `w[name]` holds every tensor by its GGUF name in numpy order (a {n_in, n_out} weight is
    [n_out, n_in], so `x @ w.T` is ggml_mul_mat). `ssm_a` is stored effective (-exp(A_log))
    whatever the layout; the diffusion-only tensors of the official layout are not loaded.
    """

    def __init__(self, hp: HParams, w: Dict[str, torch.Tensor]):
        self.hp = hp
        self.w = w
        self.dtype = w["token_embd.weight"].dtype
        self.out_weight = w.get("output.weight", w["token_embd.weight"])

    @classmethod
    def load(cls, path: str, dtype=torch.float64) -> "Model":
        r = gguf.GGUFReader(path)
        hp = read_hparams(r)
        w = {}
        for name in r.tensors:
            if name.endswith(DIFFUSION_ONLY_SUFFIXES):
                continue  # unpublished semantics: deliberately unused (docs/decoding.md)
            if name.startswith("blk."):
                il = int(name.split(".")[1])
                if il >= hp.n_layer:
                    continue  # MTP block: not part of the trunk
            w[name] = torch.from_numpy(r.tensor(name).copy()).to(dtype)
        for il in range(hp.n_layer):
            if hp.recurrent[il]:
                a = w.get(f"blk.{il}.ssm_a")
                if a is None:
                    raise ModelError(f"tensor blk.{il}.ssm_a missing (GDN layer {il})")
                if hp.official_layout:
                    w[f"blk.{il}.ssm_a"] = -torch.exp(a)
        _check_shapes(hp, w)
        return cls(hp, w)


def _check_shapes(hp: HParams, w: Dict[str, torch.Tensor]):
    def need(name, shape):
        if name not in w:
            raise ModelError(f"tensor {name!r} missing")
        if tuple(w[name].shape) != tuple(shape):
            raise ModelError(f"tensor {name!r} has numpy shape {tuple(w[name].shape)}, expected {tuple(shape)}")
    E, D, F = hp.n_expert, hp.n_embd, hp.n_ff_exp
    need("token_embd.weight", (hp.n_vocab, D))
    need("output_norm.weight", (D,))
    for il in range(hp.n_layer):
        b = f"blk.{il}."
        need(b + "attn_norm.weight", (D,))
        need(b + "post_attention_norm.weight", (D,))
        need(b + "ffn_gate_inp.weight", (E, D))
        if b + "ffn_gate_up_exps.weight" in w:  # merged form: rows [0, F) gate, [F, 2F) up
            gu = w.pop(b + "ffn_gate_up_exps.weight")
            w[b + "ffn_gate_exps.weight"], w[b + "ffn_up_exps.weight"] = gu[:, :F], gu[:, F:]
        need(b + "ffn_gate_exps.weight", (E, F, D))
        need(b + "ffn_up_exps.weight", (E, F, D))
        need(b + "ffn_down_exps.weight", (E, D, F))
        need(b + "ffn_gate_inp_shexp.weight", (D,))
        need(b + "ffn_gate_shexp.weight", (hp.n_ff_shexp, D))
        need(b + "ffn_up_shexp.weight", (hp.n_ff_shexp, D))
        need(b + "ffn_down_shexp.weight", (D, hp.n_ff_shexp))
        if hp.recurrent[il]:
            need(b + "attn_qkv.weight", (hp.conv_dim, D))
            need(b + "attn_gate.weight", (hp.ssm_d_inner, D))
            need(b + "ssm_beta.weight", (hp.ssm_dt_rank, D))
            need(b + "ssm_alpha.weight", (hp.ssm_dt_rank, D))
            need(b + "ssm_dt.bias", (hp.ssm_dt_rank,))
            need(b + "ssm_a", (hp.ssm_dt_rank,))
            need(b + "ssm_conv1d.weight", (hp.conv_dim, hp.ssm_conv_kernel))
            need(b + "ssm_norm.weight", (hp.ssm_d_state,))
            need(b + "ssm_out.weight", (D, hp.ssm_d_inner))
        else:
            qd, kvd = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
            if b + "attn_q.weight" not in w and b + "attn_qkv.weight" in w:  # fused [Q+gate, K, V]
                qkv = w.pop(b + "attn_qkv.weight")
                w[b + "attn_q.weight"] = qkv[:2 * qd]
                w[b + "attn_k.weight"] = qkv[2 * qd:2 * qd + kvd]
                w[b + "attn_v.weight"] = qkv[2 * qd + kvd:]
            need(b + "attn_q.weight", (2 * qd, D))
            need(b + "attn_k.weight", (kvd, D))
            need(b + "attn_v.weight", (kvd, D))
            need(b + "attn_output.weight", (D, qd))
            need(b + "attn_q_norm.weight", (hp.head_dim,))
            need(b + "attn_k_norm.weight", (hp.head_dim,))


# ----------------------------------------------------------------------------------------------
# Primitives (notes 2.1)

def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * w over the last dim (the +1 of HF norms is already in w)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def l2_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / max(||x||, eps) over the last dim (ggml_l2_norm), written as sqrt(max(sum x^2, eps^2))
    so that training gets no 0 * inf gradient for all-zero (padding) vectors."""
    return x / torch.sqrt(torch.clamp(x.pow(2).sum(-1, keepdim=True), min=eps * eps))


def softplus(x: torch.Tensor) -> torch.Tensor:
    """log(1 + exp(x)), and x itself above 20 (ggml)."""
    return torch.where(x > 20, x, torch.log1p(torch.exp(torch.clamp(x, max=20))))


def silu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


def rope_neox(x: torch.Tensor, pos: torch.Tensor, n_rot: int, base: float) -> torch.Tensor:
    """NeoX RoPE on dims [0, n_rot) of each head; x [T, H, D], pos [T] (int).

    Pair i = (x[i], x[i + n_rot/2]) rotates by theta_i = pos * base^(-2i/n_rot), with theta built
    as ggml does: float32 start at pos, multiplied by float32 powf(base, -2/n_rot) once per pair.
    For text input this is exactly qwen35moe's IMROPE (all four position streams equal pos).
    """
    half = n_rot // 2
    scale = np.float32(np.power(np.float32(base), np.float32(-2.0 / n_rot), dtype=np.float32))
    theta = np.empty((len(pos), half), dtype=np.float32)
    t = pos.cpu().numpy().astype(np.float32)
    for i in range(half):
        theta[:, i] = t
        t = (t * scale).astype(np.float32)
    th = torch.from_numpy(theta.astype(np.float64)).to(x.dtype)[:, None, :]  # [T, 1, half]
    cos, sin = torch.cos(th), torch.sin(th)
    x0, x1, rest = x[..., :half], x[..., half:n_rot], x[..., n_rot:]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos, rest], dim=-1)


# ----------------------------------------------------------------------------------------------
# Sequence state

class State:
    """Committed state of one sequence: KV cache of the attention layers and GDN conv/SSM state.

    k[il], v[il]: [n_past, n_head_kv, head_dim] (K after norm + rope). conv[il]: [K-1, conv_dim]
    (the last K-1 pre-conv inputs, oldest first). ssm[il]: [Hv, Dk, Dv] with S[h, i, j], i = key
    dim, j = value dim (HF layout; llama.cpp stores the transpose).
    """

    def __init__(self, model: Model):
        hp = model.hp
        self.n_past = 0
        self.k: Dict[int, torch.Tensor] = {}
        self.v: Dict[int, torch.Tensor] = {}
        self.conv: Dict[int, torch.Tensor] = {}
        self.ssm: Dict[int, torch.Tensor] = {}
        for il in range(hp.n_layer):
            if hp.recurrent[il]:
                self.conv[il] = torch.zeros(hp.ssm_conv_kernel - 1, hp.conv_dim, dtype=model.dtype)
                self.ssm[il] = torch.zeros(hp.ssm_dt_rank, hp.ssm_d_state, hp.ssm_d_state, dtype=model.dtype)
            else:
                self.k[il] = torch.zeros(0, hp.n_head_kv, hp.head_dim, dtype=model.dtype)
                self.v[il] = torch.zeros(0, hp.n_head_kv, hp.head_dim, dtype=model.dtype)

    def clone(self) -> "State":
        s = State.__new__(State)
        s.n_past = self.n_past
        s.k = {i: t.clone() for i, t in self.k.items()}
        s.v = {i: t.clone() for i, t in self.v.items()}
        s.conv = {i: t.clone() for i, t in self.conv.items()}
        s.ssm = {i: t.clone() for i, t in self.ssm.items()}
        return s

    def max_abs_diff(self, other: "State") -> float:
        """Largest |difference| over every tensor of two states (inf if lengths differ)."""
        if self.n_past != other.n_past:
            return math.inf
        d = 0.0
        for a, b in ((self.k, other.k), (self.v, other.v), (self.conv, other.conv), (self.ssm, other.ssm)):
            for i in a:
                d = max(d, (a[i] - b[i]).abs().max().item() if a[i].numel() else 0.0)
        return d


class VerifyRecord:
    """What a causal pass records for rollback by replay (docs/decoding.md, self-speculation):
    per GDN layer the state before the pass, the pre-conv inputs and the recurrence inputs."""

    def __init__(self):
        self.n_past0 = 0
        self.gdn: Dict[int, dict] = {}


# ----------------------------------------------------------------------------------------------
# Layers

def attention(model: Model, il: int, h: torch.Tensor, state: State, pos: torch.Tensor,
              bidirectional_block: bool, commit: bool) -> torch.Tensor:
    """Gated full attention (notes 2.4). h [T, n_embd] -> [T, n_embd].

    The T new tokens see the committed prefix (state.k/v) plus themselves: causally, or all of
    them (bidirectional inside the block) for a denoise pass. commit=True appends K/V.
    """
    hp, w, b = model.hp, model.w, f"blk.{il}."
    T, H, Hkv, Dh = h.shape[0], hp.n_head, hp.n_head_kv, hp.head_dim
    qg = (h @ w[b + "attn_q.weight"].T).view(T, H, 2 * Dh)  # per head: [q (Dh) | gate (Dh)]
    q, gate = qg[..., :Dh], qg[..., Dh:].reshape(T, H * Dh)
    k = (h @ w[b + "attn_k.weight"].T).view(T, Hkv, Dh)
    v = (h @ w[b + "attn_v.weight"].T).view(T, Hkv, Dh)
    q = rope_neox(rms_norm(q, w[b + "attn_q_norm.weight"], hp.eps), pos, hp.n_rot, hp.rope_base)
    k = rope_neox(rms_norm(k, w[b + "attn_k_norm.weight"], hp.eps), pos, hp.n_rot, hp.rope_base)
    K = torch.cat([state.k[il], k], 0)  # [P + T, Hkv, Dh]
    V = torch.cat([state.v[il], v], 0)
    P = state.k[il].shape[0]
    group = H // Hkv  # query head hh reads kv head hh // group
    Kh = K.repeat_interleave(group, dim=1)  # [P+T, H, Dh]
    Vh = V.repeat_interleave(group, dim=1)
    scores = torch.einsum("thd,shd->hts", q, Kh) / math.sqrt(Dh)  # [H, T, P+T]
    if not bidirectional_block:
        allowed = torch.arange(P + T)[None, :] <= (P + torch.arange(T))[:, None]  # [T, P+T]
        scores = scores.masked_fill(~allowed[None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    o = torch.einsum("hts,shd->thd", probs, Vh).reshape(T, H * Dh)
    o = o * torch.sigmoid(gate)
    if commit:
        state.k[il], state.v[il] = K, V
    return o @ w[b + "attn_output.weight"].T


def gdn_recurrence(S: torch.Tensor, q, k, v, g, beta, n_group: int) -> (torch.Tensor, torch.Tensor):
    """Gated delta rule over T tokens, sequentially (notes 2.3 step 6).

    S [Hv, Dk, Dv] initial state; q, k [T, Hk, Dk] (l2-normed); v [T, Hv, Dv]; g, beta [T, Hv].
    Value head h uses key head h mod Hk (tiled GGUF order). Returns (o [T, Hv, Dv], final S).
    """
    T, Hv = v.shape[0], v.shape[1]
    idx = torch.arange(Hv) % n_group
    scale = 1.0 / math.sqrt(q.shape[-1])
    outs = []
    for t in range(T):
        kt, qt = k[t, idx], q[t, idx]  # [Hv, Dk]
        S = S * torch.exp(g[t])[:, None, None]                      # decay
        kv = torch.einsum("hij,hi->hj", S, kt)                       # read old memory
        d = (v[t] - kv) * beta[t][:, None]                           # delta
        S = S + kt[:, :, None] * d[:, None, :]                       # rank-1 write
        outs.append(scale * torch.einsum("hij,hi->hj", S, qt))       # read updated state
    return torch.stack(outs, 0), S


def gdn_inputs(model: Model, il: int, h: torch.Tensor):
    """Projections and gates of a GDN layer (notes 2.3 steps 1-2): (qkv, z, g, beta)."""
    hp, w, b = model.hp, model.w, f"blk.{il}."
    qkv = h @ w[b + "attn_qkv.weight"].T                        # [T, conv_dim], pre-conv
    z = h @ w[b + "attn_gate.weight"].T                          # [T, d_inner]
    beta = torch.sigmoid(h @ w[b + "ssm_beta.weight"].T)         # [T, Hv]
    g = softplus(h @ w[b + "ssm_alpha.weight"].T + w[b + "ssm_dt.bias"]) * w[b + "ssm_a"]  # <= 0
    return qkv, z, g, beta


def gdn_conv(model: Model, il: int, conv_state: torch.Tensor, qkv: torch.Tensor):
    """Causal depthwise conv with state, then silu, then split + l2-norm (notes 2.3 steps 3-5).

    Returns (q [T, Hk, Dk], k [T, Hk, Dk], v [T, Hv, Dv], new conv state [K-1, conv_dim]).
    """
    hp, W = model.hp, model.w[f"blk.{il}.ssm_conv1d.weight"]  # [C, K]
    K, T = hp.ssm_conv_kernel, qkv.shape[0]
    X = torch.cat([conv_state, qkv], 0)                          # [K-1+T, C]
    y = sum(X[j:j + T] * W[:, j] for j in range(K))              # j = K-1 multiplies the current token
    y = silu(y)
    kd = hp.key_dim
    q = l2_norm(y[:, :kd].reshape(T, hp.ssm_n_group, hp.ssm_d_state), hp.eps)
    k = l2_norm(y[:, kd:2 * kd].reshape(T, hp.ssm_n_group, hp.ssm_d_state), hp.eps)
    v = y[:, 2 * kd:].reshape(T, hp.ssm_dt_rank, hp.ssm_d_state)
    return q, k, v, X[T:].clone() if K > 1 else X[:0]


def gdn_output(model: Model, il: int, o: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Gated RMSNorm per head with silu(z), then ssm_out (notes 2.3 steps 7-8)."""
    hp, w, b = model.hp, model.w, f"blk.{il}."
    T = o.shape[0]
    o = rms_norm(o, w[b + "ssm_norm.weight"], hp.eps) * silu(z.view(T, hp.ssm_dt_rank, hp.ssm_d_state))
    return o.reshape(T, hp.ssm_d_inner) @ w[b + "ssm_out.weight"].T


def gdn_causal(model: Model, il: int, h: torch.Tensor, state: State, commit: bool,
               record: Optional[VerifyRecord] = None) -> torch.Tensor:
    """GDN layer over T tokens from the committed state; commit=True advances it."""
    qkv, z, g, beta = gdn_inputs(model, il, h)
    q, k, v, conv_new = gdn_conv(model, il, state.conv[il], qkv)
    o, S = gdn_recurrence(state.ssm[il], q, k, v, g, beta, model.hp.ssm_n_group)
    if record is not None:
        record.gdn[il] = dict(conv0=state.conv[il], ssm0=state.ssm[il], qkv=qkv, q=q, k=k, v=v, g=g, beta=beta)
    if commit:
        state.conv[il], state.ssm[il] = conv_new, S
    return gdn_output(model, il, o, z)


def gdn_denoise(model: Model, il: int, h: torch.Tensor, state: State) -> torch.Tensor:
    """GDN layer of a denoise pass: causal over the block from the committed state, into scratch.

    The official file's diffusion-only tensors (ssm_bd_history.*, ssm_bd_logit_scale.weight,
    ssm_conv1d.weight_right) have no published semantics and are unused; this is the one place
    to change when the maker's definition appears (docs/decoding.md).
    """
    return gdn_causal(model, il, h, state, commit=False)


def moe(model: Model, il: int, f: torch.Tensor) -> torch.Tensor:
    """Routed experts (softmax, top-k, renormalized) + sigmoid-gated shared expert (notes 2.5)."""
    hp, w, b = model.hp, model.w, f"blk.{il}."
    probs = torch.softmax(f @ w[b + "ffn_gate_inp.weight"].T, dim=-1)    # [T, E]
    top_w, top_e = torch.topk(probs, hp.n_expert_used, dim=-1)           # descending
    top_w = top_w / torch.clamp(top_w.sum(-1, keepdim=True), min=6.103515625e-5)
    gate_e, up_e, down_e = w[b + "ffn_gate_exps.weight"], w[b + "ffn_up_exps.weight"], w[b + "ffn_down_exps.weight"]
    out = torch.zeros_like(f)
    for t in range(f.shape[0]):
        for slot in range(hp.n_expert_used):  # summed in selection order
            e = int(top_e[t, slot])
            y = down_e[e] @ (silu(gate_e[e] @ f[t]) * (up_e[e] @ f[t]))
            out[t] = out[t] + y * top_w[t, slot]
    sh = (silu(f @ w[b + "ffn_gate_shexp.weight"].T) * (f @ w[b + "ffn_up_shexp.weight"].T)) @ w[b + "ffn_down_shexp.weight"].T
    sg = torch.sigmoid(f @ w[b + "ffn_gate_inp_shexp.weight"])           # [T]
    return out + sh * sg[:, None]


# ----------------------------------------------------------------------------------------------
# Forward pass

def forward(model: Model, state: State, tokens: List[int], mode: str = "causal",
            record: Optional[VerifyRecord] = None) -> torch.Tensor:
    """Runs `tokens` at positions [state.n_past, state.n_past + T); returns logits [T, n_vocab].

    mode "causal": attention causal, GDN from the committed state; the pass is committed (KV
    appended, GDN advanced, n_past += T). mode "denoise": attention sees the whole prefix and
    the whole block (bidirectional inside it), GDN runs causally into scratch; `state` is not
    modified. `record` (causal only) keeps what rollback() needs. Raises ModelError on bad ids
    or context overflow.
    """
    hp, w = model.hp, model.w
    if mode not in ("causal", "denoise"):
        raise ModelError(f"forward mode {mode!r}; expected 'causal' or 'denoise'")
    T = len(tokens)
    if T == 0:
        raise ModelError("forward over zero tokens")
    bad = [t for t in tokens if not 0 <= t < hp.n_vocab]
    if bad:
        raise ModelError(f"token id {bad[0]} out of range [0, {hp.n_vocab})")
    if state.n_past + T > hp.n_ctx:
        raise ModelError(f"context overflow: {state.n_past} + {T} tokens > context_length {hp.n_ctx}")
    commit = mode == "causal"
    if record is not None:
        record.n_past0 = state.n_past
    pos = torch.arange(state.n_past, state.n_past + T)
    x = w["token_embd.weight"][torch.tensor(tokens)]
    for il in range(hp.n_layer):
        b = f"blk.{il}."
        h = rms_norm(x, w[b + "attn_norm.weight"], hp.eps)
        if hp.recurrent[il]:
            a = gdn_causal(model, il, h, state, True, record) if commit else gdn_denoise(model, il, h, state)
        else:
            a = attention(model, il, h, state, pos, bidirectional_block=not commit, commit=commit)
        x = x + a
        x = x + moe(model, il, rms_norm(x, w[b + "post_attention_norm.weight"], hp.eps))
    if commit:
        state.n_past += T
    return rms_norm(x, w["output_norm.weight"], hp.eps) @ model.out_weight.T


def rollback(model: Model, state: State, record: VerifyRecord, n_keep: int):
    """Rolls a state committed by a recorded causal pass back to its first `n_keep` tokens.

    KV is truncated; each GDN layer's SSM state is rebuilt by replaying the recurrence over the
    first n_keep recorded tokens from the pre-pass state, and its conv window is taken from the
    recorded pre-conv inputs (docs/decoding.md, "GDN rollback by replay").
    """
    hp = model.hp
    n_total = state.n_past - record.n_past0
    if not 0 <= n_keep <= n_total:
        raise ModelError(f"rollback to {n_keep} tokens of a {n_total}-token pass")
    for il in range(hp.n_layer):
        if hp.recurrent[il]:
            r = record.gdn[il]
            if n_keep == 0:
                state.ssm[il], state.conv[il] = r["ssm0"], r["conv0"]
                continue
            _, S = gdn_recurrence(r["ssm0"], r["q"][:n_keep], r["k"][:n_keep], r["v"][:n_keep],
                                  r["g"][:n_keep], r["beta"][:n_keep], hp.ssm_n_group)
            X = torch.cat([r["conv0"], r["qkv"][:n_keep]], 0)
            state.ssm[il], state.conv[il] = S, X[X.shape[0] - (hp.ssm_conv_kernel - 1):].clone()
        else:
            keep = record.n_past0 + n_keep
            state.k[il], state.v[il] = state.k[il][:keep], state.v[il][:keep]
    state.n_past = record.n_past0 + n_keep
