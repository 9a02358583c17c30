// File: common/file_lock.cc
#include "common/file_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"

namespace coppelius {

absl::StatusOr<FileLock> FileLock::Acquire(const std::string& lock_path,
                                           absl::string_view what) {
  int fd;
  do {
    fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, "creating lock file", lock_path);
  int rc;
  do {
    rc = flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    if (err == ENOLCK || err == EOPNOTSUPP || err == EINVAL) {
      close(fd);
      return FileLock(-1);  // no flock here: unlocked, as documented
    }
    std::string holder;
    if (err == EWOULDBLOCK) {
      char buffer[32] = {};
      const ssize_t n = pread(fd, buffer, sizeof(buffer) - 1, 0);
      int64_t pid = 0;
      if (n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(
                                        absl::string_view(buffer, n)),
                                    &pid)) {
        holder = absl::StrCat("pid ", pid, ", ");
      }
    }
    close(fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": in use by another process (", holder,
                       "lock file ", lock_path, ")"));
    }
    return ErrnoStatus(err, "locking", lock_path);
  }
  // Holder's pid for the next process's message (best effort: the lock is
  // what counts).
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) == 0) {
    (void)!pwrite(fd, pid.data(), pid.size(), 0);
  }
  return FileLock(fd);
}

FileLock::FileLock(FileLock&& other) noexcept : fd_(other.fd_) {
  other.fd_ = -1;
}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace coppelius
