"""Trains the tiny tri-mode Clover model (AR + block diffusion jointly) on this machine's CPU and
exports it to GGUF in Clover's official layout. Fixed seed; progress and losses are printed.
Usage: train_tiny.py --corpus DIR --out models/clover-tiny.gguf [--epochs 9] [--threads 2] [--procs 2]
(`make train-tiny` runs corpus -> BPE -> this -> evaluation.)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import socket
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bpe  # noqa: E402
import export  # noqa: E402
import model  # noqa: E402
from gguf import GgmlType  # noqa: E402
from model import HParams  # noqa: E402
from train_net import TrainNet  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_config(vocab: dict) -> HParams:
    """The tiny model: Clover's structure (3 GDN layers then 1 gated-attention layer, repeated;
    value heads = 2 x key heads; routed experts top-k + a gated shared expert) at small widths."""
    ids = {t: i for i, t in enumerate(vocab["tokens"])}
    n_layer = 8
    return HParams(
        arch="clover_moe", n_vocab=len(vocab["tokens"]), n_embd=128, n_layer=n_layer, n_head=4, n_head_kv=2,
        head_dim=32, n_rot=8, rope_base=1e6, eps=1e-6, n_ctx=2048,
        recurrent=[(il + 1) % 4 != 0 for il in range(n_layer)], ssm_conv_kernel=4, ssm_d_state=32,
        ssm_n_group=2, ssm_dt_rank=4, ssm_d_inner=128, n_expert=8, n_expert_used=2, n_ff_exp=128,
        n_ff_shexp=128, official_layout=True, mask_token_id=ids["<|mask|>"],
        eog_ids=sorted({ids["<|im_end|>"], ids["<|endoftext|>"]}), think_start_id=ids["<think>"],
        think_end_id=ids["</think>"], block_size=32, threshold=0.95, shift_logits=True)


def init_weights(hp: HParams, seed: int) -> dict:
    """Initial weights (numpy order, effective ssm_a): N(0, 1/n_in) projections, residual outputs
    scaled by 1/sqrt(2 n_layer), Mamba-style dt (softplus(dt_bias) in [1e-3, 0.1])."""
    g = torch.Generator().manual_seed(seed)
    D = hp.n_embd
    res = 1.0 / math.sqrt(2 * hp.n_layer)

    def lin(n_out, n_in, s=1.0, *lead):
        return torch.randn(*lead, n_out, n_in, generator=g) * s / math.sqrt(n_in)

    w = {"token_embd.weight": torch.randn(hp.n_vocab, D, generator=g),
         "output_norm.weight": torch.ones(D), "output.weight": lin(hp.n_vocab, D)}
    for il in range(hp.n_layer):
        b = f"blk.{il}."
        w[b + "attn_norm.weight"] = torch.ones(D)
        w[b + "post_attention_norm.weight"] = torch.ones(D)
        w[b + "ffn_gate_inp.weight"] = lin(hp.n_expert, D, 0.1)
        w[b + "ffn_gate_exps.weight"] = lin(hp.n_ff_exp, D, 1.0, hp.n_expert)
        w[b + "ffn_up_exps.weight"] = lin(hp.n_ff_exp, D, 1.0, hp.n_expert)
        w[b + "ffn_down_exps.weight"] = lin(D, hp.n_ff_exp, res, hp.n_expert)
        w[b + "ffn_gate_inp_shexp.weight"] = torch.zeros(D)
        w[b + "ffn_gate_shexp.weight"] = lin(hp.n_ff_shexp, D)
        w[b + "ffn_up_shexp.weight"] = lin(hp.n_ff_shexp, D)
        w[b + "ffn_down_shexp.weight"] = lin(D, hp.n_ff_shexp, res)
        if hp.recurrent[il]:
            w[b + "attn_qkv.weight"] = lin(hp.conv_dim, D)
            w[b + "attn_gate.weight"] = lin(hp.ssm_d_inner, D)
            w[b + "ssm_beta.weight"] = lin(hp.ssm_dt_rank, D)
            w[b + "ssm_alpha.weight"] = lin(hp.ssm_dt_rank, D, 0.1)
            dt = torch.exp(torch.rand(hp.ssm_dt_rank, generator=g) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            w[b + "ssm_dt.bias"] = dt + torch.log(-torch.expm1(-dt))  # inverse softplus
            w[b + "ssm_a"] = -(1 + 15 * torch.rand(hp.ssm_dt_rank, generator=g))
            w[b + "ssm_conv1d.weight"] = torch.randn(hp.conv_dim, hp.ssm_conv_kernel, generator=g) / math.sqrt(hp.ssm_conv_kernel)
            w[b + "ssm_norm.weight"] = torch.ones(hp.ssm_d_state)
            w[b + "ssm_out.weight"] = lin(D, hp.ssm_d_inner, res)
        else:
            qd = hp.n_head * hp.head_dim
            w[b + "attn_q.weight"] = lin(2 * qd, D)
            w[b + "attn_k.weight"] = lin(hp.n_head_kv * hp.head_dim, D)
            w[b + "attn_v.weight"] = lin(hp.n_head_kv * hp.head_dim, D)
            w[b + "attn_output.weight"] = lin(D, qd, res)
            w[b + "attn_q_norm.weight"] = torch.ones(hp.head_dim)
            w[b + "attn_k_norm.weight"] = torch.ones(hp.head_dim)
    return w


CHUNK = 8  # GDN chunk of the training pass; answers start on a chunk boundary


class Example:
    """One training sequence: tokens (left-padded so the answer starts on a GDN chunk boundary,
    hence every answer block too), per-target AR weights, and the answer span [a0, a1) (empty for
    plain text). Padding is invisible to the network (see TrainNet.forward)."""

    def __init__(self, prompt, answer, B, prompt_weight, pad_id):
        pad = (CHUNK - len(prompt) % CHUNK) % CHUNK if answer else 0
        self.tokens = [pad_id] * pad + prompt + answer
        self.pad = pad
        self.a0, self.a1 = pad + len(prompt), pad + len(prompt) + len(answer)
        n = len(self.tokens)
        self.T = (n + CHUNK - 1) // CHUNK * CHUNK
        # Weight of the target at position i+1 predicted by row i.
        self.w = [0.0] * self.T
        for i in range(pad, n - 1):
            self.w[i] = 1.0 if i + 1 >= self.a0 and answer else (prompt_weight if answer else 1.0)


def load_examples(corpus, tok, B, prompt_weight, max_len):
    pad_id = tok.token_id("<|endoftext|>")
    chats, texts = [], []
    with open(os.path.join(corpus, "train.jsonl"), encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            chats.append(Example(tok.encode(r["prompt"]), tok.encode(r["answer"]), B, prompt_weight, pad_id))
    with open(os.path.join(corpus, "text.jsonl"), encoding="utf-8") as f:
        for line in f:
            ids = tok.encode(json.loads(line)["text"])
            for i in range(0, len(ids), max_len):
                piece = ids[i:i + max_len]
                if len(piece) > 8:
                    texts.append(Example(piece, [], B, 1.0, pad_id))
    return chats, texts


def make_batches(examples, tokens_per_batch, rng):
    """Groups examples of equal padded length; each batch holds about tokens_per_batch tokens."""
    by_len = {}
    for e in examples:
        by_len.setdefault(e.T, []).append(e)
    batches = []
    for T, group in by_len.items():
        rng.shuffle(group)
        n = max(1, tokens_per_batch // T)
        batches += [group[i:i + n] for i in range(0, len(group), n)]
    rng.shuffle(batches)
    return batches


def collate(batch, hp, rng, pad_id, complementary=True):
    """Tensors for TrainNet.forward plus AR / diffusion targets. Noisy blocks: slot 0 (the seed)
    is never masked; each other answer slot is masked with probability r ~ U(0, 1] per block
    (at least one); with `complementary` a second copy masks exactly the other slots."""
    B, mask = hp.block_size, hp.mask_token_id
    N, T = len(batch), max(e.T for e in batch)
    tokens = torch.full((N, T), pad_id, dtype=torch.long)
    valid = torch.zeros(N, T, dtype=torch.bool)
    pos = torch.zeros(N, T, dtype=torch.long)
    tgt = torch.zeros(N, T, dtype=torch.long)
    w = torch.zeros(N, T)
    ntok, nseq, nstart, ntgt, nmask = [], [], [], [], []
    for i, e in enumerate(batch):
        n = len(e.tokens)
        tokens[i, :n] = torch.tensor(e.tokens)
        valid[i, e.pad:n] = True
        pos[i, e.pad:n] = torch.arange(n - e.pad)
        tgt[i, :n - 1] = torch.tensor(e.tokens[1:])
        w[i, :e.T] = torch.tensor(e.w)
        if e.a1 <= e.a0:
            continue
        for s in range(e.a0, e.a1, B):
            slots = [j for j in range(1, B) if s + j < e.a1]
            if not slots:
                continue
            r = 1.0 - rng.random()
            m = [j for j in slots if rng.random() < r] or [rng.choice(slots)]
            copies = [m]
            rest = [j for j in slots if j not in m]
            if complementary and rest:
                copies.append(rest)
            for mm in copies:
                blk = [e.tokens[s + j] if s + j < e.a1 else mask for j in range(B)]
                tg = [-100] * B
                for j in mm:
                    blk[j] = mask
                    tg[j - 1] = e.tokens[s + j]  # shifted: row j-1 predicts slot j
                for j in range(1, B):
                    if s + j >= e.a1:
                        blk[j] = mask
                ntok.append(blk)
                nseq.append(i)
                nstart.append(s)
                ntgt.append(tg)
                nmask.append(len(mm))
    noisy = None
    if ntok:
        noisy = {"tokens": torch.tensor(ntok), "seq": torch.tensor(nseq), "start": torch.tensor(nstart),
                 "targets": torch.tensor(ntgt)}
    return tokens, valid, pos, tgt, w, noisy


def shard(tokens, valid, pos, tgt, w, noisy, rank: int, world: int):
    """This data-parallel rank's share of a collated batch: sequences rank, rank + world, ... and the
    noisy blocks cut from them (their "seq" renumbered). None when the batch has too few sequences."""
    N = tokens.shape[0]
    keep = torch.arange(rank, N, world)
    if keep.numel() == 0:
        return None
    if world == 1:
        return tokens, valid, pos, tgt, w, noisy
    remap = torch.full((N,), -1, dtype=torch.long)
    remap[keep] = torch.arange(keep.numel())
    sub = None
    if noisy is not None:
        sel = remap[noisy["seq"]] >= 0
        if bool(sel.any()):
            sub = {"tokens": noisy["tokens"][sel], "seq": remap[noisy["seq"][sel]], "start": noisy["start"][sel],
                   "targets": noisy["targets"][sel]}
    return tokens[keep], valid[keep], pos[keep], tgt[keep], w[keep], sub


def shard_loss(net, full, rank: int, world: int, diff_weight: float, aux_weight: float = 0.01):
    """(loss, [AR, diffusion, aux] as floats) of this rank's share of the collated batch `full`,
    normalised by the whole batch, so the ranks' losses (and gradients) sum to the whole batch's:
    AR cross-entropy weighted by w, diffusion cross-entropy averaged over the masked slots, plus
    aux_weight x the experts' load-balancing loss (that one only approximately: it is computed per
    pass and weighted by the rank's share of sequences). loss is None when the rank has none."""
    stats = torch.zeros(3)
    part = shard(*full, rank, world)
    if part is None:
        return None, stats
    w_all = full[4][full[4] > 0].sum()
    n_noisy = int((full[5]["targets"] != -100).sum()) if full[5] is not None else 0
    tokens, valid, pos, tgt, w, noisy = part
    rows = w > 0
    nrows = noisy["targets"] != -100 if noisy is not None else None
    logits, nlogits, aux = net(tokens, valid, pos, noisy, rows, nrows, CHUNK)
    ce = torch.nn.functional.cross_entropy(logits, tgt[rows], reduction="none")
    ar = (ce * w[rows]).sum() / w_all
    # The load-balancing loss is per pass: weight it by this rank's share of the sequences.
    aux = aux * (tokens.shape[0] / full[0].shape[0])
    loss = ar + aux_weight * aux
    dl = torch.tensor(0.0)
    if nlogits is not None:
        dl = torch.nn.functional.cross_entropy(nlogits, noisy["targets"][nrows], reduction="sum") / n_noisy
        loss = loss + diff_weight * dl
    stats[:] = torch.tensor([ar.item(), dl.item(), float(aux)])
    return loss, stats


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    class Fmt(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
        pass
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=Fmt)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--vocab", help="vocab.json (default CORPUS/vocab.json)")
    ap.add_argument("--out", required=True, help="GGUF to write")
    ap.add_argument("--minutes", type=float, default=0.0,
                    help="wall-clock budget; with --epochs 0 the schedule is sized from the speed measured "
                         "over the first 50 steps (0: no budget)")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: budget only)")
    ap.add_argument("--epochs", type=float, default=9, help="schedule length in epochs over the chat data")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads in all (split between --procs)")
    ap.add_argument("--procs", type=int, default=2,
                    help="data-parallel processes: each takes every procs-th sequence of a batch and the "
                         "gradients are summed (gloo); two 1-thread processes ran 2.4x faster than one 2-thread "
                         "process on this network, whose small operations do not parallelise (docs/reference.md)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--tokens-per-batch", type=int, default=3072)
    ap.add_argument("--text-ratio", type=float, default=0.10, help="plain-text batches per chat batch")
    ap.add_argument("--diff-weight", type=float, default=1.0)
    ap.add_argument("--prompt-weight", type=float, default=0.0, help="AR loss weight of chat prompt tokens")
    ap.add_argument("--type", default="Q8_0", choices=["Q8_0", "F16", "F32"])
    ap.add_argument("--init", help="start from this GGUF's weights (a second, fine-tuning stage)")
    ap.add_argument("--checkpoint", help="save training state here after every epoch; resume from it")
    a = ap.parse_args()
    if a.procs < 1 or a.threads < a.procs:
        raise SystemExit(f"train: --procs must be between 1 and --threads ({a.threads}), got {a.procs}")
    # Checked here, before any worker starts, so a wrong path is one line, not a worker's traceback.
    needed = [os.path.join(a.corpus, "train.jsonl"), os.path.join(a.corpus, "text.jsonl"),
              a.vocab or os.path.join(a.corpus, "vocab.json")] + ([a.init] if a.init else [])
    missing = [f for f in needed if not os.path.isfile(f)]
    if missing:
        raise SystemExit(f"train: missing {', '.join(missing)} (make the corpus with tiny_corpus.py and the "
                         f"vocabulary with bpe.py train first; see train_tiny.sh)")
    if a.procs == 1:
        train(0, a, 0)
    else:
        import torch.multiprocessing as mp
        mp.spawn(train, args=(a, free_port()), nprocs=a.procs)


def train(rank: int, a, port: int):
    """One data-parallel rank (rank 0 prints, checkpoints and exports). Every rank draws the same
    schedule and noise from the same seeded RNG, so only the gradients need exchanging; the summed
    gradient equals the whole batch's, and every rank applies the same update."""
    world = a.procs
    torch.set_num_threads(a.threads // world)
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    lead = rank == 0
    log = print if lead else (lambda *args, **kw: None)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    vocab_path = a.vocab or os.path.join(a.corpus, "vocab.json")
    with open(vocab_path, encoding="utf-8") as f:
        vocab = json.load(f)
    tok = bpe.Tokenizer(vocab)
    hp = tiny_config(vocab)
    pad_id = tok.token_id("<|endoftext|>")
    chats, texts = load_examples(a.corpus, tok, hp.block_size, a.prompt_weight, 256)
    weights = init_weights(hp, a.seed)
    if a.init:
        # Fine-tuning stage: start from an exported model (its Q8_0 rounding included).
        loaded = model.Model.load(a.init, dtype=torch.float32).w
        missing = [k for k in weights if k not in loaded]
        if missing:
            raise SystemExit(f"train: {a.init} lacks {missing[:3]}... (not a tiny model of this config)")
        weights = {k: loaded[k].float().reshape(v.shape).clone() for k, v in weights.items()}
        log(f"train: starting from the weights of {a.init}", flush=True)
    net = TrainNet(hp, weights)
    n_params = sum(p.numel() for p in net.parameters())
    log(f"train: {n_params / 1e6:.2f}M parameters, {len(chats)} chats, {len(texts)} text pieces, "
        f"vocab {hp.n_vocab}, {world} process(es) x {a.threads // world} thread(s)", flush=True)
    params = list(net.parameters())
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    start, step, epoch = time.time(), 0, 0
    budget = a.minutes * 60
    total_steps = a.steps or None
    hist = {"ar": [], "diff": [], "aux": []}
    elapsed = 0.0  # rank 0's clock, shared through the gradient exchange so all ranks stop together
    if a.checkpoint and os.path.exists(a.checkpoint):
        # Resume at the epoch boundary where the checkpoint was taken (same RNG states, so the
        # rest of the run is what an uninterrupted run would have done).
        ck = torch.load(a.checkpoint)
        net.load_state_dict(ck["net"])
        opt.load_state_dict(ck["opt"])
        step, epoch, total_steps, hist = ck["step"], ck["epoch"], ck["total_steps"], ck["hist"]
        rng.setstate(ck["rng"])
        torch.set_rng_state(ck["torch_rng"])
        start -= ck["elapsed"]
        elapsed = ck["elapsed"]
        log(f"train: resumed from {a.checkpoint} at step {step}, epoch {epoch}", flush=True)
    while True:
        chat_b = make_batches(chats, a.tokens_per_batch, rng)
        text_b = make_batches(texts, a.tokens_per_batch, rng)
        n_text = int(len(chat_b) * a.text_ratio)
        sched = [("chat", b) for b in chat_b] + [("text", b) for b in text_b[:n_text]]
        rng.shuffle(sched)
        if total_steps is None and step == 0 and a.epochs:
            total_steps = int(a.epochs * len(sched))
        for kind, batch in sched:
            if total_steps is None and step == 50 and budget > 0:
                # Fix the schedule length from the measured speed so the run ends within budget.
                total_steps = int(budget / (elapsed / 50))
                log(f"train: {elapsed / 50:.2f} s/step -> {total_steps} steps "
                    f"({total_steps / len(sched):.1f} epochs)", flush=True)
            if (total_steps and step >= total_steps) or (budget > 0 and elapsed > budget * 1.05):
                break
            frac = step / total_steps if total_steps else 0.0
            lr = a.lr * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
            for gp in opt.param_groups:
                gp["lr"] = lr
            full = collate(batch, hp, rng, pad_id)
            stats = torch.zeros(4)  # AR loss, diffusion loss, aux loss, rank 0's clock
            opt.zero_grad()
            loss, stats[:3] = shard_loss(net, full, rank, world, a.diff_weight)
            if loss is not None:
                loss.backward()
            if lead:
                stats[3] = time.time() - start
            if world > 1:
                grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
                flat = torch.cat([g.reshape(-1) for g in grads] + [stats])
                dist.all_reduce(flat)
                off = 0
                for p_, g in zip(params, grads):
                    p_.grad = flat[off:off + g.numel()].view_as(g)
                    off += g.numel()
                stats = flat[off:]
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            elapsed = float(stats[3])
            step += 1
            hist["ar"].append(float(stats[0]))
            hist["aux"].append(float(stats[2]))
            if full[5] is not None:  # the batch has answer blocks, hence a diffusion loss
                hist["diff"].append(float(stats[1]))
            if step % 50 == 0:
                mean = {k: (sum(v[-50:]) / max(1, len(v[-50:]))) for k, v in hist.items()}
                log(f"step {step:6d} epoch {epoch:3d} {time.time() - start:7.0f}s cpu {time.process_time():7.0f}s lr {lr:.2e} "
                    f"ar {mean['ar']:.4f} diff {mean['diff']:.4f} aux {mean['aux']:.3f}", flush=True)
        else:
            epoch += 1
            if a.checkpoint and lead:
                torch.save({"net": net.state_dict(), "opt": opt.state_dict(), "step": step, "epoch": epoch,
                            "total_steps": total_steps, "hist": hist, "rng": rng.getstate(),
                            "torch_rng": torch.get_rng_state(), "elapsed": time.time() - start},
                           a.checkpoint + ".tmp")
                os.replace(a.checkpoint + ".tmp", a.checkpoint)
            continue
        break
    log(f"train: {step} steps, {epoch} full epochs, {time.time() - start:.0f} s", flush=True)
    if world > 1:
        dist.destroy_process_group()
    if not lead:
        return
    weights = {k: v.numpy() for k, v in net.export_weights().items()}
    with open(os.path.join(ROOT, "assets", "chat_template.jinja"), encoding="utf-8") as f:
        template = f.read()
    vocab_meta = dict(vocab, eos_token_id=tok.token_id("<|im_end|>"), padding_token_id=pad_id,
                      mask_token_id=hp.mask_token_id)
    desc = ("crossword's tiny tri-mode Clover model (AR + block diffusion), trained by "
            "reference/train_tiny.py on Debian text and generated chats. Official Clover layout: "
            "ssm_a holds raw A_log, no expert_shared_count key; the four diffusion-only GDN tensors "
            "(ssm_bd_history.weight/.bias, ssm_bd_logit_scale.weight, ssm_conv1d.weight_right) are "
            "zeros because no engine uses them.")
    export.write_gguf(a.out, hp, weights, vocab_meta, "official", GgmlType[a.type], description=desc,
                      chat_template=template, name="clover-tiny")
    print(f"train: wrote {a.out} ({os.path.getsize(a.out)} bytes)", flush=True)


if __name__ == "__main__":
    main()
