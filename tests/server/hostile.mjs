// Hostile request bodies (issue 24): JSON nested 1,000 to 200,000 deep in each field a recursive
// walk used to reach (tools[].function.parameters, an assistant tool call's arguments as an object
// and as a JSON string, chat_template_kwargs) gets a 400 naming the limit, and the server keeps
// answering; a value just inside the limit still renders and generates.
import assert from "node:assert/strict";
import { check, get, post, run, startServer } from "./harness.mjs";

const srv = await startServer(["-c", "512"]);
const user = '{"role":"user","content":"hello"}';

// Nested JSON text built as a string (JSON.stringify itself would recurse on these).
const deepArray = (n) => "[".repeat(n) + "]".repeat(n);
const deepObject = (n) => '{"a":'.repeat(n) + "{}" + "}".repeat(n);

// The four fields, each given a nested value as JSON text.
const bodies = {
  "tools[].function.parameters": (v) =>
    `{"messages":[${user}],"max_tokens":2,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":${v}}}}}]}`,
  "tool_calls[].function.arguments (object)": (v) =>
    `{"messages":[${user},{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":{"x":${v}}}}]},{"role":"tool","tool_call_id":"call_1","content":"ok"}],"max_tokens":2}`,
  "tool_calls[].function.arguments (JSON string)": (v) =>
    `{"messages":[${user},{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":${JSON.stringify(`{"x":${v}}`)}}}]},{"role":"tool","tool_call_id":"call_1","content":"ok"}],"max_tokens":2}`,
  chat_template_kwargs: (v) => `{"messages":[${user}],"max_tokens":2,"chat_template_kwargs":{"x":${v}}}`,
};

for (const [field, body] of Object.entries(bodies)) {
  check(`${field}: nesting 1,000 to 200,000 deep is a 400 and the server keeps answering`, async () => {
    for (const depth of [1000, 40000, 100000, 200000]) {
      for (const v of [deepArray(depth), deepObject(depth)]) {
        const r = await post(srv.base, "/v1/chat/completions", body(v));
        assert.equal(r.status, 400, `${field} depth ${depth}: ${r.status} ${r.text.slice(0, 200)}`);
        assert.equal(r.body.error.type, "invalid_request_error");
        assert.match(r.body.error.message, /nested deeper than 256 levels/, r.body.error.message);
        assert.equal((await get(srv.base, "/health")).status, 200, `alive after ${field} depth ${depth}`);
      }
    }
    assert.equal(srv.exited(), null);
  });
}

check("the gate covers every JSON route (tokenize, completions)", async () => {
  for (const route of ["/tokenize", "/v1/completions", "/detokenize"]) {
    const r = await post(srv.base, route, `{"content":${deepArray(100000)},"prompt":"x"}`);
    assert.equal(r.status, 400, `${route}: ${r.text.slice(0, 200)}`);
    assert.match(r.body.error.message, /nested deeper than 256 levels/);
  }
  const many = `{"prompt":[${"1,".repeat(1100000)}1],"max_tokens":1}`;
  const r = await post(srv.base, "/v1/completions", many);
  assert.equal(r.status, 400, r.text.slice(0, 200));
  assert.match(r.body.error.message, /more than 1000000 array elements/);
});

check("values nested just inside the limit render and generate", async () => {
  // Tool-call arguments up to the schema-sized limit (64 levels): the template's tojson walks them.
  const r = await post(srv.base, "/v1/chat/completions", bodies["tool_calls[].function.arguments (object)"](deepArray(60)));
  assert.equal(r.status, 200, r.text.slice(0, 300));
  assert.equal(r.body.choices.length, 1);
  // chat_template_kwargs 253 levels deep in all (the gate allows 256): copied, merged, rendered.
  const k = await post(srv.base, "/v1/chat/completions", bodies.chat_template_kwargs(deepObject(250)));
  assert.equal(k.status, 200, k.text.slice(0, 300));
});

check("the server still generates after all of the above", async () => {
  const r = await post(srv.base, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 3, ignore_eos: true });
  assert.equal(r.status, 200);
  assert.equal(r.body.usage.completion_tokens, 3);
  assert.equal(srv.exited(), null);
});

await run([srv]);
