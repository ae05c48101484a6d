// llama-server command lines start `crossword serve` unchanged (issue 23): the two lines users
// publish for Clover (only -m points at the test model and the port is a free one), each answering
// /health and /props with the defaults it asked for, and printing one "no effect" line for each
// flag that changes nothing here. Also: llama.cpp's multi-letter short flags are read whole,
// -hf is refused (exit 2, no download), an unknown flag fails naming it.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { args, check, run } from "./harness.mjs";

const M = args.model;
const line1 = `-m ${M} --alias clover-35b-a3b -ngl 99 -fa on -c 16384 --jinja
  --reasoning-format deepseek --presence-penalty 0.9 --repeat-penalty 1.05 --port 0`;
const line2 = `-m ${M} -a clover-35b-a3b-preview --host 127.0.0.1 --port 0 --jinja -ngl 99
  --n-cpu-moe 20 -fit off -fa on -ctk bf16 -ctv bf16 -c 131072 -np 4 -kvu -b 2048 -ub 2048 -t 8
  -tb 8 --temp 0 --top-k 1 --seed 42 --no-webui --metrics --cache-ram 0`;
const split = (s) => s.split(/\s+/).filter(Boolean);

// Starts `crossword serve ARGS` exactly as given; resolves {base, log(), stop()} once ready.
async function serve(argv) {
  const proc = spawn(args.crossword, ["serve", ...argv], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`not ready in 120 s:\n${log}`)), 120000);
    proc.stderr.on("data", (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m && / ready: /.test(log)) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`exited (${code}) before it was ready:\n${log}`));
    });
  });
  return {
    port,
    base: `http://127.0.0.1:${port}`,
    log: () => log,
    exited: () => null,
    async stop() {
      proc.kill("SIGTERM");
      return await new Promise((r) => proc.on("exit", (code, signal) => r({ code, signal })));
    },
  };
}

const noEffect = (log) => log.split("\n").filter((l) => /no effect|no discrete GPU|KV cache is stored as/.test(l));
const ngl = (log) => /-ngl 99: no discrete GPU found/.test(log) || /executor: vulkan/i.test(log);

const servers = [];
check("line 1 (--alias -ngl 99 -fa on -c 16384 --jinja ...) starts, answers /health and /props", async () => {
  const s = await serve(split(line1));
  servers.push(s);
  const h = await fetch(s.base + "/health");
  assert.equal(h.status, 200);
  const models = await (await fetch(s.base + "/v1/models")).json();
  assert.equal(models.data[0].id, "clover-35b-a3b");
  const props = await (await fetch(s.base + "/props")).json();
  const p = props.default_generation_settings.params;
  assert.ok(Math.abs(p.presence_penalty - 0.9) < 1e-6, JSON.stringify(p));
  assert.ok(Math.abs(p.repeat_penalty - 1.05) < 1e-6, JSON.stringify(p));
  assert.equal(props.default_generation_settings.n_ctx, 16384);
  const log = s.log();
  assert.ok(ngl(log), "-ngl 99 says where the layers run:\n" + log);
  assert.match(log, /--flash-attn on: no effect/);
  assert.doesNotMatch(log, /--jinja|--reasoning-format|--presence|--repeat|--alias/, "flags with an effect make no note");
  assert.equal(noEffect(log).length, 2, noEffect(log).join("\n"));
});

check("line 2 (-ctk bf16 -np 4 -kvu -ub 2048 -tb 8 --seed 42 --cache-ram 0 ...) starts; one line per flag without effect", async () => {
  const s = await serve(split(line2));
  servers.push(s);
  assert.equal((await fetch(s.base + "/health")).status, 200);
  const models = await (await fetch(s.base + "/v1/models")).json();
  assert.equal(models.data[0].id, "clover-35b-a3b-preview");
  const props = await (await fetch(s.base + "/props")).json();
  const p = props.default_generation_settings.params;
  assert.equal(p.temperature, 0);
  assert.equal(p.top_k, 1);
  assert.equal(p.seed, 42);
  assert.equal(props.total_slots, 4);
  assert.equal(props.default_generation_settings.n_ctx, 131072 / 4);
  assert.equal((await fetch(s.base + "/")).status === 200 && (await (await fetch(s.base + "/")).text()).includes("<html"), false, "--no-webui");
  assert.equal((await fetch(s.base + "/metrics")).status, 200, "--metrics");
  const log = s.log();
  const lines = noEffect(log);
  assert.ok(ngl(log), log);
  for (const want of [/--n-cpu-moe 20: no effect/, /--flash-attn on: no effect/, /-ctk bf16, -ctv bf16: the KV cache is stored as f16/, /--kv-unified: no effect/, /--cache-ram 0: no effect/]) {
    assert.equal(lines.filter((l) => want.test(l)).length, 1, `${want} once in:\n${lines.join("\n")}`);
  }
  assert.equal(lines.length, 6, "and nothing else (-fit off, -ub = -b, -tb = -t do what they say):\n" + lines.join("\n"));
  // The answer is greedy (--temp 0 --top-k 1) and reproducible.
  const body = { messages: [{ role: "user", content: "Hello" }], max_tokens: 4 };
  const post = () => fetch(s.base + "/v1/chat/completions", { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" } }).then((r) => r.json());
  assert.equal((await post()).choices[0].message.content, (await post()).choices[0].message.content);
});

const cw = (argv, env = {}) => spawnSync(args.crossword, argv, { encoding: "utf8", timeout: 60000, env: { ...process.env, ...env } });

check("-hf is refused (exit 2, nothing downloaded); an unknown multi-letter flag fails naming it", async () => {
  const hf = cw(["serve", "-hf", "unsloth/Clover-GGUF", "--port", "0"]);
  assert.equal(hf.status, 2);
  assert.match(hf.stderr, /-hf is not supported: crossword does not download models/);
  const unknown = cw(["serve", "-m", M, "-xyz", "1", "--port", "0"]);
  assert.equal(unknown.status, 2);
  assert.match(unknown.stderr, /unknown flag '-xyz'/);
  const long = cw(["serve", "-m", M, "--no-such-flag", "--port", "0"]);
  assert.equal(long.status, 2);
  assert.match(long.stderr + long.stdout, /--no-such-flag/);
  const badType = cw(["serve", "-m", M, "-ctk", "q9_9", "--port", "0"]);
  assert.equal(badType.status, 2, "-ctk is read whole (not -c tk): its value is checked");
  assert.match(badType.stderr, /-ctk must be f16 or f32 .*got 'q9_9'/);
});

check("crossword run takes llama-cli's names: -n, --temp, --seed, -ctk, -fa, -sys, -no-cnv, --jinja", async () => {
  const r = cw(["run", "-m", M, "-p", "Hello", "-n", "3", "--temp", "0", "--top-k", "1", "--seed", "42", "-ctk", "f16",
    "-ctv", "f16", "-fa", "auto", "-ngl", "0", "-t", "1", "-tb", "1", "-b", "64", "-ub", "64", "-no-cnv", "--jinja"]);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /--flash-attn auto: no effect/);
  assert.equal(noEffect(r.stderr).length, 1, r.stderr);
  const chat = cw(["run", "-m", M, "--chat", "-sys", "Be brief.", "-p", "Hi", "-n", "2", "-t", "1", "--log-level", "warn"]);
  assert.equal(chat.status, 0, chat.stderr);
  const cnv = cw(["run", "-m", M, "-cnv", "-p", "Hi"]);
  assert.equal(cnv.status, 2);
  assert.match(cnv.stderr, /-cnv is not supported: crossword run answers one prompt/);
  const env = cw(["run", "-m", M, "-p", "Hi", "-t", "1", "--log-level", "warn", "--stats"], { LLAMA_ARG_N_PREDICT: "3", LLAMA_ARG_CACHE_TYPE_K: "q8_0" });
  assert.equal(env.status, 0, env.stderr);
  assert.match(env.stderr, /generated 3 tokens/, "LLAMA_ARG_N_PREDICT sets -n");
  assert.match(env.stderr, /-ctk q8_0: the KV cache is stored as f16/, "LLAMA_ARG_CACHE_TYPE_K sets -ctk");
  const seedRandom = cw(["run", "-m", M, "-p", "Hi", "-n", "2", "-t", "1", "--seed", "-1", "--log-level", "warn"]);
  assert.equal(seedRandom.status, 0, "--seed -1 (a random seed) is a value, not a flag: " + seedRandom.stderr);
});

await run([() => servers]);
