// parallel_for (sim/report/parallel.h): every index once, progress counts to n, and the
// exception a serial loop would have thrown (the lowest failing index) for any thread count.
#include "sim/report/parallel.h"

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stepcast {
namespace {

TEST(ParallelFor, VisitsEveryIndexOnceAndCountsProgress) {
  for (int threads : {1, 2, 5, 64}) {
    std::vector<std::atomic<int>> hits(1000);
    size_t last = 0, calls = 0;
    parallel_for(
        hits.size(), threads, [&](size_t i) { ++hits[i]; },
        [&](size_t done, size_t total) {
          EXPECT_EQ(total, 1000u);
          EXPECT_EQ(done, last + 1);  // called under a lock, in order
          last = done;
          ++calls;
        });
    for (const auto& h : hits) EXPECT_EQ(h.load(), 1) << threads << " threads";
    EXPECT_EQ(calls, 1000u);
  }
  parallel_for(0, 4, [](size_t) { FAIL(); });  // nothing to do
}

TEST(ParallelFor, RethrowsTheLowestFailingIndex) {
  // Indices 300 and 700 fail; a serial loop stops at 300, so every thread count reports 300.
  for (int threads : {1, 2, 8}) {
    try {
      parallel_for(1000, threads, [](size_t i) {
        if (i == 300 || i == 700) throw std::runtime_error(std::to_string(i));
      });
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "300") << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace stepcast
