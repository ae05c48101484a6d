// Structured output over HTTP: the official client's chat.completions.parse with its zod helper
// (zod@3.25.76 from scripts/setup-oracles) gets a parsed message in every decoding mode, with
// and without thinking, streamed answers parse too; llama-server's json_schema and grammar
// fields; tool calls limited to the declared tools and their parameter schemas; and every bad
// schema or grammar is a 400 that names the problem, after which the server still answers.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { args, check, collectChat, get, post, run, startServer } from "./harness.mjs";

const require = createRequire(path.join(path.resolve(args.oracles), "package.json"));
const { z } = await import(pathToFileURL(require.resolve("zod")).href);
const { zodResponseFormat } = await import(pathToFileURL(require.resolve("openai/helpers/zod")).href);

const srv = await startServer([]);
const client = srv.client();
const ask = [{ role: "user", content: "Write these drone orders as JSON: drone 7 to Church Lane with 2 boxes" }];
const Orders = z.object({
  orders: z.array(z.object({ drone: z.number().int().min(1).max(9), to: z.string().max(40), boxes: z.number().int() })).min(1).max(3),
  urgent: z.boolean(),
});

for (const mode of ["ar", "diffusion", "spec"]) {
  for (const think of [false, true]) {
    check(`chat.completions.parse with a zod schema: ${mode}, thinking ${think ? "on" : "off"}`, async () => {
      const c = await client.chat.completions.parse({
        model: "x", messages: ask, response_format: zodResponseFormat(Orders, "orders"), max_tokens: 300,
        crossword: { mode }, chat_template_kwargs: { enable_thinking: think },
      });
      const m = c.choices[0].message;
      assert.equal(c.choices[0].finish_reason, "stop");
      assert.ok(m.parsed, `no parsed message: ${JSON.stringify(m)}`);
      Orders.parse(m.parsed);  // the helper validated it already; again, to be explicit
      if (think) assert.ok(m.reasoning_content, "the reasoning stays free text before the JSON");
    });
  }
}

check("a streamed answer under a schema is the same JSON, chunk by chunk", async () => {
  const req = { model: "x", messages: ask, response_format: zodResponseFormat(Orders, "orders"), max_tokens: 300,
                chat_template_kwargs: { enable_thinking: false } };
  const whole = await client.chat.completions.create(req);
  const streamed = await collectChat(await client.chat.completions.create({ ...req, stream: true }));
  assert.equal(streamed.content, whole.choices[0].message.content);
  Orders.parse(JSON.parse(streamed.content));
  assert.ok(streamed.chunks > 3);
});

check("json_object mode gives a JSON object", async () => {
  const c = await client.chat.completions.create({
    model: "x", messages: [{ role: "user", content: "What is the capital of France?" }],
    response_format: { type: "json_object" }, max_tokens: 200, chat_template_kwargs: { enable_thinking: false },
  });
  if (c.choices[0].finish_reason === "stop") {
    const v = JSON.parse(c.choices[0].message.content);
    assert.equal(typeof v, "object");
    assert.ok(!Array.isArray(v));
  } else {
    assert.match(c.choices[0].message.content, /^\{/);  // cut by max_tokens: still the start of one
  }
});

check("llama-server's json_schema and grammar fields, chat and completions", async () => {
  const a = await post(srv.base, "/v1/chat/completions", {
    messages: ask, json_schema: { type: "array", items: { enum: ["north", "south"] }, minItems: 2, maxItems: 2 },
    chat_template_kwargs: { enable_thinking: false }, max_tokens: 40,
  });
  assert.equal(a.status, 200, a.text);
  const v = JSON.parse(a.body.choices[0].message.content);
  assert.equal(v.length, 2);
  for (const x of v) assert.ok(["north", "south"].includes(x));
  const b = await post(srv.base, "/v1/completions", {
    prompt: "Is Paris the capital of France? Answer:", grammar: 'root ::= " " ("yes" | "no") "."', max_tokens: 10,
  });
  assert.equal(b.status, 200, b.text);
  assert.match(b.body.choices[0].text, /^ (yes|no)\.$/);
});

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    parameters: {
      type: "object",
      properties: { city: { type: "string", enum: ["Oslo", "Lisbon"] }, days: { type: "integer", minimum: 1, maximum: 3 } },
      required: ["city", "days"],
    },
  },
};
const clock = { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } };

for (const [label, choice] of [["required", "required"], ["named", { type: "function", function: { name: "get_weather" } }], ["auto", "auto"]]) {
  for (const think of [false, true]) {
    check(`tool_choice ${label}, thinking ${think ? "on" : "off"}: calls name declared tools with valid arguments`, async () => {
      const c = await client.chat.completions.create({
        model: "x", messages: [{ role: "user", content: "What is the weather in Paris?" }], tools: [weather, clock],
        tool_choice: choice, max_tokens: 200, chat_template_kwargs: { enable_thinking: think },
      });
      const calls = c.choices[0].message.tool_calls ?? [];
      if (label !== "auto") assert.ok(calls.length >= 1, JSON.stringify(c.choices[0]));
      for (const call of calls) {
        assert.ok(["get_weather", "get_time"].includes(call.function.name), call.function.name);
        const a = JSON.parse(call.function.arguments);
        if (call.function.name === "get_weather") {
          assert.ok(["Oslo", "Lisbon"].includes(a.city), call.function.arguments);  // not "Paris": the enum holds
          assert.ok(Number.isInteger(a.days) && a.days >= 1 && a.days <= 3, call.function.arguments);
        } else {
          assert.deepEqual(a, {});
        }
        if (label === "named") assert.equal(call.function.name, "get_weather");
      }
    });
  }
}

async function expect400(body, param, pattern) {
  const r = await post(srv.base, "/v1/chat/completions", { messages: ask, max_tokens: 8, ...body });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.body.error.param, param, r.text);
  assert.match(r.body.error.message, pattern);
  return r.body.error;
}

check("bad schemas and grammars are a 400 naming the problem, and the server stays healthy", async () => {
  const rf = (schema) => ({ response_format: { type: "json_schema", json_schema: { name: "x", schema } } });
  await expect400(rf({ type: "object", properties: { a: { not: { type: "null" } } } }), "response_format.json_schema.schema", /keyword 'not'/);
  await expect400(rf({ type: "array", uniqueItems: true }), "response_format.json_schema.schema", /uniqueItems/);
  await expect400({ json_schema: { type: "string", format: "ipv6" } }, "json_schema", /format 'ipv6'/);
  await expect400({ json_schema: { type: "integer", minimum: 5, maximum: 3 } }, "json_schema", /admits no string/);
  await expect400({ grammar: 'root ::= "a" x\nx ::= "b" x' }, "grammar", /admits no string/);
  await expect400({ grammar: 'root ::= root "a" | "b"' }, "grammar", /left-recursive/);
  await expect400({ grammar: 'root ::= "a" ("b"' }, "grammar", /line 1, column \d+/);
  await expect400({ grammar: 'root ::= item' }, "grammar", /'item' is used but never defined/);
  await expect400({ grammar: "root ::= \"a\"", json_schema: {} }, "grammar", /at most one/);
  await expect400({ tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { x: { type: "string", pattern: "(?=a)" } } } } }],
                    tool_choice: "required" }, "tools", /lookaround/);
  // 1 MB of schema, and a schema 100,000 levels deep: refused before anything recursive runs.
  await expect400({ json_schema: { enum: ["a".repeat(1 << 20)] } }, "json_schema", /larger than/);
  const deep = '{"items":'.repeat(100000) + "{}" + "}".repeat(100000);
  const r = await post(srv.base, "/v1/chat/completions", `{"messages": ${JSON.stringify(ask)}, "json_schema": ${deep}}`);
  assert.equal(r.status, 400, r.text.slice(0, 300));
  assert.match(r.body.error.message, /nested deeper than 256 levels/);  // the body gate, first
  // Within the body gate, the schema's own limit: 64 levels.
  const deep100 = '{"items":'.repeat(100) + "{}" + "}".repeat(100);
  const r100 = await post(srv.base, "/v1/chat/completions", `{"messages": ${JSON.stringify(ask)}, "json_schema": ${deep100}}`);
  assert.equal(r100.status, 400, r100.text.slice(0, 300));
  assert.match(r100.body.error.message, /deeper than 64/);
  const h = await get(srv.base, "/health");
  assert.equal(h.status, 200);
  const ok = await post(srv.base, "/v1/chat/completions", { messages: ask, max_tokens: 4 });
  assert.equal(ok.status, 200);
});

await run([srv]);
