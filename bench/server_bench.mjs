// Benchmark of `crossword serve` (not a test): throughput with 1, 2, 4 and 8 concurrent streaming
// clients on one server with 4 slots (the extra clients queue), and the prompt-cache saving on a
// multi-turn chat (cold: cache_prompt false, warm: the slot's cache), as docs/server.md reports.
//
//   node bench/server_bench.mjs --crossword BIN [--model M.gguf] [--threads 2] [--slots 4]
//        [--tokens 128] [--runs 3] [--turns 6] [--mode ar]
//
// Method (../shared/clover-facts.md): fixed-length answers (ignore_eos), greedy; one warm-up,
// median of runs. Total tokens/s = all generated tokens / wall time of the round; per request =
// its tokens / its end-to-end time; decode = tokens after the first / time after the first token.
// The load average of the machine is printed with each figure: other processes skew them.
import { spawn } from "node:child_process";
import os from "node:os";

const opt = { threads: "2", slots: "4", tokens: "128", runs: "3", turns: "6", mode: "ar" };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) opt[argv[i].replace(/^--/, "")] = argv[i + 1];
if (!opt.crossword) {
  console.error("usage: node bench/server_bench.mjs --crossword BIN [--model M.gguf] [--threads N] ...");
  process.exit(2);
}

async function startServer(slots = opt.slots) {
  const args = ["serve", "--port", "0", "-np", String(slots), "-t", opt.threads, "--mode", opt.mode, "-c", String(4096 * Number(slots))];
  if (opt.model) args.splice(1, 0, "-m", opt.model);
  const proc = spawn(opt.crossword, args, { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  const port = await new Promise((resolve, reject) => {
    proc.stderr.on("data", (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m && / ready: /.test(log)) resolve(Number(m[1]));
    });
    proc.on("exit", (c) => reject(new Error(`server exited (${c}):\n${log}`)));
  });
  return { proc, base: `http://127.0.0.1:${port}` };
}

// One streamed chat request; returns {tokens, e2e, first, decode_tps, usage, timings}.
async function streamChat(base, body) {
  const t0 = performance.now();
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  let first = null, usage = null, timings = null, buf = "";
  const dec = new TextDecoder();
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let k;
    while ((k = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const j = JSON.parse(ev.slice(6));
      if (first === null && j.choices?.[0]?.delta && (j.choices[0].delta.content || j.choices[0].delta.reasoning_content)) {
        first = performance.now();
      }
      if (j.usage) usage = j.usage;
      if (j.timings) timings = j.timings;
    }
  }
  const end = performance.now();
  const n = usage.completion_tokens;
  return { tokens: n, e2e: (end - t0) / 1e3, decode_tps: first && n > 1 ? (n - 1) / ((end - first) / 1e3) : 0, usage, timings };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const load = () => os.loadavg()[0].toFixed(1);

async function concurrency(base) {
  const tokens = Number(opt.tokens);
  const req = (i, r) => ({
    messages: [{ role: "user", content: `Request ${i} of round ${r}: write about topic number ${i}.` }],
    max_tokens: tokens, ignore_eos: true, cache_prompt: false,
  });
  console.log(`\n## Concurrent clients (${opt.slots} slots, ${tokens}-token answers, mode ${opt.mode}, -t ${opt.threads})`);
  console.log("| clients | total tokens/s | per request tokens/s | decode tokens/s per stream | load avg |");
  console.log("|---|---|---|---|---|");
  await streamChat(base, req(0, -1));  // warm-up
  for (const n of [1, 2, 4, 8]) {
    const total = [], per = [], dec = [];
    for (let r = 0; r < Number(opt.runs); r++) {
      const t0 = performance.now();
      const res = await Promise.all(Array.from({ length: n }, (_, i) => streamChat(base, req(i, r))));
      const wall = (performance.now() - t0) / 1e3;
      total.push(res.reduce((a, x) => a + x.tokens, 0) / wall);
      per.push(median(res.map((x) => x.tokens / x.e2e)));
      dec.push(median(res.map((x) => x.decode_tps)));
    }
    console.log(`| ${n} | ${median(total).toFixed(1)} | ${median(per).toFixed(1)} | ${median(dec).toFixed(1)} | ${load()} |`);
  }
}

async function promptCache(coldBase, warmBase) {
  const turns = Number(opt.turns);
  const questions = ["Tell me about the history of the printing press.", "Who improved it next?", "How did it spread in Europe?",
    "What changed for books?", "And for newspapers?", "Summarize all of that.", "What came after it?", "Thanks, one more detail?"];
  const system = { role: "system", content: "You are a careful historian. " + "Answer in detail, citing dates and places. ".repeat(8) };
  console.log(`\n## Prompt cache: a ${turns}-turn chat, 32-token answers (cold: a server given cache_prompt false; warm: a server with its cache)`);
  console.log("| turn | prompt tokens | cold: evaluated / ms | warm: cached, evaluated / ms | same answer |");
  console.log("|---|---|---|---|---|");
  const messages = [system];
  let sum = { cold_n: 0, cold_ms: 0, warm_n: 0, warm_ms: 0 };
  for (let t = 0; t < turns; t++) {
    messages.push({ role: "user", content: questions[t % questions.length] });
    // Answers end at the model's EOG (ignore_eos defeats the cache: docs/server.md, Limitations).
    const body = { messages, max_tokens: 32, reasoning_format: "none" };
    const cold = await fetch(`${coldBase}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ ...body, cache_prompt: false }) }).then((r) => r.json());
    const warm = await fetch(`${warmBase}/v1/chat/completions`, { method: "POST", body: JSON.stringify(body) }).then((r) => r.json());
    const same = cold.choices[0].message.content === warm.choices[0].message.content;
    console.log(`| ${t + 1} | ${cold.usage.prompt_tokens} | ${cold.timings.prompt_n} / ${cold.timings.prompt_ms.toFixed(1)} | ` +
                `${warm.usage.prompt_tokens_details.cached_tokens}, ${warm.timings.prompt_n} / ${warm.timings.prompt_ms.toFixed(1)} | ${same ? "yes" : "NO"} |`);
    if (t > 0) {
      sum.cold_n += cold.timings.prompt_n; sum.cold_ms += cold.timings.prompt_ms;
      sum.warm_n += warm.timings.prompt_n; sum.warm_ms += warm.timings.prompt_ms;
    }
    messages.push({ role: "assistant", content: warm.choices[0].message.content });
  }
  console.log(`\nturns 2-${turns}: prompt tokens evaluated cold ${sum.cold_n}, warm ${sum.warm_n} ` +
              `(${(100 * (1 - sum.warm_n / sum.cold_n)).toFixed(1)}% saved); prompt time cold ${sum.cold_ms.toFixed(1)} ms, ` +
              `warm ${sum.warm_ms.toFixed(1)} ms (${(100 * (1 - sum.warm_ms / sum.cold_ms)).toFixed(1)}% saved); load avg ${load()}`);
}

const srv = await startServer();
try {
  if (opt.skip !== "concurrency") await concurrency(srv.base);
} finally {
  srv.proc.kill("SIGTERM");
}
const cold = await startServer(1), warm = await startServer(1);
try {
  await promptCache(cold.base, warm.base);
} finally {
  cold.proc.kill("SIGTERM");
  warm.proc.kill("SIGTERM");
}
