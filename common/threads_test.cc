#include "common/threads.h"

#include <atomic>
#include <cstdint>
#include <vector>

#include "common/refuse_threads.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

// Every item exactly once, whatever the thread count (known answer: the
// sum 0 + 1 + … + (n − 1) and a hit count of 1 per item).
TEST(ParallelFor, EveryItemOnce) {
  for (int threads : {0, 1, 3, 64}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1000}}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int64_t> sum{0};
      const int ran = ParallelFor(n, threads, [&](int64_t i) {
        hits[static_cast<size_t>(i)].fetch_add(1);
        sum.fetch_add(i);
      });
      EXPECT_GE(ran, 1);
      EXPECT_LE(ran, std::max<int64_t>(1, std::min<int64_t>(
                                              std::max(threads, 1), n)));
      for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
      EXPECT_EQ(sum.load(), n * (n - 1) / 2) << threads << " " << n;
    }
  }
}

// When no thread can be started the caller does all the work (it used to
// abort with std::system_error).
TEST(ParallelFor, RefusedThreadsLeaveTheWorkToTheCaller) {
  std::atomic<int64_t> sum{0};
  int ran = 0;
  {
    RefuseNewThreads refuse;
    ran = ParallelFor(100, 8, [&](int64_t i) { sum.fetch_add(i); });
  }
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(sum.load(), 4950);
}

}  // namespace
}  // namespace coppelius
