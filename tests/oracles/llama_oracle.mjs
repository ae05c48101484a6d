// Independent oracle: runs a GGUF file in the llama.cpp library shipped by the npm package
// node-llama-cpp (installed by scripts/setup-oracles BUILD_DIR into BUILD_DIR/oracles) and prints
// one JSON document on stdout.
//
//   node tests/oracles/llama_oracle.mjs --oracles BUILD/oracles --model M.gguf --tokens 1,2,3
//        [--generate N] [--top K] [--threads 2] [--ctx 512] [--batch 512] [--kv-type F16|F32 (F32 also disables flash attention)]
//     -> {"prompt_top": [[[id, logprob], ...] for each prompt position],
//         "generated": [ids], "generated_top": [[[id, logprob], ...] for each generated token]}
//   prompt_top[i] is the top-K log-softmax after tokens 0..i, all evaluated in ONE batch;
//   generation then continues greedily (temperature 0) one token at a time, and generated_top[j]
//   is the distribution generated[j] was picked from (generated_top[0] == prompt_top[last]).
//
//   --tokenize TEXT [--special]  -> {"tokens": [ids]}     (--special: parse <|im_start|> etc.)
//   --detokenize 1,2,3           -> {"text": "..."}
//   --info                       -> {"architecture", "name", "eos", "bos", "eot"} of the model
//
// Exit status: 0 on success, 2 on bad arguments or a model llama.cpp refuses (message on stderr).
import path from "node:path";
import { pathToFileURL } from "node:url";

function parseArgs(argv) {
  const args = { top: 10, generate: 0, threads: 2, ctx: 512, batch: 512, special: false, info: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) fail(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case "--oracles": args.oracles = next(); break;
      case "--model": args.model = next(); break;
      case "--tokens": args.tokens = parseIds(next()); break;
      case "--generate": args.generate = parseInt(next(), 10); break;
      case "--top": args.top = parseInt(next(), 10); break;
      case "--threads": args.threads = parseInt(next(), 10); break;
      case "--ctx": args.ctx = parseInt(next(), 10); break;
      case "--batch": args.batch = parseInt(next(), 10); break;
      case "--kv-type": {
        const t = next().toUpperCase();
        if (t !== "F32" && t !== "F16") fail("--kv-type must be F16 or F32");
        args.kvType = t === "F32" ? 0 : 1;
        break;
      }
      case "--tokenize": args.tokenize = next(); break;
      case "--detokenize": args.detokenize = parseIds(next()); break;
      case "--special": args.special = true; break;
      case "--info": args.info = true; break;
      default: fail(`unknown argument ${a}`);
    }
  }
  if (!args.oracles || !args.model) fail("--oracles DIR and --model FILE are required");
  return args;
}

function parseIds(s) {
  const ids = s.split(",").filter((x) => x.length > 0).map((x) => Number(x));
  if (ids.some((x) => !Number.isInteger(x) || x < 0)) fail(`bad token id list '${s}'`);
  return ids;
}

function fail(message) {
  process.stderr.write(`llama_oracle: ${message}\n`);
  process.exit(2);
}

// Top-K [id, log p] pairs of a probability Map (node-llama-cpp returns it sorted, highest first).
function topK(probabilities, k) {
  const out = [];
  for (const [id, p] of probabilities) {
    if (out.length >= k) break;
    out.push([id, p > 0 ? Math.log(p) : null]);
  }
  return out;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const entry = path.join(path.resolve(args.oracles), "node_modules", "node-llama-cpp", "dist", "index.js");
  const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);
  const llama = await getLlama({
    gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true,
    logLevel: LlamaLogLevel.error, maxThreads: args.threads,
  });
  const vocabOnly = args.tokenize !== undefined || args.detokenize !== undefined || args.info;
  let model;
  try {
    model = await llama.loadModel({ modelPath: path.resolve(args.model), gpuLayers: 0, vocabOnly });
  } catch (e) {
    fail(`llama.cpp could not load ${args.model}: ${e.message}`);
  }
  let result;
  if (args.tokenize !== undefined) {
    result = { tokens: Array.from(model.tokenize(args.tokenize, args.special)) };
  } else if (args.detokenize !== undefined) {
    result = { text: model.detokenize(args.detokenize, true) };
  } else if (args.info) {
    result = {
      architecture: model.fileInfo.metadata?.general?.architecture ?? null,
      name: model.fileInfo.metadata?.general?.name ?? null,
      eos: model.tokens.eos ?? null, bos: model.tokens.bos ?? null, eot: model.tokens.eot ?? null,
    };
  } else {
    if (!args.tokens || args.tokens.length === 0) fail("--tokens is required (comma-separated ids)");
    const context = await model.createContext({
      contextSize: args.ctx, batchSize: args.batch, threads: args.threads, sequences: 1,
      // The addon reads the KV types only as numbers (ggml type ids: F32 = 0, F16 = 1). llama.cpp's
      // flash-attention path casts F32 K/V to F16, so an F32 cache also turns flash attention off.
      ...(args.kvType !== undefined ? { experimentalKvCacheKeyType: args.kvType, experimentalKvCacheValueType: args.kvType } : {}),
      ...(args.kvType === 0 ? { flashAttention: false } : {}),
    });
    const seq = context.getSequence();
    const want = { generateNext: { token: true, probabilities: true, options: { temperature: 0 } } };
    const out = await seq.controlledEvaluate(args.tokens.map((t) => [t, want]));
    const promptTop = [];
    for (let i = 0; i < args.tokens.length; i++) {
      if (!out[i] || !out[i].next || !out[i].next.probabilities) fail(`no distribution at prompt position ${i}`);
      promptTop.push(topK(out[i].next.probabilities, args.top));
    }
    const generated = [];
    const generatedTop = [];
    let next = out[args.tokens.length - 1].next;
    for (let j = 0; j < args.generate; j++) {
      generated.push(next.token);
      generatedTop.push(topK(next.probabilities, args.top));
      if (j + 1 === args.generate) break;
      const step = await seq.controlledEvaluate([[next.token, want]]);
      next = step[0].next;
    }
    result = { prompt_top: promptTop, generated, generated_top: generatedTop };
    await context.dispose();
  }
  process.stdout.write(JSON.stringify(result) + "\n");
  await model.dispose();
  await llama.dispose();
}

main().catch((e) => fail(e && e.stack ? e.stack : String(e)));
