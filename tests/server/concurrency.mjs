// Continuous batching and isolation: concurrent clients get exactly what they get alone (greedy),
// diffusion and spec requests run next to AR ones, and a client that goes away (streaming,
// non-streaming or still queued) frees its slot within a second without touching the others.
import assert from "node:assert/strict";
import { check, collectChat, metrics, run, sleep, startServer } from "./harness.mjs";

const main = await startServer(["-np", "4"]);
const alone = await startServer(["-np", "1"]);
const client = main.client();
const solo = alone.client();

const topics = ["rivers", "volcanoes", "bread", "chess", "owls", "trains", "glass", "the moon"];
const convo = (i) => [
  { role: "system", content: `You answer questions about ${topics[i]}.` },
  { role: "user", content: `Tell me ${i + 1} things about ${topics[i]}, please.` },
];
const base = { max_tokens: 32, ignore_eos: true, reasoning_format: "none" };
const answer = (r) => r.choices[0].message.content;
// The answer with each token's log-probability: a leak of another slot's state shows up in these
// numbers even when it does not change the (greedy) text.
const lp = { logprobs: true };
const trace = (text, entries) => ({ text, lp: JSON.stringify(entries.map((e) => [e.token, e.logprob])) });
const traced = (r) => trace(answer(r), r.choices[0].logprobs.content);

const reference = [];
check("references: each conversation alone (and the conversations differ)", async () => {
  for (let i = 0; i < topics.length; i++) {
    reference.push(traced(await solo.chat.completions.create({ messages: convo(i), ...base, ...lp })));
  }
  assert.equal(new Set(reference.map((r) => r.lp)).size, topics.length,
    "every conversation must leave its own trace for the checks to mean anything");
  for (const r of reference) assert.equal(JSON.parse(r.lp).length, 32);
});

check("8 concurrent streaming clients on 4 slots: every answer identical to its run alone, none lost", async () => {
  const before = await metrics(main.base);
  const results = await Promise.all(
    topics.map(async (_, i) => collectChat(await client.chat.completions.create({ messages: convo(i), ...base, ...lp, stream: true }))),
  );
  results.forEach((r, i) => {
    assert.deepEqual(trace(r.content, r.logprobs), reference[i], `conversation ${i}`);
    assert.equal(r.finish, "length");
  });
  const after = await metrics(main.base);
  assert.equal(after.requests_finished_total - before.requests_finished_total, 8);
  const passes = after.forward_passes_total - before.forward_passes_total;
  const seqs = after.sequences_per_pass * after.forward_passes_total - before.sequences_per_pass * before.forward_passes_total;
  assert.ok(seqs / passes > 1.5, `slots must share forward passes (mean ${(seqs / passes).toFixed(2)} sequences per pass)`);
});

check("diffusion and spec requests run correctly next to AR requests", async () => {
  const modes = ["ar", "diffusion", "spec", "diffusion"];
  const req = (i) => ({ messages: convo(i), ...base, crossword: { mode: modes[i], block_size: 8 } });
  const single = [];
  for (let i = 0; i < modes.length; i++) single.push(answer(await solo.chat.completions.create(req(i))));
  const together = await Promise.all(modes.map(async (_, i) => answer(await client.chat.completions.create(req(i)))));
  assert.deepEqual(together, single);
  // Greedy self-speculation is lossless: it equals AR.
  assert.equal(single[2], reference[2].text);
  assert.equal(answer(await client.chat.completions.create({ messages: convo(0), ...base, mode: "spec" })), reference[0].text);
});

async function waitFor(cond, ms, what) {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    if (await cond()) return Date.now() - t0;
    await sleep(20);
  }
  throw new Error(`not within ${ms} ms: ${what}`);
}

check("a client that disconnects mid-stream frees its slot within a second; the other stream is unchanged", async () => {
  const m0 = await metrics(main.base);
  const long = await client.chat.completions.create({ messages: convo(5), max_tokens: 3000, ignore_eos: true, stream: true });
  const other = client.chat.completions.create({ messages: convo(1), ...base, ...lp, stream: true }).then(collectChat);
  let got = 0;
  for await (const _ of long) {
    if (++got === 4) break;  // leaving the loop aborts the HTTP request
  }
  const t = await waitFor(async () => (await metrics(main.base)).requests_cancelled_total > m0.requests_cancelled_total, 1000, "slot freed");
  console.log(`  slot freed ${t} ms after the disconnect`);
  const r = await other;
  assert.deepEqual(trace(r.content, r.logprobs), reference[1]);
  // The freed slot is reused: all four slots busy again give the right answers.
  const again = await Promise.all([0, 2, 4, 6].map(async (i) => traced(await client.chat.completions.create({ messages: convo(i), ...base, ...lp }))));
  assert.deepEqual(again, [reference[0], reference[2], reference[4], reference[6]]);
});

check("a non-streaming client that disconnects frees its slot within a second", async () => {
  const m0 = await metrics(main.base);
  const ac = new AbortController();
  const p = client.chat.completions.create({ messages: convo(3), max_tokens: 3000, ignore_eos: true }, { signal: ac.signal }).catch((e) => e);
  await waitFor(async () => (await metrics(main.base)).slots_busy >= 1, 5000, "request running");
  ac.abort();
  await p;
  const t = await waitFor(async () => (await metrics(main.base)).requests_cancelled_total > m0.requests_cancelled_total, 1000, "slot freed");
  console.log(`  slot freed ${t} ms after the disconnect`);
});

check("cancelling a queued request touches no running one", async () => {
  const m0 = await metrics(alone.base);
  // Long enough to outlast the three 20 ms polls below at the tiny model's ~5000 tokens/s (300
  // tokens once did not), short enough for the slot's 2048-token context.
  const longReq = { messages: convo(7), max_tokens: 1800, ignore_eos: true, reasoning_format: "none", ...lp };
  const running = solo.chat.completions.create({ ...longReq, stream: true }).then(collectChat);
  await waitFor(async () => (await metrics(alone.base)).slots_busy === 1, 5000, "first request running");
  const queued = await solo.chat.completions.create({ messages: convo(2), ...base, stream: true });
  await waitFor(async () => (await metrics(alone.base)).queue_length === 1, 5000, "second request queued");
  queued.controller.abort();
  let m1 = null;
  // Dropped = gone from the queue and counted as cancelled (the two are not one atomic update: a
  // clean-clone run read the queue empty before the counter moved).
  const t = await waitFor(async () => {
    m1 = await metrics(alone.base);
    return m1.queue_length === 0 && m1.requests_cancelled_total > m0.requests_cancelled_total;
  }, 2000, "queued request dropped");
  console.log(`  queued request dropped ${t} ms after the disconnect`);
  // Dropped from the queue, not admitted: the first request still runs and nothing else ended.
  assert.equal(m1.requests_cancelled_total - m0.requests_cancelled_total, 1);
  assert.equal(m1.requests_finished_total, m0.requests_finished_total, "the running request was still running");
  assert.equal(m1.slots_busy, 1);
  const r = await running;
  assert.equal(r.finish, "length");
  assert.deepEqual(trace(r.content, r.logprobs), traced(await solo.chat.completions.create(longReq)),
    "the running answer is unchanged");
});

await run([main, alone]);
