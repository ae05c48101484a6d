// The chat page in a real browser: Debian's Chromium driven by puppeteer-core (scripts/
// setup-oracles). Behind --api-key the page asks for the key; a question in each mode (ar,
// diffusion, spec) gets an answer with tokens/s and tokens per pass; in diffusion mode the block
// view fills in from the crossword_trace events; a screenshot of it is saved under
// BUILD/artifacts; no request from the page goes anywhere but the server. --no-webui: no page.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { args, check, get, run, startServer } from "./harness.mjs";

const chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => fs.existsSync(p));
if (!chromium) {
  console.log("FAIL: no Chromium (scripts/install-deps installs Debian's chromium)");
  process.exit(1);
}
const { default: puppeteer } = await import(
  pathToFileURL(path.join(args.oracles, "node_modules", "puppeteer-core", "lib", "puppeteer", "puppeteer-core.js")).href
);
const artifacts = args.artifacts ?? path.join(args.oracles, "..", "artifacts");
fs.mkdirSync(artifacts, { recursive: true });

// The server drafts per round (its default auto: on the tiny model mostly no draft, a verify of
// the seed alone); the spec question sets the page's Drafts control to 15, so its rounds draft
// and the block view colours the drafts.
const srv = await startServer(["--api-key", "sk-page", "-c", "4096"]);
const bare = await startServer(["--no-webui"]);
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-default-apps", "--disable-sync"],
});
const page = await browser.newPage();
await page.setViewport({ width: 1280, height: 860 });
const origin = new URL(srv.base).origin;
const elsewhere = [];
const consoleErrors = [];
await page.setRequestInterception(true);
page.on("request", (r) => {
  const url = r.url();
  if (new URL(url).origin !== origin && !url.startsWith("data:")) {
    elsewhere.push(url);
    r.abort();
  } else {
    r.continue();
  }
});
// The key probe's 401 is logged by Chromium as a failed resource; that one is expected.
page.on("console", (m) => m.type() === "error" && !/status of 401/.test(m.text()) && consoleErrors.push(m.text()));
page.on("pageerror", (e) => consoleErrors.push(String(e)));

check("the page asks for the API key and then loads the model's name", async () => {
  await page.goto(srv.base + "/", { waitUntil: "load" });
  await page.waitForSelector("#key-dialog[open]", { timeout: 10000 });
  await page.type("#key-input", "sk-page");
  await page.click("#key-form button");
  await page.waitForFunction(() => document.getElementById("model-info").textContent.length > 0, { timeout: 10000 });
  assert.match(await page.$eval("#model-info", (e) => e.textContent), /clover-tiny|tiny/);
  // The Drafts control starts at the server's setting.
  assert.equal(await page.$eval("#draft-max", (e) => e.value), "auto");
});

async function ask(mode, question) {
  await page.select("#mode", mode);
  if (mode === "spec") await page.select("#draft-max", "15");
  await page.$eval("#thinking", (e) => (e.checked = false));
  await page.$eval("#max-tokens", (e) => (e.value = "48"));
  const before = await page.$$eval(".msg.assistant", (l) => l.length);
  await page.type("#input", question);
  await page.keyboard.press("Enter");
  await page.waitForFunction(
    (n) => {
      const l = document.querySelectorAll(".msg.assistant");
      return l.length > n && l[l.length - 1].dataset.state === "done";
    },
    { timeout: 120000 },
    before,
  );
  return page.$eval(".msg.assistant:last-child", (e) => ({
    content: e.querySelector(".content").textContent,
    stats: e.querySelector(".stats")?.textContent ?? "",
    error: e.querySelector(".error")?.textContent ?? "",
  }));
}

for (const mode of ["ar", "diffusion", "spec"]) {
  check(`a question in mode ${mode} gets an answer with its speed`, async () => {
    const a = await ask(mode, "What is the capital of France?");
    assert.equal(a.error, "");
    assert.ok(a.content.trim().length > 0, JSON.stringify(a));
    assert.match(a.stats, /tokens\/s/);
    assert.match(a.stats, new RegExp(`tokens/pass · ${mode}`));
    if (mode === "ar") {
      assert.equal(await page.$eval("#block-view", (e) => e.hidden), true);
      return;
    }
    // The block view filled in from the trace events.
    const view = await page.$eval("#block-view", (e) => ({
      hidden: e.hidden, passes: Number(e.dataset.passes),
      slots: e.querySelectorAll(".slot").length,
      filled: e.querySelectorAll(".slot.filled, .slot.new, .slot.draft, .slot.accepted, .slot.rejected").length,
      title: document.getElementById("block-title").textContent,
    }));
    assert.equal(view.hidden, false);
    assert.ok(view.passes > 0, JSON.stringify(view));
    assert.equal(view.slots, 32);
    assert.ok(view.filled > 0, JSON.stringify(view));
    assert.match(view.title, mode === "diffusion" ? /denoise|commit/ : /draft|verify/);
    if (mode === "diffusion") {
      const file = path.join(artifacts, "webui-block-view.png");
      await page.screenshot({ path: file });
      assert.ok(fs.statSync(file).size > 10000);
      console.log(`screenshot: ${file}`);
    }
  });
}

check("a second question continues the conversation; reloading keeps it", async () => {
  const a = await ask("ar", "And of Italy?");
  assert.ok(a.content.trim().length > 0);
  assert.equal(await page.$$eval(".msg.user", (l) => l.length), 4);
  await page.reload({ waitUntil: "load" });
  await page.waitForFunction(() => document.querySelectorAll(".msg.user").length === 4, { timeout: 10000 });
});

check("no request went anywhere but the server; no script errors", async () => {
  assert.deepEqual(elsewhere, []);
  assert.deepEqual(consoleErrors, []);
});

check("--no-webui: / is a 404, the API is unaffected", async () => {
  assert.equal((await get(bare.base, "/")).status, 404);
  assert.equal((await get(bare.base, "/app.js")).status, 404);
  assert.equal((await get(bare.base, "/v1/models")).status, 200);
});

check("the page's files need no key and set a same-origin content policy", async () => {
  const r = await fetch(srv.base + "/");
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-security-policy"), /default-src 'self'/);
  assert.equal((await get(srv.base, "/v1/models")).status, 401);
});

await run([srv, bare, { stop: async () => (await browser.close(), null), log: () => "", port: "browser" }]);
