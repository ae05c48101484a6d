// Bad input gets its status code and OpenAI's error JSON, and the server keeps serving: every
// case is followed by /health, a running stream is unaffected, greedy output is unchanged.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { args, check, collectChat, get, post, run, startServer } from "./harness.mjs";

const srv = await startServer(["-np", "2", "-c", "512", "--max-body-size", "65536"]);
const keyed = await startServer(["--api-key", "sk-right"]);
const client = srv.client();
const ok = { messages: [{ role: "user", content: "hello" }], max_tokens: 12, ignore_eos: true };
const greedy = async () => (await client.chat.completions.create({ ...ok, reasoning_format: "none" })).choices[0].message.content;

async function expectError(body, status, param, { route = "/v1/chat/completions", headers = {}, base = srv.base } = {}) {
  const r = await post(base, route, body, headers);
  assert.equal(r.status, status, `${String(body).slice(0, 80)} -> ${r.status} ${r.text.slice(0, 200)}`);
  assert.ok(r.body && r.body.error, `OpenAI error JSON expected, got ${r.text.slice(0, 200)}`);
  assert.equal(typeof r.body.error.message, "string");
  assert.equal(typeof r.body.error.type, "string");
  assert.ok("param" in r.body.error);
  if (param !== undefined) assert.equal(r.body.error.param, param);
  const h = await get(base, "/health");
  assert.equal(h.status, 200, "the server still answers /health");
  return r.body.error;
}

let before = null;
check("reference answer", async () => {
  before = await greedy();
});

check("malformed, truncated and non-object bodies are a 400", async () => {
  await expectError('{"messages": [', 400, null);
  await expectError("", 400, null);
  await expectError("[1, 2]", 400, null);
  await expectError("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]} trailing", 400, null);
});

check("wrong types and out-of-range values are a 400 naming the field", async () => {
  const m = ok.messages;
  await expectError({ messages: "hello" }, 400, "messages");
  await expectError({ messages: [] }, 400, "messages");
  await expectError({}, 400, "messages");
  await expectError({ messages: [{ role: "user" , content: 5 }] }, 400, "messages[0].content");
  await expectError({ messages: [{ role: "wizard", content: "x" }] }, 400, "messages[0].role");
  await expectError({ messages: m, max_tokens: 0 }, 400, "max_tokens");
  await expectError({ messages: m, max_tokens: -3 }, 400, "max_tokens");
  await expectError({ messages: m, max_tokens: "5" }, 400, "max_tokens");
  // A number too large for JSON's integers is still an integer question: the message gives the range.
  assert.match((await expectError({ messages: m, max_tokens: 1e20 }, 400, "max_tokens")).message,
               /must be an integer in \[-?\d+, \d+\] \(got 1e\+20\)/);
  await expectError({ messages: m, max_completion_tokens: 1.5 }, 400, "max_completion_tokens");
  await expectError({ messages: m, temperature: "hot" }, 400, "temperature");
  await expectError({ messages: m, top_p: 2 }, 400, "top_p");
  // Positive, but 0 once stored as a 32-bit float: was a 500 from decoding's own check.
  for (const tiny of [1e-300, 1e-46]) {
    const e = await expectError({ messages: m, top_p: tiny }, 400, "top_p");
    assert.match(e.message, /32-bit float/);
    await expectError({ messages: m, crossword: { mode: "diffusion", threshold: tiny } }, 400, "crossword.threshold");
    await expectError({ messages: m, threshold: tiny, crossword: { mode: "spec" } }, 400, "threshold");
  }
  assert.match((await expectError({ messages: m, crossword: { threshold: -1 } }, 400, "crossword.threshold")).message,
               /must be in \(0, 1\] \(got -1\)/);
  await expectError({ messages: m, stop: 5 }, 400, "stop");
  await expectError({ messages: m, stream: "yes" }, 400, "stream");
  await expectError({ messages: m, stream_options: { include_usage: 1 } }, 400, "stream_options.include_usage");
  await expectError({ messages: m, chat_template_kwargs: "thinking off" }, 400, "chat_template_kwargs");
  await expectError({ messages: m, reasoning_format: "mystery" }, 400, "reasoning_format");
  await expectError({ messages: m, crossword: { mode: "telepathy" } }, 400, "crossword.mode");
  await expectError({ messages: m, crossword: { block_size: 1 } }, 400, "crossword.block_size");
  // draft_max and verify_chunk take an integer or "auto"; each error says both.
  for (const [field, value, want] of [
    ["draft_max", 300, /must be in \[0, 255\] or "auto" \(got 300\)/],
    ["draft_max", "AUTO", /must be an integer in \[0, 255\] or "auto" \(got "AUTO"\)/],
    ["draft_max", 1.5, /must be an integer in \[0, 255\] or "auto" \(got 1\.5\)/],
    ["verify_chunk", -1, /must be in \[0, 256\] or "auto" \(got -1\)/],
    ["verify_chunk", "all", /must be an integer in \[0, 256\] or "auto"/],
    ["draft_skip_ffn", "2,3", /must be an array of at most 64 layer numbers in \[0, 63\]/],
    ["draft_skip_ffn", [2, 64], /in \[0, 63\]/],
    // The embedded model has 8 layers: the last one's FFN feeds the head.
    ["draft_skip_ffn", [7], /may name layers 0 \.\. 6 of this model/],
  ]) {
    const e = await expectError({ messages: m, crossword: { [field]: value } }, 400, "crossword." + field);
    assert.match(e.message, want);
  }
  await expectError({ messages: m, logit_bias: { abc: 5 } }, 400, "logit_bias.abc");
  await expectError({ messages: m, n: 129 }, 400, "n");
  // Known OpenAI fields crossword ignores are still type-checked; unknown fields are ignored.
  await expectError({ messages: m, user: 5 }, 400, "user");
  await expectError({ messages: m, metadata: [] }, 400, "metadata");
  await expectError({ messages: m, response_format: { type: "json_schema" } }, 400, "response_format.json_schema");
  await expectError({ messages: m, response_format: { type: "xml" } }, 400, "response_format.type");
  const r = await post(srv.base, "/v1/chat/completions", { ...ok, some_extension: { x: 1 } });
  assert.equal(r.status, 200);
});

check("a template exception is a 400 carrying its text", async () => {
  const e = await expectError({ messages: [{ role: "assistant", content: "I speak first" }] }, 400, "messages");
  assert.equal(e.message, "messages contain no user query");
  const e2 = await expectError({ messages: [{ role: "user", content: "a" }, { role: "system", content: "late" }] }, 400, "messages");
  assert.match(e2.message, /system message is only allowed first/);
});

check("a prompt longer than the context is a 400", async () => {
  const long = "word ".repeat(800);
  const e = await expectError({ messages: [{ role: "user", content: long }] }, 400, "messages");
  assert.match(e.message, /tokens but a slot's context holds 256/);
  const c = await expectError({ prompt: long, max_tokens: 4 }, 400, "prompt", { route: "/v1/completions" });
  assert.equal(c.type, "invalid_request_error");
});

check("invalid UTF-8 and lone surrogates are a 400; the next greedy answer is unchanged", async () => {
  const bad = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"caf'), Buffer.from([0xc3, 0x28, 0xff]), Buffer.from('"}]}')]);
  await expectError(bad, 400, null);
  await expectError('{"messages":[{"role":"user","content":"\\ud800 alone"}]}', 400, null);
  await expectError('{"messages":[{"role":"user","content":"\\udc00"}]}', 400, null);
  await expectError(JSON.stringify({ messages: [{ role: "user", content: "x\ud800" }] }), 400, null);
  assert.equal(await greedy(), before);
});

check("an answer cut inside a multi-byte character is valid JSON with finish_reason length", async () => {
  // The first piece of a character the vocabulary splits into several tokens is not UTF-8 alone.
  let lead = null;
  for (const ch of ["\u{1F600}", "\u{1F9EA}", "\u{10348}", "\u4E2D", "\u00E9", "\u0416"]) {
    const t = await post(srv.base, "/tokenize", { content: ch, with_pieces: true });
    const p = t.body.tokens.find((x) => Array.isArray(x.piece));
    if (t.body.tokens.length > 1 && p) {
      lead = p.id;
      break;
    }
  }
  assert.ok(lead !== null, "some character must split into byte tokens");
  const req = { ...ok, max_tokens: 1, logit_bias: { [lead]: 100 }, reasoning_format: "none" };
  const r = await post(srv.base, "/v1/chat/completions", req);
  assert.equal(r.status, 200);
  assert.equal(r.body.choices[0].finish_reason, "length");
  assert.equal(r.body.usage.completion_tokens, 1);
  assert.equal(r.body.choices[0].message.content, "\uFFFD");
  const s = await collectChat(await client.chat.completions.create({ ...req, stream: true }));
  assert.equal(s.finish, "length");
  assert.equal(s.content, "\uFFFD");
});

check("a body over the limit is a 413; unknown routes a 404", async () => {
  const big = JSON.stringify({ messages: [{ role: "user", content: "x".repeat(70000) }] });
  const e = await expectError(big, 413, null);
  assert.equal(e.type, "invalid_request_error");
  await expectError("{}", 404, null, { route: "/v1/nothing-here" });
});

check("with --api-key: missing or wrong key is a 401 on /v1 routes, /health stays open", async () => {
  await expectError(ok, 401, null, { base: keyed.base });
  await expectError(ok, 401, null, { base: keyed.base, headers: { authorization: "Bearer sk-wrong" } });
  await expectError(ok, 401, null, { base: keyed.base, headers: { authorization: "sk-right" } });
  assert.equal((await get(keyed.base, "/v1/models")).status, 401);
  assert.equal((await get(keyed.base, "/health")).status, 200);
  await assert.rejects(keyed.client({ apiKey: "sk-wrong" }).models.list(), (e) => e.status === 401);
  const r = await keyed.client({ apiKey: "sk-right" }).chat.completions.create(ok);
  assert.equal(r.choices.length, 1);
});

check("a running stream is unaffected by a burst of bad requests", async () => {
  const req = { ...ok, max_tokens: 40, reasoning_format: "none", logprobs: true };
  const alone = (await client.chat.completions.create(req)).choices[0];
  const stream = client.chat.completions.create({ ...req, stream: true }).then(collectChat);
  const junk = ['{"messages": [', "[]", JSON.stringify({ messages: [] }), JSON.stringify({ ...ok, max_tokens: 0 }),
    Buffer.from([0x7b, 0xff, 0x7d]), JSON.stringify({ messages: [{ role: "assistant", content: "x" }] })];
  const codes = await Promise.all(junk.map(async (b) => (await post(srv.base, "/v1/chat/completions", b)).status));
  assert.deepEqual(codes, junk.map(() => 400));
  const s = await stream;
  assert.equal(s.content, alone.message.content);
  assert.deepEqual(s.logprobs.map((e) => e.logprob), alone.logprobs.content.map((e) => e.logprob));
});

check("a second server on a port in use exits with an error instead of sharing it", async () => {
  const r = spawnSync(args.crossword, ["serve", "-m", args.model, "--port", String(srv.port), "-t", "1"],
    { encoding: "utf8", timeout: 20000 });
  assert.notEqual(r.status, 0, r.stderr);
  assert.match(r.stderr, /port is in use/);
  assert.equal((await get(srv.base, "/health")).status, 200);
});

await run([srv, keyed]);
