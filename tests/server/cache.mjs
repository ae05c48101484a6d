// Prompt cache: a follow-up turn resumes from the slot's cached prefix (live state or a GDN
// checkpoint) and gives exactly the cold-run answer; conversations keep to their slots.
import assert from "node:assert/strict";
import { check, metrics, post, run, startServer } from "./harness.mjs";

const warm = await startServer(["-np", "2", "--ctx-checkpoint-interval", "64"]);
const cold = await startServer(["-np", "1"]);
const W = warm.client();
const base = { max_tokens: 24, ignore_eos: true, reasoning_format: "none", logprobs: true };
const trace = (r) => ({
  text: r.choices[0].message.content,
  lp: JSON.stringify(r.choices[0].logprobs.content.map((e) => [e.token, e.logprob])),
});

// A cold answer: another server, its slot's cache dropped (cache_prompt: false).
async function coldRun(messages) {
  const r = await cold.client().chat.completions.create({ messages, ...base, cache_prompt: false });
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(r.timings.prompt_n, r.usage.prompt_tokens);
  return trace(r);
}

// What the cache promises for a follow-up of `prev`: at least everything before the previous
// prompt's answer header (its last <|im_start|>, where a checkpoint is taken), at most the common
// prefix of the two rendered prompts.
async function expectedRange(prev, next) {
  const [imStart] = (await post(warm.base, "/tokenize", { content: "<|im_start|>", parse_special: true })).body.tokens;
  const a = (await post(warm.base, "/apply-template", { messages: prev })).body.tokens;
  const b = (await post(warm.base, "/apply-template", { messages: next })).body.tokens;
  let common = 0;
  while (common < a.length && common < b.length && a[common] === b[common]) common++;
  return [a.lastIndexOf(imStart), common];
}

function assertCached(cached, [lo, hi], what) {
  assert.ok(cached >= lo && cached <= hi, `${what}: cached ${cached}, expected within [${lo}, ${hi}]`);
}

const system = { role: "system", content: "You are a patient teacher of geography." };
const turns = ["Where is the Danube?", "Which countries does it cross?", "And how long is it?"];

check("each turn of a chat resumes from the previous one and answers exactly as a cold run", async () => {
  const messages = [system];
  let prev = null;
  for (const [i, q] of turns.entries()) {
    messages.push({ role: "user", content: q });
    const range = prev ? await expectedRange(prev, messages) : [0, 0];
    const r = await W.chat.completions.create({ messages, ...base });
    const cached = r.usage.prompt_tokens_details.cached_tokens;
    const prompt = r.usage.prompt_tokens;
    console.log(`  turn ${i + 1}: prompt ${prompt} tokens, cached ${cached}, evaluated ${r.timings.prompt_n} ` +
                `in ${r.timings.prompt_ms.toFixed(1)} ms`);
    assertCached(cached, range, `turn ${i + 1}`);
    if (i > 0) assert.deepEqual(trace(r), await coldRun(messages), `turn ${i + 1} equals a cold run`);
    prev = structuredClone(messages);
    messages.push({ role: "assistant", content: r.choices[0].message.content });
  }
});

check("a conversation edited early resumes from a checkpoint before the edit", async () => {
  const long = { role: "system", content: "Facts: " + Array.from({ length: 60 }, (_, i) => `item ${i} is number ${i * 7}.`).join(" ") };
  const a = await W.chat.completions.create({ messages: [long, { role: "user", content: "Which item is 49?" }], ...base });
  assert.ok(a.usage.prompt_tokens > 200, `prompt long enough for interval checkpoints (${a.usage.prompt_tokens})`);
  const edited = [long, { role: "user", content: "Which item is 56?" }];
  const b = await W.chat.completions.create({ messages: edited, ...base });
  const cached = b.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= 64 && cached < b.usage.prompt_tokens, `resumed at a checkpoint (${cached} of ${b.usage.prompt_tokens})`);
  assert.deepEqual(trace(b), await coldRun(edited));
});

check("two interleaved conversations each find their own slot", async () => {
  const conv = (topic) => [{ role: "system", content: `Talk about ${topic}.` }, { role: "user", content: `Describe ${topic} at length.` }];
  const x1 = await W.chat.completions.create({ messages: conv("mountains"), ...base });
  const y1 = await W.chat.completions.create({ messages: conv("deserts"), ...base });
  const follow = (c, r) => [...c, { role: "assistant", content: r.choices[0].message.content }, { role: "user", content: "More." }];
  const m0 = await metrics(warm.base);
  const x2 = await W.chat.completions.create({ messages: follow(conv("mountains"), x1), ...base });
  const y2 = await W.chat.completions.create({ messages: follow(conv("deserts"), y1), ...base });
  assertCached(x2.usage.prompt_tokens_details.cached_tokens, await expectedRange(conv("mountains"), follow(conv("mountains"), x1)), "x");
  assertCached(y2.usage.prompt_tokens_details.cached_tokens, await expectedRange(conv("deserts"), follow(conv("deserts"), y1)), "y");
  const m1 = await metrics(warm.base);
  assert.equal(m1.prompt_tokens_cached_total - m0.prompt_tokens_cached_total,
    x2.usage.prompt_tokens_details.cached_tokens + y2.usage.prompt_tokens_details.cached_tokens);
  assert.deepEqual(trace(y2), await coldRun(follow(conv("deserts"), y1)));
});

check("an identical raw prompt sent twice re-runs only its last token, with the cold answer", async () => {
  // A prompt shorter than the checkpoint interval with no chat turn in it (issue 23: it reused
  // nothing because no checkpoint fell inside it).
  const body = { prompt: "The river flows past the old mill and", max_tokens: 12, ignore_eos: true, logprobs: 2 };
  const a = await post(warm.base, "/v1/completions", body);
  const b = await post(warm.base, "/v1/completions", body);
  assert.equal(a.status, 200, a.text);
  const n = b.body.usage.prompt_tokens;
  assert.equal(b.body.usage.prompt_tokens_details.cached_tokens, n - 1, `cached ${b.body.usage.prompt_tokens_details.cached_tokens} of ${n}`);
  const c = await post(cold.base, "/v1/completions", { ...body, cache_prompt: false });
  assert.equal(b.body.choices[0].text, c.body.choices[0].text);
  assert.deepEqual(b.body.choices[0].logprobs.token_logprobs, c.body.choices[0].logprobs.token_logprobs);
});

await run([warm, cold]);
