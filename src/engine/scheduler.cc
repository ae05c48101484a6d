// Scheduler: slot admission with prompt-cache affinity, the scheduler's own checkpointed prefill,
// and one batched forward pass per step over every active slot (continuous batching).
#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>

#include "base/error.h"

namespace crossword::engine {
namespace {
using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

struct Scheduler::Pending {
  ScheduledRequest req;
  std::shared_ptr<RequestHandle> handle;
  Clock::time_point submitted;
  bool stopped_by_caller = false;  // on_token returned false: a stop, not a cancellation
};

struct Scheduler::Slot {
  int index = 0;
  std::unique_ptr<model::SequenceState> state;
  PromptCache cache;
  uint64_t last_used = 0;
  // The active request (null when the slot is free).
  std::unique_ptr<Pending> active;
  std::unique_ptr<decode::Generation> gen;  // null while the scheduler prefills
  std::vector<int64_t> targets;             // checkpoint positions still ahead in that prefill
  size_t next_target = 0;
  int64_t cached = 0;
  bool end_checkpoint = false;
  std::span<const float> row;  // AR: the logits row of the pass being consumed (for on_token)
  Clock::time_point admitted;
  Clock::time_point last_emit;  // the request's previous emission (on_emit)
  bool emitted = false;         // it emitted at least one token
  double prefill_seconds = 0;
  // `--draft-max auto`: the draft-length controller the slot's last greedy spec generation ended
  // with (Generation::CarriedDraftControl), the start of the next; empty until one ran.
  std::optional<decode::DraftControl> draft_control;

  explicit Slot(PromptCacheOptions o) : cache(o) {}
  int64_t prompt_size() const { return static_cast<int64_t>(active->req.prompt.size()); }
};

Scheduler::Scheduler(const Engine& engine, SchedulerOptions options)
    : engine_(engine), options_(options) {
  Check(options_.n_slots >= 1, "scheduler: the number of slots must be >= 1 (got {})",
        options_.n_slots);
  Check(options_.n_ctx >= 2, "scheduler: the context per slot must be >= 2 tokens (got {})",
        options_.n_ctx);
  Check(options_.max_block_size >= 2 && options_.max_block_size <= 256,
        "scheduler: the largest block size must be in [2, 256] (got {})", options_.max_block_size);
  Check(options_.batch_tokens >= 1, "scheduler: batch tokens must be >= 1 (got {})",
        options_.batch_tokens);
  if (!options_.cache.turn_start) options_.cache.turn_start = engine.tokenizer().special().im_start;
  // Every slot's step (at most one block) must fit next to the others in one pass.
  options_.batch_tokens =
      std::max<int64_t>(options_.batch_tokens, int64_t{options_.n_slots} * options_.max_block_size);
  for (int i = 0; i < options_.n_slots; ++i) {
    auto slot = std::make_unique<Slot>(options_.cache);
    slot->index = i;
    slot->state = engine.NewState(options_.n_ctx, options_.kv_type);
    slots_.push_back(std::move(slot));
  }
  model::ContextOptions co;
  co.max_tokens = options_.batch_tokens;
  co.max_seqs = options_.n_slots;
  co.max_logit_rows = int64_t{options_.n_slots} * options_.max_block_size;
  ctx_ = engine.executor().NewContext(co);
  inputs_.reserve(static_cast<size_t>(options_.n_slots));
  members_.reserve(static_cast<size_t>(options_.n_slots));
  metrics_.n_slots = options_.n_slots;
  metrics_.kv_tokens_total = int64_t{options_.n_slots} * options_.n_ctx;
  PublishKvUse();  // every slot idle
  thread_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestHandle> Scheduler::Submit(ScheduledRequest request) {
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  if (n == 0) Fail("the prompt is empty: at least one token is needed");
  if (n >= options_.n_ctx) {
    Fail(
        "the prompt has {} tokens but a slot holds {} (prompt + answer); shorten the prompt or "
        "raise -c",
        n, options_.n_ctx);
  }
  const auto& p = request.params;
  if (p.mode != decode::Mode::kAr && p.block_size > options_.max_block_size) {
    Fail("block size {} is larger than this server's largest ({}, --max-block-size)", p.block_size,
         options_.max_block_size);
  }
  auto pending = std::make_unique<Pending>();
  pending->req = std::move(request);
  pending->submitted = Clock::now();
  std::shared_ptr<RequestHandle> handle;
  {
    std::lock_guard lk(mu_);
    if (stopping_) Fail("the server is shutting down");
    if (queue_.size() >= options_.max_queue) {
      Fail("the request queue is full ({} waiting); retry later", queue_.size());
    }
    handle.reset(new RequestHandle(next_id_++));
    pending->handle = handle;
    queue_.push_back(std::move(pending));
    ++metrics_.requests_submitted;
    metrics_.queue_length = static_cast<int64_t>(queue_.size());
  }
  cv_.notify_one();
  return handle;
}

SchedulerMetrics Scheduler::Metrics() const {
  std::lock_guard lk(mu_);
  return metrics_;
}

int Scheduler::ChooseSlot(const ScheduledRequest& request) const {
  int best = -1;
  int64_t best_resume = -1;
  uint64_t best_used = std::numeric_limits<uint64_t>::max();
  for (const auto& s : slots_) {
    if (s->active) continue;
    // The slot that resumes furthest; among equals the least recently used one.
    const int64_t r = request.use_cache ? s->cache.ResumePoint(request.prompt, *s->state) : 0;
    if (r > best_resume || (r == best_resume && s->last_used < best_used)) {
      best = s->index;
      best_resume = r;
      best_used = s->last_used;
    }
  }
  return best;
}

void Scheduler::Loop() {
  for (;;) {
    std::vector<std::unique_ptr<Pending>> dropped;
    std::vector<Slot*> admitted;
    bool stopping;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] {
        return stopping_ || !queue_.empty() ||
               std::any_of(slots_.begin(), slots_.end(),
                           [](const auto& s) { return s->active != nullptr; });
      });
      stopping = stopping_;
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (stopping || (*it)->handle->cancelled()) {
          dropped.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      while (!queue_.empty()) {
        const int s = ChooseSlot(queue_.front()->req);
        if (s < 0) break;
        slots_[s]->active = std::move(queue_.front());
        queue_.pop_front();
        admitted.push_back(slots_[s].get());
        ++metrics_.slots_busy;
      }
      metrics_.queue_length = static_cast<int64_t>(queue_.size());
      metrics_.requests_cancelled += static_cast<int64_t>(dropped.size());
    }
    for (auto& p : dropped) {
      RequestOutcome o;
      o.finish = decode::FinishReason::kCancelled;
      o.prompt_tokens = static_cast<int64_t>(p->req.prompt.size());
      o.queue_seconds = o.total_seconds = Seconds(p->submitted, Clock::now());
      try {
        if (p->req.on_done) p->req.on_done(o);
      } catch (...) {
        // The caller's problem; the scheduler goes on.
      }
    }
    for (Slot* s : admitted) {
      std::unique_ptr<Pending> p = std::move(s->active);
      Admit(std::move(p), *s);
    }
    if (!admitted.empty()) PublishKvUse();
    if (stopping) {
      for (auto& s : slots_) {
        if (!s->active) continue;
        s->active->handle->Cancel();
        if (s->gen) s->gen->Cancel();
        Finish(*s, "");
      }
      return;
    }
    if (!Step()) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // nothing runnable yet
  }
}

void Scheduler::Admit(std::unique_ptr<Pending> p, Slot& slot) {
  slot.active = std::move(p);
  slot.admitted = Clock::now();
  slot.emitted = false;
  slot.prefill_seconds = 0;
  slot.end_checkpoint = false;
  const std::vector<int32_t>& prompt = slot.active->req.prompt;
  if (!slot.active->req.use_cache) slot.cache.Clear(*slot.state);
  slot.cached = slot.cache.Resume(prompt, *slot.state);
  slot.targets = slot.cache.PlanCheckpoints(prompt, slot.cached);
  slot.next_target = 0;
  {
    std::lock_guard lk(mu_);
    metrics_.prompt_tokens += static_cast<int64_t>(prompt.size());
    metrics_.prompt_tokens_cached += slot.cached;
  }
  if (slot.state->n_past() + 1 == slot.prompt_size()) StartGeneration(slot);
}

void Scheduler::StartGeneration(Slot& slot) {
  decode::DecodeParams params = slot.active->req.params;
  params.prefill_chunk = std::max<int64_t>(1, options_.batch_tokens);
  Pending* req = slot.active.get();
  const Slot* sp = &slot;
  auto sink = [req, sp](int32_t token) {
    if (!req->req.on_token || req->req.on_token(token, sp->row)) return true;
    req->stopped_by_caller = true;
    return false;
  };
  try {
    slot.gen = std::make_unique<decode::Generation>(engine_.model(), *slot.state, req->req.prompt,
                                                    params, sink);
    slot.gen->SetHostPool(engine_.executor().host_pool());
    if (slot.draft_control) slot.gen->CarryDraftControl(*slot.draft_control);
  } catch (const std::exception& e) {
    Finish(slot, e.what());
  }
}

bool Scheduler::Step() {
  inputs_.clear();
  members_.clear();
  for (auto& s : slots_) {
    if (s->active && s->active->handle->cancelled()) {
      if (s->gen) s->gen->Cancel();
      Finish(*s, "");
    }
  }
  int64_t tokens_left = options_.batch_tokens;
  int64_t rows_left = ctx_->options().max_logit_rows;
  // Decoding steps first (they are small and latency-bound), then prefill shares what is left.
  for (auto& s : slots_) {
    if (!s->active || !s->gen) continue;
    model::SequenceInput in = s->gen->NextInput();
    const int64_t t = static_cast<int64_t>(in.tokens.size());
    const int64_t rows = in.logits == model::LogitRows::kAll    ? t
                         : in.logits == model::LogitRows::kLast ? 1
                                                                : 0;
    if (t > tokens_left || rows > rows_left) continue;  // next step
    tokens_left -= t;
    rows_left -= rows;
    inputs_.push_back(in);
    members_.push_back(s->index);
  }
  const size_t n = slots_.size();
  for (size_t k = 0; k < n && tokens_left > 0; ++k) {
    Slot& s = *slots_[(rr_ + k) % n];
    if (!s.active || s.gen) continue;
    const int64_t target =
        s.next_target < s.targets.size() ? s.targets[s.next_target] : s.prompt_size() - 1;
    const int64_t from = s.state->n_past();
    const int64_t t = std::min(target - from, tokens_left);
    if (t <= 0) continue;
    model::SequenceInput in;
    in.state = s.state.get();
    in.tokens =
        std::span(s.active->req.prompt).subspan(static_cast<size_t>(from), static_cast<size_t>(t));
    in.logits = model::LogitRows::kNone;
    tokens_left -= t;
    inputs_.push_back(in);
    members_.push_back(s.index);
  }
  ++rr_;
  if (inputs_.empty()) {
    PublishKvUse();  // a cancelled request may have freed its slot above
    return false;
  }

  const auto t0 = Clock::now();
  int64_t pass_tokens = 0;
  for (const auto& in : inputs_) pass_tokens += static_cast<int64_t>(in.tokens.size());
  try {
    engine_.executor().Forward(inputs_, *ctx_);
  } catch (const std::exception& e) {
    const std::string msg = std::string("forward pass failed: ") + e.what();
    for (int m : members_) {
      slots_[m]->cache.Clear(*slots_[m]->state);
      Finish(*slots_[m], msg);
    }
    PublishKvUse();
    return true;
  }
  int64_t emitted = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    Slot& s = *slots_[members_[i]];
    if (!s.active) continue;
    if (!s.gen) {
      if (s.next_target < s.targets.size() && s.state->n_past() == s.targets[s.next_target]) {
        s.cache.AddCheckpoint(*s.state);
        ++s.next_target;
      }
      if (options_.on_prefill) {
        options_.on_prefill(s.index, s.state->n_past() - s.cached, s.prompt_size() - s.cached,
                            Seconds(s.admitted, Clock::now()));
      }
      if (s.state->n_past() + 1 == s.prompt_size()) StartGeneration(s);
      continue;
    }
    const int64_t before = s.gen->stats().generated;
    const std::span<const float> logits = ctx_->logits(static_cast<int>(i));
    s.row = s.gen->params().mode == decode::Mode::kAr ? logits : std::span<const float>();
    if (ctx_->moe_layers() > 0) {
      s.gen->NotePassExperts(static_cast<double>(ctx_->experts_used()) / ctx_->moe_layers());
    }
    try {
      decode::DeliverLogits(*s.gen, *ctx_, static_cast<int>(i));
    } catch (const RequestError& e) {
      Finish(s, e.what(), /*client_error=*/true);
      continue;
    } catch (const std::exception& e) {
      Finish(s, e.what());
      continue;
    }
    if (s.active->req.on_pass) {
      try {
        s.active->req.on_pass(*s.gen);
      } catch (...) {
        // A tracer's problem; decoding goes on.
      }
    }
    const int64_t n_new = s.gen->stats().generated - before;
    emitted += n_new;
    if (n_new > 0 && options_.on_emit) {
      const auto now = Clock::now();
      options_.on_emit(n_new, !s.emitted, Seconds(s.emitted ? s.last_emit : s.admitted, now));
      s.last_emit = now;
      s.emitted = true;
    }
    if (!s.end_checkpoint && s.state->n_past() == s.prompt_size()) {
      s.prefill_seconds = Seconds(s.admitted, Clock::now());
      s.cache.AddCheckpoint(*s.state);
      s.end_checkpoint = true;
    }
    if (s.gen->done()) Finish(s, "");
  }
  const double busy = Seconds(t0, Clock::now());
  PublishKvUse();
  std::lock_guard lk(mu_);
  ++metrics_.forward_passes;
  metrics_.forward_tokens += pass_tokens;
  metrics_.forward_sequences += static_cast<int64_t>(inputs_.size());
  metrics_.busy_seconds += busy;
  metrics_.generated_tokens += emitted;
  return true;
}

void Scheduler::PublishKvUse() {
  int64_t used = 0;
  for (const auto& s : slots_)
    if (s->active) used += s->state->n_past();
  std::lock_guard lk(mu_);
  metrics_.kv_tokens_used = used;
  metrics_.slots.resize(slots_.size());  // allocates once
  for (const auto& s : slots_) {
    SlotState& st = metrics_.slots[static_cast<size_t>(s->index)];
    st = SlotState{};
    st.id = s->index;
    st.n_past = s->state->n_past();
    if (!s->active) continue;
    const decode::DecodeParams& p = s->gen ? s->gen->params() : s->active->req.params;
    st.busy = true;
    st.request = s->active->handle->id();
    st.generating = s->gen != nullptr;
    st.mode = p.mode;
    st.block_size = p.block_size;
    st.threshold = p.threshold;
    st.draft_max = p.draft_max;
    st.draft_auto = p.draft_auto;
    st.draft_p_min = p.draft_p_min;
    st.draft_expert_budget = p.draft_expert_budget;
    st.draft_skip_ffn = p.draft_skip_ffn;
    st.verify_chunk = p.verify_chunk;
    st.temperature = p.sampling.temperature;
    st.top_k = p.sampling.top_k;
    st.top_p = p.sampling.top_p;
    st.min_p = p.sampling.min_p;
    st.seed = p.sampling.seed;
    st.repetition_penalty = p.sampling.repetition_penalty;
    st.presence_penalty = p.sampling.presence_penalty;
    st.frequency_penalty = p.sampling.frequency_penalty;
    st.ignore_eos = p.eog_ids.empty();
    st.n_prompt = s->prompt_size();
    st.max_tokens = p.max_tokens;
    if (s->gen) {
      const decode::DecodeStats& d = s->gen->stats();
      st.n_decoded = d.generated;
      st.passes = d.forward_passes();
      st.tokens_per_pass = d.tokens_per_pass();
    }
  }
}

void Scheduler::Finish(Slot& slot, const std::string& error, bool client_error) {
  RequestOutcome o;
  Pending& p = *slot.active;
  o.slot = slot.index;
  o.prompt_tokens = slot.prompt_size();
  o.cached_tokens = slot.cached;
  o.error = error;
  o.client_error = !error.empty() && client_error;
  const auto now = Clock::now();
  o.queue_seconds = Seconds(p.submitted, slot.admitted);
  o.prefill_seconds = slot.prefill_seconds;
  o.total_seconds = Seconds(p.submitted, now);
  if (slot.gen) {
    if (auto carried = slot.gen->CarriedDraftControl()) slot.draft_control = *carried;
    o.stats = slot.gen->stats();
    o.output = slot.gen->output();
    o.finish = slot.gen->finish_reason();
    // The generation reports any end its sink asked for as kCancelled; the caller's stop string
    // is a normal finish (logged and counted as "stop"), unless Cancel() came as well.
    if (o.finish == decode::FinishReason::kCancelled && p.stopped_by_caller &&
        !p.handle->cancelled()) {
      o.finish = decode::FinishReason::kStop;
    }
  } else {
    o.finish = decode::FinishReason::kCancelled;
  }
  if (error.empty()) {
    std::vector<int32_t> held = p.req.prompt;
    held.insert(held.end(), o.output.begin(), o.output.end());
    slot.cache.Commit(held, *slot.state);
  } else {
    o.finish = decode::FinishReason::kNone;
    slot.cache.Clear(*slot.state);
  }
  {
    std::lock_guard lk(mu_);
    --metrics_.slots_busy;
    if (!error.empty()) {
      ++metrics_.requests_failed;
    } else if (o.finish == decode::FinishReason::kCancelled) {
      ++metrics_.requests_cancelled;
    } else {
      ++metrics_.requests_finished;
    }
  }
  std::unique_ptr<Pending> done = std::move(slot.active);
  slot.gen.reset();
  slot.targets.clear();
  slot.last_used = ++use_clock_;
  // The slot is idle before its caller hears the end: a scrape that follows the answer must not
  // still count this request's context as held (the pass's own PublishKvUse comes after).
  PublishKvUse();
  try {
    if (done->req.on_done) done->req.on_done(o);
  } catch (...) {
    // The caller's problem; the scheduler goes on.
  }
}

}  // namespace crossword::engine
