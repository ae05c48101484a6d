// Tests for core: type table and thread pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "core/types.h"

namespace crossword {
namespace {

TEST(Types, KnownSizes) {
  EXPECT_EQ(GetTypeTraits(GgmlType::kQ4_0).type_size, 18);
  EXPECT_EQ(GetTypeTraits(GgmlType::kQ6_K).block_size, 256);
  EXPECT_EQ(*RowBytes(GgmlType::kQ8_0, 2048), 2048u / 32 * 34);
  EXPECT_FALSE(RowBytes(GgmlType::kQ4_K, 100).has_value());
  EXPECT_EQ(*ParseTypeName("q4_k"), GgmlType::kQ4_K);
  EXPECT_FALSE(FindTypeTraits(4).has_value());  // removed Q4_2
  EXPECT_EQ(FindTypeTraits(30)->name, "BF16");
}

TEST(ThreadPool, EveryTaskRunsOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<std::atomic<int>> hits(1000);
      pool.ParallelFor(1000, [&](int64_t task, int thread) {
        ASSERT_GE(thread, 0);
        ASSERT_LT(thread, threads);
        hits[task].fetch_add(1);
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
  }
}

// Busy threads on every core: the pool's waits yield to them and sleep (thread_pool.cc,
// WaitUntil), and every task still runs exactly once, across gaps between loops (the worker
// asleep) too.
TEST(ThreadPool, EveryTaskRunsOnceBesideBusyThreads) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < cores; ++i) {
    busy.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  ThreadPool pool(2);
  for (int rep = 0; rep < 300; ++rep) {
    std::vector<std::atomic<int>> hits(64);
    pool.ParallelFor(64, [&](int64_t task, int) { hits[task].fetch_add(1); });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    if (rep % 100 == 99) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop = true;
  for (auto& t : busy) t.join();
}

// A loop with little work runs every task on the calling thread (thread 0), in order; with work
// enough, the tasks are shared as by the plain ParallelFor. Every task runs once either way.
TEST(ThreadPool, SmallWorkRunsOnTheCallingThread) {
  ThreadPool pool(2);
  std::vector<int64_t> order;
  pool.ParallelFor(50, ThreadPool::kMinParallelWork - 1, [&](int64_t task, int thread) {
    ASSERT_EQ(thread, 0);
    order.push_back(task);
  });
  ASSERT_EQ(order.size(), 50u);
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  // With work enough the loop is shared: task 0 waits (up to 5 s) for task 1 to start, which only
  // another thread can do while task 0 runs.
  std::atomic<bool> started{false}, waited_ok{false};
  pool.ParallelFor(2, ThreadPool::kMinParallelWork, [&](int64_t task, int) {
    if (task == 1) {
      started = true;
      return;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!started && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    waited_ok = started.load();
  });
  EXPECT_TRUE(waited_ok) << "task 1 did not run beside task 0: the large loop ran inline";
}

TEST(ThreadPool, RunOnEachThreadAndNesting) {
  ThreadPool pool(2);
  std::atomic<int> mask{0};
  std::atomic<int> inner{0};
  pool.RunOnEachThread([&](int thread) {
    mask.fetch_or(1 << thread);
    pool.ParallelFor(10, [&](int64_t, int) { inner.fetch_add(1); });  // nested: runs inline
  });
  EXPECT_EQ(mask.load(), 3);
  EXPECT_EQ(inner.load(), 20);
}

TEST(ThreadPool, RunsInlineOnOneThreadAndInsideATask) {
  ThreadPool one(1), two(2);
  EXPECT_TRUE(one.RunsInline());
  EXPECT_FALSE(two.RunsInline());
  std::atomic<int> inline_seen{0};
  two.RunOnEachThread([&](int) { inline_seen.fetch_add(two.RunsInline() ? 1 : 0); });
  EXPECT_EQ(inline_seen.load(), 2);
  EXPECT_FALSE(two.RunsInline());  // the loop is over
}

// A task that throws, on a worker or on the calling thread, in ParallelFor or RunOnEachThread:
// the issuing call rethrows it once every thread has left the loop, and the pool keeps working
// (every later task runs, on every thread).
TEST(ThreadPool, AnExceptionInATaskReachesTheCaller) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 50; ++rep) {
    const int thrower = rep % 2;
    std::atomic<int> done{0};
    EXPECT_THROW(pool.RunOnEachThread([&](int thread) {
      if (thread == thrower) throw std::runtime_error("task failed");
      done.fetch_add(1);
    }),
                 std::runtime_error);
    EXPECT_EQ(done.load(), 1);  // the other thread's task ran to its end
    EXPECT_THROW(pool.ParallelFor(100,
                                  [&](int64_t task, int) {
                                    if (task == 37) throw std::runtime_error("task 37 failed");
                                  }),
                 std::runtime_error);
    std::atomic<int> mask{0};
    std::vector<std::atomic<int>> hits(64);
    pool.RunOnEachThread([&](int thread) { mask.fetch_or(1 << thread); });
    pool.ParallelFor(64, [&](int64_t task, int) { hits[task].fetch_add(1); });
    EXPECT_EQ(mask.load(), 3);
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

// RunOnEachThread nested in a task calls fn for every thread index, on the calling thread.
TEST(ThreadPool, NestedRunOnEachThreadCallsEveryIndex) {
  ThreadPool pool(3);
  std::atomic<int> calls{0};
  pool.ParallelFor(4, [&](int64_t, int) {
    int mask = 0;
    pool.RunOnEachThread([&](int thread) { mask |= 1 << thread; });
    EXPECT_EQ(mask, 7);
    calls.fetch_add(1);
  });
  EXPECT_EQ(calls.load(), 4);
}

}  // namespace
}  // namespace crossword
