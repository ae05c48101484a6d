"""Batched, differentiable form of the reference network for training the tiny model: the clean
sequence runs causally (AR loss) and noisy copies of the answer blocks run as denoise passes
against the clean prefix (diffusion loss), with the math of model.py (tested equal there).
GDN uses the chunked form of the delta rule; blocks start on chunk boundaries, so the clean state
at every block start is available to the noisy blocks.
"""

from __future__ import annotations

import math
from typing import Dict

import torch

import model as ref
from model import HParams


def gdn_chunked(q, k, v, g, beta, S0, n_group: int, chunk: int):
    """Gated delta rule over a sequence in chunks (equal to model.gdn_recurrence up to rounding).

    q, k [N, T, Hk, Dk] (l2-normed), v [N, T, Hv, Dv], g, beta [N, T, Hv], S0 [N, Hv, Dk, Dv];
    T a multiple of `chunk`. Returns (o [N, T, Hv, Dv], S_start [N, T/chunk, Hv, Dk, Dv] = the
    state before each chunk, S_final).
    Derivation: with A_t = exp(cumsum g) inside a chunk and u_t the value written at t,
    S_t = A_t S0 + sum_{s<=t} (A_t/A_s) k_s u_s^T and (I + L) u = beta (v - A K S0) with
    L[t,s] = beta_t (A_t/A_s) k_t.k_s (s < t); o_t = scale (A_t S0^T q_t + sum_{s<=t} (A_t/A_s)(q_t.k_s) u_s).
    """
    N, T, Hv, Dv = v.shape
    Dk = q.shape[-1]
    idx = torch.arange(Hv) % n_group
    q, k = q[:, :, idx], k[:, :, idx]  # tiled order: value head h uses key head h mod Hk
    scale = 1.0 / math.sqrt(Dk)
    nc, C = T // chunk, chunk
    # [N, Hv, nc, C, D]
    q = q.permute(0, 2, 1, 3).reshape(N, Hv, nc, C, Dk)
    k = k.permute(0, 2, 1, 3).reshape(N, Hv, nc, C, Dk)
    v = v.permute(0, 2, 1, 3).reshape(N, Hv, nc, C, Dv)
    g = g.permute(0, 2, 1).reshape(N, Hv, nc, C)
    beta = beta.permute(0, 2, 1).reshape(N, Hv, nc, C)
    gcs = torch.cumsum(g, -1)                                   # log A_t
    diff = gcs[..., :, None] - gcs[..., None, :]                # log(A_t / A_s)
    tri = torch.tril(torch.ones(C, C, dtype=torch.bool))
    decay = torch.where(tri, torch.exp(torch.where(tri, diff, torch.zeros_like(diff))), torch.zeros_like(diff))
    strict = torch.tril(torch.ones(C, C, dtype=torch.bool), -1)
    kk = k @ k.transpose(-1, -2)
    L = torch.where(strict, beta[..., :, None] * decay * kk, torch.zeros_like(kk))
    IL = torch.eye(C, dtype=q.dtype) + L
    A = torch.exp(gcs)                                          # [N, Hv, nc, C]
    # Triangular solves (stable); the nilpotent product form of (I + L)^-1 overflows in float32
    # once keys align during training.
    P = torch.linalg.solve_triangular(IL, beta[..., None] * v, upper=False)             # [.., C, Dv]
    R = torch.linalg.solve_triangular(IL, (beta * A)[..., None] * k, upper=False)      # [.., C, Dk]
    QK = (q @ k.transpose(-1, -2)) * decay                      # [.., C, C]
    Aq = A[..., None] * q
    A_last = A[..., -1]                                         # [N, Hv, nc]
    Kw = (torch.exp(gcs[..., -1:] - gcs))[..., None] * k        # k_s * A_C / A_s
    S = S0
    outs, starts = [], []
    for c in range(nc):
        starts.append(S)
        U = P[:, :, c] - R[:, :, c] @ S                          # [N, Hv, C, Dv]
        outs.append(scale * (Aq[:, :, c] @ S + QK[:, :, c] @ U))
        S = A_last[:, :, c, None, None] * S + Kw[:, :, c].transpose(-1, -2) @ U
    o = torch.stack(outs, 2).reshape(N, Hv, T, Dv).permute(0, 2, 1, 3)
    return o, torch.stack(starts, 1), S


class TrainNet(torch.nn.Module):
    """Parameters under their GGUF names ('.' replaced by '__' for nn.ParameterDict), numpy order,
    `ssm_a` stored as A_log (so -exp keeps it negative while training)."""

    def __init__(self, hp: HParams, weights: Dict[str, torch.Tensor]):
        super().__init__()
        self.hp = hp
        self.p = torch.nn.ParameterDict()
        for name, t in weights.items():
            if name.endswith("ssm_a"):
                t = torch.log(-t)
            self.p[name.replace(".", "__")] = torch.nn.Parameter(t.clone().float())

    def w(self, name):
        t = self.p[name.replace(".", "__")]
        return -torch.exp(t) if name.endswith("ssm_a") else t

    def export_weights(self) -> Dict[str, torch.Tensor]:
        """Weights in model.py form (effective ssm_a), detached float32."""
        out = {}
        for key, t in self.p.items():
            name = key.replace("__", ".")
            out[name] = self.w(name).detach().clone()
        return out

    # -- layers over [N, T, D] ---------------------------------------------------------------

    def moe(self, il, f):
        hp, b = self.hp, f"blk.{il}."
        shape = f.shape
        x = f.reshape(-1, shape[-1])
        probs = torch.softmax(x @ self.w(b + "ffn_gate_inp.weight").T, -1)
        top_w, top_e = torch.topk(probs, hp.n_expert_used, -1)
        top_w = top_w / torch.clamp(top_w.sum(-1, keepdim=True), min=6.103515625e-5)
        out = torch.zeros_like(x)
        gate_e, up_e, down_e = (self.w(b + n) for n in ("ffn_gate_exps.weight", "ffn_up_exps.weight",
                                                         "ffn_down_exps.weight"))
        for e in range(hp.n_expert):
            rows, slot = torch.nonzero(top_e == e, as_tuple=True)
            if rows.numel() == 0:
                continue
            xe = x[rows]
            y = (ref.silu(xe @ gate_e[e].T) * (xe @ up_e[e].T)) @ down_e[e].T
            out = out.index_add(0, rows, y * top_w[rows, slot][:, None])
        sh = (ref.silu(x @ self.w(b + "ffn_gate_shexp.weight").T) * (x @ self.w(b + "ffn_up_shexp.weight").T)) \
            @ self.w(b + "ffn_down_shexp.weight").T
        out = out + sh * torch.sigmoid(x @ self.w(b + "ffn_gate_inp_shexp.weight"))[:, None]
        # Switch-style balance term: fraction routed x mean probability, per expert.
        frac = torch.zeros(hp.n_expert).index_add(0, top_e.reshape(-1), torch.ones(top_e.numel())) / top_e.numel()
        aux = hp.n_expert * (frac * probs.mean(0)).sum()
        return out.reshape(shape), aux

    def attn_qkv(self, il, h, pos):
        hp, b = self.hp, f"blk.{il}."
        N, T, _ = h.shape
        H, Hkv, Dh = hp.n_head, hp.n_head_kv, hp.head_dim
        qg = (h @ self.w(b + "attn_q.weight").T).view(N, T, H, 2 * Dh)
        q, gate = qg[..., :Dh], qg[..., Dh:].reshape(N, T, H * Dh)
        k = (h @ self.w(b + "attn_k.weight").T).view(N, T, Hkv, Dh)
        v = (h @ self.w(b + "attn_v.weight").T).view(N, T, Hkv, Dh)
        q = ref.rms_norm(q, self.w(b + "attn_q_norm.weight"), hp.eps)
        k = ref.rms_norm(k, self.w(b + "attn_k_norm.weight"), hp.eps)
        return rope(q, pos, hp), rope(k, pos, hp), v, gate

    def attend(self, il, q, K, V, allowed, gate):
        """q [N, T, H, Dh]; K, V [N, S, Hkv, Dh]; allowed [N, T, S] bool."""
        hp, b = self.hp, f"blk.{il}."
        N, T, H, Dh = q.shape
        grp = H // hp.n_head_kv
        Kh, Vh = K.repeat_interleave(grp, 2), V.repeat_interleave(grp, 2)
        s = torch.einsum("nthd,nshd->nhts", q, Kh) / math.sqrt(Dh)
        s = s.masked_fill(~allowed[:, None], float("-inf"))
        o = torch.einsum("nhts,nshd->nthd", torch.softmax(s, -1), Vh).reshape(N, T, H * Dh)
        return (o * torch.sigmoid(gate)) @ self.w(b + "attn_output.weight").T

    def gdn_in(self, il, h):
        hp, b = self.hp, f"blk.{il}."
        qkv = h @ self.w(b + "attn_qkv.weight").T
        z = h @ self.w(b + "attn_gate.weight").T
        beta = torch.sigmoid(h @ self.w(b + "ssm_beta.weight").T)
        g = ref.softplus(h @ self.w(b + "ssm_alpha.weight").T + self.w(b + "ssm_dt.bias")) * self.w(b + "ssm_a")
        return qkv, z, g, beta

    def gdn_conv(self, il, X, T):
        """X [N, K-1+T, C] (K-1 rows of left context) -> q, k, v after conv, silu, split, l2-norm."""
        hp = self.hp
        W = self.w(f"blk.{il}.ssm_conv1d.weight")
        K = hp.ssm_conv_kernel
        y = ref.silu(sum(X[:, j:j + T] * W[:, j] for j in range(K)))
        kd, N = hp.key_dim, X.shape[0]
        q = ref.l2_norm(y[..., :kd].reshape(N, T, hp.ssm_n_group, hp.ssm_d_state), hp.eps)
        k = ref.l2_norm(y[..., kd:2 * kd].reshape(N, T, hp.ssm_n_group, hp.ssm_d_state), hp.eps)
        v = y[..., 2 * kd:].reshape(N, T, hp.ssm_dt_rank, hp.ssm_d_state)
        return q, k, v

    def gdn_out(self, il, o, z):
        hp, b = self.hp, f"blk.{il}."
        N, T = o.shape[:2]
        o = ref.rms_norm(o, self.w(b + "ssm_norm.weight"), hp.eps) * ref.silu(z.view(N, T, hp.ssm_dt_rank, hp.ssm_d_state))
        return o.reshape(N, T, hp.ssm_d_inner) @ self.w(b + "ssm_out.weight").T

    # -- the joint pass -----------------------------------------------------------------------

    def forward(self, tokens, valid, pos, noisy=None, rows=None, nrows=None, chunk=8):
        """Clean causal pass over `tokens` [N, T] (T a multiple of `chunk`) and, if given, denoise
        passes of noisy blocks of B = hp.block_size slots.

        valid [N, T] bool: False for padding (invisible: zero GDN inputs, masked keys).
        pos [N, T]: RoPE positions. noisy: dict with "tokens" [M, B], "seq" [M] (row of the clean
        batch), "start" [M] (clean index of the block's first slot, a multiple of `chunk`).
        rows / nrows: optional boolean masks [N, T] / [M, B] selecting the rows whose logits are
        computed (the output layer dominates the cost otherwise).
        Returns (clean logits [N, T, V] or [rows, V], noisy logits [M, B, V] or [nrows, V] or
        None, aux loss).
        """
        hp = self.hp
        B = hp.block_size
        N, T = tokens.shape
        x = self.w("token_embd.weight")[tokens]
        # Padding queries see themselves only (a row without keys would make NaNs that reach the
        # GDN layers through 0 * NaN).
        eye = torch.eye(T, dtype=torch.bool)[None]
        causal = (torch.tril(torch.ones(T, T, dtype=torch.bool))[None] & valid[:, None, :]) | eye
        if noisy is not None:
            M = noisy["tokens"].shape[0]
            seq, start = noisy["seq"], noisy["start"]
            xn = self.w("token_embd.weight")[noisy["tokens"]]
            npos = pos[seq, start][:, None] + torch.arange(B)
            # Noisy block keys: the clean prefix before the block, then the whole block.
            prefix = (torch.arange(T)[None, :] < start[:, None]) & valid[seq]
            n_allowed = torch.cat([prefix[:, None, :].expand(M, B, T), torch.ones(M, B, B, dtype=torch.bool)], -1)
        aux = 0.0
        for il in range(hp.n_layer):
            b = f"blk.{il}."
            h = ref.rms_norm(x, self.w(b + "attn_norm.weight"), hp.eps)
            hn = ref.rms_norm(xn, self.w(b + "attn_norm.weight"), hp.eps) if noisy is not None else None
            if hp.recurrent[il]:
                qkv, z, g, beta = self.gdn_in(il, h)
                vm = valid[..., None]
                zero = torch.zeros((), dtype=qkv.dtype)
                qkv, g, beta = torch.where(vm, qkv, zero), torch.where(vm, g, zero), torch.where(vm, beta, zero)
                K1 = hp.ssm_conv_kernel - 1
                X = torch.cat([torch.zeros(N, K1, qkv.shape[-1]), qkv], 1)
                q, k, v = self.gdn_conv(il, X, T)
                S0 = torch.zeros(N, hp.ssm_dt_rank, hp.ssm_d_state, hp.ssm_d_state)
                o, starts, _ = gdn_chunked(q, k, v, g, beta, S0, hp.ssm_n_group, chunk)
                a = self.gdn_out(il, o, z)
                if noisy is not None:
                    qkvn, zn, gn, betan = self.gdn_in(il, hn)
                    # Conv window: the K-1 clean rows before the block (zeros before the sequence).
                    ctx_idx = start[:, None] + torch.arange(K1)  # index into X (offset K1)
                    ctx = X[seq[:, None], ctx_idx]
                    qn, kn, vn = self.gdn_conv(il, torch.cat([ctx, qkvn], 1), B)
                    on, _, _ = gdn_chunked(qn, kn, vn, gn, betan, starts[seq, start // chunk], hp.ssm_n_group, B)
                    an = self.gdn_out(il, on, zn)
            else:
                q, k, v, gate = self.attn_qkv(il, h, pos)
                a = self.attend(il, q, k, v, causal, gate)
                if noisy is not None:
                    qn, kn, vn, gaten = self.attn_qkv(il, hn, npos)
                    Kc = torch.cat([k[seq], kn], 1)
                    Vc = torch.cat([v[seq], vn], 1)
                    an = self.attend(il, qn, Kc, Vc, n_allowed, gaten)
            x = x + a
            f, aux_l = self.moe(il, ref.rms_norm(x, self.w(b + "post_attention_norm.weight"), hp.eps))
            x = x + f
            aux = aux + aux_l
            if noisy is not None:
                xn = xn + an
                fn, _ = self.moe(il, ref.rms_norm(xn, self.w(b + "post_attention_norm.weight"), hp.eps))
                xn = xn + fn
        out_w = self.w("output.weight")
        if rows is not None:
            x = x[rows]
        logits = ref.rms_norm(x, self.w("output_norm.weight"), hp.eps) @ out_w.T
        nlogits = None
        if noisy is not None:
            if nrows is not None:
                xn = xn[nrows]
            nlogits = ref.rms_norm(xn, self.w("output_norm.weight"), hp.eps) @ out_w.T
        return logits, nlogits, aux / hp.n_layer


def rope(x, pos, hp):
    """NeoX RoPE on the first n_rot dims (as model.rope_neox, batched; theta in float32 as ggml)."""
    half = hp.n_rot // 2
    scale = torch.tensor(hp.rope_base, dtype=torch.float32) ** torch.tensor(-2.0 / hp.n_rot, dtype=torch.float32)
    # theta_i = pos * scale^i, built by repeated float32 multiplication like ggml.
    th = [pos.to(torch.float32)]
    for _ in range(half - 1):
        th.append(th[-1] * scale)
    theta = torch.stack(th, -1)[..., None, :].to(x.dtype)  # [N, T, 1, half]
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1, rest = x[..., :half], x[..., half:hp.n_rot], x[..., hp.n_rot:]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos, rest], -1)
