// Thinking switches (chat_template_kwargs, the gateway-proof fallbacks, the server default) and
// the reasoning split, including an answer cut by max_tokens inside the think block.
import assert from "node:assert/strict";
import { check, collectChat, post, run, startServer } from "./harness.mjs";

const srv = await startServer([]);
const off = await startServer(["--reasoning-budget", "0"]);
const client = srv.client();
const messages = [{ role: "user", content: "Why is the sky blue?" }];
const closed = "<think>\n\n</think>\n\n";

check("enable_thinking: false closes the think block and gives no reasoning", async () => {
  const tpl = await post(srv.base, "/apply-template", { messages, chat_template_kwargs: { enable_thinking: false } });
  assert.ok(tpl.body.prompt.endsWith(closed), JSON.stringify(tpl.body.prompt.slice(-40)));
  assert.equal(tpl.body.think_open, false);
  const r = await client.chat.completions.create({ messages, max_tokens: 16, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(r.choices[0].message.reasoning_content, undefined);
  const s = await collectChat(await client.chat.completions.create({
    messages, max_tokens: 16, chat_template_kwargs: { enable_thinking: false }, stream: true,
  }));
  assert.equal(s.reasoning, "");
  assert.equal(s.content, r.choices[0].message.content ?? "");
});

check("thinking can be switched off without chat_template_kwargs (top-level, reasoning_effort, server default)", async () => {
  for (const body of [{ messages, enable_thinking: false }, { messages, reasoning_effort: "none" }]) {
    const tpl = await post(srv.base, "/apply-template", body);
    assert.ok(tpl.body.prompt.endsWith(closed), JSON.stringify(body));
  }
  const def = await post(off.base, "/apply-template", { messages });
  assert.ok(def.body.prompt.endsWith(closed), "--reasoning-budget 0 turns thinking off by default");
  const back = await post(off.base, "/apply-template", { messages, chat_template_kwargs: { enable_thinking: true } });
  assert.ok(back.body.prompt.endsWith("<think>\n"), "a request can still turn it on");
});

check("with thinking on, reasoning_content is separate from content", async () => {
  const tpl = await post(srv.base, "/apply-template", { messages });
  assert.ok(tpl.body.prompt.endsWith("<think>\n"));
  const r = await client.chat.completions.create({ messages, max_tokens: 24 });
  const m = r.choices[0].message;
  assert.ok(m.reasoning_content && m.reasoning_content.length > 0, "reasoning present");
  const raw = await client.chat.completions.create({ messages, max_tokens: 24, reasoning_format: "none" });
  const text = raw.choices[0].message.content;
  assert.ok(text.includes(m.reasoning_content), "reasoning_format none leaves the reasoning in content");
  assert.ok(!(m.content ?? "").includes(m.reasoning_content), "deepseek format moves it out of content");
});

check("max_tokens reached inside the think block: length, all text in reasoning, nothing lost", async () => {
  const req = { messages, max_tokens: 5 };
  const a = await client.chat.completions.create(req);
  const m = a.choices[0].message;
  assert.equal(a.choices[0].finish_reason, "length");
  assert.equal(a.usage.completion_tokens, 5);
  assert.ok(m.reasoning_content.length > 0);
  assert.equal(m.content ?? "", "");
  const s = await collectChat(await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.finish, "length");
  assert.equal(s.reasoning, m.reasoning_content);
  assert.equal(s.content, "");
  assert.equal(s.usage.completion_tokens, 5);
  // The raw text of the same 5 tokens is exactly the reasoning (trimmed): nothing dropped.
  const raw = await client.chat.completions.create({ ...req, reasoning_format: "none" });
  assert.equal(raw.choices[0].message.content.trim(), m.reasoning_content);
});

await run([srv, off]);
