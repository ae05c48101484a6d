// llama-server behaviours that tools built for it rely on (issue 23): CORS preflights answered
// without the API key, --cors-origins (localhost by default, a list, '*'), --api-key-file with
// several keys, and assistant prefill / continue_final_message on the chat routes.
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { check, run, startServer } from "./harness.mjs";

const dir = mkdtempSync(path.join(tmpdir(), "crossword-compat-"));
const keys = path.join(dir, "keys.txt");
writeFileSync(keys, "sk-one\n\nsk-two  \n");
const local = await startServer(["--api-key-file", keys]);
const listed = await startServer(["--cors-origins", "https://a.example, https://b.example"]);
const any = await startServer(["--cors-origins", "*", "--no-cors-credentials"]);

const preflight = (base, origin) =>
  fetch(base + "/v1/chat/completions", {
    method: "OPTIONS",
    headers: { Origin: origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Authorization" },
  });

check("a preflight is answered without the API key; localhost origins by default", async () => {
  const r = await preflight(local.base, "http://localhost:5173");
  assert.equal(r.status, 200);
  assert.equal(r.headers.get("access-control-allow-origin"), "http://localhost:5173");
  assert.equal(r.headers.get("access-control-allow-credentials"), "true");
  assert.match(r.headers.get("access-control-allow-methods"), /POST/);
  const evil = await preflight(local.base, "https://evil.example");
  assert.equal(evil.status, 200);
  assert.equal(evil.headers.get("access-control-allow-origin"), null);
  for (const o of ["http://127.0.0.1:3000", "http://[::1]:8080", "localhost"]) {
    assert.equal((await preflight(local.base, o)).headers.get("access-control-allow-origin"), o, o);
  }
  assert.equal((await preflight(local.base, "http://localhost.evil.example")).headers.get("access-control-allow-origin"), null);
});

check("--api-key-file: every key in the file opens the routes, others do not", async () => {
  const body = JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
  const post = (key) =>
    fetch(local.base + "/v1/chat/completions", {
      method: "POST",
      body,
      headers: { "content-type": "application/json", ...(key ? { Authorization: `Bearer ${key}` } : {}), Origin: "http://localhost:1" },
    });
  assert.equal((await post("sk-one")).status, 200);
  assert.equal((await post("sk-two")).status, 200);
  const bad = await post("sk-three");
  assert.equal(bad.status, 401);
  assert.equal(bad.headers.get("access-control-allow-origin"), "http://localhost:1", "errors carry CORS headers too");
  assert.equal((await post(null)).status, 401);
});

check("--cors-origins: a list allows exactly its origins; '*' without credentials is '*'", async () => {
  assert.equal((await preflight(listed.base, "https://b.example")).headers.get("access-control-allow-origin"), "https://b.example");
  assert.equal((await preflight(listed.base, "https://c.example")).headers.get("access-control-allow-origin"), null);
  assert.equal((await preflight(listed.base, "http://localhost:1")).headers.get("access-control-allow-origin"), null);
  const r = await fetch(any.base + "/v1/models", { headers: { Origin: "https://anywhere.example" } });
  assert.equal(r.headers.get("access-control-allow-origin"), "*");
});

// Streams with logprobs: each chunk's logprob tokens spell exactly the text it carries. Several

check("a final assistant message is continued (prefill, continue_final_message); 400 with add_generation_prompt", async () => {
  const post = async (route, body) => {
    const r = await fetch(any.base + route, { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" } });
    return { status: r.status, body: await r.json() };
  };
  const messages = [{ role: "user", content: "What is the capital of France?" }, { role: "assistant", content: "The capital of France is" }];
  const prefill = await post("/apply-template", { messages });
  assert.ok(prefill.body.prompt.endsWith("The capital of France is"), JSON.stringify(prefill.body.prompt.slice(-80)));
  const explicit = await post("/apply-template", { messages, continue_final_message: true, add_generation_prompt: false });
  assert.equal(explicit.body.prompt, prefill.body.prompt);
  const newTurn = await post("/apply-template", { messages, add_generation_prompt: true });
  assert.ok(newTurn.body.prompt.endsWith("<|im_start|>assistant\n") || newTurn.body.prompt.includes("<|im_end|>\n<|im_start|>assistant"), "a new turn when asked for");
  const answer = await post("/v1/chat/completions", { messages, max_tokens: 6, ignore_eos: true, reasoning_format: "none" });
  assert.equal(answer.status, 200);
  assert.equal(answer.body.usage.prompt_tokens, prefill.body.tokens.length);
  assert.ok(!answer.body.choices[0].message.content.startsWith("The capital"), "only the continuation is returned");
  const both = await post("/v1/chat/completions", { messages, continue_final_message: true, add_generation_prompt: true });
  assert.equal(both.status, 400);
  assert.equal(both.body.error.param, "continue_final_message");
  const nothing = await post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], continue_final_message: true });
  assert.equal(nothing.status, 400);
});


await run([local, listed, any]);
