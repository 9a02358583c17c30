// File: common/threads.h
//
// The thread-count convention of every Coppelius tool: a positive request
// is taken as is, 0 (or less) means one thread per core the machine reports
// (at least 1). Tools that check requests accept at most kMaxThreadCount.
#ifndef COPPELIUS_COMMON_THREADS_H_
#define COPPELIUS_COMMON_THREADS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace coppelius {

// The largest thread count a tool's --threads accepts (each thread costs a
// stack; the system refuses thousands).
constexpr int kMaxThreadCount = 1024;

inline int ResolveThreadCount(int requested) {
  if (requested > 0) return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// ResolveThreadCount, at most kMaxThreadCount (a machine may report more
// cores than a tool starts threads).
inline int ResolveCappedThreadCount(int requested) {
  return std::min(ResolveThreadCount(requested), kMaxThreadCount);
}

// The check every tool makes of its --threads flag: OK for
// 0..kMaxThreadCount, else InvalidArgument
// "--threads=N: expected 0..1024 (0 = all cores)".
inline absl::Status CheckThreadsFlag(int threads) {
  if (threads >= 0 && threads <= kMaxThreadCount) return absl::OkStatus();
  return UsageError(absl::StrCat(
      "--threads=", threads, ": expected 0..", kMaxThreadCount,
      " (0 = all cores)"));
}

// Calls fn(i) once for every i in [0, n) on up to `threads` threads, the
// caller's included; items are handed out in increasing order from a shared
// counter, so fn must not depend on which thread runs it. Returns after
// every call has returned. If the system refuses to start a thread
// (std::thread throws std::system_error), the threads already running and
// the caller do the remaining items: the same calls, fewer threads, never
// an abort. Returns the number of threads that ran (at least 1).
template <typename Fn>
int ParallelFor(int64_t n, int threads, const Fn& fn) {
  if (n <= 0) return 1;
  const int64_t wanted = std::min<int64_t>(std::max(threads, 1), n);
  std::atomic<int64_t> next{0};
  auto work = [&]() {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(wanted - 1));
  for (int64_t t = 1; t < wanted; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // the system has no more threads for us: carry on with fewer
    }
  }
  work();
  for (std::thread& thread : pool) thread.join();
  return static_cast<int>(pool.size()) + 1;
}

}  // namespace coppelius

#endif  // COPPELIUS_COMMON_THREADS_H_
