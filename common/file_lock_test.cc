// File: common/file_lock_test.cc
#include "common/file_lock.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

std::string TestDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

TEST(LooksLikeLockFile, ByNameAndContent) {
  auto write = [](const std::string& path, const std::string& bytes) {
    EXPECT_TRUE(WriteFileAtomically(path, bytes).ok());
    return path;
  };
  EXPECT_TRUE(LooksLikeLockFile(write(TestDir() + "/.r.res.lock", "123\n")));
  EXPECT_TRUE(LooksLikeLockFile(write(TestDir() + "/.e.lock", "")));
  {
    auto lock = FileLock::Acquire(TestDir() + "/.held.ckpt.lock", "held");
    ASSERT_TRUE(lock.ok()) << lock.status();
    EXPECT_TRUE(LooksLikeLockFile(TestDir() + "/.held.ckpt.lock"));
  }
  // Other names, other bytes, no file.
  EXPECT_FALSE(LooksLikeLockFile(write(TestDir() + "/r.res.lock", "123\n")));
  EXPECT_FALSE(LooksLikeLockFile(write(TestDir() + "/.r.res", "123\n")));
  EXPECT_FALSE(LooksLikeLockFile(write(TestDir() + "/.x.lock", "not a pid\n")));
  EXPECT_FALSE(LooksLikeLockFile(TestDir() + "/.missing.lock"));
  EXPECT_FALSE(LooksLikeLockFile(TestDir()));
}

TEST(FileLockTest, SecondHolderIsRefusedUntilTheFirstReleases) {
  const std::string path = TestDir() + "/out.ckpt.lock";
  {
    auto first = FileLock::Acquire(path, "--checkpoint-out out.ckpt");
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_TRUE(first->locked());
    // flock locks belong to the open file: a second open in the same
    // process conflicts like another process's would.
    auto second = FileLock::Acquire(path, "--checkpoint-out out.ckpt");
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(second.status().message(),
              absl::StrCat("--checkpoint-out out.ckpt: in use by another "
                           "process (pid ",
                           getpid(), " wrote it last, lock file ", path, ")"));
    // Moving keeps the lock held.
    FileLock moved = std::move(*first);
    EXPECT_FALSE(FileLock::Acquire(path, "x").ok());
  }
  auto again = FileLock::Acquire(path, "--checkpoint-out out.ckpt");
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST(FileLockTest, AKilledHolderLeavesNoLock) {
  const std::string path = TestDir() + "/killed.lock";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto lock = FileLock::Acquire(path, "child");
    const char c = lock.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    pause();  // holds the lock until killed
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  auto refused = FileLock::Acquire(path, "parent");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(absl::StrCat("pid ", child)),
            absl::string_view::npos)
      << refused.status();
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  auto taken = FileLock::Acquire(path, "parent");
  EXPECT_TRUE(taken.ok()) << taken.status();
  close(ready[0]);
  close(ready[1]);
}

// A name that collides with another file is refused, never truncated.
TEST(FileLockTest, OtherFilesAndSymbolicLinksAreNeverTakenOver) {
  const std::string dir = TestDir();
  const std::string other = dir + "/poetry.lock";
  {
    FILE* f = fopen(other.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("[[package]]\nname = \"x\"\n", f);
    fclose(f);
  }
  auto lock = FileLock::Acquire(other, "--result=poetry");
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(lock.status().message().find("is not a lock file"),
            absl::string_view::npos)
      << lock.status();
  struct stat st;
  ASSERT_EQ(stat(other.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 23);  // untouched
  // A symbolic link, even to an empty file, is not followed.
  const std::string target = dir + "/target.txt";
  FILE* t = fopen(target.c_str(), "w");
  ASSERT_NE(t, nullptr);
  fclose(t);
  const std::string link = dir + "/x.ckpt.lock";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  lock = FileLock::Acquire(link, "--checkpoint-out=x.ckpt");
  ASSERT_FALSE(lock.ok());
  EXPECT_NE(lock.status().message().find("symbolic link"),
            absl::string_view::npos)
      << lock.status();
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
  // A directory is refused as well, naming the output it locks.
  const std::string sub = dir + "/d.lock";
  ASSERT_EQ(mkdir(sub.c_str(), 0755), 0);
  const auto in_dir = FileLock::Acquire(sub, "--result=d");
  EXPECT_EQ(in_dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(in_dir.status().message(),
            "--result=d: creating its lock file " + sub + ": Is a directory");
}

TEST(FileLockTest, MissingDirectoryIsNotFound) {
  auto lock = FileLock::Acquire(TestDir() + "/no/such/dir/x.lock", "x");
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(lock.status().message().find("/no/such/dir/x.lock"),
            absl::string_view::npos);
}

// A directory the process may not write to: PermissionDenied, not the
// NotFound of the read-only fallback open (which finds no file to share).
// Under /tmp, which any user can traverse; as root, the child drops to
// nobody first (root writes anywhere).
TEST(FileLockTest, UnwritableDirectoryIsPermissionDenied) {
  char dir[] = "/tmp/file_lock_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ASSERT_EQ(chmod(dir, 0555), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) {
      _exit(5);  // root that cannot drop privileges: nothing to test
    }
    auto lock = FileLock::Acquire(absl::StrCat(dir, "/.lock"), "history");
    if (lock.ok()) _exit(3);
    _exit(lock.status().code() == absl::StatusCode::kPermissionDenied ? 0
                                                                      : 4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  rmdir(dir);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  if (WEXITSTATUS(status) == 5) GTEST_SKIP() << "root without setuid(2)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: locked, 4: another code than "
                                       "PermissionDenied";
}

}  // namespace
}  // namespace coppelius
