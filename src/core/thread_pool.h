// A fixed-size thread pool passed explicitly to whatever computes in parallel (no global pool).
// The calling thread takes part as thread 0, so ThreadPool(1) runs everything inline.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace crossword {

/// Runs data-parallel loops on `n_threads` threads (the caller plus n_threads-1 workers).
/// Workers spin briefly after a job and then sleep, so an idle pool costs no CPU.
/// Not reentrant: a ParallelFor or RunOnEachThread issued from inside a task runs inline on that
/// thread. An exception thrown by a task on any thread is rethrown by the call that issued the
/// loop, after every thread has left it (the first one; no further task starts); the pool stays
/// usable. Dispatch does not allocate.
class ThreadPool {
 public:
  /// `n_threads` >= 1 (values < 1 are treated as 1).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  /// True when a loop issued now runs every task on the calling thread: a pool of one thread, or
  /// a call from inside a task (nested) while a loop is running. A caller can then pick coarser
  /// tasks (the results must not depend on the split).
  bool RunsInline() const { return n_threads_ == 1 || in_job_.load(std::memory_order_relaxed); }

  /// Calls fn(task, thread) for every task in [0, n_tasks); tasks are handed out dynamically
  /// one at a time; `thread` is in [0, size()). Returns when all tasks are done.
  template <class F>
  void ParallelFor(int64_t n_tasks, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    auto call = [](void* ctx, int64_t task, int thread) { (*static_cast<Fn*>(ctx))(task, thread); };
    Dispatch(call, const_cast<void*>(static_cast<const void*>(&fn)), n_tasks, /*per_thread=*/false);
  }

  /// As ParallelFor, but runs every task on the calling thread, in order, when the whole loop is
  /// `work` < kMinParallelWork units (multiply-adds, or comparable simple operations): handing
  /// tasks to another thread costs ~1-3 us per loop on a 2-core VM (measured: an empty 2-task loop
  /// 0.8-1.1 us back to back, ~2 us after a few us of serial work), more than such a loop takes;
  /// the embedded model's one-row steps ran ~2.5x slower on 2 threads than on 1. The tasks and
  /// their results are the same either way.
  template <class F>
  void ParallelFor(int64_t n_tasks, int64_t work, F&& fn) {
    if (work < kMinParallelWork) {
      for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
      return;
    }
    ParallelFor(n_tasks, std::forward<F>(fn));
  }
  static constexpr int64_t kMinParallelWork = int64_t{1} << 20;

  /// Calls fn(thread) once for each thread index in [0, size()), each on its own thread (nested
  /// in a task: all on the calling thread, in order). Use for static partitions.
  template <class F>
  void RunOnEachThread(F&& fn) {
    using Fn = std::remove_reference_t<F>;
    auto call = [](void* ctx, int64_t, int thread) { (*static_cast<Fn*>(ctx))(thread); };
    Dispatch(call, const_cast<void*>(static_cast<const void*>(&fn)), n_threads_,
             /*per_thread=*/true);
  }

 private:
  using CallFn = void (*)(void*, int64_t, int);
  void Dispatch(CallFn call, void* ctx, int64_t n_tasks, bool per_thread);
  void WorkerLoop(int thread);
  void Work(int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  // Current job.
  CallFn call_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_tasks_ = 0;
  bool per_thread_ = false;
  alignas(64) std::atomic<int64_t> next_task_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> busy_workers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> in_job_{false};
  std::mutex error_mu_;       // guards error_ (taken only when a task has thrown)
  std::exception_ptr error_;  // the job's first exception
  std::atomic<bool> failed_{false};
};

}  // namespace crossword
