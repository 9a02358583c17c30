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

class FileLock {
 public:
  // Opens or creates (mode 0644) `lock_path` and takes the lock.
  // FailedPrecondition when another holder has it: "`what`: in use by
  // another process (pid N, lock file `lock_path`)"; the errno status of
  // open(2)/flock(2) (NotFound, PermissionDenied, ...) naming the lock file
  // otherwise.
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
