// llama-server's native routes (issue 23): POST /completion and /completions (prompt forms,
// n_predict, n_probs, post_sampling_probs, return_tokens, response_fields, logit_bias in both
// forms, samplers, ignore_eos, cache_prompt, stop words; its response fields; streaming) and
// /infill. Also the streamed-logprobs placement bug: every streamed chunk's logprob entries are
// those of the tokens whose text that chunk carries (before the fix, when several deltas were
// taken at once, all their entries went on the first chunk).
import assert from "node:assert/strict";
import { check, get, post, run, sse, startServer } from "./harness.mjs";

const srv = await startServer(["-np", "4"]);
const base = srv.base;
const prompt = "The capital of France is";
const complete = async (body, route = "/completion") => {
  const r = await post(base, route, body);
  assert.equal(r.status, 200, r.text);
  return r.body;
};
const utf8 = (entries) => Buffer.concat(entries.map((e) => Buffer.from(e.bytes))).toString("utf8");

let greedy;
check("/completion: content, tokens, stop_type limit, timings, generation_settings, no extra tokens", async () => {
  greedy = await complete({ prompt, n_predict: 8, return_tokens: true, cache_prompt: false, ignore_eos: true });
  assert.equal(typeof greedy.content, "string");
  assert.equal(greedy.tokens.length, 8);
  assert.equal(greedy.stop, true);
  assert.equal(greedy.stop_type, "limit");
  assert.equal(greedy.truncated, false);
  assert.equal(greedy.tokens_predicted, 8);
  const ids = (await post(base, "/tokenize", { content: prompt })).body.tokens;
  assert.equal(greedy.tokens_evaluated, ids.length);
  assert.equal(greedy.generation_settings.n_predict, 8);
  assert.equal(greedy.timings.predicted_n, 8);
  assert.equal(greedy.timings.cache_n, 0, "cache_prompt false");
  assert.equal((await post(base, "/detokenize", { tokens: greedy.tokens })).body.content, greedy.content);
  const plain = await complete({ prompt, n_predict: 8, ignore_eos: true });
  assert.deepEqual(plain.tokens, [], "tokens only with return_tokens");
  assert.equal(plain.content, greedy.content);
  const again = await complete({ prompt, n_predict: 8, ignore_eos: true });
  assert.ok(again.timings.cache_n > 0, "an identical prompt reuses the cache: " + JSON.stringify(again.timings));
  const other = await complete({ prompt, n_predict: 8, ignore_eos: true }, "/completions");
  assert.equal(other.content, greedy.content, "/completions is the same route");
});

check("prompt as ids, as [ids and text mixed], as [one string]: the same prompt", async () => {
  const ids = (await post(base, "/tokenize", { content: "The capital of" })).body.tokens;
  for (const p of [(await post(base, "/tokenize", { content: prompt })).body.tokens, [...ids, " France is"], [prompt]]) {
    const r = await complete({ prompt: p, n_predict: 8, ignore_eos: true });
    assert.equal(r.content, greedy.content, JSON.stringify(p));
  }
  assert.equal((await post(base, "/completion", { prompt: ["a", "b"] })).status, 400, "several prompts");
  assert.equal((await post(base, "/completion", { prompt: [1.5] })).status, 400);
  assert.equal((await post(base, "/completion", {})).status, 400);
  assert.equal((await post(base, "/completion", { prompt, n_predict: 0 })).status, 400);
});

check("n_probs: completion_probabilities per token (id, token, bytes, logprob, top_logprobs); post_sampling_probs", async () => {
  const r = await complete({ prompt, n_predict: 6, n_probs: 3, return_tokens: true, ignore_eos: true });
  assert.equal(r.completion_probabilities.length, 6);
  r.completion_probabilities.forEach((e, i) => {
    assert.equal(e.id, r.tokens[i]);
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob && e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob);
    assert.ok(e.logprob <= e.top_logprobs[0].logprob + 1e-6);
    assert.ok(e.logprob <= 0);
  });
  assert.equal(utf8(r.completion_probabilities), r.content);
  const p = await complete({ prompt, n_predict: 3, n_probs: 2, post_sampling_probs: true, ignore_eos: true });
  for (const e of p.completion_probabilities) {
    assert.ok(e.prob > 0 && e.prob <= 1);
    assert.equal(e.top_probs.length, 2);
    assert.equal(e.logprob, undefined);
  }
  assert.equal((await complete({ prompt, n_predict: 2 })).completion_probabilities, undefined);
});

check("response_fields picks fields by path", async () => {
  const r = await complete({ prompt, n_predict: 2, response_fields: ["content", "generation_settings/n_predict", "nope"] });
  assert.deepEqual(Object.keys(r).sort(), ["content", "generation_settings/n_predict"]);
  assert.equal(r["generation_settings/n_predict"], 2);
});

check("logit_bias: [[id, false]] bans a token, {id: -100} too, [[text, bias]] by text; samplers", async () => {
  const first = greedy.tokens[0];
  for (const logit_bias of [[[first, false]], { [first]: -100 }]) {
    const r = await complete({ prompt, n_predict: 1, return_tokens: true, logit_bias });
    assert.notEqual(r.tokens[0], first, JSON.stringify(logit_bias));
  }
  const text = (await post(base, "/detokenize", { tokens: [first] })).body.content;
  const byText = await complete({ prompt, n_predict: 1, return_tokens: true, logit_bias: [[text, false]] });
  assert.notEqual(byText.tokens[0], first);
  const s = await complete({ prompt, n_predict: 8, samplers: ["top_k", "temperature"], ignore_eos: true });
  assert.equal(s.content, greedy.content, "greedy whatever the chain");
  assert.equal((await post(base, "/completion", { prompt, samplers: ["bogus"] })).status, 400);
  assert.equal((await post(base, "/completion", { prompt, logit_bias: [[1]] })).status, 400);
});

check("logit_bias banning every token: 400; all but the mask token: ar and spec emit it, diffusion 400s", async () => {
  // The embedded model: 4,096 tokens, the mask token 4095 (tokenizer.ggml.mask_token_id).
  const all = Array.from({ length: 4096 }, (_, i) => [i, false]);
  const r = await post(base, "/completion", { prompt, n_predict: 4, logit_bias: all });
  assert.equal(r.status, 400, JSON.stringify(r.body));
  assert.match(JSON.stringify(r.body), /logit_bias/);
  // The full ban used to hang a diffusion request (each row all -inf: a confidence of NaN, so no
  // slot ever committed). With all but the mask token banned, ar (and spec, identical to it) can
  // only emit the mask token; diffusion never emits it, so no token is left: a 400 saying so.
  const outs = {};
  for (const mode of ["diffusion", "spec", "ar"]) {
    const t0 = Date.now();
    const d = await post(base, "/completion", {
      prompt, n_predict: 8, return_tokens: true, logit_bias: all.slice(0, 4095), crossword: { mode },
    });
    assert.ok(Date.now() - t0 < 20000, `${mode} took ${Date.now() - t0} ms`);
    if (mode === "diffusion") {
      assert.equal(d.status, 400, `${mode}: ${JSON.stringify(d.body)}`);
      assert.match(JSON.stringify(d.body), /no token is allowed/);
    } else {
      assert.equal(d.status, 200, `${mode}: ${JSON.stringify(d.body)}`);
      assert.ok(d.body.tokens.length > 0 && d.body.tokens.every((t) => t === 4095), JSON.stringify(d.body.tokens));
      outs[mode] = d.body.tokens;
    }
  }
  assert.deepEqual(outs.spec, outs.ar);
  assert.equal((await get(base, "/health")).status, 200);
});

check("a grammar whose tokens logit_bias bans: 400 in every mode, greedy and sampled (was a 500)", async () => {
  const all = Array.from({ length: 4095 }, (_, i) => [i, false]);
  for (const mode of ["ar", "spec", "diffusion"]) {
    for (const temperature of [0, 1]) {
      const d = await post(base, "/completion", {
        prompt, n_predict: 8, temperature, grammar: "root ::= [a-z]+", logit_bias: all, crossword: { mode },
      });
      assert.equal(d.status, 400, `${mode} t=${temperature}: ${JSON.stringify(d.body)}`);
      assert.match(JSON.stringify(d.body), /no token is allowed/);
    }
  }
  assert.equal((await get(base, "/health")).status, 200);
});

check("stop words: stop_type word, stopping_word, the text before it", async () => {
  const word = greedy.content.slice(3, 6);
  assert.ok(word.length === 3 && greedy.content.indexOf(word) === 3, JSON.stringify(greedy.content));
  const r = await complete({ prompt, n_predict: 8, stop: [word], ignore_eos: true });
  assert.equal(r.stop_type, "word");
  assert.equal(r.stopping_word, word);
  assert.equal(r.content, greedy.content.slice(0, 3));
});

check("stream: data events with content and tokens, the last with stop: true and timings, no [DONE]", async () => {
  const events = (await sse(base, "/completion", { prompt, n_predict: 8, stream: true, return_tokens: true, n_probs: 2, ignore_eos: true })).map((e) => JSON.parse(e));
  const last = events.at(-1);
  assert.equal(last.stop, true);
  assert.equal(last.stop_type, "limit");
  assert.ok(last.timings.predicted_n === 8);
  const body = events.slice(0, -1);
  assert.ok(body.every((e) => e.stop === false));
  assert.equal(body.map((e) => e.content).join(""), greedy.content);
  assert.deepEqual(body.flatMap((e) => e.tokens), greedy.tokens);
  for (const e of body) {
    assert.deepEqual(e.completion_probabilities.map((p) => p.id), e.tokens, "each chunk's probabilities are its own tokens");
  }
});

// The bug of issue 23: with several deltas taken in one go, every logprob entry went on the first
// chunk. Four streams at once on a busy machine make such batches common; every chunk must carry
// exactly the entries of the tokens whose text it shows.
check("streamed logprobs sit on the chunk whose text they spell (chat and completions, 4 streams at once)", async () => {
  const chat = (i) => sse(base, "/v1/chat/completions", {
    messages: [{ role: "user", content: `Count to ${20 + i}.` }], max_tokens: 48, stream: true, logprobs: true, top_logprobs: 1, ignore_eos: true, reasoning_format: "none",
  });
  const legacy = (i) => sse(base, "/v1/completions", { prompt: `${prompt} ${i}`, max_tokens: 48, stream: true, logprobs: 1, ignore_eos: true });
  const runs = await Promise.all([chat(1), chat(2), legacy(1), legacy(2)]);
  let chunks = 0;
  for (const [k, events] of runs.entries()) {
    const isChat = k < 2;
    const parsed = events.filter((e) => e !== "[DONE]").map((e) => JSON.parse(e)).filter((e) => e.choices?.length);
    let spelled = "";
    let allText = "";
    for (const c of parsed) {
      const ch = c.choices[0];
      const text = isChat ? ch.delta?.content ?? "" : ch.text;
      // Chat entries carry their bytes; the legacy lists only token texts.
      spelled += isChat ? utf8(ch.logprobs?.content ?? []) : (ch.logprobs?.tokens ?? []).join("");
      allText += text;
      if (!text) continue;
      chunks++;
      // The entries so far spell exactly the text so far: none early, none late.
      assert.equal(spelled, text, `chunk ${chunks} of stream ${k}: its entries spell its text`);
      spelled = "";
    }
    assert.ok(allText.length > 0);
  }
  assert.ok(chunks > 40);
});

check("/infill: a clear 400 without FIM tokens, else a completion after <|fim_middle|>", async () => {
  const r = await post(base, "/infill", { input_prefix: "def f():\n    return ", input_suffix: "\n", n_predict: 4 });
  if (r.status === 400) {
    assert.match(r.body.error.message, /no fill-in-the-middle tokens/);
  } else {
    assert.equal(r.status, 200, r.text);
    assert.equal(typeof r.body.content, "string");
    assert.ok(r.body.prompt.includes("<|fim_middle|>"), r.body.prompt);
  }
});

check("n > 1 on chat and completions: n choices, usage over all, streamed by index with one [DONE]", async () => {
  const messages = [{ role: "user", content: "Name a colour." }];
  const chatBody = { messages, max_tokens: 12, reasoning_format: "none", ignore_eos: true };
  const single = (await post(base, "/v1/chat/completions", { ...chatBody, temperature: 0 })).body;
  const greedy3 = (await post(base, "/v1/chat/completions", { ...chatBody, temperature: 0, n: 3 })).body;
  assert.deepEqual(greedy3.choices.map((c) => c.index), [0, 1, 2]);
  for (const c of greedy3.choices) assert.equal(c.message.content, single.choices[0].message.content, "greedy: every choice the same");
  assert.equal(greedy3.usage.completion_tokens, 36);
  assert.equal(greedy3.usage.prompt_tokens, single.usage.prompt_tokens, "one prompt counted once");
  const sampled = (await post(base, "/v1/chat/completions", { ...chatBody, temperature: 1.5, seed: 7, n: 3 })).body;
  assert.ok(new Set(sampled.choices.map((c) => c.message.content)).size >= 2, "sampled choices differ: " + JSON.stringify(sampled.choices));
  const events = await sse(base, "/v1/chat/completions", { ...chatBody, temperature: 0, n: 2, stream: true, stream_options: { include_usage: true } });
  assert.equal(events.filter((e) => e === "[DONE]").length, 1);
  assert.equal(events.at(-1), "[DONE]");
  const chunks = events.filter((e) => e !== "[DONE]").map((e) => JSON.parse(e));
  const text = ["", ""];
  const finish = [null, null];
  for (const c of chunks) {
    for (const ch of c.choices) {
      text[ch.index] += ch.delta?.content ?? "";
      if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
    }
  }
  assert.deepEqual(text, [single.choices[0].message.content, single.choices[0].message.content]);
  assert.deepEqual(finish, ["length", "length"]);
  assert.equal(chunks.at(-1).usage.completion_tokens, 24);
});

check("several prompts in one /v1/completions request: one choice per prompt (and n each)", async () => {
  const prompts = ["The capital of France is", "Once upon a time", "1, 2, 3,"];
  const each = [];
  for (const p of prompts) each.push((await post(base, "/v1/completions", { prompt: p, max_tokens: 6, temperature: 0 })).body.choices[0].text);
  const r = (await post(base, "/v1/completions", { prompt: prompts, max_tokens: 6, temperature: 0 })).body;
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(r.choices.map((c) => c.text), each);
  const ids = [];
  for (const p of prompts.slice(0, 2)) ids.push((await post(base, "/tokenize", { content: p })).body.tokens);
  const byIds = (await post(base, "/v1/completions", { prompt: ids, max_tokens: 6, temperature: 0, n: 2 })).body;
  assert.deepEqual(byIds.choices.map((c) => c.text), [each[0], each[0], each[1], each[1]]);
  const events = (await sse(base, "/v1/completions", { prompt: prompts, max_tokens: 6, temperature: 0, stream: true })).filter((e) => e !== "[DONE]").map((e) => JSON.parse(e));
  const text = ["", "", ""];
  for (const c of events) for (const ch of c.choices) text[ch.index] += ch.text;
  assert.deepEqual(text, each);
  assert.equal((await post(base, "/v1/completions", { prompt: ["a", 5] })).status, 400);
});

await run([srv]);
