// Small server defects of issue 24, each checked against what a client sees: request paths are
// logged escaped (no forged log lines), a stop string is a "stop" in the log and the metrics (not
// "cancelled"), /v1/completions fills logprobs.text_offset, ignore_eos never shows <|im_end|>,
// and the Authorization scheme is case-insensitive.
import assert from "node:assert/strict";
import { check, get, metrics, post, run, sleep, sse, startServer } from "./harness.mjs";

const srv = await startServer(["-np", "1", "-c", "1024"]);
const keyed = await startServer(["--api-key", "sk-right"]);

check("request paths with %0a and ANSI escapes are logged escaped, one line per request", async () => {
  const forged = "/v1/nope%0acrossword:%20error:%20FORGED%20LINE%1b[31mRED%0d";
  const r = await get(srv.base, forged);
  assert.equal(r.status, 404);
  const m = await fetch(srv.base + "/v1/models%0aFORGED2%1b[2J", { method: "GET" });
  await m.text();
  await new Promise((r) => setTimeout(r, 200));
  const log = srv.log();
  assert.ok(!/^crossword: error: FORGED/m.test(log), "a request path forged a log line");
  assert.ok(!/^FORGED2/m.test(log), "a request path forged a log line");
  assert.ok(!log.includes("\x1b"), "an ANSI escape reached the log");
  assert.ok(!log.includes("\r"), "a carriage return reached the log");
  assert.match(log, /\/v1\/nope\\x0acrossword: error: FORGED LINE\\x1b\[31mRED\\x0d 404/);
});

const prompt = "The quick brown fox";
let reference = null;
check("a stop string ends with finish stop in the answer, the log and the metrics", async () => {
  const base = { prompt, max_tokens: 24, ignore_eos: true };
  reference = await post(srv.base, "/v1/completions", base);
  assert.equal(reference.status, 200);
  const text = reference.body.choices[0].text;
  assert.ok(text.length >= 6, `answer too short to cut: ${JSON.stringify(text)}`);
  const stop = text.slice(3, 6);
  const before = await metrics(srv.base);
  const r = await post(srv.base, "/v1/completions", { ...base, stop: [stop] });
  assert.equal(r.status, 200);
  assert.equal(r.body.choices[0].finish_reason, "stop");
  assert.equal(r.body.choices[0].text, text.slice(0, text.indexOf(stop)));
  const after = await metrics(srv.base);
  assert.equal(after.requests_cancelled_total, before.requests_cancelled_total, "a stop string counted as cancelled");
  assert.equal(after.requests_finished_total, before.requests_finished_total + 1);
  // The log line reaches the harness through the server's stderr pipe, which can lag the
  // response on a loaded machine (a sanitizer run missed it once): wait for it up to 2 s.
  const logged = () => srv.log().split("\n").filter((l) => l.includes(r.body.id));
  for (let i = 0; i < 100 && logged().length === 0; ++i) await sleep(20);
  const lines = logged();
  assert.ok(lines.length >= 1, "no log line for the request");
  assert.match(lines.join("\n"), /finish stop/);
  assert.doesNotMatch(lines.join("\n"), /cancelled/);
});

// Code points of a string (text_offset counts them, as vLLM does).
const cps = (s) => [...s].length;
function checkOffsets(lp, text) {
  assert.equal(lp.text_offset.length, lp.tokens.length, "one text_offset per token");
  let at = 0;
  for (let i = 0; i < lp.tokens.length; ++i) {
    assert.equal(lp.text_offset[i], at, `text_offset[${i}]`);
    at += cps(lp.tokens[i]);
  }
  assert.equal(at, cps(text), "the offsets walk the whole answer");
}

check("/v1/completions logprobs.text_offset gives each token's offset, streamed or not", async () => {
  const req = { prompt, max_tokens: 16, ignore_eos: true, logprobs: 2 };
  const r = await post(srv.base, "/v1/completions", req);
  assert.equal(r.status, 200);
  const c = r.body.choices[0];
  assert.ok(c.logprobs.tokens.length === 16);
  checkOffsets(c.logprobs, c.text);
  // Streamed: the offsets continue across chunks.
  const events = await sse(srv.base, "/v1/completions", { ...req, stream: true });
  const all = { tokens: [], text_offset: [] };
  let text = "";
  for (const e of events) {
    if (e === "[DONE]") continue;
    const ch = JSON.parse(e).choices[0];
    if (!ch) continue;
    text += ch.text ?? "";
    if (ch.logprobs) {
      all.tokens.push(...ch.logprobs.tokens);
      all.text_offset.push(...ch.logprobs.text_offset);
    }
  }
  assert.equal(text, c.text);
  checkOffsets(all, text);
});

check("ignore_eos runs to max_tokens without end-of-generation tokens in the text", async () => {
  for (const mode of ["ar", "diffusion"]) {
    const r = await post(srv.base, "/v1/chat/completions", {
      messages: [{ role: "user", content: "Say hi." }],
      max_tokens: 80,
      ignore_eos: true,
      crossword: { mode },
      chat_template_kwargs: { enable_thinking: false },
    });
    assert.equal(r.status, 200, r.text);
    const content = r.body.choices[0].message.content ?? "";
    assert.ok(!/<\|im_end\|>|<\|endoftext\|>/.test(content), `${mode}: ${JSON.stringify(content)}`);
    assert.equal(r.body.usage.completion_tokens, 80, mode);
    assert.equal(r.body.choices[0].finish_reason, "length");
  }
});

check("the Authorization scheme is case-insensitive (RFC 9110)", async () => {
  const body = { messages: [{ role: "user", content: "hi" }], max_tokens: 2 };
  for (const scheme of ["Bearer", "bearer", "BEARER", "bEaReR"]) {
    const r = await post(keyed.base, "/v1/chat/completions", body, { authorization: `${scheme} sk-right` });
    assert.equal(r.status, 200, `${scheme}: ${r.text.slice(0, 200)}`);
  }
  for (const auth of ["bearer sk-wrong", "Basic sk-right", "bearersk-right", "bearer"]) {
    const r = await post(keyed.base, "/v1/chat/completions", body, { authorization: auth });
    assert.equal(r.status, 401, auth);
  }
});

await run([srv, keyed]);
