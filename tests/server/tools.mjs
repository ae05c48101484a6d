// Tool calls on the wire: OpenAI tool_calls (ids, names, JSON-string arguments) streamed and not,
// tool_choice none / required / named, and a tool result sent back for a final answer. The calls
// are forced through tool_choice so this runs on any model; tools_trained.mjs checks that the
// trained model decides on two calls by itself.
import assert from "node:assert/strict";
import { check, collectChat, post, run, startServer } from "./harness.mjs";

const srv = await startServer([]);
const client = srv.client();
const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather for a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};
const clock = { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } };
const messages = [{ role: "user", content: "Is it warmer in Lisbon or in Oslo?" }];
const noThink = { enable_thinking: false };

function assertCall(call) {
  assert.match(call.id, /^call_/);
  assert.equal(call.type ?? "function", "function");
  assert.equal(typeof call.function.arguments, "string");
  const args = JSON.parse(call.function.arguments);
  assert.equal(typeof args, "object");
  assert.ok(args !== null && !Array.isArray(args));
}

check("tool_choice none: tools are not shown to the model", async () => {
  const a = await post(srv.base, "/apply-template", { messages, tools: [weather] });
  const b = await post(srv.base, "/apply-template", { messages, tools: [weather], tool_choice: "none" });
  assert.ok(a.body.prompt.includes("get_weather"));
  assert.ok(!b.body.prompt.includes("get_weather"));
});

check("a named tool_choice yields that call, streamed and not, with JSON-string arguments", async () => {
  const req = {
    messages, tools: [weather, clock], max_tokens: 48, chat_template_kwargs: noThink,
    tool_choice: { type: "function", function: { name: "get_weather" } },
  };
  const r = await client.chat.completions.create(req);
  const choice = r.choices[0];
  assert.ok(choice.message.tool_calls?.length >= 1, JSON.stringify(choice.message));
  assert.equal(choice.message.tool_calls[0].function.name, "get_weather");
  for (const c of choice.message.tool_calls) assertCall(c);
  assert.ok(["tool_calls", "length"].includes(choice.finish_reason));
  if (choice.finish_reason !== "length") assert.equal(choice.finish_reason, "tool_calls");
  const s = await collectChat(await client.chat.completions.create({ ...req, stream: true }));
  assert.equal(s.calls.length, choice.message.tool_calls.length);
  s.calls.forEach((c, i) => {
    assert.match(c.id, /^call_/);
    assert.equal(c.name, choice.message.tool_calls[i].function.name);
    assert.equal(c.arguments, choice.message.tool_calls[i].function.arguments);
  });
  assert.equal(s.finish, choice.finish_reason);
  assert.equal(s.content, choice.message.content ?? "");
});

check("tool_choice required forces a call", async () => {
  const r = await client.chat.completions.create({
    messages, tools: [weather], tool_choice: "required", max_tokens: 32, chat_template_kwargs: noThink,
  });
  const calls = r.choices[0].message.tool_calls;
  assert.ok(calls?.length >= 1, JSON.stringify(r.choices[0].message));
  for (const c of calls) assertCall(c);
});

check("with thinking on, a named tool_choice makes that call right after the reasoning", async () => {
  // The bias ends the reasoning at once (a random model would think until max_tokens).
  const [thinkEnd] = (await post(srv.base, "/tokenize", { content: "</think>", parse_special: true })).body.tokens;
  const req = {
    messages, tools: [weather, clock], max_tokens: 24, logit_bias: { [thinkEnd]: 100 },
    tool_choice: { type: "function", function: { name: "get_time" } },
  };
  const r = await client.chat.completions.create(req);
  const calls = r.choices[0].message.tool_calls;
  assert.ok(calls?.length >= 1, JSON.stringify(r.choices[0].message));
  assert.equal(calls[0].function.name, "get_time");
  assertCall(calls[0]);
  assert.equal(r.usage.completion_tokens <= 24, true);
  const s = await collectChat(await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } }));
  assert.deepEqual(s.calls.map((c) => [c.name, c.arguments]), calls.map((c) => [c.function.name, c.function.arguments]));
  assert.equal(s.reasoning, r.choices[0].message.reasoning_content ?? "");
  assert.equal(s.finish, r.choices[0].finish_reason);
  assert.equal(s.usage.completion_tokens, r.usage.completion_tokens);
});

check("tool results sent back give a final answer", async () => {
  const first = await client.chat.completions.create({
    messages, tools: [weather], max_tokens: 48, chat_template_kwargs: noThink,
    tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  const m = first.choices[0].message;
  const calls = [
    { id: "call_lisbon", type: "function", function: { name: "get_weather", arguments: JSON.stringify({ city: "Lisbon" }) } },
    { id: "call_oslo", type: "function", function: { name: "get_weather", arguments: JSON.stringify({ city: "Oslo" }) } },
  ];
  const convo = [
    ...messages,
    { role: "assistant", content: m.content ?? "", tool_calls: calls },
    { role: "tool", tool_call_id: "call_lisbon", content: JSON.stringify({ temperature: 21, sky: "sunny" }) },
    { role: "tool", tool_call_id: "call_oslo", content: JSON.stringify({ temperature: 9, sky: "rainy" }) },
  ];
  const tpl = await post(srv.base, "/apply-template", { messages: convo, tools: [weather] });
  assert.equal(tpl.status, 200);
  assert.ok(tpl.body.prompt.includes("<parameter=city>\nLisbon\n</parameter>"), "arguments rendered as the model writes them");
  assert.ok(tpl.body.prompt.includes("<tool_response>"));
  const r = await client.chat.completions.create({ messages: convo, tools: [weather], max_tokens: 24 });
  assert.ok(["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason));
  const s = await collectChat(await client.chat.completions.create({ messages: convo, tools: [weather], max_tokens: 24, stream: true }));
  assert.equal(s.content, r.choices[0].message.content ?? "");
  assert.equal(s.reasoning, r.choices[0].message.reasoning_content ?? "");
});

check("malformed tool definitions and calls are a 400 naming the field", async () => {
  const bad = [
    [{ messages, tools: [{ type: "function" }] }, "tools[0].function"],
    [{ messages, tools: "get_weather" }, "tools"],
    [{ messages, tools: [weather], tool_choice: { type: "function", function: { name: "nope" } } }, "tool_choice"],
    [{ messages: [...messages, { role: "assistant", content: "", tool_calls: [{ id: "x", type: "function", function: { name: "get_weather", arguments: "{not json" } }] }] }, "messages[1].tool_calls[0].function.arguments"],
  ];
  for (const [body, param] of bad) {
    const r = await post(srv.base, "/v1/chat/completions", body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(r.body.error.param, param);
    assert.equal(r.body.error.type, "invalid_request_error");
  }
});

await run([srv]);
