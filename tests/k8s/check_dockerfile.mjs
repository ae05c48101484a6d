// Checks the repository's Dockerfile without a container runtime (none here):
// 1. lint: npm dockerfile-utils@0.16.3 (the linter of the VS Code Docker language server; hadolint
//    is not packaged in Debian 12) reports nothing;
// 2. its build steps are exactly CI's: Debian 12 images only, RUN lines are `scripts/install-deps`
//    or `make TARGET [VAR=value]` with targets the Makefile declares (the make targets CI's `make
//    test` runs start with the same install script), nothing downloaded by ADD;
// 3. the runtime stage runs as a non-root user and holds no model: it copies only `make install`'s
//    prefix, and .dockerignore keeps every .gguf but the embedded tiny model out of the context.
// Each rule is also run on a broken copy, which must fail.
//
//   node tests/k8s/check_dockerfile.mjs --source REPO --oracles BUILD/oracles
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
if (!args.source || !args.oracles) {
  console.error("usage: node check_dockerfile.mjs --source REPO --oracles BUILD/oracles");
  process.exit(2);
}
const nm = path.join(args.oracles, "node_modules");
const { validate } = await import(pathToFileURL(path.join(nm, "dockerfile-utils/lib/main.js")).href);
const { DockerfileParser } = await import(pathToFileURL(path.join(nm, "dockerfile-ast/lib/main.js")).href);

const makefile = fs.readFileSync(path.join(args.source, "Makefile"), "utf8");
const phony = new Set((makefile.match(/^\.PHONY:(.*)$/m)?.[1] ?? "").trim().split(/\s+/));
const IMAGES = new Set(["debian:12", "debian:12-slim"]);

/// Problems of a Dockerfile text (and a .dockerignore text); empty when it passes.
function problems(text, ignore) {
  const out = [];
  for (const d of validate(text)) out.push(`lint (line ${d.range.start.line + 1}): ${d.message}`);
  const df = DockerfileParser.parse(text);
  const froms = df.getFROMs();
  if (froms.length === 0) return [...out, "no FROM"];
  for (const f of froms) {
    const image = `${f.getImageName()}:${f.getImageTag()}`;
    if (!IMAGES.has(image)) out.push(`FROM ${image}: the base must be Debian 12 (${[...IMAGES].join(" or ")})`);
  }
  const stages = [];  // instructions per stage
  for (const ins of df.getInstructions()) {
    if (ins.getKeyword() === "FROM") stages.push([]);
    stages.at(-1)?.push(ins);
  }
  let sawDeps = false;
  for (const ins of df.getInstructions()) {
    const kw = ins.getKeyword();
    const words = ins.getArguments().map((a) => a.getValue());
    if (kw === "RUN") {
      const line = ins.getArgumentsContent().trim();
      if (line === "scripts/install-deps") {
        sawDeps = true;
      } else if (words[0] === "make" && words.length >= 2) {
        const targets = words.slice(1).filter((w) => !w.includes("="));
        if (!sawDeps) out.push(`RUN ${line}: scripts/install-deps must run first, as in CI`);
        for (const t of targets) if (!phony.has(t)) out.push(`RUN ${line}: ${t} is not a Makefile target`);
      } else {
        out.push(`RUN ${line}: only scripts/install-deps and make targets (CI's steps) may run`);
      }
    }
    if (kw === "ADD") out.push(`ADD ${ins.getArgumentsContent()}: use COPY (ADD can download)`);
  }
  const last = stages.at(-1);
  const user = last.filter((i) => i.getKeyword() === "USER").at(-1);
  const userName = user?.getArguments()[0]?.getValue().split(":")[0];
  if (!user || userName === "0" || userName === "root") out.push("the runtime stage must set a non-root USER");
  const entry = last.findIndex((i) => i.getKeyword() === "ENTRYPOINT");
  if (entry < 0 || last.indexOf(user) > entry) out.push("USER must come before the ENTRYPOINT");
  for (const ins of last) {
    if (ins.getKeyword() !== "COPY") continue;
    const from = ins.getFlags?.().find((fl) => fl.getName() === "from")?.getValue();
    const src = ins.getArguments()[0]?.getValue();
    if (!from || src !== "/opt/crossword")
      out.push(`COPY ${ins.getArgumentsContent()}: the runtime stage takes only make install's prefix from the build stage`);
  }
  const rules = ignore.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
  if (!rules.includes("**/*.gguf")) out.push(".dockerignore must exclude **/*.gguf (models stay out of the image)");
  for (const r of rules.filter((l) => l.startsWith("!")))
    if (r !== "!models/clover-tiny.gguf") out.push(`.dockerignore lets ${r.slice(1)} back in`);
  return out;
}

const text = fs.readFileSync(path.join(args.source, "Dockerfile"), "utf8");
const ignore = fs.readFileSync(path.join(args.source, ".dockerignore"), "utf8");
let failed = 0;
const found = problems(text, ignore);
for (const p of found) console.log(`FAIL ${p}`);
if (found.length) failed++;
else console.log("ok   Dockerfile: lint clean, CI's build steps only, non-root, no model");

const broken = [
  ["a RUN that is not CI's", text.replace("RUN scripts/install-deps", "RUN scripts/install-deps\nRUN apt-get install -y curl"), ignore],
  ["an unknown make target", text.replace("RUN make install", "RUN make image"), ignore],
  ["make before install-deps", text.replace("RUN scripts/install-deps\n", ""), ignore],
  ["a non-Debian base", text.replace("FROM debian:12-slim", "FROM ubuntu:24.04"), ignore],
  ["running as root", text.replace("USER 10001:10001", "USER root"), ignore],
  ["no USER", text.replace("USER 10001:10001\n", ""), ignore],
  ["a model copied in", text.replace("COPY --from=build /opt/crossword /opt/crossword", "COPY --from=build /opt/crossword /opt/crossword\nCOPY --from=build /src/models /models"), ignore],
  ["a lint error", text.replace("EXPOSE 8080", "EXPOSE port8080"), ignore],
  ["models in the build context", text, ignore.replace("**/*.gguf", "")],
];
for (const [what, t, ig] of broken) {
  if (t === text && ig === ignore) {
    console.log(`FAIL broken copy '${what}' did not change anything (the Dockerfile moved on?)`);
    failed++;
    continue;
  }
  const p = problems(t, ig);
  if (p.length) console.log(`ok   a broken copy fails: ${what} (${p[0]})`);
  else {
    console.log(`FAIL a broken copy passes: ${what}`);
    failed++;
  }
}
console.log(failed ? `${failed} check(s) failed` : "all Dockerfile checks passed");
process.exit(failed ? 1 : 0);
