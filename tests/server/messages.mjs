// Anthropic's Messages API checked with the official client (@anthropic-ai/sdk@1.16.0 from
// scripts/setup-oracles): plain and streamed answers agree, thinking on and off, one and two tool
// calls with their results sent back, count_tokens, x-api-key auth, Anthropic's error shape and
// statuses, and the crossword_trace events in diffusion mode.
import assert from "node:assert/strict";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { args, check, get, post, run, startServer } from "./harness.mjs";

const { default: Anthropic } = await import(
  pathToFileURL(path.join(args.oracles, "node_modules", "@anthropic-ai", "sdk", "index.mjs")).href
);
const trained = !(args.synth && args.model === args.synth);
const srv = await startServer(["-np", "2"]);
const keyed = await startServer(["--api-key", "sk-right"]);
const client = new Anthropic({ baseURL: srv.base, apiKey: "sk-local", maxRetries: 0, timeout: 120000 });
const weather = {
  name: "get_weather",
  description: "Current weather for a city.",
  input_schema: { type: "object", properties: { city: { type: "string", description: "City name" } }, required: ["city"] },
};
const user = (text) => [{ role: "user", content: text }];

// Folds a streamed answer (the SDK's MessageStream) into the final message and checks the event
// order: message_start, blocks opened and closed in turn, message_delta, message_stop.
async function streamed(params) {
  const stream = client.messages.stream(params);
  const events = [];
  for await (const e of stream) events.push(e);
  const final = await stream.finalMessage();
  assert.equal(events[0].type, "message_start");
  assert.equal(events.at(-1).type, "message_stop");
  assert.equal(events.at(-2).type, "message_delta");
  let open = -1;
  for (const e of events) {
    if (e.type === "content_block_start") {
      assert.equal(open, -1, "a block starts only after the previous one stopped");
      open = e.index;
    } else if (e.type === "content_block_delta") {
      assert.equal(e.index, open);
    } else if (e.type === "content_block_stop") {
      assert.equal(e.index, open);
      open = -1;
    }
  }
  assert.equal(open, -1);
  return { final, events };
}

// The parts of a message that must agree between a plain and a streamed answer (ids differ).
const comparable = (m) => ({
  stop_reason: m.stop_reason,
  stop_sequence: m.stop_sequence,
  content: m.content.map((b) => (b.type === "tool_use" ? { type: b.type, name: b.name, input: b.input } : b)),
  output_tokens: m.usage.output_tokens,
});

for (const thinking of [false, true]) {
  check(`plain and streamed answers agree (thinking ${thinking ? "on" : "off"})`, async () => {
    const params = {
      model: "clover-tiny", max_tokens: 120, messages: user("What is the capital of France?"),
      thinking: thinking ? { type: "enabled", budget_tokens: 1024 } : { type: "disabled" },
    };
    const m = await client.messages.create(params);
    assert.equal(m.type, "message");
    assert.equal(m.role, "assistant");
    assert.match(m.id, /^msg_/);
    assert.ok(["end_turn", "max_tokens"].includes(m.stop_reason), m.stop_reason);
    assert.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0);
    const kinds = m.content.map((b) => b.type);
    if (thinking && trained) assert.equal(kinds[0], "thinking", JSON.stringify(m.content));
    if (!thinking) assert.ok(!kinds.includes("thinking"), JSON.stringify(m.content));
    if (trained) assert.ok(kinds.includes("text"), JSON.stringify(m.content));
    const { final } = await streamed(params);
    assert.deepEqual(comparable(final), comparable(m));
  });
}

check("stop_sequences end the answer with stop_reason stop_sequence", async () => {
  const params = { model: "m", max_tokens: 60, messages: user("Count from 1 to 20."), stop_sequences: ["5"] };
  const m = await client.messages.create(params);
  if (m.stop_reason === "stop_sequence") {
    assert.equal(m.stop_sequence, "5");
    assert.ok(!m.content.map((b) => b.text ?? "").join("").includes("5"));
  }
  const { final } = await streamed(params);
  assert.deepEqual(comparable(final), comparable(m));
});

if (trained) {
  check("one tool call (tool_choice any, no parallel use), then the result gives an answer", async () => {
    const params = {
      model: "m", max_tokens: 200, messages: user("What is the weather in Paris?"), tools: [weather],
      tool_choice: { type: "any", disable_parallel_tool_use: true },
    };
    const m = await client.messages.create(params);
    assert.equal(m.stop_reason, "tool_use", JSON.stringify(m.content));
    const uses = m.content.filter((b) => b.type === "tool_use");
    assert.equal(uses.length, 1);
    assert.match(uses[0].id, /^toolu_/);
    assert.equal(uses[0].name, "get_weather");
    assert.equal(typeof uses[0].input.city, "string");
    const { final } = await streamed(params);
    assert.deepEqual(comparable(final), comparable(m));
    const fin = await client.messages.create({
      model: "m", max_tokens: 200, tools: [weather],
      messages: [
        ...params.messages,
        { role: "assistant", content: m.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: uses[0].id, content: '{"temperature": 18, "sky": "clear"}' }] },
      ],
    });
    assert.equal(fin.stop_reason, "end_turn", JSON.stringify(fin.content));
    assert.ok(fin.content.some((b) => b.type === "text" && b.text.length > 0), JSON.stringify(fin.content));
  });

  for (const thinking of [false, true]) {
    check(`two tool calls with their results (thinking ${thinking ? "on" : "off"})`, async () => {
      const params = {
        model: "m", max_tokens: 300, messages: user("Is it warmer in Lisbon or in Oslo?"), tools: [weather],
        thinking: thinking ? { type: "enabled", budget_tokens: 1024 } : { type: "disabled" },
      };
      const m = await client.messages.create(params);
      assert.equal(m.stop_reason, "tool_use", JSON.stringify(m.content));
      const uses = m.content.filter((b) => b.type === "tool_use");
      assert.equal(uses.length, 2, JSON.stringify(m.content));
      assert.notEqual(uses[0].id, uses[1].id);
      const { final, events } = await streamed(params);
      assert.deepEqual(comparable(final), comparable(m));
      assert.ok(events.some((e) => e.type === "content_block_delta" && e.delta.type === "input_json_delta"));
      if (thinking) assert.ok(events.some((e) => e.delta?.type === "thinking_delta"));
      const fin = await client.messages.create({
        ...params,
        messages: [
          ...params.messages,
          { role: "assistant", content: m.content },
          {
            role: "user",
            content: uses.map((u, i) => ({
              type: "tool_result", tool_use_id: u.id, content: JSON.stringify({ temperature: i === 0 ? 21 : 6 }),
            })),
          },
        ],
      });
      assert.equal(fin.stop_reason, "end_turn", JSON.stringify(fin.content));
      const text = fin.content.map((b) => b.text ?? b.thinking ?? "").join("");
      assert.ok(text.length > 0);
    });
  }
}

check("count_tokens counts the prompt the answer would use", async () => {
  const params = { model: "m", messages: user("What is the capital of France?"), thinking: { type: "disabled" } };
  const c = await client.messages.countTokens(params);
  assert.ok(Number.isInteger(c.input_tokens) && c.input_tokens > 5, JSON.stringify(c));
  const m = await client.messages.create({ ...params, max_tokens: 4 });
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, c.input_tokens);
  const withTools = await client.messages.countTokens({ ...params, tools: [weather] });
  assert.ok(withTools.input_tokens > c.input_tokens);
});

check("errors come in Anthropic's shape with the right status", async () => {
  const cases = [
    [{ model: "m", messages: user("hi") }, 400, /max_tokens/],  // max_tokens is required
    [{ model: "m", max_tokens: 10 }, 400, /messages/],
    [{ model: "m", max_tokens: 10, messages: [{ role: "wizard", content: "x" }] }, 400, /role/],
    [{ model: "m", max_tokens: 10, messages: user("x"), temperature: 3 }, 400, /temperature/],
    [{ model: "m", max_tokens: 10, messages: user("x"), tools: [{ name: "t" }] }, 400, /input_schema/],
    [{ model: "m", max_tokens: 10, messages: user("x"), tool_choice: { type: "sometimes" } }, 400, /tool_choice/],
    [{ model: "m", max_tokens: 10, messages: user("x"), thinking: { type: "maybe" } }, 400, /thinking/],
    [{ model: "m", max_tokens: 10, messages: [{ role: "user", content: [{ type: "image", source: {} }] }] }, 400, /image/],
    ["{not json", 400, /JSON/],
  ];
  for (const [body, status, re] of cases) {
    const r = await post(srv.base, "/v1/messages", body);
    assert.equal(r.status, status, r.text);
    assert.equal(r.body.type, "error", r.text);
    assert.equal(r.body.error.type, "invalid_request_error");
    assert.match(r.body.error.message, re);
  }
  // The SDK maps them onto its error classes.
  await assert.rejects(client.messages.create({ model: "m", max_tokens: 10, messages: [] }), (e) => e.status === 400 && e.error?.type === "error");
  const h = await get(srv.base, "/health");
  assert.equal(h.status, 200);
});

check("behind --api-key: x-api-key and Bearer work, a wrong key is a 401 in Anthropic's shape", async () => {
  const ok = new Anthropic({ baseURL: keyed.base, apiKey: "sk-right", maxRetries: 0 });
  const m = await ok.messages.create({ model: "m", max_tokens: 4, messages: user("hi") });
  assert.equal(m.type, "message");
  const bearer = new Anthropic({ baseURL: keyed.base, authToken: "sk-right", apiKey: null, maxRetries: 0 });
  assert.equal((await bearer.messages.create({ model: "m", max_tokens: 4, messages: user("hi") })).type, "message");
  const r = await post(keyed.base, "/v1/messages", { model: "m", max_tokens: 4, messages: user("hi") }, { "x-api-key": "sk-wrong" });
  assert.equal(r.status, 401);
  assert.equal(r.body.type, "error");
  assert.equal(r.body.error.type, "authentication_error");
  const bad = new Anthropic({ baseURL: keyed.base, apiKey: "sk-wrong", maxRetries: 0 });
  await assert.rejects(bad.messages.create({ model: "m", max_tokens: 4, messages: user("hi") }), (e) => e.status === 401);
  // x-api-key is an Anthropic-route header: the OpenAI routes keep to Bearer.
  const o = await post(keyed.base, "/v1/chat/completions", { messages: user("hi"), max_tokens: 2 }, { "x-api-key": "sk-right" });
  assert.equal(o.status, 401);
  assert.ok(o.body.error.message);
});

check("crossword_trace: diffusion passes arrive as crossword_trace events; the answer is unchanged", async () => {
  const body = {
    model: "m", max_tokens: 40, messages: user("What is the capital of France?"), stream: true,
    crossword: { mode: "diffusion", block_size: 32 },
  };
  const plain = await client.messages.create({ ...body, stream: false });
  const r = await fetch(srv.base + "/v1/messages", {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream_options: { crossword_trace: true } }),
  });
  const text = await r.text();
  const events = text.split("\n\n").filter((e) => e.trim()).map((e) => {
    const [ev, data] = e.split("\n");
    return { event: ev.slice(7), data: JSON.parse(data.slice(6)) };
  });
  const traces = events.filter((e) => e.event === "crossword_trace");
  assert.ok(traces.length > 0, text.slice(0, 500));
  // A block shows its 32 slots, or, cut at a committed end of generation, its slots up to that
  // end (docs/decoding.md, block diffusion step 2), the last one filled.
  for (const t of traces) {
    const n = t.data.slots.length;
    assert.ok(n === 32 || (n >= 2 && n < 32 && t.data.slots[n - 1] !== ""), JSON.stringify(t.data.slots));
    assert.ok(["denoise", "commit"].includes(t.data.phase));
  }
  const got = events.filter((e) => e.data.delta?.type === "text_delta").map((e) => e.data.delta.text).join("");
  assert.equal(got, plain.content.filter((b) => b.type === "text").map((b) => b.text).join(""));
});

check("crossword_trace: a spec round shows its draft, then its verify; rounds without a draft show nothing", async () => {
  // Sampled `auto` requests start from the priors: their first rounds verify the seed alone.
  const body = {
    model: "m", max_tokens: 40, messages: user("Count from one to twenty."), stream: true,
    temperature: 0.8, seed: 7, crossword: { mode: "spec", draft_max: "auto" },
    stream_options: { crossword_trace: true },
  };
  const r = await fetch(srv.base + "/v1/messages", {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  });
  const text = await r.text();
  const traces = text.split("\n\n").filter((e) => e.startsWith("event: crossword_trace"))
    .map((e) => JSON.parse(e.split("\n")[1].slice(6)));
  const usage = text.split("\n\n").filter((e) => e.startsWith("event: message_delta"))
    .map((e) => JSON.parse(e.split("\n")[1].slice(6)).usage.output_tokens).pop();
  // Fewer events than answer tokens: the one-row rounds (8 before the first probe) show none.
  assert.ok(traces.length < 2 * usage, `${traces.length} events for ${usage} tokens`);
  for (let i = 0; i < traces.length; ++i) {
    const t = traces[i];
    assert.ok(["draft", "verify"].includes(t.phase), JSON.stringify(t));
    if (t.phase !== "verify") continue;
    const d = traces[i - 1];
    assert.ok(d && d.phase === "draft" && d.pass === t.pass - 1 && d.block === t.block,
      "a verify event follows its own draft: " + JSON.stringify([d, t]));
  }
});

await run([srv, keyed]);
