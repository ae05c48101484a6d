// Independent oracle for GBNF grammars: llama.cpp's grammar engine inside the npm package
// node-llama-cpp (installed by scripts/setup-oracles BUILD_DIR into BUILD_DIR/oracles), no model.
//
//   node tests/oracles/gbnf_oracle.mjs --oracles BUILD/oracles --cases IN.json --out OUT.json
//     IN:  [{"grammar": "root ::= ...", "strings": ["...", ...]}, ...]
//     OUT: [{"parsed": true|false, "accepts": [bool, ...]}, ...]
//   "parsed": llama.cpp accepted the grammar text (false: a syntax error, an undefined rule,
//   left recursion, no root); "accepts"[i]: the whole string is a complete match
//   (LlamaGrammar's isTextCompatible: the string fed code point by code point, then an empty
//   stack present).
//   --grammars-dir: also prints the folder of the .gbnf files the package ships (llama.cpp's
//   grammars/, MIT-licensed) and exits.
// Exit status: 0 on success, 2 on bad arguments.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

function fail(message) {
  process.stderr.write(`gbnf_oracle: ${message}\n`);
  process.exit(2);
}

const args = {};
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  if (a === "--grammars-dir") { args.grammarsDir = true; continue; }
  if (i + 1 >= process.argv.length) fail(`${a} needs a value`);
  if (a === "--oracles") args.oracles = process.argv[++i];
  else if (a === "--cases") args.cases = process.argv[++i];
  else if (a === "--out") args.out = process.argv[++i];
  else fail(`unknown argument ${a}`);
}
if (!args.oracles) fail("--oracles DIR is required");
const pkg = path.join(path.resolve(args.oracles), "node_modules", "node-llama-cpp");
if (args.grammarsDir) {
  process.stdout.write(path.join(pkg, "llama", "grammars") + "\n");
  process.exit(0);
}
if (!args.cases || !args.out) fail("--cases IN.json and --out OUT.json are required");

const { getLlama, LlamaLogLevel } = await import(pathToFileURL(path.join(pkg, "dist", "index.js")).href);
const llama = await getLlama({
  gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
  logLevel: LlamaLogLevel.disabled, maxThreads: 1,
});
const cases = JSON.parse(fs.readFileSync(args.cases, "utf8"));
const out = [];
for (const c of cases) {
  let grammar;
  try {
    grammar = await llama.createGrammar({ grammar: c.grammar });
  } catch (e) {
    out.push({ parsed: false, accepts: [] });
    continue;
  }
  out.push({ parsed: true, accepts: c.strings.map((s) => grammar._testText(s)) });
}
fs.writeFileSync(args.out, JSON.stringify(out));
await llama.dispose();
