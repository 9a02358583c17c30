// File: common/file_lock.h
//
// An exclusive lock on an output that only one process may write at a time
// (train's checkpoint and result): flock(2) (LOCK_EX | LOCK_NB) on a lock
// file beside it. The lock belongs to the open file, so it ends when the
// FileLock is destroyed or the process dies (killed included): a lock is
// never left behind, only its 0–20-byte file, which is reused. The file
// holds the holder's pid (decimal, newline), for the error message of the
// process that is refused.
//
// The lock file is never taken through a symbolic link (O_NOFOLLOW), and an
// existing file that is not regular or holds anything but a pid and a
// newline is refused rather than truncated: a name that happens to collide
// with another program's file (a package manager's "x.lock") is never
// damaged. Another user's lock file (mode 0644) is locked through a
// read-only descriptor (its pid is then not rewritten).
//
// Advisory: it excludes processes that take the same lock, nothing else.
// Where the file system does not support flock (ENOLCK, EOPNOTSUPP, as some
// network file systems), Acquire returns an unlocked FileLock (locked()
// false) instead of an error, so such file systems stay usable.
#ifndef COPPELIUS_COMMON_FILE_LOCK_H_
#define COPPELIUS_COMMON_FILE_LOCK_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coppelius {

// Whether flock(2)'s errno `error_number` says the file system does not
// support locks (ENOLCK, EOPNOTSUPP, EINVAL, as some network file systems
// answer), rather than that the lock is held or the call was wrong.
bool FlockUnsupported(int error_number);

// Whether `path` is, by its name and bytes, a lock file of FileLock's kind
// that train takes: a regular file named ".lock" or ".NAME.lock" holding
// nothing or a pid and a newline. Such a file is never a run's output.
bool LooksLikeLockFile(const std::string& path);

class FileLock {
 public:
  // Opens or creates (mode 0644) `lock_path` and takes the lock.
  // FailedPrecondition when another holder has it: "`what`: in use by
  // another process (pid N wrote it last, lock file `lock_path`)", or when
  // `lock_path` is a symbolic link, not a regular file, or holds anything
  // but a pid; the errno status of open(2)/flock(2) (NotFound,
  // PermissionDenied, ...) naming the lock file otherwise.
  static absl::StatusOr<FileLock> Acquire(const std::string& lock_path,
                                          absl::string_view what);

  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();  // releases the lock (closes the file)

  // False when the file system does not support flock (see above).
  bool locked() const { return fd_ >= 0; }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace coppelius

#endif  // COPPELIUS_COMMON_FILE_LOCK_H_
