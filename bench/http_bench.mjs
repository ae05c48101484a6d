// Benchmark of the server's HTTP layer (not a test): requests/s and latency of small requests that
// do not touch the model (GET /health, POST /tokenize), from C keep-alive clients, for one or
// more servers in the same run (alternating rounds, so a change in the machine's load hits all).
//
//   node bench/http_bench.mjs --crossword BIN[,BIN2...] [--model M.gguf] [--clients 1,8]
//        [--requests 2000] [--rounds 5]
//
// Prints, per binary, route and client count: median over rounds of requests/s, and the median
// over rounds of each round's p50 and p99 latency (ms); the load average goes with each line.
import { spawn } from "node:child_process";
import http from "node:http";
import os from "node:os";

const opt = { clients: "1,8", requests: "2000", rounds: "5" };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) opt[argv[i].replace(/^--/, "")] = argv[i + 1];
if (!opt.crossword) {
  console.error("usage: node bench/http_bench.mjs --crossword BIN[,BIN2...] [--model M.gguf] [--clients 1,8] ...");
  process.exit(2);
}

async function startServer(bin) {
  const args = ["serve", "--port", "0", "-np", "1", "-t", "1"];
  if (opt.model) args.splice(1, 0, "-m", opt.model);
  const proc = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  const port = await new Promise((resolve, reject) => {
    proc.stderr.on("data", (d) => {
      if (log.length > 65536) return;  // one line per request follows
      log += d;
      const m = log.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    proc.on("exit", (c) => reject(new Error(`server exited (${c}):\n${log}`)));
  });
  for (;;) {  // until the model is loaded
    const ok = await new Promise((r) => http.get({ port, path: "/health" }, (res) => { res.resume(); r(res.statusCode === 200); }).on("error", () => r(false)));
    if (ok) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  return { proc, port };
}

function request(agent, port, route) {
  const body = route === "/tokenize" ? JSON.stringify({ content: "The quick brown fox jumps over the lazy dog." }) : null;
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.request({ agent, port, path: route, method: body ? "POST" : "GET", headers: body ? { "content-type": "application/json", "content-length": body.length } : {} }, (res) => {
      res.resume();
      res.on("end", () => (res.statusCode === 200 ? resolve(performance.now() - t0) : reject(new Error(`status ${res.statusCode}`))));
    });
    req.on("error", reject);
    req.end(body);
  });
}

async function round(port, route, clients) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: clients });
  const n = Number(opt.requests);
  const lat = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: clients }, async () => {
    while (next < n) {
      next++;
      lat.push(await request(agent, port, route));
    }
  }));
  const wall = (performance.now() - t0) / 1000;
  agent.destroy();
  lat.sort((a, b) => a - b);
  return { rps: n / wall, p50: lat[lat.length >> 1], p99: lat[Math.floor(lat.length * 0.99)] };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const bins = opt.crossword.split(",");
const servers = [];
for (const b of bins) servers.push(await startServer(b));
const results = {};
for (const route of ["/health", "/tokenize"]) {
  for (const c of opt.clients.split(",").map(Number)) {
    for (let r = 0; r < Number(opt.rounds); ++r) {
      for (const [i, s] of servers.entries()) {
        const key = `${i}\t${route}\t${c}`;
        (results[key] ??= []).push({ ...(await round(s.port, route, c)), load: os.loadavg()[0] });
      }
    }
  }
}
console.log("binary\troute\tclients\treq/s\tp50 ms\tp99 ms\tload");
for (const [key, rs] of Object.entries(results)) {
  const [i, route, c] = key.split("\t");
  console.log(`${bins[i]}\t${route}\t${c}\t${median(rs.map((x) => x.rps)).toFixed(0)}\t${median(rs.map((x) => x.p50)).toFixed(3)}\t` +
    `${median(rs.map((x) => x.p99)).toFixed(3)}\t${median(rs.map((x) => x.load)).toFixed(1)}`);
}
for (const s of servers) s.proc.kill("SIGTERM");
