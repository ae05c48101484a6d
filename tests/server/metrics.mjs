// The metrics an inference router reads (Gateway API Inference Extension model server protocol,
// llm-d router): three servers on 127.0.0.1, load that moves the gauges, every scrape through
// `promtool check metrics`, the histograms against the requests sent, the vLLM names of
// --metrics-compat vllm against crossword's, the llm-d router values file's metric specs against a
// live scrape, and /health while the model loads.
//   node tests/server/metrics.mjs --crossword BIN --model M --oracles DIR --values deploy/k8s/llm-d-router-values.yaml
import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { args, check, get, post, run, sleep, startServer } from "./harness.mjs";

const PROMTOOL = args.promtool ?? "promtool";
// A: two slots (gauges, histograms); B: one slot with the vLLM names; C: one slot, 2048 tokens of
// context (the KV fraction). Together: the three replicas a picker would score.
const A = await startServer(["-np", "2"]);
const B = await startServer(["-np", "1", "--metrics-compat", "vllm"]);
const C = await startServer(["-np", "1", "-c", "2048"]);

/// Prometheus text -> Map(family name -> {type, samples: [{name, labels, value}]}).
function parse(text) {
  const fams = new Map();
  let cur = null;
  for (const line of text.split("\n")) {
    if (!line) continue;
    let m = line.match(/^# TYPE (\S+) (\S+)$/);
    if (m) {
      cur = { type: m[2], samples: [] };
      fams.set(m[1], cur);
      continue;
    }
    if (line.startsWith("#")) continue;
    m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/);
    assert.ok(m, `not a sample line: ${line}`);
    const labels = {};
    for (const l of (m[2] ?? "").slice(1, -1).matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    const fam = fams.get(m[1].replace(/_(bucket|sum|count)$/, "")) ?? fams.get(m[1]);
    assert.ok(fam, `sample ${m[1]} without a TYPE line`);
    fam.samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return fams;
}
const value = (fams, name, sample = name) => {
  const f = fams.get(name);
  assert.ok(f, `no metric ${name}`);
  const s = f.samples.find((x) => x.name === sample);
  assert.ok(s, `no sample ${sample}`);
  return s.value;
};

// Every scrape text any check took, per server, for promtool at the end.
const scrapes = new Map([[A, []], [B, []], [C, []]]);
async function scrape(srv) {
  const t0 = performance.now();
  const { status, text } = await get(srv.base, "/metrics");
  const ms = performance.now() - t0;
  assert.equal(status, 200);
  const list = scrapes.get(srv);
  if (list && list.length < 60) list.push(text);
  return { fams: parse(text), text, ms };
}

/// Scrapes `srv` every `every` ms until `until` resolves; returns the parsed samples.
async function watch(srv, until, every = 5) {
  const seen = [];
  seen.times = [];  // ms, when each scrape came back
  let done = false;
  until.then(() => (done = true), () => (done = true));
  while (!done) {
    seen.push((await scrape(srv)).fams);
    seen.times.push(performance.now());
    await sleep(every);
  }
  seen.push((await scrape(srv)).fams);
  seen.times.push(performance.now());
  return seen;
}

async function stream(srv, body) {
  const r = await fetch(srv.base + "/v1/chat/completions", {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  assert.equal(r.status, 200);
  const text = await r.text();
  const events = text.split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice(6));
  assert.equal(events.at(-1), "[DONE]");
  return JSON.parse(events.at(-2)).usage;
}

const q = (i) => [{ role: "user", content: `Count to ${i + 3} in words, please.` }];
const sent = { A: [] };  // usage of every generation request sent to A

check("more requests than slots: the waiting gauge rises, running = busy slots <= slots, both fall back to 0", async () => {
  const load = Promise.all(
    Array.from({ length: 8 }, (_, i) => stream(A, { messages: q(i), max_tokens: 800, ignore_eos: true, reasoning_format: "none" })),
  );
  const seen = await watch(A, load);
  for (const u of await load) sent.A.push(u);
  const waiting = seen.map((f) => value(f, "crossword_queue_length"));
  const running = seen.map((f) => value(f, "crossword_slots_busy"));
  assert.ok(Math.max(...waiting) >= 2, `the waiting gauge never showed the queue (max ${Math.max(...waiting)} over ${seen.length} scrapes)`);
  assert.ok(Math.max(...running) === 2, `running never reached the 2 slots (max ${Math.max(...running)})`);
  seen.forEach((f, i) => {
    assert.ok(running[i] <= 2, "running above the slot count");
    // Nobody waits while a slot is free, except in the instant between a request finishing and the
    // next one's admission (before the next pass): scrapes can land there, so a free slot with a
    // queue is allowed for a moment, but not for kFreeSlotMs. (Not a count of scrapes: under a
    // sanitizer, beside another test on 2 cores, one pass outlasted two 5 ms scrape intervals.)
    const kFreeSlotMs = 500;
    if (waiting[i] > 0 && running[i] < 2) {
      let j = i;
      while (j + 1 < seen.length && waiting[j + 1] > 0 && running[j + 1] < 2) ++j;
      assert.ok(seen.times[j] - seen.times[i] < kFreeSlotMs,
        `scrapes ${i}-${j}: ${waiting[i]} waiting with a slot free for ${(seen.times[j] - seen.times[i]).toFixed(0)} ms`);
    }
    assert.equal(value(f, "crossword_slot_utilization"), running[i] / 2);
  });
  const end = seen.at(-1);
  assert.equal(value(end, "crossword_queue_length"), 0);
  assert.equal(value(end, "crossword_slots_busy"), 0);
  assert.equal(value(end, "crossword_kv_cache_usage_ratio"), 0, "idle: no context held by running requests");
  console.log(`     ${seen.length} scrapes during the load: waiting max ${Math.max(...waiting)}, running max ${Math.max(...running)}`);
});

check("the KV fraction stays in [0, 1] and grows with prompt length", async () => {
  const nCtx = 2048;
  const peak = async (words) => {
    const body = { messages: [{ role: "user", content: `${"lorem ipsum ".repeat(words)}Summarise.` }], max_tokens: 400, ignore_eos: true, reasoning_format: "none" };
    const req = stream(C, body);
    const seen = await watch(C, req, 2);
    const usage = await req;
    const fr = seen.map((f) => value(f, "crossword_kv_cache_usage_ratio"));
    for (const x of fr) assert.ok(x >= 0 && x <= 1, `KV fraction ${x} outside [0, 1]`);
    return { max: Math.max(...fr), usage };
  };
  const short = await peak(5);
  const long = await peak(200);
  assert.ok(long.usage.prompt_tokens > 4 * short.usage.prompt_tokens);
  // While running, the slot holds the prompt and part of the answer: at least the prompt.
  assert.ok(short.max > 0, "the short request was never seen running");
  assert.ok(long.max >= long.usage.prompt_tokens / nCtx, `long: ${long.max} < ${long.usage.prompt_tokens}/${nCtx}`);
  assert.ok(long.max <= (long.usage.prompt_tokens + 400) / nCtx + 1e-9);
  assert.ok(long.max > short.max, `KV fraction ${long.max} (prompt ${long.usage.prompt_tokens}) not above ${short.max} (prompt ${short.usage.prompt_tokens})`);
  console.log(`     prompt ${short.usage.prompt_tokens} -> peak ${short.max.toFixed(3)}; prompt ${long.usage.prompt_tokens} -> peak ${long.max.toFixed(3)}`);
});

check("the histograms count every request (TTFT, e2e, queue; per token: requests of 2+ tokens; inter-token = tokens - 1 in AR)", async () => {
  // One more non-streamed request, and one that stops at the model's end of turn.
  for (const body of [{ max_tokens: 5, ignore_eos: true }, { max_tokens: 64 }]) {
    const r = await post(A.base, "/v1/chat/completions", { messages: q(9), reasoning_format: "none", ...body });
    assert.equal(r.status, 200);
    sent.A.push(r.body.usage);
  }
  const { fams } = await scrape(A);
  const n = sent.A.length;
  const tokens = sent.A.reduce((s, u) => s + u.completion_tokens, 0);
  const multi = sent.A.filter((u) => u.completion_tokens > 1).length;
  const expect = {
    crossword_time_to_first_token_seconds: n,
    crossword_e2e_request_latency_seconds: n,
    crossword_request_queue_time_seconds: n,
    crossword_request_tokens_per_pass: multi,  // requests with a pass after prefill
    crossword_time_per_output_token_seconds: multi,
    crossword_inter_token_latency_seconds: tokens - n,  // AR: one token per pass per request
  };
  for (const [name, count] of Object.entries(expect)) {
    const f = fams.get(name);
    assert.equal(f.type, "histogram", name);
    assert.equal(value(fams, name, `${name}_count`), count, `${name}_count`);
    const buckets = f.samples.filter((s) => s.name === `${name}_bucket`);
    for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i].value >= buckets[i - 1].value, `${name}: buckets not cumulative`);
    assert.equal(buckets.at(-1).labels.le, "+Inf");
    assert.equal(buckets.at(-1).value, count);
    assert.ok(value(fams, name, `${name}_sum`) > 0, `${name}_sum`);
  }
  // In AR a request makes about one token per pass after prefill (n tokens / (n - 1) passes; with
  // an end-of-generation token, n / n).
  const tpp = fams.get("crossword_request_tokens_per_pass").samples.filter((s) => s.name.endsWith("_bucket"));
  assert.equal(tpp.find((s) => s.labels.le === "1.5").value, multi);
  assert.equal(value(fams, "crossword_generated_tokens_total"), tokens);
  assert.equal(value(fams, "crossword_requests_finished_total"), n);
  assert.equal(value(fams, "crossword_prefix_cache_queries_total"), value(fams, "crossword_prompt_tokens_total"));
  assert.equal(value(fams, "crossword_prefix_cache_hits_total"), value(fams, "crossword_prompt_tokens_cached_total"));
  const info = fams.get("crossword_cache_config_info").samples[0];
  assert.deepEqual(Object.keys(info.labels).sort(), ["block_size", "num_blocks"]);
  assert.equal(info.value, 1);
});

check("--metrics-compat vllm: the vLLM names carry the same values as crossword's", async () => {
  // The "during" scrapes repeat until one finds a request running (the load is long, but under
  // a sanitizer neither request may have reached a slot 20 ms in, and in a fast build the short
  // one is gone): every scrape's pairs must agree, and at least one must see a busy slot.
  let loadDone = false;
  const load = stream(B, { messages: q(1), max_tokens: 1500, ignore_eos: true, reasoning_format: "none" }).finally(() => { loadDone = true; });
  const other = post(B.base, "/v1/chat/completions", { messages: q(2), max_tokens: 20, ignore_eos: true, reasoning_format: "none" });
  const pairs = [
    ["vllm:num_requests_waiting", "crossword_queue_length"], ["vllm:num_requests_running", "crossword_slots_busy"],
    ["vllm:kv_cache_usage_perc", "crossword_kv_cache_usage_ratio"], ["vllm:prompt_tokens_total", "crossword_prompt_tokens_total"],
    ["vllm:generation_tokens_total", "crossword_generated_tokens_total"], ["vllm:prefix_cache_hits_total", "crossword_prefix_cache_hits_total"],
    ["vllm:prefix_cache_queries_total", "crossword_prefix_cache_queries_total"],
  ];
  let busy = false;
  const during = [];
  for (let i = 0; i < 200 && !busy && !loadDone; i++) {
    await sleep(5);
    const { fams } = await scrape(B);
    // Both slots may be busy (2 requests, 2 slots), so any running request counts.
    if (value(fams, "crossword_slots_busy") >= 1) busy = true;
    during.push(fams);
  }
  for (const when of [...during.map(() => "during"), "after"]) {
    if (when === "after") await Promise.all([load, other]);
    const fams = when === "during" ? during.shift() : (await scrape(B)).fams;
    for (const [v, c] of pairs) {
      const s = fams.get(v).samples[0];
      assert.equal(s.labels.model_name, "clover-tiny", v);
      assert.equal(s.value, value(fams, c), `${v} != ${c} (${when})`);
      assert.equal(fams.get(v).type, fams.get(c).type, `${v}: type`);
    }
    for (const h of ["time_to_first_token_seconds", "inter_token_latency_seconds", "time_per_output_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds"]) {
      assert.equal(value(fams, `vllm:${h}`, `vllm:${h}_count`), value(fams, `crossword_${h}`, `crossword_${h}_count`), h);
    }
    const info = fams.get("vllm:cache_config_info").samples[0].labels;
    const ours = fams.get("crossword_cache_config_info").samples[0].labels;
    assert.equal(info.block_size, ours.block_size);
    assert.equal(info.num_gpu_blocks, ours.num_blocks);
  }
  assert.ok(busy, "the scrape during the load saw no running request");
  const { fams } = await scrape(B);
  const ok = fams.get("vllm:request_success_total").samples;
  assert.equal(ok.find((s) => s.labels.finished_reason === "length").value, 2);
});

check("the llm-d router values file: every metric it names is in a live scrape with the type the picker reads", async () => {
  const values = JSON.parse(execFileSync("/usr/bin/python3", ["-c",
    "import json,sys,yaml; v=yaml.safe_load(open(sys.argv[1])); e=v['router']['epp']; print(json.dumps(yaml.safe_load(e['pluginsCustomConfig'][e['pluginsConfigFile']])))",
    args.values]).toString());
  const ext = values.plugins.find((p) => p.type === "core-metrics-extractor").parameters;
  const engine = ext.engineConfigs.find((c) => c.name === ext.defaultEngine);
  // The EPP's built-in vLLM mapping (llm-d-router core-metrics-extractor defaults) against B.
  const vllm = { queuedRequestsSpec: "vllm:num_requests_waiting", runningRequestsSpec: "vllm:num_requests_running", kvUsageSpec: "vllm:kv_cache_usage_perc", cacheInfoSpec: "vllm:cache_config_info" };
  for (const [srv, spec, blockLabel, blocksLabel] of [
    [A, engine, engine.cacheBlockSizeLabelName, engine.cacheNumBlocksLabelName],
    [B, vllm, "block_size", "num_gpu_blocks"],
  ]) {
    const { fams } = await scrape(srv);
    for (const key of ["queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec", "cacheInfoSpec"]) {
      const m = spec[key].match(/^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?$/);
      assert.ok(m, `${key}: ${spec[key]}`);
      const f = fams.get(m[1]);
      assert.ok(f, `${key} names ${m[1]}, which the scrape lacks`);
      assert.equal(f.type, "gauge", `${m[1]} must be a gauge`);
      const s = f.samples[0];
      if (key === "kvUsageSpec") assert.ok(s.value >= 0 && s.value <= 1);
      if (key === "cacheInfoSpec") {
        assert.ok(Number.isInteger(Number(s.labels[blockLabel])) && Number(s.labels[blockLabel]) > 0, `${blockLabel}`);
        assert.ok(Number.isInteger(Number(s.labels[blocksLabel])) && Number(s.labels[blocksLabel]) > 0, `${blocksLabel}`);
      }
    }
  }
});

check("a picker's view of three replicas: the loaded one shows its queue and KV use, the idle ones zeros", async () => {
  const load = Promise.all(Array.from({ length: 4 }, (_, i) => stream(A, { messages: q(i), max_tokens: 900, ignore_eos: true, reasoning_format: "none" })));
  let best = null;
  // Bounded by time, not by a count of polls: under ASan each scrape is slower.
  for (const until = Date.now() + 30000; !best && Date.now() < until; ) {
    const view = await Promise.all([A, B, C].map(async (s) => (await scrape(s)).fams));
    // The picker's moment: A has a queue and its running slots hold prompt tokens. Right after
    // admission a slot may not have committed its prompt yet (slow under ASan), so a queue alone
    // can show beside a KV fraction of 0.
    const w = view.map((f) => value(f, "crossword_queue_length"));
    const kv = view.map((f) => value(f, "crossword_kv_cache_usage_ratio"));
    if (w[0] > 0 && kv[0] > 0) best = view;
    await sleep(2);
  }
  for (const u of await load) sent.A.push(u);
  assert.ok(best, "never saw A's queue beside its KV use");
  const [a, b, c] = best.map((f) => [value(f, "crossword_queue_length"), value(f, "crossword_kv_cache_usage_ratio")]);
  assert.ok(a[0] > b[0] && a[0] > c[0] && a[1] > b[1] && a[1] > c[1], `A ${a} B ${b} C ${c}`);
});

check("a scrape goes out uncompressed even to a client that accepts br or gzip (brotli cost 20 ms/scrape)", async () => {
  for (const enc of ["br", "gzip", "gzip, deflate, br"]) {
    const r = await fetch(`${A.base}/metrics`, { headers: { "accept-encoding": enc } });
    assert.equal(r.headers.get("content-encoding"), null, enc);
    assert.match(await r.text(), /^crossword_queue_length \d+$/m);
  }
});

check("/health: 503 while the model loads (and generation refused), 200 when ready", async () => {
  // A model path that blocks in open(2): a FIFO nobody writes to yet keeps the server loading.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cw-fifo-"));
  const fifo = path.join(dir, "model.gguf");
  execFileSync("mkfifo", [fifo]);
  const proc = spawn(args.crossword, ["serve", "--port", "0", "-m", fifo], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  const port = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no listening line:\n${log}`)), 30000);
    proc.stderr.on("data", (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) {
        clearTimeout(t);
        resolve(Number(m[1]));
      }
    });
  });
  const base = `http://127.0.0.1:${port}`;
  const h = await get(base, "/health");
  assert.equal(h.status, 503);
  assert.equal(h.body.status, "loading");
  assert.equal((await post(base, "/v1/chat/completions", { messages: q(0) })).status, 503);
  const m = parse((await get(base, "/metrics")).text);
  assert.equal(value(m, "crossword_ready"), 0);
  // Release the open: the FIFO is no regular file, so loading fails and the server exits.
  const exited = new Promise((r) => proc.on("exit", (code) => r(code)));
  fs.writeFileSync(fifo, "");
  assert.notEqual(await exited, 0);
  assert.match(log, /not a regular file/);
  fs.rmSync(dir, { recursive: true });
  assert.equal((await get(A.base, "/health")).status, 200);
});

check("promtool check metrics accepts every scrape (compat: only its naming lint on the vLLM names)", async () => {
  let n = 0;
  for (const [srv, texts] of scrapes) {
    const unique = [...new Set(texts)];
    for (const text of unique.slice(0, 25)) {
      const r = spawnSync(PROMTOOL, ["check", "metrics"], { input: text });
      const findings = (r.stdout.toString() + r.stderr.toString()).split("\n").filter((l) => l.trim());
      const other = findings.filter((l) => !/^vllm:\w+ metric names should not contain ':'$/.test(l));
      assert.deepEqual(other, [], `promtool on port ${srv.port}:\n${findings.join("\n")}`);
      if (srv !== B) assert.equal(r.status, 0, `promtool exit ${r.status} on port ${srv.port}`);
      n++;
    }
  }
  assert.ok(n >= 10, `only ${n} scrapes checked`);
  console.log(`     ${n} distinct scrapes checked`);
});

await run([A, B, C]);
