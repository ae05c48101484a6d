// llama-server's GET /props and GET /slots shapes: context, slots, chat template, special tokens
// and default generation settings; each slot's state with crossword's decoding mode, block size,
// threshold and tokens per pass while a request runs; --no-slots turns /slots off (501);
// behind --api-key both need the key.
import assert from "node:assert/strict";
import { check, get, run, sleep, startServer } from "./harness.mjs";

const srv = await startServer(["-np", "2", "-c", "2048", "--mode", "diffusion", "--threshold", "0.9"]);
const off = await startServer(["--no-slots", "--api-key", "sk-k", "--seed", "-1"]);

check("/props: llama-server's fields with crossword's defaults", async () => {
  const { status, body } = await get(srv.base, "/props");
  assert.equal(status, 200);
  assert.equal(body.total_slots, 2);
  const d = body.default_generation_settings;
  assert.equal(d.n_ctx, 1024);
  assert.equal(typeof d.params.temperature, "number");
  assert.equal(typeof d.params.top_k, "number");
  // No --seed: each sampled request draws its own seed, shown as llama-server's LLAMA_DEFAULT_SEED.
  assert.equal(d.params.seed, 4294967295);
  // No -n: a request without max_tokens runs to the end of its slot's context, as llama-server says.
  assert.equal(d.params.n_predict, -1);
  assert.equal(d.params.max_tokens, -1);
  assert.ok(Array.isArray(d.params.samplers));
  assert.equal(d.crossword.mode, "diffusion");
  assert.equal(d.crossword.threshold, 0.9, "the float setting as its shortest decimal");
  // The spec settings, valued as a request's "crossword" object takes them.
  assert.equal(d.crossword.verify_chunk, "auto");
  // The server picks spec draft lengths per round unless --draft-max says otherwise; /v1/models
  // says the same.
  assert.equal(d.crossword.draft_max, "auto");
  // llama-server's numeric field: the most an auto round drafts (draft_max, 15 by default).
  assert.equal(d.params["speculative.n_max"], 15);
  const models = await get(srv.base, "/v1/models");
  assert.equal(models.body.data[0].meta.draft_max, "auto");
  assert.equal(typeof d.crossword.draft_p_min, "number");
  assert.equal(d.crossword.draft_expert_budget, false);
  // The embedded clover-tiny's spec drafts skip the FFN blocks of layers 2-4 (its measured set).
  assert.deepEqual(d.crossword.draft_skip_ffn, [2, 3, 4]);
  assert.equal(typeof body.chat_template, "string");
  assert.ok(body.chat_template.includes("im_start"), "the model's chat template");
  assert.equal(typeof body.eos_token, "string");
  assert.equal(body.endpoint_slots, true);
  assert.equal(body.webui, true);
  assert.deepEqual(body.modalities, { vision: false, audio: false });
});

check("/slots: idle slots, then a busy one with its decoding mode and tokens per pass", async () => {
  const r = await get(srv.base, "/slots");
  for (const s of r.body) assert.equal(s.params.n_predict, -1, "an idle slot shows the default limit");
  assert.equal(r.status, 200);
  assert.equal(r.body.length, 2);
  for (const [i, s] of r.body.entries()) {
    assert.equal(s.id, i);
    assert.equal(s.is_processing, false);
    assert.equal(s.n_ctx, 1024);
    assert.equal(s.id_task, -1);
  }
  // Runs a long streamed chat request with these decoding settings until /slots shows its slot
  // busy past its second pass; returns that slot (null if never seen) and the last /slots body.
  const busySlotOf = async (crossword, sampling = {}) => {
    const ctl = new AbortController();
    const req = fetch(srv.base + "/v1/chat/completions", {
      method: "POST", signal: ctl.signal, headers: { "content-type": "application/json" },
      body: JSON.stringify({
        messages: [{ role: "user", content: "Tell me a long story." }], max_tokens: 600, ignore_eos: true, stream: true,
        crossword, ...sampling,
      }),
    }).then((x) => x.text()).catch(() => "");
    let slot = null, seen = null;
    for (let i = 0; i < 400 && !slot; i++) {
      seen = await get(srv.base, "/slots");
      slot = seen.body.find((s) => s.is_processing && s.crossword.passes > 2) ?? null;
      if (!slot) await sleep(25);
    }
    ctl.abort();
    await req;
    // The server notices the closed connection within ~50 ms (longer under a sanitizer): wait
    // until no slot is busy, so the next request's slot is not confused with this one.
    for (let i = 0; i < 400; i++) {
      const now = await get(srv.base, "/slots");
      if (!now.body.some((s) => s.is_processing)) break;
      await sleep(25);
    }
    return { slot, seen };
  };
  // A long diffusion answer with a block size the server does not default to.
  const { slot: busy, seen } = await busySlotOf({ mode: "diffusion", block_size: 16, threshold: 0.8 });
  assert.ok(busy, "a slot was seen busy: " + JSON.stringify(seen.body));
  assert.equal(busy.crossword.mode, "diffusion");
  assert.equal(busy.crossword.block_size, 16);
  assert.equal(busy.crossword.threshold, 0.8);
  assert.equal(busy.crossword.phase, "generating");
  assert.ok(busy.crossword.tokens_per_pass > 0);
  assert.ok(busy.next_token.n_decoded > 0);
  assert.ok(busy.id_task > 0);
  assert.equal(seen.body.filter((s) => s.is_processing).length, 1);

  // A spec request's own spec settings show on its busy slot.
  const { slot: spec, seen: seen2 } = await busySlotOf(
    { mode: "spec", draft_max: "auto", verify_chunk: 4, draft_p_min: 0.25, draft_expert_budget: true,
      draft_skip_ffn: [1, 5] },
    { temperature: 0.7, seed: 3, top_k: 5, top_p: 0.9, min_p: 0.1, repeat_penalty: 1.2, presence_penalty: 0.3,
      frequency_penalty: 0.2 });
  assert.ok(spec, "a spec slot was seen busy: " + JSON.stringify(seen2.body));
  assert.equal(spec.crossword.mode, "spec");
  assert.equal(spec.crossword.draft_max, "auto");
  assert.equal(spec.crossword.verify_chunk, 4);
  assert.equal(spec.crossword.draft_p_min, 0.25);
  assert.equal(spec.crossword.draft_expert_budget, true);
  assert.deepEqual(spec.crossword.draft_skip_ffn, [1, 5]);
  // Its sampling settings too, not the server's defaults.
  const sp = spec.params;
  // Exactly as sent: float settings print as their shortest decimal (0.7, not 0.699999988079071).
  assert.deepEqual([sp.temperature, sp.top_p, sp.min_p, sp.repeat_penalty, sp.presence_penalty, sp.frequency_penalty],
    [0.7, 0.9, 0.1, 1.2, 0.3, 0.2]);
  assert.equal(sp.top_k, 5);
  assert.equal(sp.seed, 3);
  assert.equal(sp["speculative.n_max"], 15, "under auto: the most a round drafts (draft_max)");
  assert.equal(sp.ignore_eos, true);
});

check("--no-slots: /slots is a 501; /props says so; both need the key; --seed -1", async () => {
  const h = { authorization: "Bearer sk-k" };
  assert.equal((await get(off.base, "/slots")).status, 401);
  assert.equal((await get(off.base, "/props")).status, 401);
  const r = await get(off.base, "/slots", h);
  assert.equal(r.status, 501);
  assert.match(r.body.error.message, /--no-slots/);
  const p = await get(off.base, "/props", h);
  assert.equal(p.status, 200);
  assert.equal(p.body.endpoint_slots, false);
  // --seed -1, as llama-server: a random seed per request, shown as its random-seed value.
  assert.equal(p.body.default_generation_settings.params.seed, 4294967295);
});

await run([srv, off]);
