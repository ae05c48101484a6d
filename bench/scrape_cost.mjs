// What a router's /metrics polling costs `crossword serve` (not a test): server throughput under
// load with and without a scraper polling /metrics every 50 ms (the llm-d router's default
// --refresh-metrics-interval), and the scrape latency the scraper sees, idle and under load.
//
//   node bench/scrape_cost.mjs --crossword BIN [--model M.gguf] [--threads 2] [--slots 4]
//        [--clients 8] [--tokens 256] [--rounds 5] [--interval 50] [--compat vllm] [--encoding gzip]
// --encoding: the scraper's Accept-Encoding (Go's HTTP client, so the llm-d router, sends gzip).
//
// Rounds alternate without / with the scraper (one warm-up round first), so machine load drifts
// hit both alike; medians are reported with the load average. Also the server's own CPU time
// (/proc/PID/task/*/schedstat) idle, with and without the scraper: CPU time per scrape, a figure
// other processes on the machine do not skew the way they skew wall-clock throughput.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";

const opt = { threads: "2", slots: "4", clients: "8", tokens: "256", rounds: "5", interval: "50", compat: "none", encoding: "gzip" };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) opt[argv[i].replace(/^--/, "")] = argv[i + 1];
if (!opt.crossword) {
  console.error("usage: node bench/scrape_cost.mjs --crossword BIN [--model M.gguf] [--threads N] ...");
  process.exit(2);
}

const args = ["serve", "--port", "0", "-np", opt.slots, "-t", opt.threads];
if (opt.compat !== "none") args.push("--metrics-compat", opt.compat);
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
const base = `http://127.0.0.1:${port}`;

async function request(i) {
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({
      messages: [{ role: "user", content: `Tell me about the number ${i}.` }],
      max_tokens: Number(opt.tokens), ignore_eos: true, reasoning_format: "none",
    }),
  });
  const j = await r.json();
  return j.usage.completion_tokens;
}

async function scrapeOnce() {
  const t0 = performance.now();
  const r = await fetch(`${base}/metrics`, { headers: { "accept-encoding": opt.encoding } });
  const text = await r.text();
  return { ms: performance.now() - t0, bytes: text.length };
}

/// One round of `clients` concurrent requests; with `scrape`, a scraper polls every interval ms.
async function round(scrape) {
  const lat = [];
  let stop = false;
  const scraper = (async () => {
    while (scrape && !stop) {
      const t0 = performance.now();
      lat.push((await scrapeOnce()).ms);
      const wait = Number(opt.interval) - (performance.now() - t0);
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
  })();
  const t0 = performance.now();
  const tokens = (await Promise.all(Array.from({ length: Number(opt.clients) }, (_, i) => request(i)))).reduce((a, b) => a + b, 0);
  const s = (performance.now() - t0) / 1000;
  stop = true;
  await scraper;
  return { tps: tokens / s, lat };
}

/// CPU time of the server process so far, in ms (all threads, /proc/PID/task/*/schedstat, ns).
function serverCpuMs() {
  let ns = 0;
  for (const t of fs.readdirSync(`/proc/${proc.pid}/task`)) {
    try {
      ns += Number(fs.readFileSync(`/proc/${proc.pid}/task/${t}/schedstat`, "utf8").split(" ")[0]);
    } catch {}  // a thread that just ended
  }
  return ns / 1e6;
}

/// Server CPU ms per second over `seconds` idle, with or without a scraper every interval ms.
async function idleCpu(seconds, scrape) {
  const c0 = serverCpuMs();
  const t0 = performance.now();
  let n = 0;
  while (performance.now() - t0 < seconds * 1000) {
    const t1 = performance.now();
    if (scrape) {
      await scrapeOnce();
      n++;
    }
    const wait = Number(opt.interval) - (performance.now() - t1);
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
  return { cpuMs: serverCpuMs() - c0, n, s: (performance.now() - t0) / 1000 };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];

const idle = [];
let bytes = 0;
for (let i = 0; i < 200; i++) {
  const s = await scrapeOnce();
  idle.push(s.ms);
  bytes = s.bytes;
}
// Idle server CPU with and without the scraper (CPU time: robust to other processes' load).
const cpuWithout = [], cpuWith = [];
for (let i = 0; i < 3; i++) {
  cpuWithout.push(await idleCpu(5, false));
  cpuWith.push(await idleCpu(5, true));
}
await round(false);  // warm-up
const without = [], withS = [], loadLat = [];
for (let i = 0; i < Number(opt.rounds); i++) {
  without.push((await round(false)).tps);
  const w = await round(true);
  withS.push(w.tps);
  loadLat.push(...w.lat);
}
const [l1] = os.loadavg();
console.log(`server: -np ${opt.slots} -t ${opt.threads} --metrics-compat ${opt.compat}; scraper Accept-Encoding ${opt.encoding}; ${opt.clients} clients x ${opt.tokens} tokens; ${opt.rounds} rounds each; load average ${l1.toFixed(2)}`);
console.log(`scrape size ${bytes} bytes; idle scrape latency median ${median(idle).toFixed(2)} ms, p99 ${pct(idle, 0.99).toFixed(2)} ms (200 scrapes)`);
console.log(`under load, every ${opt.interval} ms: median ${median(loadLat).toFixed(2)} ms, p99 ${pct(loadLat, 0.99).toFixed(2)} ms, max ${Math.max(...loadLat).toFixed(2)} ms (${loadLat.length} scrapes)`);
const perScrape = cpuWith.map((w, i) => (w.cpuMs - cpuWithout[i].cpuMs * (w.s / cpuWithout[i].s)) / w.n);
console.log(`idle server CPU: ${median(cpuWithout.map((x) => x.cpuMs / x.s)).toFixed(2)} ms/s without, ${median(cpuWith.map((x) => x.cpuMs / x.s)).toFixed(2)} ms/s with the scraper; ` +
  `${median(perScrape).toFixed(3)} ms of server CPU per scrape (3 x 5 s each, median)`);
console.log(`throughput without scraper: median ${median(without).toFixed(1)} tokens/s (${without.map((x) => x.toFixed(0)).join(", ")})`);
console.log(`throughput with scraper:    median ${median(withS).toFixed(1)} tokens/s (${withS.map((x) => x.toFixed(0)).join(", ")})`);
console.log(`ratio with / without: ${(median(withS) / median(without)).toFixed(3)}`);
proc.kill("SIGTERM");
