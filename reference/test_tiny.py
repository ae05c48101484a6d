"""Unit tests of the tiny-model pipeline: BPE trainer/encoder, corpus rendering with the chat
template, the known-answer checker, and the training batch layout.
Run: /usr/bin/python3 -m unittest discover -s reference -p 'test_*.py'
"""

import json
import os
import random
import re
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bpe  # noqa: E402
import eval_tiny  # noqa: E402
import tiny_corpus  # noqa: E402
import train_tiny  # noqa: E402

TEXTS = ["The capital of France is Paris.", "It's 12 + 30 = 42; naïve café, 'll 've",
         "<|im_start|>user\nHello!<|im_end|>\n", "  spaces\n\n\tand tabs  ", "Brasília, Bogotá, Reykjavik"] * 20


class BpeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.vocab = bpe.train(TEXTS, 256 + len(bpe.SPECIAL_TOKENS) + 60)
        cls.tok = bpe.Tokenizer(cls.vocab)

    def test_vocab_shape(self):
        v = self.vocab
        self.assertEqual(len(v["tokens"]), 256 + len(bpe.SPECIAL_TOKENS) + 60)
        self.assertEqual(len(v["merges"]), 60)
        self.assertEqual(len(set(v["tokens"])), len(v["tokens"]))
        self.assertEqual(v["tokens"][-1], "<|mask|>")
        # Every merge result is a token, and both halves precede it.
        for r, m in enumerate(v["merges"]):
            a, b = m.split(" ")
            self.assertEqual(v["tokens"].index(a + b), 256 + r)

    def test_round_trip_and_specials(self):
        for t in TEXTS + ["unseen wörds ☃ 😀", ""]:
            self.assertEqual(self.tok.decode(self.tok.encode(t)), t)
        ids = self.tok.encode("<|im_start|>user")
        self.assertEqual(ids[0], self.tok.token_id("<|im_start|>"))
        self.assertLess(len(self.tok.encode("The capital of France is Paris.")), 20)  # merges apply

    def test_qwen35_pretokenizer(self):
        self.assertEqual(bpe.pretokenize("It's 123 abc"), ["It", "'s", " ", "1", "2", "3", " abc"])
        self.assertEqual(bpe.pretokenize("a\u0301b"), ["a\u0301b"])  # combining mark stays in the word


class CorpusTest(unittest.TestCase):
    def test_render_split_and_answers(self):
        r = tiny_corpus.Renderer(os.path.join(tiny_corpus.ROOT, "assets", "chat_template.jinja"))
        items = tiny_corpus.chat_examples(random.Random(1), r, held_out=True, repeats=1)
        kinds = {x["kind"] for x in items}
        self.assertTrue({"capital", "plus", "json", "weather_call"} <= kinds)
        for x in items:
            self.assertTrue(x["prompt"].endswith("<|im_start|>assistant\n<think>\n" +
                                                 ("" if x["thinking"] else "\n</think>\n\n")), x["prompt"])
            self.assertTrue(x["answer"].endswith("<|im_end|>"))
            self.assertTrue(eval_tiny.is_correct(x["kind"], x["answer"][:-len("<|im_end|>")], x["expected"]),
                            x)

    def test_held_out_phrasings_never_in_training(self):
        for kind, (train, held) in tiny_corpus.Q.items():
            self.assertFalse(tiny_corpus.train_phrasings(kind) & set(held), kind)
            self.assertLessEqual(set(train), tiny_corpus.train_phrasings(kind))


class CheckerTest(unittest.TestCase):
    def test_known_answer_checks_can_fail(self):
        self.assertTrue(eval_tiny.is_correct("capital", "<think>x</think>\n\nThe capital is Canberra.", "Canberra"))
        self.assertFalse(eval_tiny.is_correct("capital", "Canberra</think>\n\nSydney.", "Canberra"))
        self.assertTrue(eval_tiny.is_correct("plus", "7 + 5 = 12.", "12"))
        self.assertFalse(eval_tiny.is_correct("plus", "7 + 5 = 13.", "12"))
        js = json.dumps([{"drone": 1, "to": "Oak Street", "boxes": 2}])
        self.assertTrue(eval_tiny.is_correct("json", js, js))
        self.assertFalse(eval_tiny.is_correct("json", js[:-1], js))
        call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"
        self.assertTrue(eval_tiny.is_correct("weather_call", call, json.dumps({"get_weather": ["Oslo"]})))
        self.assertFalse(eval_tiny.is_correct("weather_call", call, json.dumps({"get_weather": ["Rome"]})))

    def test_spec_draft_limits_are_the_engines_defaults(self):
        # The reference evaluation's spec mode must decode as the engine does by default.
        with open(os.path.join(os.path.dirname(__file__), "..", "src", "engine", "engine.h")) as f:
            h = f.read()
        dm = int(re.search(r"kDefaultDraftMax = (\d+);", h).group(1))
        pm = float(re.search(r"kDefaultDraftPMin = ([0-9.]+)f;", h).group(1))
        self.assertEqual(eval_tiny.SPEC_DRAFT, {"draft_max": dm, "draft_p_min": pm})


class BatchTest(unittest.TestCase):
    def test_collate_masks_answer_blocks_only(self):
        vocab = bpe.train(TEXTS, 256 + len(bpe.SPECIAL_TOKENS) + 10)
        tok = bpe.Tokenizer(vocab)
        hp = train_tiny.tiny_config(vocab)
        prompt, answer = tok.encode("<|im_start|>user\nHi<|im_end|>\n"), tok.encode("Hello there, friend!<|im_end|>")
        ex = train_tiny.Example(prompt, answer, hp.block_size, 0.0, 0)
        self.assertEqual(ex.a0 % train_tiny.CHUNK, 0)  # the answer starts on a GDN chunk boundary
        tokens, valid, pos, tgt, w, noisy = train_tiny.collate([ex], hp, random.Random(3), 0)
        self.assertEqual(int(valid.sum()), len(prompt) + len(answer))
        self.assertEqual(int(pos[0, ex.a0]), len(prompt))
        self.assertGreater(float(w[0, ex.a0 - 1]), 0)   # row before the answer predicts its first token
        self.assertEqual(float(w[0, ex.a0 - 2]), 0.0)  # prompt tokens carry no loss (weight 0)
        blk = noisy["tokens"][0]
        self.assertEqual(int(blk[0]), answer[0])  # the seed slot is never masked
        for j in range(1, hp.block_size):
            t = int(noisy["targets"][0, j - 1])
            if j < len(answer) and int(blk[j]) == hp.mask_token_id:
                self.assertEqual(t, answer[j])  # shifted target: row j-1 predicts slot j
            else:
                self.assertEqual(t, -100)
        # Complementary copy: the two copies together mask every answer slot exactly once.
        masked = (noisy["tokens"][:, 1:len(answer)] == hp.mask_token_id).sum(0)
        self.assertTrue(torch.all(masked == 1))

    def test_data_parallel_shards_sum_to_the_whole_batch(self):
        # train_tiny.py --procs N sums the ranks' gradients: they must equal the one-process gradient
        # (exactly for the AR and diffusion losses; the experts' load-balancing loss is per pass).
        vocab = bpe.train(TEXTS, 256 + len(bpe.SPECIAL_TOKENS) + 10)
        tok = bpe.Tokenizer(vocab)
        hp = train_tiny.tiny_config(vocab)
        exs = [train_tiny.Example(tok.encode(f"<|im_start|>user\n{q}<|im_end|>\n"), tok.encode(a + "<|im_end|>"),
                                  hp.block_size, 0.0, 0)
               for q, a in [("Hi", "Hello there, friend!"), ("Capital of France?", "Paris, the city of light."),
                            ("2 + 3?", "2 + 3 = 5, which is five.")]]
        full = train_tiny.collate(exs, hp, random.Random(5), 0)
        torch.manual_seed(0)
        net = train_tiny.TrainNet(hp, train_tiny.init_weights(hp, 1))

        def grads(world):
            net.zero_grad()
            total = torch.zeros(3)
            for rank in range(world):
                loss, stats = train_tiny.shard_loss(net, full, rank, world, 1.0, aux_weight=0.0)
                if world > len(exs) and rank >= len(exs):
                    self.assertIsNone(loss)  # a rank without sequences contributes nothing
                    continue
                loss.backward()
                total += stats
            return [p.grad.clone() for p in net.parameters()], total

        g1, s1 = grads(1)
        for world in (2, 4):
            gn, sn = grads(world)
            torch.testing.assert_close(sn[:2], s1[:2], rtol=1e-5, atol=1e-6)
            self.assertLess(abs(float(sn[2] - s1[2])), 0.02 * float(s1[2]))
            for a, b in zip(gn, g1):
                # float32 sums in another order: relative to the gradient's scale.
                self.assertLessEqual(float((a - b).abs().max()), 1e-5 * float(b.abs().max()) + 1e-7)
            self.assertGreater(float(s1[1]), 0.0)  # the diffusion loss is part of the check


if __name__ == "__main__":
    unittest.main()
