// Test harness for `crossword serve`: starts real server processes on free ports, gives an
// official OpenAI client (openai@6.49.0 from scripts/setup-oracles) pointed at them, runs named
// checks in order and exits 0 (all passed), 1 (a check failed) or 77 (skipped, see SKIP_RETURN_CODE).
//
//   node tests/server/<file>.mjs --crossword BIN --model M.gguf --oracles BUILD/oracles
import { spawn } from "node:child_process";
import path from "node:path";
import { pathToFileURL } from "node:url";

export const args = (() => {
  const a = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) a[argv[i].replace(/^--/, "")] = argv[i + 1];
  for (const k of ["crossword", "model", "oracles"]) {
    if (!a[k]) {
      console.error(`usage: node ${path.basename(process.argv[1])} --crossword BIN --model M.gguf --oracles DIR`);
      process.exit(2);
    }
  }
  return a;
})();

const { default: OpenAI } = await import(
  pathToFileURL(path.join(args.oracles, "node_modules", "openai", "index.mjs")).href
);
export { OpenAI };

/// A running server: {port, base, client(opts), log(), stop()}.
export async function startServer(extra = [], { env = {}, model = args.model } = {}) {
  const argv = ["serve", "--port", "0", "-t", "1", "--log-level", "info", ...extra];
  if (model) argv.splice(1, 0, "-m", model);
  const proc = spawn(args.crossword, argv, { env: { ...process.env, ...env }, stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  let exited = null;
  proc.on("exit", (code, signal) => (exited = { code, signal }));
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not become ready in 120 s:\n${log}`)), 120000);
    let port = 0;
    proc.stderr.on("data", (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) port = Number(m[1]);
      if (port && / ready: /.test(log)) {
        clearTimeout(timer);
        resolve(port);
      }
    });
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code}) before it was ready:\n${log}`));
    });
  });
  const base = `http://127.0.0.1:${port}`;
  return {
    port,
    base,
    proc,
    log: () => log,
    exited: () => exited,
    client: (opts = {}) =>
      new OpenAI({ baseURL: `${base}/v1`, apiKey: "sk-local", maxRetries: 0, timeout: 120000, ...opts }),
    async stop() {
      if (exited) return exited;
      proc.kill("SIGTERM");
      await new Promise((r) => (exited ? r() : proc.on("exit", r)));
      return exited;
    },
  };
}

/// POST JSON (or a raw string/Buffer) and return {status, body (parsed if JSON), text}.
export async function post(base, route, body, headers = {}) {
  const raw = typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  const r = await fetch(base + route, { method: "POST", body: raw, headers: { "content-type": "application/json", ...headers } });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, body: json, text };
}

export async function get(base, route, headers = {}) {
  const r = await fetch(base + route, { headers });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, body: json, text };
}

/// Raw SSE of a streamed request: the list of `data:` payloads (strings), in order.
export async function sse(base, route, body) {
  const r = await fetch(base + route, { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" } });
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  const text = await r.text();
  return text
    .split("\n\n")
    .filter((e) => e.trim())
    .map((e) => {
      if (!e.startsWith("data: ")) throw new Error(`not an SSE data event: ${JSON.stringify(e)}`);
      return e.slice(6);
    });
}

/// Metrics as a map name -> number.
export async function metrics(base) {
  const { text } = await get(base, "/metrics");
  const m = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const [k, v] = line.split(" ");
    m[k.replace(/^crossword_/, "")] = Number(v);
  }
  return m;
}

/// Collects a streamed chat answer from the official client into one message.
export async function collectChat(stream) {
  const out = { content: "", reasoning: "", calls: [], finish: null, usage: null, chunks: 0, usageChunks: 0, logprobs: [] };
  for await (const c of stream) {
    out.chunks++;
    if (c.usage) {
      out.usage = c.usage;
      out.usageChunks++;
      if (c.choices.length !== 0) throw new Error("the usage chunk must have choices: []");
    }
    for (const ch of c.choices) {
      const d = ch.delta ?? {};
      if (d.content) out.content += d.content;
      if (d.reasoning_content) out.reasoning += d.reasoning_content;
      for (const t of d.tool_calls ?? []) {
        if (!out.calls[t.index]) out.calls[t.index] = { id: "", name: "", arguments: "" };
        const call = out.calls[t.index];
        if (t.id) call.id = t.id;
        if (t.function?.name) call.name = t.function.name;
        if (t.function?.arguments) call.arguments += t.function.arguments;
      }
      for (const e of ch.logprobs?.content ?? []) out.logprobs.push(e);
      if (ch.finish_reason) out.finish = ch.finish_reason;
    }
  }
  return out;
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

const checks = [];
/// Registers a named check (async function).
export function check(name, fn) {
  checks.push({ name, fn });
}

/// Runs the registered checks in order; `servers` are stopped at the end (their logs printed on
/// failure). Exits the process.
export async function run(servers = []) {
  let failed = 0;
  for (const { name, fn } of checks) {
    const t0 = Date.now();
    try {
      await fn();
      console.log(`ok   ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name}: ${e?.stack ?? e}`);
    }
  }
  for (const s of servers) {
    const list = typeof s === "function" ? s() : [s];
    for (const srv of list) {
      if (!srv) continue;
      const ex = await srv.stop();
      if (failed) console.log(`--- server log (port ${srv.port}) ---\n${srv.log()}`);
      if (ex && ex.signal && ex.signal !== "SIGTERM") {
        console.log(`FAIL server on port ${srv.port} died with ${ex.signal}`);
        failed++;
      } else if (ex && ex.code !== 0 && ex.code !== null) {
        console.log(`FAIL server on port ${srv.port} exited with code ${ex.code} after SIGTERM`);
        console.log(srv.log());
        failed++;
      }
    }
  }
  console.log(failed ? `${failed} check(s) failed` : `all ${checks.length} checks passed`);
  process.exit(failed ? 1 : 0);
}
