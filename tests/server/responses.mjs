// OpenAI's Responses API (stateless) checked with the official client's responses.create
// (openai@6.49.0): plain and streamed answers agree, reasoning items, function calls and their
// outputs sent back as items, previous_response_id refused, OpenAI's error shape.
import assert from "node:assert/strict";
import { args, check, get, post, run, startServer } from "./harness.mjs";

const trained = !(args.synth && args.model === args.synth);
const srv = await startServer(["-np", "2"]);
const client = srv.client();
const weather = {
  type: "function", name: "get_weather", description: "Current weather for a city.",
  parameters: { type: "object", properties: { city: { type: "string", description: "City name" } }, required: ["city"] },
};

// A streamed response folded from its events, with their order checked.
async function streamed(params) {
  const stream = await client.responses.create({ ...params, stream: true });
  const events = [];
  for await (const e of stream) events.push(e);
  assert.equal(events[0].type, "response.created");
  assert.equal(events.at(-1).type, "response.completed");
  events.forEach((e, i) => assert.equal(e.sequence_number, i));
  let text = "";
  const args = {};
  for (const e of events) {
    if (e.type === "response.output_text.delta") text += e.delta;
    if (e.type === "response.function_call_arguments.delta") args[e.item_id] = (args[e.item_id] ?? "") + e.delta;
  }
  const final = events.at(-1).response;
  assert.equal(text, final.output.filter((o) => o.type === "message").map((o) => o.content[0].text).join(""));
  for (const o of final.output.filter((o) => o.type === "function_call")) assert.equal(args[o.id] ?? "", o.arguments);
  return { final, events };
}

const comparable = (r) => ({
  status: r.status,
  output: r.output.map((o) => {
    if (o.type === "message") return { type: o.type, text: o.content.map((c) => c.text).join("") };
    if (o.type === "reasoning") return { type: o.type, text: o.content.map((c) => c.text).join("") };
    return { type: o.type, name: o.name, arguments: o.arguments };
  }),
  output_tokens: r.usage.output_tokens,
});

for (const effort of ["none", "medium"]) {
  check(`string input: plain and streamed agree (reasoning effort ${effort})`, async () => {
    const params = { model: "m", input: "What is the capital of France?", max_output_tokens: 120, reasoning: { effort }, store: false };
    const r = await client.responses.create(params);
    assert.equal(r.object, "response");
    assert.match(r.id, /^resp_/);
    assert.ok(["completed", "incomplete"].includes(r.status));
    assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
    const reasoningTokens = r.usage.output_tokens_details.reasoning_tokens;
    if (effort === "none") {
      assert.ok(!r.output.some((o) => o.type === "reasoning"));
      assert.equal(reasoningTokens, 0);
    }
    if (effort !== "none" && trained) {
      assert.equal(r.output[0].type, "reasoning", JSON.stringify(r.output));
      // The tokens up to and including </think>: some, and fewer than the whole answer.
      assert.ok(reasoningTokens > 0 && reasoningTokens < r.usage.output_tokens, JSON.stringify(r.usage));
    }
    if (trained) assert.ok(r.output_text.length > 0, JSON.stringify(r.output));
    const { final } = await streamed(params);
    assert.deepEqual(comparable(final), comparable(r));
  });
}

check("items input with instructions and an earlier assistant turn", async () => {
  const params = {
    model: "m", instructions: "Answer briefly.", max_output_tokens: 60, reasoning: { effort: "none" },
    input: [
      { role: "user", content: [{ type: "input_text", text: "What is the capital of France?" }] },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "Paris." }] },
      { role: "user", content: "And of Italy?" },
    ],
  };
  const r = await client.responses.create(params);
  assert.ok(r.output.some((o) => o.type === "message"));
  assert.equal(r.instructions, "Answer briefly.");
  const { final } = await streamed(params);
  assert.deepEqual(comparable(final), comparable(r));
});

if (trained) {
  check("function calls, then their outputs as items give an answer", async () => {
    const params = {
      model: "m", input: "Is it warmer in Lisbon or in Oslo?", tools: [weather], max_output_tokens: 300,
      reasoning: { effort: "none" },
    };
    const r = await client.responses.create(params);
    const calls = r.output.filter((o) => o.type === "function_call");
    assert.equal(calls.length, 2, JSON.stringify(r.output));
    for (const c of calls) {
      assert.match(c.call_id, /^call_/);
      assert.equal(c.name, "get_weather");
      assert.equal(typeof JSON.parse(c.arguments).city, "string");
    }
    const { final, events } = await streamed(params);
    assert.deepEqual(comparable(final), comparable(r));
    assert.ok(events.some((e) => e.type === "response.function_call_arguments.done"));
    const fin = await client.responses.create({
      ...params,
      input: [
        { role: "user", content: params.input },
        ...calls,
        ...calls.map((c, i) => ({ type: "function_call_output", call_id: c.call_id, output: JSON.stringify({ temperature: i ? 6 : 21 }) })),
      ],
    });
    assert.ok(!fin.output.some((o) => o.type === "function_call"), JSON.stringify(fin.output));
    assert.ok(fin.output_text.length > 0);
  });

  check("a reasoning item sent back is accepted", async () => {
    const first = await client.responses.create({ model: "m", input: "What is 2 + 3?", max_output_tokens: 200, reasoning: { effort: "high" } });
    const r = await client.responses.create({
      model: "m", max_output_tokens: 60, reasoning: { effort: "none" },
      input: [{ role: "user", content: "What is 2 + 3?" }, ...first.output, { role: "user", content: "And 3 + 4?" }],
    });
    assert.equal(r.status === "completed" || r.status === "incomplete", true);
  });
}

check("the sampling settings in effect are echoed (the server's defaults when the request names none)", async () => {
  const d = (await get(srv.base, "/props")).body.default_generation_settings.params;
  const a = await post(srv.base, "/v1/responses", { input: "Hi", max_output_tokens: 4 });
  assert.equal(a.status, 200);
  assert.ok(Math.abs(a.body.temperature - d.temperature) < 1e-6, `${a.body.temperature} vs ${d.temperature}`);
  const b = await post(srv.base, "/v1/responses", { input: "Hi", max_output_tokens: 4, temperature: 0.5 });
  assert.equal(b.body.temperature, 0.5);
});

check("max_output_tokens cut: status incomplete with the reason", async () => {
  const r = await client.responses.create({ model: "m", input: "Tell me a long story.", max_output_tokens: 3, reasoning: { effort: "none" } });
  assert.equal(r.status, "incomplete");
  assert.equal(r.incomplete_details.reason, "max_output_tokens");
  assert.equal(r.usage.output_tokens, 3);
});

check("errors: OpenAI's shape and status, previous_response_id refused", async () => {
  const cases = [
    [{ model: "m", input: "x", previous_response_id: "resp_123" }, 400, "previous_response_id"],
    [{ model: "m" }, 400, "input"],
    [{ model: "m", input: 5 }, 400, "input"],
    [{ model: "m", input: [{ type: "image_generation_call" }] }, 400, "input[0].type"],
    [{ model: "m", input: "x", max_output_tokens: 0 }, 400, "max_output_tokens"],
    [{ model: "m", input: "x", tools: [{ type: "web_search" }] }, 400, "tools[0].type"],
    [{ model: "m", input: "x", reasoning: { effort: "extreme" } }, 400, "reasoning.effort"],
  ];
  for (const [body, status, param] of cases) {
    const r = await post(srv.base, "/v1/responses", body);
    assert.equal(r.status, status, r.text);
    assert.equal(typeof r.body.error.message, "string");
    assert.equal(r.body.error.type, "invalid_request_error");
    assert.equal(r.body.error.param, param, r.text);
  }
  await assert.rejects(client.responses.create({ model: "m", input: "x", previous_response_id: "resp_1" }), (e) => e.status === 400);
  assert.equal((await get(srv.base, "/health")).status, 200);
});

await run([srv]);
