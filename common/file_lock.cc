// File: common/file_lock.cc
#include "common/file_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace coppelius {

bool FlockUnsupported(int error_number) {
  return error_number == ENOLCK || error_number == EOPNOTSUPP ||
         error_number == EINVAL;
}
namespace {

// The contents a lock file may hold: nothing (0) or a pid and a newline
// (the pid); nullopt for anything else.
std::optional<int64_t> LockFilePid(absl::string_view content) {
  if (content.empty()) return 0;
  if (content.size() > 21 || content.back() != '\n') return std::nullopt;
  int64_t pid = 0;
  if (!absl::SimpleAtoi(content.substr(0, content.size() - 1), &pid) ||
      pid <= 0) {
    return std::nullopt;
  }
  return pid;
}

}  // namespace

bool LooksLikeLockFile(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string name =
      slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name[0] != '.' || !absl::EndsWith(name, ".lock")) {
    return false;
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size > 21) {
    return false;
  }
  absl::StatusOr<std::string> content = ReadFile(path);
  return content.ok() && LockFilePid(*content).has_value();
}

absl::StatusOr<FileLock> FileLock::Acquire(const std::string& lock_path,
                                           absl::string_view what) {
  // Never through a symbolic link, never onto another kind of file.
  int fd;
  bool writable = true;
  do {
    fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
              0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0 && errno == EACCES) {
    // Another user's lock file (mode 0644): a read-only descriptor takes the
    // lock as well; the pid is then not written.
    writable = false;
    do {
      fd = open(lock_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    // No file to share: the directory refused the creation (EACCES), which
    // is the error to report, not the read-only open's ENOENT.
    if (fd < 0 && errno == ENOENT) errno = EACCES;
  }
  if (fd < 0) {
    if (errno == ELOOP) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": its lock file ", lock_path,
          " is a symbolic link; refusing to follow it (remove it)"));
    }
    return Annotate(ErrnoStatus(errno, "creating its lock file", lock_path),
                    what);
  }
  struct stat st;
  char buffer[32] = {};
  const ssize_t n =
      fstat(fd, &st) == 0 && S_ISREG(st.st_mode)
          ? pread(fd, buffer, sizeof(buffer), 0)
          : -1;
  const std::optional<int64_t> last_pid =
      n < 0 ? std::nullopt : LockFilePid(absl::string_view(buffer, n));
  if (!last_pid.has_value()) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": ", lock_path,
        " exists and is not a lock file (a lock file is empty or holds a pid "
        "and a newline); refusing to take it over (remove or rename it)"));
  }
  int rc;
  do {
    rc = flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    close(fd);
    if (FlockUnsupported(err)) {
      return FileLock(-1);  // no flock here: unlocked, as documented
    }
    if (err == EWOULDBLOCK) {
      const std::string holder =
          *last_pid > 0 ? absl::StrCat("pid ", *last_pid, " wrote it last, ")
                        : "";
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": in use by another process (", holder,
                       "lock file ", lock_path, ")"));
    }
    return Annotate(ErrnoStatus(err, "locking its lock file", lock_path),
                    what);
  }
  // Holder's pid for the next process's message (best effort: the lock is
  // what counts).
  if (writable) {
    const std::string pid = absl::StrCat(getpid(), "\n");
    if (ftruncate(fd, 0) == 0) {
      (void)!pwrite(fd, pid.data(), pid.size(), 0);
    }
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
