"""Unit tests of the PyTorch reference: GGUF reader/writer, network invariants (batch = token by
token, denoise passes leak nothing, rollback by replay), and the three decoding loops.
Run: /usr/bin/python3 -m unittest discover -s reference -p 'test_*.py'
"""

import os
import struct
import sys
import tempfile
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import decode  # noqa: E402
import export  # noqa: E402
import gguf  # noqa: E402
import model  # noqa: E402
import train_net  # noqa: E402

TMP = tempfile.mkdtemp(prefix="crossword-ref-")


def tiny_file(name, arch="clover_moe", layout="official", seed=1, qtype=gguf.GgmlType.F32, n_ctx=512):
    path = os.path.join(TMP, name)
    if not os.path.exists(path):
        hp = export.tiny_hparams(arch=arch, n_ctx=n_ctx)
        export.write_gguf(path, hp, export.random_weights(hp, seed),
                          export.byte_vocab(hp.n_vocab, export.SPECIALS), layout, qtype)
    return path


def f16_bits(x):
    return np.float16(x).view(np.uint16).tobytes()


class GGUFTest(unittest.TestCase):
    def test_metadata_round_trip_every_type(self):
        w = gguf.GGUFWriter()
        vt = gguf.ValueType
        w.add("u8", 250, vt.UINT8)
        w.add("i8", -100, vt.INT8)
        w.add("u16", 65000, vt.UINT16)
        w.add("i16", -32000, vt.INT16)
        w.add("u32", 4_000_000_000, vt.UINT32)
        w.add("i32", -2_000_000_000, vt.INT32)
        w.add("f32", 1.5, vt.FLOAT32)
        w.add("b", True, vt.BOOL)
        w.add("s", "héllo", vt.STRING)
        w.add("u64", 2**63 + 5, vt.UINT64)
        w.add("i64", -2**62, vt.INT64)
        w.add("f64", 0.1, vt.FLOAT64)
        w.add_array("arr_i32", [1, -2, 3], vt.INT32)
        w.add_array("arr_s", ["a", "", "ü"], vt.STRING)
        w.add_array("nested", [(vt.INT32, [1, 2]), (vt.STRING, ["x"])], vt.ARRAY)
        path = os.path.join(TMP, "meta.gguf")
        w.write(path)
        r = gguf.GGUFReader(path)
        m = r.metadata
        for k, v in [("u8", 250), ("i8", -100), ("u16", 65000), ("i16", -32000), ("u32", 4_000_000_000),
                     ("i32", -2_000_000_000), ("f32", 1.5), ("b", True), ("s", "héllo"),
                     ("u64", 2**63 + 5), ("i64", -2**62), ("f64", 0.1)]:
            self.assertEqual(m[k], v, k)
        self.assertEqual(list(m["arr_i32"]), [1, -2, 3])
        self.assertEqual(m["arr_s"], ["a", "", "ü"])
        self.assertEqual(list(m["nested"][0]), [1, 2])
        self.assertEqual(m["nested"][1], ["x"])
        self.assertEqual(r.types["u64"], vt.UINT64)

    def test_tensor_round_trip_with_type_error_bounds(self):
        rng = np.random.default_rng(0)
        x = rng.standard_normal((3, 64)).astype(np.float32)
        w = gguf.GGUFWriter()
        types = [gguf.GgmlType.F32, gguf.GgmlType.F16, gguf.GgmlType.BF16, gguf.GgmlType.Q8_0, gguf.GgmlType.Q4_0]
        for t in types:
            w.add_tensor(f"t_{t.name}", x, t)
        path = os.path.join(TMP, "tensors.gguf")
        w.write(path)
        r = gguf.GGUFReader(path)
        amax = np.abs(x.reshape(-1, 32)).max(1, keepdims=True)
        bounds = {"F32": 0.0, "F16": 1e-3 * np.abs(x).max(), "BF16": 8e-3 * np.abs(x).max()}
        for t in types:
            y = r.tensor(f"t_{t.name}")
            self.assertEqual(y.shape, x.shape)
            err = np.abs(y - x).reshape(-1, 32)
            if t.name in bounds:
                self.assertLessEqual(err.max(), bounds[t.name] + 1e-12, t.name)
            elif t == gguf.GgmlType.Q8_0:  # half a step of amax/127, plus the fp16 scale rounding
                self.assertTrue(np.all(err <= amax / 127 * 0.5 + amax * 2e-3), t.name)
            else:  # Q4_0: half a step of amax/8 (one level is clipped at +amax)
                self.assertTrue(np.all(err <= amax / 8 + amax * 2e-3), t.name)
            self.assertEqual(r.tensors[f"t_{t.name}"].offset % 32, 0)

    def test_k_quant_blocks_from_format_definition(self):
        # Q4_K: d=0.5, dmin=0.25; sub-block s has scale s+1 and min 2s (6-bit packing of
        # ggml's get_scale_min_k4); element e of the block has quant e % 16.
        sc, mn = list(range(1, 9)), [2 * s for s in range(8)]
        packed = [0] * 12
        for j in range(4):
            packed[j] = sc[j] | ((sc[j + 4] >> 4) << 6)
            packed[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6)
            packed[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4)
        q = [e % 16 for e in range(256)]
        qs = []
        for chunk in range(4):  # 32 bytes per 64 elements: low nibble = first 32, high = next 32
            for l in range(32):
                qs.append(q[64 * chunk + l] | (q[64 * chunk + 32 + l] << 4))
        raw = f16_bits(0.5) + f16_bits(0.25) + bytes(packed) + bytes(qs)
        y = gguf.dequantize(np.frombuffer(raw, np.uint8), gguf.GgmlType.Q4_K, 256)
        want = [0.5 * sc[e // 32] * q[e] - 0.25 * mn[e // 32] for e in range(256)]
        np.testing.assert_allclose(y, want, rtol=0, atol=1e-6)
        # Q6_K: d=0.125, scale of group g (16 elements) = g - 8; element e quant (e * 7) % 64.
        q6 = [(e * 7) % 64 for e in range(256)]
        ql, qh = [0] * 128, [0] * 64
        for half in range(2):
            for l in range(32):
                a, b, c, d = (q6[128 * half + l + 32 * k] for k in range(4))
                ql[64 * half + l] = (a & 0xF) | ((c & 0xF) << 4)
                ql[64 * half + l + 32] = (b & 0xF) | ((d & 0xF) << 4)
                qh[32 * half + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((d >> 4) << 6)
        scales = [g - 8 for g in range(16)]
        raw = bytes(ql) + bytes(qh) + struct.pack("<16b", *scales) + f16_bits(0.125)
        y = gguf.dequantize(np.frombuffer(raw, np.uint8), gguf.GgmlType.Q6_K, 256)
        want = [0.125 * scales[e // 16] * (q6[e] - 32) for e in range(256)]
        np.testing.assert_allclose(y, want, rtol=0, atol=1e-6)

    def test_copy_with_metadata_keeps_everything_else(self):
        src = tiny_file("tiny_off.gguf")
        dst = os.path.join(TMP, "copy.gguf")
        gguf.copy_with_metadata(src, dst, {"crossword.note": ("hi", gguf.ValueType.STRING)})
        a, b = gguf.GGUFReader(src), gguf.GGUFReader(dst)
        self.assertEqual(b.metadata["crossword.note"], "hi")
        self.assertEqual(list(b.metadata)[:-1], list(a.metadata))
        for k, v in a.metadata.items():
            self.assertEqual(a.types[k], b.types[k], k)
            self.assertTrue(np.array_equal(v, b.metadata[k]) if isinstance(v, np.ndarray) else v == b.metadata[k], k)
        self.assertEqual(list(a.tensors), list(b.tensors))
        for n in a.tensors:
            self.assertTrue(np.array_equal(a.raw(n), b.raw(n)), n)

    def test_bad_files_raise_gguf_error(self):
        path = tiny_file("tiny_off.gguf")
        with open(path, "rb") as f:
            data = f.read()
        bad = os.path.join(TMP, "bad.gguf")
        for cut in [0, 3, 4, 8, 20, 100, 1000, len(data) // 2, len(data) - 1]:
            with open(bad, "wb") as f:
                f.write(data[:cut])
            with self.assertRaises(gguf.GGUFError, msg=f"cut {cut}"):
                gguf.GGUFReader(bad)
        with open(bad, "wb") as f:
            f.write(b"GGUX" + data[4:])
        with self.assertRaisesRegex(gguf.GGUFError, "magic"):
            gguf.GGUFReader(bad)


class ModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = model.Model.load(tiny_file("tiny_off.gguf"))
        cls.prompt = [5, 17, 99, 200, 3, 44, 81, 7, 250, 31]

    def test_layouts_give_the_same_network(self):
        up = model.Model.load(tiny_file("tiny_up.gguf", layout="upstream"))
        self.assertTrue(self.m.hp.official_layout)
        self.assertFalse(up.hp.official_layout)
        a = model.forward(self.m, model.State(self.m), self.prompt)
        b = model.forward(up, model.State(up), self.prompt)
        # Only the float32 rounding of A_log vs -exp(A_log) differs between the files.
        self.assertLess((a - b).abs().max().item(), 1e-4)

    def test_batch_equals_token_by_token(self):
        s1, s2 = model.State(self.m), model.State(self.m)
        batch = model.forward(self.m, s1, self.prompt)
        rows = torch.stack([model.forward(self.m, s2, [t])[-1] for t in self.prompt])
        self.assertLess((batch - rows).abs().max().item(), 1e-10)
        self.assertLess(s1.max_abs_diff(s2), 1e-10)

    def test_denoise_reads_but_never_writes_state(self):
        s = model.State(self.m)
        model.forward(self.m, s, self.prompt)
        before = s.clone()
        block = [9, 383, 383, 383, 383, 383, 383, 383]
        d1 = model.forward(self.m, s, block, "denoise")
        self.assertEqual(s.max_abs_diff(before), 0.0)
        d2 = model.forward(self.m, s, block, "denoise")
        self.assertTrue(torch.equal(d1, d2))
        # Bidirectional inside the block: a later slot changes earlier rows; causal passes do not.
        block2 = block[:5] + [12] + block[6:]
        d3 = model.forward(self.m, s, block2, "denoise")
        self.assertGreater((d3[:5] - d1[:5]).abs().max().item(), 1e-6)
        c1 = model.forward(self.m, s.clone(), block, "causal")
        c2 = model.forward(self.m, s.clone(), block2, "causal")
        self.assertLess((c1[:5] - c2[:5]).abs().max().item(), 1e-12)
        # The prefix matters: a denoise pass after a different prompt differs.
        s_other = model.State(self.m)
        model.forward(self.m, s_other, self.prompt[1:])
        self.assertGreater((model.forward(self.m, s_other, block, "denoise") - d1).abs().max().item(), 1e-6)

    def test_rollback_by_replay_equals_shorter_pass(self):
        s = model.State(self.m)
        model.forward(self.m, s, self.prompt[:4])
        for keep in [0, 1, 3, 6]:
            s1 = s.clone()
            rec = model.VerifyRecord()
            model.forward(self.m, s1, self.prompt[4:], "causal", rec)
            model.rollback(self.m, s1, rec, keep)
            s2 = s.clone()
            if keep:
                model.forward(self.m, s2, self.prompt[4:4 + keep])
            self.assertLess(s1.max_abs_diff(s2), 1e-12, f"keep {keep}")

    def test_context_overflow_and_bad_ids_are_errors(self):
        with self.assertRaisesRegex(model.ModelError, "out of range"):
            model.forward(self.m, model.State(self.m), [self.m.hp.n_vocab])
        with self.assertRaisesRegex(model.ModelError, "context overflow"):
            model.forward(self.m, model.State(self.m), [1] * (self.m.hp.n_ctx + 1))


class TrainNetTest(unittest.TestCase):
    def test_training_network_equals_reference_passes(self):
        # The batched training form (chunked GDN, padding, noisy blocks against the clean prefix)
        # computes what model.forward computes in causal and denoise passes.
        m = model.Model.load(tiny_file("tiny_off.gguf"), dtype=torch.float32)
        m.hp.block_size = B = 8
        net = train_net.TrainNet(m.hp, m.w)
        seqs, pads, T = [[5, 17, 99, 200, 3, 44, 81, 7, 250, 31, 12, 13, 14, 15, 16, 17, 18, 19, 20],
                         list(range(1, 12))], [5, 13], 32
        tok = torch.zeros(2, T, dtype=torch.long)
        valid = torch.zeros(2, T, dtype=torch.bool)
        pos = torch.zeros(2, T, dtype=torch.long)
        for i, (s, pd) in enumerate(zip(seqs, pads)):
            tok[i, pd:pd + len(s)] = torch.tensor(s)
            valid[i, pd:pd + len(s)] = True
            pos[i, pd:] = torch.arange(T - pd)
        mask = m.hp.mask_token_id
        nt = torch.tensor([[int(tok[0, 16]), mask, 70, mask, mask, 33, mask, mask],
                           [int(tok[1, 16]), 9, mask, mask, 5, mask, mask, mask]])
        noisy = dict(tokens=nt, seq=torch.tensor([0, 1]), start=torch.tensor([16, 16]))
        lg, nl, _ = net(tok, valid, pos, noisy, chunk=4)
        self.assertTrue(torch.isfinite(lg).all())  # padding rows too (they must not make NaNs)
        for i, (s, pd) in enumerate(zip(seqs, pads)):
            clean = model.forward(m, model.State(m), s)
            self.assertLess((clean - lg[i, pd:pd + len(s)]).abs().max().item(), 2e-4)
            st = model.State(m)
            model.forward(m, st, s[:16 - pd])
            den = model.forward(m, st, nt[i].tolist(), "denoise")
            self.assertLess((den - nl[i]).abs().max().item(), 2e-4)
            self.assertGreater((den - nl[1 - i]).abs().max().item(), 1e-2)  # the check can fail


class DecodeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = model.Model.load(tiny_file("tiny_off.gguf"))
        rng = np.random.default_rng(7)
        cls.prompts = [list(rng.integers(0, 370, size=int(n))) for n in rng.integers(1, 12, size=8)]

    def test_spec_equals_ar_greedy(self):
        for i, p in enumerate(self.prompts):
            for B, n in [(4, 9), (8, 21), (32, 40)]:
                ar = decode.Decoder(self.m, decode.Config(max_tokens=n)).ar(p)
                sp = decode.Decoder(self.m, decode.Config(max_tokens=n, block_size=B)).spec(p)
                self.assertEqual(ar.tokens, sp.tokens, f"prompt {i} B {B}")
                self.assertEqual(ar.stop, sp.stop)
                self.assertEqual(len(sp.passes), sp.forward_passes)  # draft + verify per round
                if sp.stop == "limit":  # rounds emit c + 1 tokens; a last 1-slot block adds the seed
                    self.assertIn(len(sp.tokens) - sum(c + 1 for c in sp.accepted), (0, 1))

    def test_spec_with_draft_cuts_equals_ar(self):
        # Shorter drafts (draft_max) and verify cuts (draft_p_min) change rounds, never tokens.
        cut = 0
        for i, p in enumerate(self.prompts):
            ar = decode.Decoder(self.m, decode.Config(max_tokens=30)).ar(p)
            for dm, pm in [(3, 0.0), (0, 0.01), (5, 0.003), (0, 1.0)]:
                sp = decode.Decoder(self.m, decode.Config(max_tokens=30, block_size=8, draft_max=dm,
                                                          draft_p_min=pm)).spec(p)
                self.assertEqual(ar.tokens, sp.tokens, f"prompt {i} draft_max {dm} p_min {pm}")
                verified = [x["verified"] for x in sp.passes if x["kind"] == "draft"]
                self.assertTrue(all(v <= (dm + 1 if dm else 8) for v in verified))
                if pm == 1.0:
                    self.assertLessEqual(set(verified), {1})  # no draft is that sure: the seed alone
                cut += pm > 0 and any(1 < v < 8 for v in verified)
        self.assertGreater(cut, 0, "no verify pass was cut between the seed and the full block")
        # The draft limits are spec-only: diffusion blocks keep their size.
        p = self.prompts[0]
        plain = decode.Decoder(self.m, decode.Config(max_tokens=20, block_size=8)).diffusion(p)
        limited = decode.Decoder(self.m, decode.Config(max_tokens=20, block_size=8, draft_max=3,
                                                       draft_p_min=0.5)).diffusion(p)
        self.assertEqual((plain.tokens, plain.forward_passes), (limited.tokens, limited.forward_passes))

    def test_spec_equals_ar_near_context_limit(self):
        m = model.Model.load(tiny_file("tiny_ctx.gguf", n_ctx=40))
        full = 0
        for p in self.prompts:
            for B in (4, 32):
                cfg = dict(max_tokens=1000, block_size=B, dllm_biases=False)
                ar = decode.Decoder(m, decode.Config(**cfg)).ar(p)
                sp = decode.Decoder(m, decode.Config(**cfg)).spec(p)
                df = decode.Decoder(m, decode.Config(threshold=0.2, **cfg)).diffusion(p)
                self.assertEqual(ar.tokens, sp.tokens)
                for r in (ar, df):
                    if r.stop == "limit":  # every answer token takes one context position
                        self.assertEqual(len(r.tokens), 40 - len(p))
                    else:
                        self.assertLess(len(r.tokens), 40 - len(p))
                full += ar.stop == "limit"
        self.assertGreater(full, 0)

    def test_commit_rule_extremes(self):
        p = self.prompts[1]
        # tau > 1: exactly one slot per denoise pass, B-1 passes per block + 1 commit pass.
        r = decode.Decoder(self.m, decode.Config(max_tokens=16, block_size=8, threshold=1.01)).diffusion(p)
        den = [x for x in r.passes if x["kind"] == "denoise"]
        self.assertTrue(all(len(x["committed"]) == 1 for x in den))
        self.assertEqual(r.forward_passes, 2 * 7 + 1)  # the last block needs no commit pass
        # tau = 0: everything commits in the first pass of each block.
        r0 = decode.Decoder(self.m, decode.Config(max_tokens=16, block_size=8, threshold=0.0)).diffusion(p)
        self.assertEqual(r0.forward_passes, 3)
        # The first block's first pass commits, at tau = 0, exactly the candidates of that pass.
        first = r0.passes[0]
        lp = first["logits"]
        for slot, tok in first["committed"]:
            row = lp[slot - 1].clone()
            row[self.m.hp.mask_token_id] = float("-inf")
            self.assertEqual(tok, int(row.argmax()))
        self.assertEqual(len(r.tokens), 16)
        # The seed (slot 0) of the first block is the AR choice.
        ar = decode.Decoder(self.m, decode.Config(max_tokens=1)).ar(p)
        self.assertEqual(r.tokens[0], ar.tokens[0])

    def test_fallback_commits_the_most_confident_slot(self):
        p = self.prompts[2]
        r = decode.Decoder(self.m, decode.Config(max_tokens=8, block_size=8, threshold=1.01)).diffusion(p)
        first = r.passes[0]
        probs = torch.softmax(first["logits"], -1)
        masked = range(1, 8)
        conf = {}
        for j in masked:
            row = first["logits"][j - 1].clone()
            row[self.m.hp.mask_token_id] = float("-inf")
            conf[j] = probs[j - 1, int(row.argmax())].item()
        best = max(masked, key=lambda j: (conf[j], -j))
        self.assertEqual([s for s, _ in first["committed"]], [best])

    def test_eog_stops_every_mode_identically(self):
        # A strong length ramp (+60 on EOG from 5 answer tokens on) forces an end of generation.
        cfg = dict(max_tokens=64, block_size=8, length_penalty=(60.0, 5, 1))
        p = self.prompts[3]
        ar = decode.Decoder(self.m, decode.Config(**cfg)).ar(p)
        sp = decode.Decoder(self.m, decode.Config(**cfg)).spec(p)
        df = decode.Decoder(self.m, decode.Config(threshold=0.5, **cfg)).diffusion(p)
        self.assertEqual(ar.stop, "eog")
        self.assertLessEqual(len(ar.tokens), 6)
        self.assertEqual(ar.tokens, sp.tokens)
        self.assertEqual(df.stop, "eog")
        self.assertLessEqual(len(df.tokens), 6)
        self.assertTrue(all(t not in self.m.hp.eog_ids for t in df.tokens))
        off = decode.Decoder(self.m, decode.Config(dllm_biases=False, **cfg)).ar(p)
        self.assertEqual(len(off.tokens), 64)

    def test_committed_state_after_blocks_equals_ar_forwarding(self):
        p = self.prompts[4]
        states = []
        r = decode.Decoder(self.m, decode.Config(max_tokens=25, block_size=8, threshold=0.3)).diffusion(p, states)
        self.assertEqual(len(states), 3)
        s = model.State(self.m)
        model.forward(self.m, s, p)
        for i in range(len(r.tokens) // 8):  # AR-forward the same tokens one by one
            for t in r.tokens[8 * i:8 * i + 8]:
                model.forward(self.m, s, [t])
            self.assertLess(states[i].max_abs_diff(s), 1e-10, f"block {i}")

    def test_spec_sampling_matches_ar_sampling_distribution(self):
        # One spec round with one draft slot (max_tokens 2, B 2): token 1 must follow the AR
        # distribution p(. | prompt, token 0), not the draft distribution q.
        p, n, temp = self.prompts[5], 500, 1.0
        mask = self.m.hp.mask_token_id
        seen, exp_p, exp_q = [], {}, {}
        for seed in range(n):
            d = decode.Decoder(self.m, decode.Config(max_tokens=2, block_size=2, temperature=temp,
                                                     seed=seed, dllm_biases=False))
            r = d.spec(p)
            toks = r.tokens + ([r.eog_token] if r.stop == "eog" else [])
            if len(toks) < 2:
                continue  # the seed itself ended the answer
            t0, t1 = toks
            if t0 not in exp_p:
                s = model.State(self.m)
                model.forward(self.m, s, p + [t0])
                exp_p[t0] = torch.softmax(model.forward(self.m, model.State(self.m), p + [t0])[-1] / temp, -1)
                row = model.forward(self.m, s, [t0, mask], "denoise")[0].clone()
                row[mask] = float("-inf")
                exp_q[t0] = torch.softmax(row / temp, -1)
            seen.append((t0, t1))

        def chi2(expected):
            # Bins: tokens with expected count >= 5, plus one bin for the rest.
            e = sum(expected[t0] for t0, _ in seen)
            obs = torch.zeros_like(e)
            for _, t1 in seen:
                obs[t1] += 1
            big = e >= 5
            stat = (((obs[big] - e[big]) ** 2) / e[big]).sum().item()
            e_rest, o_rest = e[~big].sum().item(), obs[~big].sum().item()
            if e_rest > 0:
                stat += (o_rest - e_rest) ** 2 / e_rest
            return stat, int(big.sum()) + (1 if e_rest > 0 else 0) - 1

        stat_p, df_p = chi2(exp_p)
        stat_q, df_q = chi2(exp_q)
        # ~5 sigma above the chi-square mean: a false failure is very unlikely with fixed seeds.
        self.assertLess(stat_p, df_p + 5 * (2 * df_p) ** 0.5, f"chi2 vs AR distribution, df {df_p}")
        # The test can fail: the draft distribution itself is clearly rejected.
        self.assertGreater(stat_q, df_q + 5 * (2 * df_q) ** 0.5, f"chi2 vs draft distribution, df {df_q}")


if __name__ == "__main__":
    unittest.main()
