// File: common/refuse_threads.h (tests only)
//
// RefuseNewThreads: while alive, every new thread of the process asks for a
// stack larger than the address space (pthread default attributes), so the
// system refuses it and std::thread throws std::system_error. Used to test
// that thread-starting code turns that into an absl::Status or carries on
// with fewer threads instead of aborting. (Limiting processes with
// RLIMIT_NPROC does not work for root, which tests may run as.)
#ifndef COPPELIUS_COMMON_REFUSE_THREADS_H_
#define COPPELIUS_COMMON_REFUSE_THREADS_H_

#include <pthread.h>

#include <cstddef>

#include "gtest/gtest.h"

namespace coppelius {

class RefuseNewThreads {
 public:
  RefuseNewThreads() {
    EXPECT_EQ(pthread_getattr_default_np(&saved_), 0);
    pthread_attr_t huge;
    pthread_attr_init(&huge);
    EXPECT_EQ(pthread_attr_setstacksize(&huge, size_t{1} << 50), 0);
    EXPECT_EQ(pthread_setattr_default_np(&huge), 0);
    pthread_attr_destroy(&huge);
  }
  ~RefuseNewThreads() {
    pthread_setattr_default_np(&saved_);
    pthread_attr_destroy(&saved_);
  }
  RefuseNewThreads(const RefuseNewThreads&) = delete;
  RefuseNewThreads& operator=(const RefuseNewThreads&) = delete;

 private:
  pthread_attr_t saved_;
};

}  // namespace coppelius

#endif  // COPPELIUS_COMMON_REFUSE_THREADS_H_
