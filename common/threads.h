// File: common/threads.h
//
// The thread-count convention of every Coppelius tool: a positive request
// is taken as is, 0 (or less) means one thread per core the machine reports
// (at least 1). Tools that check requests accept at most kMaxThreadCount.
#ifndef COPPELIUS_COMMON_THREADS_H_
#define COPPELIUS_COMMON_THREADS_H_

#include <algorithm>
#include <thread>

namespace coppelius {

// The largest thread count a tool's --threads accepts (each thread costs a
// stack; the system refuses thousands).
constexpr int kMaxThreadCount = 1024;

inline int ResolveThreadCount(int requested) {
  if (requested > 0) return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace coppelius

#endif  // COPPELIUS_COMMON_THREADS_H_
