// ThreadPool: generation counter + atomic task counter; spin-then-wait workers.
#include "core/thread_pool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace crossword {
namespace {

// One spin-wait hint: PAUSE on x86, YIELD on Arm (both tell the core a sibling may run), nothing
// elsewhere. The only architecture-specific line of the pool.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__) || defined(__arm__)
  asm volatile("yield" ::: "memory");
#endif
}
// Waiting: a short busy spin (the other thread is usually microseconds away), then yielding the
// core (if the machine is oversubscribed, the thread we wait for may need this very core), then
// sleeping on the atomic (an idle pool costs no CPU).
// A yield that comes back late means another process ran on this core for a time slice (Linux
// CFS hands the yielding thread's core to any runnable task): every further yield would wait
// out another slice (with two niced busy loops on this 2-core VM the embedded model's spec
// passes took 13-24 ms on 2 threads against 0.7 ms on 1). Then, for kNoYieldFor, the pool's
// waits spin with the pause hint instead (a spinning thread at normal priority keeps its core)
// before sleeping. The yield phase stays first because on this VM (idle) it measured faster than
// a pause spin of the same length (16-row passes of the embedded model ~20 % faster): its pause
// loops may exit to the hypervisor.
constexpr int kPauseIterations = 256;
constexpr int kYieldIterations = 4096;
constexpr auto kLateYield = std::chrono::microseconds(500);
constexpr auto kPauseSpin = std::chrono::microseconds(1000);
constexpr auto kNoYieldFor = std::chrono::seconds(1);

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Calls `ready()` until it returns true, escalating from pause to yield (or, while
// `no_yield_until` is ahead, a timed pause spin) to a futex wait on `word` (which must change
// whenever `ready()` may become true).
template <class Word, class Ready>
void WaitUntil(std::atomic<Word>& word, std::atomic<int64_t>& no_yield_until, Ready ready) {
  for (int i = 0; i < kPauseIterations; ++i) {
    if (ready()) return;
    CpuRelax();
  }
  int64_t now = NowNs();
  if (now >= no_yield_until.load(std::memory_order_relaxed)) {
    for (int i = 0; i < kYieldIterations; ++i) {
      if (ready()) return;
      std::this_thread::yield();
      const int64_t after = NowNs();
      const bool late = after - now > std::chrono::nanoseconds(kLateYield).count();
      now = after;
      if (late) {
        no_yield_until.store(now + std::chrono::nanoseconds(kNoYieldFor).count(),
                             std::memory_order_relaxed);
        break;
      }
    }
  }
  if (now < no_yield_until.load(std::memory_order_relaxed)) {
    const int64_t until = now + std::chrono::nanoseconds(kPauseSpin).count();
    do {
      for (int i = 0; i < 64; ++i) {
        if (ready()) return;
        CpuRelax();
      }
    } while (NowNs() < until);
  }
  for (;;) {
    const Word seen = word.load(std::memory_order_acquire);
    if (ready()) return;
    word.wait(seen, std::memory_order_acquire);
  }
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::Work(int thread) {
  if (per_thread_) {
    call_(ctx_, thread, thread);
    return;
  }
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) break;
    call_(ctx_, task, thread);
  }
}

void ThreadPool::Dispatch(CallFn call, void* ctx, int64_t n_tasks, bool per_thread) {
  if (n_tasks <= 0) return;
  bool expected = false;
  if (n_threads_ == 1 || (!per_thread && n_tasks == 1) ||
      !in_job_.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
    // Single thread, trivial job, or a nested call from inside a task: run inline.
    if (per_thread) {
      call(ctx, 0, 0);
    } else {
      for (int64_t i = 0; i < n_tasks; ++i) call(ctx, i, 0);
    }
    return;
  }
  call_ = call;
  ctx_ = ctx;
  n_tasks_ = n_tasks;
  per_thread_ = per_thread;
  next_task_.store(0, std::memory_order_relaxed);
  busy_workers_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  Work(0);
  WaitUntil(busy_workers_, no_yield_until_,
            [this] { return busy_workers_.load(std::memory_order_acquire) == 0; });
  in_job_.store(false, std::memory_order_release);
}

void ThreadPool::WorkerLoop(int thread) {
  uint32_t seen = 0;  // generation_ starts at 0; a job may be posted before this thread runs
  for (;;) {
    WaitUntil(generation_, no_yield_until_,
              [&] { return generation_.load(std::memory_order_acquire) != seen; });
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    Work(thread);
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) busy_workers_.notify_one();
  }
}

}  // namespace crossword
