"""Writes a clover_moe / qwen35moe network (numpy weights, effective ssm_a) to GGUF in the
official (Clover fork) or upstream layout, and builds small random networks for tests.
Key and tensor names: /work/shared/qwen35moe-notes.md section 1; layouts: clover-facts.md.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

import gguf
from gguf import GgmlType, ValueType
from model import DIFFUSION_ONLY_SUFFIXES, HParams

# Tensors kept in F32 whatever the requested type (small vectors and the conv kernel, as
# llama.cpp's converter and quantizer do).
_F32_SUFFIXES = ("norm.weight", "ssm_a", "ssm_dt.bias", "ssm_conv1d.weight", "ffn_gate_inp_shexp.weight",
                 "ffn_gate_inp.weight", "ssm_bd_history.bias", "ssm_bd_logit_scale.weight")


def storage_type(name: str, shape, qtype: GgmlType) -> GgmlType:
    """Type a tensor is stored in: F32 for vectors/norms/gates, else `qtype` when rows fit its block."""
    if name.endswith(_F32_SUFFIXES) or len(shape) < 2:
        return GgmlType.F32
    block = gguf.BLOCK_LAYOUT[qtype][0]
    return qtype if shape[-1] % block == 0 else GgmlType.F16


def write_gguf(path: str, hp: HParams, weights: Dict[str, np.ndarray], vocab: dict,
               layout: str = "official", qtype: GgmlType = GgmlType.F32,
               description: str = "", chat_template: Optional[str] = None, name: str = "tiny"):
    """Writes `weights` (numpy order, ssm_a effective = -exp(A_log)) as a GGUF file.

    layout "official": arch clover_moe, no expert_shared_count key, ssm_a = raw A_log, and the four
    diffusion-only tensors per GDN layer written as zeros. layout "upstream": the patched form
    (key present, no extra tensors, ssm_a = -exp(A_log)). `vocab` holds tokens (list of str),
    token_type (list of int), merges (list of str), eos/padding/mask ids.
    """
    if layout not in ("official", "upstream"):
        raise ValueError(f"layout {layout!r}; expected official or upstream")
    arch = hp.arch
    p = arch + "."
    w = gguf.GGUFWriter()
    w.add_string("general.architecture", arch)
    w.add_string("general.name", name)
    if description:
        w.add_string("general.description", description)
    w.add_u32("general.alignment", 32)
    w.add_u32(p + "context_length", hp.n_ctx)
    w.add_u32(p + "embedding_length", hp.n_embd)
    w.add_u32(p + "block_count", hp.n_layer)
    w.add_u32(p + "attention.head_count", hp.n_head)
    w.add_u32(p + "attention.head_count_kv", hp.n_head_kv)
    w.add_u32(p + "attention.key_length", hp.head_dim)
    w.add_u32(p + "attention.value_length", hp.head_dim)
    w.add_f32(p + "attention.layer_norm_rms_epsilon", hp.eps)
    w.add_u32(p + "rope.dimension_count", hp.n_rot)
    sec = hp.n_rot // 2
    w.add_array(p + "rope.dimension_sections", [sec - 2 * (sec // 3), sec // 3, sec // 3, 0], ValueType.INT32)
    w.add_f32(p + "rope.freq_base", hp.rope_base)
    w.add_u32(p + "ssm.conv_kernel", hp.ssm_conv_kernel)
    w.add_u32(p + "ssm.state_size", hp.ssm_d_state)
    w.add_u32(p + "ssm.group_count", hp.ssm_n_group)
    w.add_u32(p + "ssm.time_step_rank", hp.ssm_dt_rank)
    w.add_u32(p + "ssm.inner_size", hp.ssm_d_inner)
    interval = next((i + 1 for i, r in enumerate(hp.recurrent) if not r), 4)
    w.add_u32(p + "full_attention_interval", interval)
    w.add_u32(p + "expert_count", hp.n_expert)
    w.add_u32(p + "expert_used_count", hp.n_expert_used)
    w.add_u32(p + "expert_feed_forward_length", hp.n_ff_exp)
    w.add_u32(p + "expert_shared_feed_forward_length", hp.n_ff_shexp)
    if layout == "upstream":
        w.add_u32(p + "expert_shared_count", 1)
    if arch == "clover_moe":
        w.add_u32(p + "diffusion.block_size", hp.block_size)
        w.add_f32(p + "diffusion.threshold", hp.threshold)
        w.add_bool(p + "diffusion.shift_logits", hp.shift_logits)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen35")
    w.add_array("tokenizer.ggml.tokens", vocab["tokens"], ValueType.STRING)
    w.add_array("tokenizer.ggml.token_type", vocab["token_type"], ValueType.INT32)
    w.add_array("tokenizer.ggml.merges", vocab.get("merges", []), ValueType.STRING)
    w.add_u32("tokenizer.ggml.eos_token_id", vocab["eos_token_id"])
    w.add_u32("tokenizer.ggml.padding_token_id", vocab.get("padding_token_id", vocab["eos_token_id"]))
    if vocab.get("mask_token_id") is not None:
        w.add_u32("tokenizer.ggml.mask_token_id", vocab["mask_token_id"])
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    if chat_template:
        w.add_string("tokenizer.chat_template", chat_template)

    def put(tname, arr):
        arr = np.asarray(arr, dtype=np.float32)
        w.add_tensor(tname, arr, storage_type(tname, arr.shape, qtype))

    put("token_embd.weight", weights["token_embd.weight"])
    for il in range(hp.n_layer):
        b = f"blk.{il}."
        for tname in sorted(k for k in weights if k.startswith(b)):
            arr = weights[tname]
            if tname == b + "ssm_a" and layout == "official":
                arr = np.log(-np.asarray(arr, dtype=np.float64))  # raw A_log
            put(tname, arr)
        if hp.recurrent[il] and layout == "official":
            # Unpublished shapes: small plausible ones, zeros (the engines leave them unused).
            put(b + "ssm_bd_history.weight", np.zeros((hp.ssm_dt_rank, hp.n_embd)))
            put(b + "ssm_bd_history.bias", np.zeros((hp.ssm_dt_rank,)))
            put(b + "ssm_bd_logit_scale.weight", np.zeros((hp.ssm_dt_rank,)))
            put(b + "ssm_conv1d.weight_right", np.zeros((hp.conv_dim, hp.ssm_conv_kernel)))
    put("output_norm.weight", weights["output_norm.weight"])
    if "output.weight" in weights:
        put("output.weight", weights["output.weight"])
    w.write(path)


def byte_vocab(n_vocab: int, specials: List[str]) -> dict:
    """A byte-level vocabulary: the 256 GPT-2 byte symbols, filler tokens, then `specials` last."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    tokens = [chr(c) for c in cs]
    while len(tokens) < n_vocab - len(specials):
        tokens.append(f"<filler_{len(tokens)}>")
    tokens += specials
    types = [1] * (len(tokens) - len(specials)) + [3] * len(specials)
    ids = {t: i for i, t in enumerate(tokens)}
    return dict(tokens=tokens, token_type=types, merges=[], eos_token_id=ids["<|im_end|>"],
                padding_token_id=ids["<|endoftext|>"], mask_token_id=ids.get("<|mask|>"))


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
            "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|mask|>"]


def tiny_hparams(arch="clover_moe", n_vocab=384, n_embd=64, n_layer=4, n_ctx=512) -> HParams:
    """Small widths with the real structure: GDN x3 + attention, Hv = 2 Hk, top-2 of 4 experts."""
    return HParams(arch=arch, n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer, n_head=4, n_head_kv=2,
                   head_dim=32, n_rot=8, rope_base=10000.0, eps=1e-6, n_ctx=n_ctx,
                   recurrent=[(il + 1) % 4 != 0 for il in range(n_layer)], ssm_conv_kernel=4,
                   ssm_d_state=16, ssm_n_group=2, ssm_dt_rank=4, ssm_d_inner=64, n_expert=4,
                   n_expert_used=2, n_ff_exp=32, n_ff_shexp=32, official_layout=False,
                   mask_token_id=None, eog_ids=[], think_start_id=None, think_end_id=None)


def random_weights(hp: HParams, seed: int = 0, logit_scale: float = 1.0) -> Dict[str, np.ndarray]:
    """Random weights that keep activations finite and logits spread (numpy order, effective ssm_a)."""
    rng = np.random.default_rng(seed)
    D = hp.n_embd

    def lin(n_out, n_in, s=1.0):
        return (rng.standard_normal((n_out, n_in)) * s / np.sqrt(n_in)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"token_embd.weight": rng.standard_normal((hp.n_vocab, D)).astype(np.float32),
         "output_norm.weight": norm(D),
         "output.weight": lin(hp.n_vocab, D, 4.0 * logit_scale)}
    for il in range(hp.n_layer):
        b = f"blk.{il}."
        w[b + "attn_norm.weight"] = norm(D)
        w[b + "post_attention_norm.weight"] = norm(D)
        w[b + "ffn_gate_inp.weight"] = lin(hp.n_expert, D, 2.0)
        w[b + "ffn_gate_exps.weight"] = np.stack([lin(hp.n_ff_exp, D) for _ in range(hp.n_expert)])
        w[b + "ffn_up_exps.weight"] = np.stack([lin(hp.n_ff_exp, D) for _ in range(hp.n_expert)])
        w[b + "ffn_down_exps.weight"] = np.stack([lin(D, hp.n_ff_exp, 0.5) for _ in range(hp.n_expert)])
        w[b + "ffn_gate_inp_shexp.weight"] = (rng.standard_normal(D) / np.sqrt(D)).astype(np.float32)
        w[b + "ffn_gate_shexp.weight"] = lin(hp.n_ff_shexp, D)
        w[b + "ffn_up_shexp.weight"] = lin(hp.n_ff_shexp, D)
        w[b + "ffn_down_shexp.weight"] = lin(D, hp.n_ff_shexp, 0.5)
        if hp.recurrent[il]:
            w[b + "attn_qkv.weight"] = lin(hp.conv_dim, D)
            w[b + "attn_gate.weight"] = lin(hp.ssm_d_inner, D)
            w[b + "ssm_beta.weight"] = lin(hp.ssm_dt_rank, D)
            w[b + "ssm_alpha.weight"] = lin(hp.ssm_dt_rank, D)
            w[b + "ssm_dt.bias"] = (0.5 * rng.standard_normal(hp.ssm_dt_rank)).astype(np.float32)
            w[b + "ssm_a"] = (-np.exp(rng.uniform(np.log(1), np.log(16), hp.ssm_dt_rank))).astype(np.float32)
            w[b + "ssm_conv1d.weight"] = (0.5 * rng.standard_normal((hp.conv_dim, hp.ssm_conv_kernel))).astype(np.float32)
            w[b + "ssm_norm.weight"] = norm(hp.ssm_d_state)
            w[b + "ssm_out.weight"] = lin(D, hp.ssm_d_inner, 0.5)
        else:
            qd = hp.n_head * hp.head_dim
            w[b + "attn_q.weight"] = lin(2 * qd, D)
            w[b + "attn_k.weight"] = lin(hp.n_head_kv * hp.head_dim, D)
            w[b + "attn_v.weight"] = lin(hp.n_head_kv * hp.head_dim, D)
            w[b + "attn_output.weight"] = lin(D, qd, 0.5)
            w[b + "attn_q_norm.weight"] = norm(hp.head_dim)
            w[b + "attn_k_norm.weight"] = norm(hp.head_dim)
    return w
