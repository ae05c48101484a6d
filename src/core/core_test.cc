// Tests for core: type table and thread pool.
#include <gtest/gtest.h>

#include <atomic>
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

}  // namespace
}  // namespace crossword
