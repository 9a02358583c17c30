// File: trainer/result_file_noflock_test.cc
//
// A file system without flock(2), as some network file systems are: this
// test binary defines flock itself (a link-time seam: the executable's
// definition is the one every call binds to, linkstatic), answering ENOLCK
// as such a file system does. Train's outputs must stay writable there:
// ResultWriter writes its file unlocked, as FileLock takes its lock file
// unlocked (common/file_lock.h), and both refuse nothing else.
#include <errno.h>
#include <sys/file.h>

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/file_lock.h"
#include "gtest/gtest.h"
#include "trainer/result_file.h"

namespace {
std::atomic<int> g_flock_calls{0};
std::atomic<int> g_flock_errno{ENOLCK};
}  // namespace

extern "C" int flock(int, int) {
  ++g_flock_calls;
  errno = g_flock_errno.load();
  return -1;
}

namespace coppelius {
namespace {

constexpr ResultGeometry kTiny = {512, 64, 8};

std::string TempPath(const std::string& name) {
  return absl::StrCat(testing::TempDir(), "/", name);
}

TEST(NoFlockFileSystem, ResultWriterWritesUnlocked) {
  for (const int e : {ENOLCK, EOPNOTSUPP}) {
    g_flock_errno = e;
    const std::string path = TempPath(absl::StrCat("noflock_result_", e));
    for (int round = 0; round < 2; ++round) {  // new, then replacing
      const int calls = g_flock_calls;
      auto writer = ResultWriter::Create(path, kTiny);
      ASSERT_TRUE(writer.ok()) << writer.status();
      EXPECT_GT(g_flock_calls, calls) << "flock was not asked";
    }
    auto bytes = ReadFile(path);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_GT(bytes->size(), 0u);
  }
}

TEST(NoFlockFileSystem, FileLockIsTakenUnlocked) {
  g_flock_errno = ENOLCK;
  auto lock = FileLock::Acquire(TempPath("noflock.lock"), "test output");
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_FALSE(lock->locked());
}

// Any other flock error is still an error naming the file.
TEST(NoFlockFileSystem, OtherFlockErrorsStillRefuse) {
  g_flock_errno = EBADF;
  const std::string path = TempPath("noflock_ebadf");
  auto writer = ResultWriter::Create(path, kTiny);
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find(path), std::string::npos)
      << writer.status();
  g_flock_errno = EWOULDBLOCK;
  auto held = FileLock::Acquire(TempPath("noflock_held.lock"), "test output");
  EXPECT_FALSE(held.ok());
}

TEST(FlockUnsupported, Classifies) {
  EXPECT_TRUE(FlockUnsupported(ENOLCK));
  EXPECT_TRUE(FlockUnsupported(EOPNOTSUPP));
  EXPECT_TRUE(FlockUnsupported(EINVAL));
  EXPECT_FALSE(FlockUnsupported(EWOULDBLOCK));
  EXPECT_FALSE(FlockUnsupported(EBADF));
  EXPECT_FALSE(FlockUnsupported(EINTR));
}

}  // namespace
}  // namespace coppelius
