// ThreadPool: generation counter + atomic task counter; spin-then-wait workers.
#include "core/thread_pool.h"

#include <mutex>

#include "core/cpu_relax.h"

namespace crossword {
namespace {

// Waiting: a short busy spin (the other thread is usually microseconds away), then yielding the
// core (if the machine is oversubscribed, the thread we wait for may need this very core), then
// sleeping on the atomic (an idle pool costs no CPU).
constexpr int kPauseIterations = 256;
constexpr int kYieldIterations = 4096;

// Calls `ready()` until it returns true, escalating from pause to yield to a futex wait on `word`
// (which must change whenever `ready()` may become true).
template <class Word, class Ready>
void WaitUntil(std::atomic<Word>& word, Ready ready) {
  for (int i = 0; i < kPauseIterations; ++i) {
    if (ready()) return;
    CpuRelax();
  }
  for (int i = 0; i < kYieldIterations; ++i) {
    if (ready()) return;
    std::this_thread::yield();
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
  try {
    if (per_thread_) {
      call_(ctx_, thread, thread);
      return;
    }
    for (;;) {
      const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
      if (task >= n_tasks_) break;
      call_(ctx_, task, thread);
    }
  } catch (...) {
    // The first error of the job goes to the caller (Dispatch rethrows it once every thread is
    // done); no further task is handed out.
    std::lock_guard<std::mutex> lock(error_mu_);
    if (!error_) error_ = std::current_exception();
    failed_.store(true, std::memory_order_relaxed);
    next_task_.store(n_tasks_, std::memory_order_relaxed);
  }
}

void ThreadPool::Dispatch(CallFn call, void* ctx, int64_t n_tasks, bool per_thread) {
  if (n_tasks <= 0) return;
  bool expected = false;
  // (The plain load first: nested calls from both threads at once would otherwise bounce the
  // flag's cache line between the cores with every failing compare-exchange.)
  if (n_threads_ == 1 || (!per_thread && n_tasks == 1) || in_job_.load(std::memory_order_relaxed) ||
      !in_job_.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
    // Single thread, trivial job, or a nested call from inside a task: run inline, every task
    // (every thread index for RunOnEachThread) on this thread, in order.
    if (per_thread) {
      for (int t = 0; t < n_threads_; ++t) call(ctx, t, t);
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
  WaitUntil(busy_workers_, [this] { return busy_workers_.load(std::memory_order_acquire) == 0; });
  std::exception_ptr error;
  if (failed_.load(std::memory_order_relaxed)) {  // ordered by busy_workers_'s acquire above
    std::lock_guard<std::mutex> lock(error_mu_);
    error.swap(error_);
    failed_.store(false, std::memory_order_relaxed);
  }
  in_job_.store(false, std::memory_order_release);
  if (error) std::rethrow_exception(error);
}

void ThreadPool::WorkerLoop(int thread) {
  uint32_t seen = 0;  // generation_ starts at 0; a job may be posted before this thread runs
  for (;;) {
    WaitUntil(generation_, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    Work(thread);
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) busy_workers_.notify_one();
  }
}

}  // namespace crossword
