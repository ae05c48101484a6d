// Continuous-batching scheduler: N slots (one SequenceState + prompt cache each), a FIFO queue,
// and one thread that runs every active request's next step in a single batched forward pass.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "decode/generation.h"
#include "engine/engine.h"
#include "engine/prompt_cache.h"

namespace crossword::engine {

struct SchedulerOptions {
  int n_slots = 1;       ///< requests decoded at once (>= 1)
  int64_t n_ctx = 4096;  ///< tokens per slot: prompt + answer (+ one block of scratch)
  GgmlType kv_type = GgmlType::kF16;
  int64_t batch_tokens =
      512;  ///< tokens per forward pass over all slots (raised to n_slots x max_block_size)
  int max_block_size = 32;   ///< largest diffusion block / spec draft a request may use
  size_t max_queue = 1024;   ///< waiting requests beyond this are refused
  PromptCacheOptions cache;  ///< checkpoints (turn_start defaults to the model's <|im_start|>)
  /// Optional: called on the scheduler thread after each forward pass, once per request that
  /// emitted tokens in it, with the tokens emitted, whether they are the request's first, and the
  /// seconds since its previous emission (first: since it got its slot). For latency histograms;
  /// must be quick and must not throw.
  std::function<void(int64_t tokens, bool first, double seconds)> on_emit;
  /// Optional: called on the scheduler thread after each prefill pass of a request, with its
  /// slot, the prompt tokens evaluated so far and in all (cached ones excluded) and the seconds
  /// since it got its slot: progress of long prompts (serve logs it). Quick, must not throw.
  std::function<void(int slot, int64_t done, int64_t total, double seconds)> on_prefill;
};

/// How a request ended, reported once to its on_done callback.
struct RequestOutcome {
  decode::FinishReason finish = decode::FinishReason::kNone;
  decode::DecodeStats
      stats;  ///< from the generation (its prompt_tokens counts only its own prefill)
  int64_t prompt_tokens = 0;    ///< tokens of the prompt
  int64_t cached_tokens = 0;    ///< prompt tokens resumed from the slot's cache (not evaluated)
  std::vector<int32_t> output;  ///< emitted tokens (EOG excluded)
  double queue_seconds = 0;     ///< from Submit to getting a slot
  double prefill_seconds = 0;   ///< from getting a slot to the first token's logits
  double total_seconds = 0;     ///< from Submit to the end
  int slot = -1;
  std::string error;          ///< non-empty: the request failed inside the engine
  bool client_error = false;  ///< `error` came from the request itself (crossword::RequestError)
};

/// One request for the scheduler. The callbacks run on the scheduler thread and must be quick;
/// an exception thrown by them ends that request with `error` set (others go on).
struct ScheduledRequest {
  std::vector<int32_t> prompt;  ///< at least one token, fewer than n_ctx
  decode::DecodeParams params;
  /// false: evaluate the whole prompt (the slot's cache is dropped first), e.g. for cold timings.
  bool use_cache = true;
  /// Each emitted token, in order, with the raw logits row (n_vocab floats, before penalties and
  /// sampling) it was chosen from: given in AR mode, empty in diffusion/spec mode (their rows are
  /// per block slot). Return false to end the request here (a stop string matched): it finishes
  /// with FinishReason::kStop and counts as finished; only RequestHandle::Cancel() cancels.
  std::function<bool(int32_t token, std::span<const float> logits)> on_token;
  /// Optional: called on the scheduler thread after each decoding pass of the request (prefill
  /// excluded), with its generation: block() and masked() show a diffusion block's slots or a
  /// spec round's drafts, stats() the counters. For tracing; must be quick.
  std::function<void(const decode::Generation&)> on_pass;
  /// Called exactly once when the request ends (finished, cancelled, failed or never started).
  std::function<void(const RequestOutcome&)> on_done;
};

/// The caller's side of a submitted request. Cancel() from any thread: a queued request is
/// dropped, an active one ends before the scheduler's next forward pass and frees its slot.
class RequestHandle {
 public:
  uint64_t id() const { return id_; }
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  friend class Scheduler;
  explicit RequestHandle(uint64_t id) : id_(id) {}
  uint64_t id_;
  std::atomic<bool> cancelled_{false};
};

/// What one slot is doing, as of the scheduler's last pass.
struct SlotState {
  int id = 0;
  bool busy = false;
  uint64_t request = 0;     ///< the active request's id (0: none)
  bool generating = false;  ///< past prefill
  /// The active request's decoding settings (DecodeParams' fields of the same names).
  decode::Mode mode = decode::Mode::kAr;
  int block_size = 0;
  float threshold = 0;
  int draft_max = 0;
  bool draft_auto = false;
  float draft_p_min = 0;
  bool draft_expert_budget = false;
  uint64_t draft_skip_ffn = 0;
  int verify_chunk = 0;
  /// The active request's sampling settings (SamplingParams' scalar fields; logit_bias is left
  /// out so that publishing allocates nothing) and whether its end-of-generation tokens are banned.
  float temperature = 0, top_p = 1, min_p = 0;
  int top_k = 0;
  uint64_t seed = 0;
  float repetition_penalty = 1, presence_penalty = 0, frequency_penalty = 0;
  bool ignore_eos = false;
  int64_t n_prompt = 0;   ///< prompt tokens of the active request
  int64_t n_past = 0;     ///< context tokens held
  int64_t n_decoded = 0;  ///< tokens emitted so far
  int64_t max_tokens = 0;
  int64_t passes = 0;  ///< decoding passes so far (prefill excluded)
  double tokens_per_pass = 0;
};

/// Counters since start (monotonic) and current gauges.
struct SchedulerMetrics {
  int n_slots = 0;
  int slots_busy = 0;
  int64_t queue_length = 0;
  int64_t requests_submitted = 0;
  int64_t requests_finished = 0;   ///< ended with stop or length
  int64_t requests_cancelled = 0;  ///< ended by Cancel (client gone, server stopping)
  int64_t requests_failed = 0;
  int64_t prompt_tokens = 0;  ///< prompt tokens of requests that got a slot
  int64_t prompt_tokens_cached = 0;
  int64_t generated_tokens = 0;
  int64_t forward_passes = 0;     ///< batched passes (one per scheduler step)
  int64_t forward_tokens = 0;     ///< tokens processed in them (prefill, steps, blocks)
  int64_t forward_sequences = 0;  ///< sum over passes of the sequences batched in it
  double busy_seconds = 0;        ///< time spent in forward passes and sampling
  /// Context tokens held by the busy slots' sequences (prompt prefix resumed or evaluated, plus
  /// the answer so far), updated after each pass; kv_tokens_total = slots x context per slot.
  int64_t kv_tokens_used = 0;
  int64_t kv_tokens_total = 0;
  std::vector<SlotState> slots;  ///< one per slot, in slot order
};

/// Owns the slots and the scheduler thread. Engine must outlive it. Thread-safe: Submit, Metrics
/// and handles may be used from any thread.
class Scheduler {
 public:
  /// Allocates every slot's state and the forward context. Throws crossword::Error on bad options
  /// or when memory cannot be had.
  Scheduler(const Engine& engine, SchedulerOptions options);
  /// Cancels what is queued and active (their on_done runs) and joins the thread.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const SchedulerOptions& options() const { return options_; }

  /// Queues a request. Throws crossword::Error (nothing queued, on_done not called) when the
  /// prompt is empty or does not fit n_ctx, the queue is full, or the scheduler is stopping.
  std::shared_ptr<RequestHandle> Submit(ScheduledRequest request);

  SchedulerMetrics Metrics() const;

 private:
  struct Pending;
  struct Slot;
  void Loop();
  void Admit(std::unique_ptr<Pending> p, Slot& slot);
  int ChooseSlot(const ScheduledRequest& request) const;
  bool Step();
  void Finish(Slot& slot, const std::string& error, bool client_error = false);
  void StartGeneration(Slot& slot);
  void PublishKvUse();  // scheduler thread: recomputes metrics_.kv_tokens_used and the slots

  const Engine& engine_;
  SchedulerOptions options_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::unique_ptr<model::ForwardContext> ctx_;
  std::vector<model::SequenceInput> inputs_;  // scratch of Step
  std::vector<int> members_;                  // slot index of each input
  size_t rr_ = 0;                             // round-robin start of prefill budget sharing
  uint64_t use_clock_ = 0;                    // LRU order of slots

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Pending>> queue_;
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  SchedulerMetrics metrics_;
  std::thread thread_;
};

}  // namespace crossword::engine
