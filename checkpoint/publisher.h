// File: checkpoint/publisher.h
//
// Durable, atomic publication of a checkpoint envelope (SPEC §5, §6):
//
//   1. CleanStaleTemporaries(path): temporaries left by a killed writer go.
//   2. A unique temporary "<path>.tmp.<pid>.<16 hex>" is created beside
//      `path` (O_CREAT|O_EXCL|O_CLOEXEC, mode 0644) and posix_fallocate'd to
//      the full size, so ENOSPC shows before any byte is written.
//   3. The payload is written at its offset (short writes and EINTR
//      retried) while `options.threads` threads compute the SHA-256 of each
//      chunk from memory; then the preamble + header (+ padding) is written.
//   4. The temporary is fsynced and closed (close checked).
//   5. The temporary is renamed over `path`; the directory is fsynced.
//   6. With options.history_dir: DIR/update-NNNNNNNN.ckpt (the update count,
//      at least 8 digits) is made a hard link of `path` (LinkIntoHistory:
//      via a temporary link renamed into place), and DIR is fsynced.
//
// The history link comes last so that a kill can never leave a history
// entry for an update that `path` does not hold: a run resumed from `path`
// publishes the updates after it, none of which the history holds yet.
// (Until 2026-11-30 the link came before the rename, and a kill between
// the two left DIR/update-N beside a `path` still at N − interval, which
// the resumed run then refused to replace.) A kill between the rename and
// the link leaves the history without update N; train links it when it is
// resumed from `path` (trainer/run.cc).
//
// On any error the temporary is removed, `path` still holds whatever it held
// before (the previous checkpoint, untouched), and the status names the
// operation, the file and the errno text (ENOSPC -> ResourceExhausted). A
// process killed at any point leaves `path` holding either the previous or
// the new complete checkpoint, plus possibly a temporary that the next
// CleanStaleTemporaries removes.
//
// Typical use (the run loop, every 1,000 steps, on a background thread):
//   PublishOptions options;
//   options.writer = "train";
//   options.backend = backend.name();
//   RETURN_IF_ERROR(PublishCheckpoint(out_path, CoppeliusIdentity(),
//                                     c0 + steps_done, pmv.data(),
//                                     pmv.size() * 4, options));
//
// A path has a single writer, and its publications must not overlap in time
// (run them one after another, e.g. on one background thread):
// CleanStaleTemporaries removes every temporary of `path`, whoever made it.
// Distinct paths may be published concurrently. The payload buffer must stay
// unchanged until PublishCheckpoint returns.
#ifndef COPPELIUS_CHECKPOINT_PUBLISHER_H_
#define COPPELIUS_CHECKPOINT_PUBLISHER_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "checkpoint/envelope.h"

namespace coppelius {

// The file operations the publisher uses, each with the POSIX signature and
// errno convention (-1 and errno set; fallocate returns the error number as
// posix_fallocate does). Tests replace members to inject ENOSPC/EIO at a
// byte offset, or failures of fsync, close, rename or link. Every member must
// be set (start from PosixFileOps()).
struct FileOps {
  std::function<int(const char* path, int flags, mode_t mode)> open;
  std::function<int(int fd, off_t offset, off_t length)> fallocate;
  std::function<ssize_t(int fd, const void* data, size_t size, off_t offset)>
      pwrite;
  std::function<int(int fd)> fsync;
  std::function<int(int fd)> close;
  std::function<int(const char* from, const char* to)> rename;
  std::function<int(const char* from, const char* to)> link;
  std::function<int(const char* path)> unlink;
  // Opens directory `dir`, fsyncs and closes it.
  std::function<int(const char* dir)> fsync_directory;
};

// FileOps calling open(2), posix_fallocate(3), pwrite(2), fsync(2),
// close(2), rename(2), link(2), unlink(2), and open+fsync+close of a
// directory.
FileOps PosixFileOps();

// Points of a publication, in order, reported to PublishOptions::stage_hook
// (crash tests raise SIGKILL there).
enum class PublishStage {
  kTemporaryCreated,   // temporary exists, empty
  kAllocated,          // posix_fallocate done
  kPayloadWritten,     // payload written (and digested); prefix not yet
  kPrefixWritten,      // preamble + header + padding: whole file written
  kSynced,             // fsync of the temporary done
  kClosed,             // temporary closed
  kRenamed,            // temporary renamed over path, directory not synced
  kDirectorySynced,    // directory fsynced: path durable (complete without
                       // history_dir)
  kHistoryLinked,      // history link in place and its directory synced:
                       // publication complete
};

struct PublishOptions {
  // If non-empty, also keep DIR/update-NNNNNNNN.ckpt as a hard link (same
  // filesystem as `path`; EXDEV is an error).
  std::string history_dir;
  // Threads digesting chunks (>= 1).
  int threads = 2;
  // Provenance recorded in the header (see EnvelopeProvenance).
  std::string writer;
  std::string backend;
  std::string parent_header_sha256;  // 32 bytes or empty
  // 0 = now.
  uint64_t created_unix_nanos = 0;
  // Test hooks: file operations (null = PosixFileOps()) and a callback at
  // each stage.
  const FileOps* file_ops = nullptr;
  std::function<void(PublishStage)> stage_hook;
};

// Publishes `payload` (payload_bytes bytes of P, M, V fp32 LE) wrapped in an
// envelope with `identity` and `update_count` at `path`, as described above.
// InvalidArgument if payload_bytes != identity.payload_bytes, the identity is
// unusable (see MakeHeader), or the chunk digests would not fit the header
// (more than ~490k chunks); errno-derived statuses otherwise (ENOSPC/EDQUOT
// -> ResourceExhausted, ENOENT -> NotFound, EACCES -> PermissionDenied, EIO
// and others -> Internal).
absl::Status PublishCheckpoint(const std::string& path,
                               const CheckpointIdentity& identity,
                               uint64_t update_count, const void* payload,
                               size_t payload_bytes,
                               const PublishOptions& options);

// Removes the temporaries of `path` ("<basename>.tmp.<digits>.<16 hex>" in
// its directory) and, given `history_dir`, the temporary history links there
// ("update-<digits>.ckpt.tmp.<digits>.<16 hex>"); returns how many were
// removed. The digits are the writer's pid: a temporary of another process
// that is still running (kill(pid, 0) does not fail with ESRCH) is kept,
// since its publication may be in progress. Called by PublishCheckpoint
// first; call it at the start of a run.
// `caller_holds_locks`: the caller holds the lock of `path` (and of
// `history_dir`, given one) that every writer of them takes (train's
// .NAME.lock and DIR/.lock), so no other publication of them can be in
// progress: every temporary of theirs is stale, whatever process now has
// its pid (pids are reused, after a reboot within seconds, and a 692 MB
// temporary of a killed run was kept for good).
// A missing directory is NotFound.
absl::StatusOr<int> CleanStaleTemporaries(const std::string& path,
                                          const std::string& history_dir = "",
                                          const FileOps* file_ops = nullptr,
                                          bool caller_holds_locks = false);

// "<dir>/update-NNNNNNNN.ckpt" for `update_count` (zero-padded to 8 digits).
std::string HistoryPath(const std::string& history_dir, uint64_t update_count);

// Makes HistoryPath(history_dir, update_count) a hard link of the published
// checkpoint `published_path` (through a temporary link renamed into place,
// replacing any file of that name) and fsyncs history_dir. Errno statuses
// naming the file (EXDEV: history_dir must be on the same filesystem).
absl::Status LinkIntoHistory(const std::string& published_path,
                             const std::string& history_dir,
                             uint64_t update_count,
                             const FileOps* file_ops = nullptr);

// True if `basename` is "<target>.tmp.<digits>.<16 lower-case hex>", the
// name of a temporary of a file named `target`.
bool IsTemporaryName(absl::string_view basename, absl::string_view target);

}  // namespace coppelius

#endif  // COPPELIUS_CHECKPOINT_PUBLISHER_H_
