// crossword's chat page: conversations kept in this browser (localStorage), answers streamed from
// the server's /v1/chat/completions, and in diffusion and spec modes a live view of the block the
// model is filling, driven by the server's opt-in stream extension
// stream_options.crossword_trace (docs/server.md). Talks to this server only; no other requests.
"use strict";

const $ = (id) => document.getElementById(id);
const store = {
  get key() { return sessionStorage.getItem("crossword.key") || ""; },
  set key(v) { sessionStorage.setItem("crossword.key", v); },
  load() {
    try { return JSON.parse(localStorage.getItem("crossword.conversations") || "[]"); } catch { return []; }
  },
  save(list) { localStorage.setItem("crossword.conversations", JSON.stringify(list)); },
};

let conversations = store.load();
let current = null;   // the conversation shown
let controller = null;  // AbortController of the answer being streamed

function headers() {
  const h = { "content-type": "application/json" };
  if (store.key) h.authorization = "Bearer " + store.key;
  return h;
}

// Asks for the API key until the server accepts one (only when it needs one).
async function ensureKey() {
  for (;;) {
    const r = await fetch("/v1/models", { headers: headers() });
    if (r.status !== 401) return r.ok ? r.json() : null;
    const dlg = $("key-dialog");
    $("key-error").textContent = store.key ? "That key was not accepted." : "";
    dlg.showModal();
    await new Promise((resolve) => dlg.addEventListener("close", resolve, { once: true }));
    store.key = $("key-input").value.trim();
  }
}

function newConversation() {
  current = { id: Date.now().toString(36), title: "New chat", messages: [] };
  conversations.unshift(current);
  store.save(conversations);
  render();
}

function renderList() {
  const ul = $("conversations");
  ul.textContent = "";
  for (const c of conversations) {
    const li = document.createElement("li");
    li.textContent = c.title;
    if (c === current) li.className = "active";
    li.onclick = () => { if (!controller) { current = c; render(); } };
    ul.appendChild(li);
  }
}

function messageNode(m) {
  const div = document.createElement("div");
  div.className = "msg " + m.role;
  const role = document.createElement("div");
  role.className = "role";
  role.textContent = m.role === "user" ? "You" : "crossword" + (m.mode ? " (" + m.mode + ")" : "");
  div.appendChild(role);
  if (m.reasoning) {
    const d = document.createElement("details");
    const s = document.createElement("summary");
    s.textContent = "Reasoning";
    const pre = document.createElement("pre");
    pre.className = "reasoning";
    pre.textContent = m.reasoning;
    d.append(s, pre);
    div.appendChild(d);
  }
  const content = document.createElement("div");
  content.className = "content";
  content.textContent = m.content || "";
  div.appendChild(content);
  for (const call of m.tool_calls || []) {
    const t = document.createElement("div");
    t.className = "tool-call";
    t.textContent = "tool call: " + call.name + "(" + call.arguments + ")";
    div.appendChild(t);
  }
  if (m.error) {
    const e = document.createElement("div");
    e.className = "error";
    e.textContent = m.error;
    div.appendChild(e);
  }
  if (m.stats) {
    const s = document.createElement("div");
    s.className = "stats";
    s.textContent = m.stats;
    div.appendChild(s);
  }
  if (m.role === "assistant") div.dataset.state = m.done ? "done" : "streaming";
  return div;
}

function render() {
  renderList();
  const box = $("messages");
  box.textContent = "";
  for (const m of current.messages) box.appendChild(messageNode(m));
  box.scrollTop = box.scrollHeight;
}

function updateLast(m) {
  const box = $("messages");
  const node = messageNode(m);
  const details = box.lastElementChild && box.lastElementChild.querySelector("details");
  if (details && details.open) node.querySelector("details")?.setAttribute("open", "");
  box.replaceChild(node, box.lastElementChild);
  box.scrollTop = box.scrollHeight;
}

// --- the block view -------------------------------------------------------------------------
const blockView = { passes: 0 };

function showSlot(text) {
  return text.replace(/\n/g, "⏎").replace(/\t/g, "⇥");
}

function resetBlock(size) {
  blockView.passes = 0;
  const grid = $("slots");
  grid.textContent = "";
  for (let j = 0; j < size; j++) {
    const d = document.createElement("div");
    d.className = "slot";
    grid.appendChild(d);
  }
  $("block-view").dataset.passes = "0";
  $("block-title").textContent = "Block";
  $("block-stats").textContent = "";
}

function onTrace(t) {
  const grid = $("slots");
  while (grid.children.length < t.slots.length) {
    const d = document.createElement("div");
    d.className = "slot";
    grid.appendChild(d);
  }
  const fresh = new Set(t.committed);
  t.slots.forEach((text, j) => {
    const d = grid.children[j];
    d.textContent = showSlot(text);
    d.title = text;
    let cls = "slot";
    if (j === 0 && text) cls += " seed";
    else if (t.phase === "draft" && text) cls += " draft";
    else if (t.phase === "verify" && text) cls += j <= t.accepted ? " accepted" : " rejected";
    else if (fresh.has(j) && t.phase === "denoise") cls += " new";
    else if (text) cls += " filled";
    d.className = cls;
  });
  for (let j = t.slots.length; j < grid.children.length; j++) {
    grid.children[j].className = "slot";
    grid.children[j].textContent = "";
  }
  blockView.passes++;
  $("block-view").dataset.passes = String(blockView.passes);
  $("block-title").textContent = "Block " + t.block + " · pass " + t.pass + " · " + t.phase;
  let s = t.tokens_per_pass.toFixed(2) + " tokens/pass";
  if (t.phase === "denoise") s += " · " + t.committed.length + " filled this pass";
  if (t.phase === "draft") s += " · " + t.drafted + " drafted";
  if (t.phase === "verify") s += " · " + t.accepted + " of " + t.drafted + " accepted";
  $("block-stats").textContent = s;
}

// --- sending ----------------------------------------------------------------------------------
async function send(text) {
  const mode = $("mode").value;
  current.messages.push({ role: "user", content: text });
  if (current.title === "New chat") current.title = text.slice(0, 40);
  const answer = { role: "assistant", content: "", reasoning: "", tool_calls: [], mode, done: false };
  current.messages.push(answer);
  render();
  const body = {
    messages: current.messages.slice(0, -1).map((m) => ({ role: m.role, content: m.content })),
    stream: true,
    stream_options: { include_usage: true, crossword_trace: mode !== "ar" },
    max_tokens: Number($("max-tokens").value) || 256,
    chat_template_kwargs: { enable_thinking: $("thinking").checked },
    crossword: { mode },
  };
  if (mode !== "ar") {
    body.crossword.block_size = Number($("block-size").value) || 32;
    if (mode === "diffusion") body.crossword.threshold = Number($("threshold").value) || 0.95;
    if (mode === "spec") {
      // Drafts per round: auto (the server picks per round; on a small CPU model mostly none, so
      // the block view shows the seed's verify) or a fixed count.
      const d = $("draft-max").value;
      body.crossword.draft_max = d === "auto" ? "auto" : Number(d);
    }
    $("block-view").hidden = false;
    resetBlock(body.crossword.block_size);
  } else {
    $("block-view").hidden = true;
  }
  controller = new AbortController();
  $("send").hidden = true;
  $("stop").hidden = false;
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal,
    });
    if (!r.ok) {
      let msg = r.status + " " + r.statusText;
      try { msg = (await r.json()).error.message; } catch {}
      throw new Error(msg);
    }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          onChunk(answer, JSON.parse(data));
        }
      }
      updateLast(answer);
    }
  } catch (e) {
    if (e.name !== "AbortError") answer.error = String(e.message || e);
  } finally {
    answer.done = true;
    controller = null;
    $("send").hidden = false;
    $("stop").hidden = true;
    store.save(conversations);
    updateLast(answer);
    renderList();
  }
}

function onChunk(answer, c) {
  if (c.error) { answer.error = c.error.message; return; }
  if (c.crossword_trace) onTrace(c.crossword_trace);
  for (const ch of c.choices || []) {
    const d = ch.delta || {};
    if (d.content) answer.content += d.content;
    if (d.reasoning_content) answer.reasoning += d.reasoning_content;
    for (const t of d.tool_calls || []) {
      if (!answer.tool_calls[t.index]) answer.tool_calls[t.index] = { name: "", arguments: "" };
      if (t.function && t.function.name) answer.tool_calls[t.index].name = t.function.name;
      if (t.function && t.function.arguments) answer.tool_calls[t.index].arguments += t.function.arguments;
    }
  }
  if (c.timings) {
    const t = c.timings;
    answer.stats = t.predicted_n + " tokens · " + t.predicted_per_second.toFixed(1) + " tokens/s · " +
      t.tokens_per_pass.toFixed(2) + " tokens/pass · " + t.mode;
  }
}

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").onclick = () => controller && controller.abort();
$("new-chat").onclick = () => { if (!controller) newConversation(); };
$("mode").onchange = () => { $("block-view").hidden = $("mode").value === "ar"; };

(async () => {
  const models = await ensureKey();
  const m = models && models.data && models.data[0];
  if (m) {
    $("model-info").textContent = m.id + (m.meta ? " · " + m.meta.n_ctx_slot + " tokens per slot" : "");
    if (m.meta) {
      $("mode").value = m.meta.mode;
      $("block-size").value = m.meta.block_size;
      $("threshold").value = Number(m.meta.threshold.toFixed(3));
      if (m.meta.draft_max !== undefined) {
        const d = String(m.meta.draft_max);
        const select = $("draft-max");
        if (![...select.options].some((o) => o.value === d)) select.add(new Option(d, d));
        select.value = d;
      }
    }
  }
  if (conversations.length) { current = conversations[0]; render(); } else newConversation();
})();
