#include "checkpoint/publisher.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace coppelius {
namespace {

// Largest single pwrite; keeps injected faults and progress granular.
constexpr size_t kMaxWriteBytes = size_t{64} << 20;

int PosixFsyncDirectory(const char* dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  if (fsync(fd) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return close(fd);
}

absl::Status WriteAt(const FileOps& ops, int fd, const void* data, size_t size,
                     uint64_t offset, const std::string& file) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const size_t n_try = std::min(size, kMaxWriteBytes);
    ssize_t n = ops.pwrite(fd, p, n_try, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("writing at offset ", offset, " of"),
                         file);
    }
    if (n == 0) {
      return ErrnoStatus(
          ENOSPC, absl::StrCat("writing at offset ", offset, " (0 bytes written) of"),
          file);
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!absl::ascii_isdigit(c)) return false;
  return true;
}

// "update-<8+ digits>.ckpt"
bool IsHistoryName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "update-")) return false;
  if (!absl::ConsumeSuffix(&name, ".ckpt")) return false;
  return name.size() >= 8 && AllDigits(name);
}

absl::StatusOr<int> CleanDirectory(
    const std::string& dir, const std::function<bool(absl::string_view)>& match,
    const FileOps& ops) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, "opening directory", dir);
  std::vector<std::string> victims;
  errno = 0;
  while (struct dirent* e = readdir(d)) {
    if (match(e->d_name)) victims.push_back(e->d_name);
  }
  int read_errno = errno;
  closedir(d);
  if (read_errno != 0) return ErrnoStatus(read_errno, "reading directory", dir);
  int removed = 0;
  for (const std::string& name : victims) {
    const std::string full = absl::StrCat(dir, "/", name);
    if (ops.unlink(full.c_str()) != 0) {
      if (errno == ENOENT) continue;
      return ErrnoStatus(errno, "removing stale temporary", full);
    }
    ++removed;
  }
  return removed;
}

}  // namespace

FileOps PosixFileOps() {
  FileOps ops;
  ops.open = [](const char* path, int flags, mode_t mode) {
    return ::open(path, flags, mode);
  };
  ops.fallocate = [](int fd, off_t offset, off_t length) {
    return ::posix_fallocate(fd, offset, length);
  };
  ops.pwrite = [](int fd, const void* data, size_t size, off_t offset) {
    return ::pwrite(fd, data, size, offset);
  };
  ops.fsync = [](int fd) { return ::fsync(fd); };
  ops.close = [](int fd) { return ::close(fd); };
  ops.rename = [](const char* from, const char* to) {
    return ::rename(from, to);
  };
  ops.link = [](const char* from, const char* to) { return ::link(from, to); };
  ops.unlink = [](const char* path) { return ::unlink(path); };
  ops.fsync_directory = &PosixFsyncDirectory;
  return ops;
}

std::string HistoryPath(const std::string& history_dir, uint64_t update_count) {
  return absl::StrFormat("%s/update-%08d.ckpt", history_dir, update_count);
}

namespace {

// The pid in `basename` if it is "<target>.tmp.<pid>.<16 hex digits>" (a
// publication's temporary of `target`), else nullopt.
std::optional<uint64_t> TemporaryPid(absl::string_view basename,
                                     absl::string_view target) {
  if (target.empty()) return std::nullopt;
  if (!absl::ConsumePrefix(&basename, target)) return std::nullopt;
  if (!absl::ConsumePrefix(&basename, ".tmp.")) return std::nullopt;
  const size_t dot = basename.find('.');
  if (dot == absl::string_view::npos) return std::nullopt;
  const absl::string_view digits = basename.substr(0, dot);
  if (!AllDigits(digits)) return std::nullopt;
  absl::string_view hex = basename.substr(dot + 1);
  if (hex.size() != 16) return std::nullopt;
  for (char c : hex) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) {
      return std::nullopt;
    }
  }
  uint64_t pid = 0;
  if (!absl::SimpleAtoi(digits, &pid)) pid = 0;  // too many digits
  return pid;
}

// Whether `name` is a temporary of `target` that no other running process
// holds (kill(2) says "no such process" for its pid, or the pid is this
// process's): a publication in progress elsewhere is not stale.
bool IsStaleTemporary(absl::string_view name, absl::string_view target,
                      bool any_pid) {
  const std::optional<uint64_t> pid = TemporaryPid(name, target);
  if (!pid.has_value()) return false;
  return any_pid || *pid == 0 || *pid == static_cast<uint64_t>(getpid()) ||
         !ProcessMayBeRunning(static_cast<int64_t>(*pid));
}

}  // namespace

bool IsTemporaryName(absl::string_view basename, absl::string_view target) {
  return TemporaryPid(basename, target).has_value();
}

absl::StatusOr<int> CleanStaleTemporaries(const std::string& path,
                                          const std::string& history_dir,
                                          const FileOps* file_ops,
                                          bool caller_holds_locks) {
  const FileOps ops = file_ops != nullptr ? *file_ops : PosixFileOps();
  const std::string target = BaseName(path);
  ASSIGN_OR_RETURN(
      int removed,
      CleanDirectory(
          DirName(path),
          [&](absl::string_view name) {
            return IsStaleTemporary(name, target, caller_holds_locks);
          },
          ops));
  if (!history_dir.empty()) {
    ASSIGN_OR_RETURN(
        int history_removed,
        CleanDirectory(
            history_dir,
            [&](absl::string_view name) {
              const size_t pos = name.find(".ckpt.tmp.");
              if (pos == absl::string_view::npos) return false;
              absl::string_view target = name.substr(0, pos + 5);
              return IsHistoryName(target) &&
                     IsStaleTemporary(name, target, caller_holds_locks);
            },
            ops));
    removed += history_removed;
  }
  return removed;
}

absl::Status PublishCheckpoint(const std::string& path,
                               const CheckpointIdentity& identity,
                               uint64_t update_count, const void* payload,
                               size_t payload_bytes,
                               const PublishOptions& options) {
  if (payload_bytes != identity.payload_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "publishing %s: payload is %d bytes, the identity says %d", path,
        payload_bytes, identity.payload_bytes));
  }
  if (payload == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("publishing ", path, ": payload is null"));
  }
  if (identity.chunk_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("publishing ", path, ": chunk_bytes is 0, expected > 0"));
  }
  // Bound the digest list before allocating it (each digest takes 34 header
  // bytes; the header is limited to kMaxHeaderBytes).
  const uint64_t chunks = NumChunks(payload_bytes, identity.chunk_bytes);
  if (chunks > kMaxHeaderBytes / (kSha256Bytes + 2)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "publishing %s: %d chunks of %d bytes need more than the %d-byte "
        "header limit; raise chunk_bytes",
        path, chunks, identity.chunk_bytes, kMaxHeaderBytes));
  }
  const FileOps ops =
      options.file_ops != nullptr ? *options.file_ops : PosixFileOps();
  auto stage = [&](PublishStage s) {
    if (options.stage_hook) options.stage_hook(s);
  };

  RETURN_IF_ERROR(Annotate(
      CleanStaleTemporaries(path, options.history_dir, &ops).status(),
      absl::StrCat("publishing ", path)));

  EnvelopeProvenance provenance;
  provenance.writer = options.writer;
  provenance.backend = options.backend;
  provenance.created_unix_nanos = options.created_unix_nanos;
  provenance.parent_header_sha256 = options.parent_header_sha256;
  // The header's size does not depend on the digests' values (each is a
  // 32-byte field), so the layout is fixed before they are computed: the
  // payload is written while it is digested, and the prefix last.
  const std::vector<Sha256Digest> placeholder(chunks);
  absl::StatusOr<CheckpointHeader> header =
      MakeHeader(identity, update_count, placeholder, provenance);
  if (!header.ok()) {
    return Annotate(header.status(), absl::StrCat("publishing ", path));
  }
  provenance.created_unix_nanos = header->created_unix_nanos();
  provenance.host = header->host();
  ASSIGN_OR_RETURN(const std::string planned_prefix,
                   EncodeEnvelopePrefix(*header));
  const uint64_t payload_offset = planned_prefix.size();
  const uint64_t total = payload_offset + payload_bytes;

  const std::string tmp = PublicationTemporaryPath(path);
  // Registered before it exists, so that no interrupt can leave it behind
  // (common/file_io.h: the handler unlinks registered paths); unregistered
  // once renamed or removed, on every return below.
  const RemoveOnInterruptScope remove_on_interrupt(tmp);
  int fd = ops.open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Annotate(ErrnoStatus(errno, "creating temporary", tmp),
                    absl::StrCat("publishing ", path));
  }
  bool tmp_exists = true;
  std::vector<Sha256Digest> digests;
  std::thread digester;
  auto fail = [&](absl::Status status) {
    if (digester.joinable()) digester.join();
    if (fd >= 0) ops.close(fd);
    if (tmp_exists) ops.unlink(tmp.c_str());
    return Annotate(status, absl::StrCat("publishing ", path,
                                         " (previous checkpoint untouched)"));
  };
  stage(PublishStage::kTemporaryCreated);

  int err = ops.fallocate(fd, 0, static_cast<off_t>(total));
  if (err != 0 && err != EOPNOTSUPP && err != EINVAL && err != ENOSYS) {
    return fail(
        ErrnoStatus(err, absl::StrCat("allocating ", total, " bytes for"), tmp));
  }
  stage(PublishStage::kAllocated);

  // Digest from memory (never from the file: re-reading the page cache would
  // prove nothing) on `threads` threads while this thread writes.
  // If the system refuses the thread, digest first, then write: the same
  // result, without the overlap.
  auto digest = [&] {
    digests = ChunkDigests(payload, payload_bytes, identity.chunk_bytes,
                           options.threads);
  };
  try {
    digester = std::thread(digest);
  } catch (const std::system_error&) {
    digest();
  }
  absl::Status status =
      WriteAt(ops, fd, payload, payload_bytes, payload_offset, tmp);
  if (!status.ok()) return fail(status);
  if (digester.joinable()) digester.join();
  stage(PublishStage::kPayloadWritten);

  header = MakeHeader(identity, update_count, digests, provenance);
  if (!header.ok()) return fail(header.status());
  absl::StatusOr<std::string> prefix = EncodeEnvelopePrefix(*header);
  if (!prefix.ok()) return fail(prefix.status());
  if (prefix->size() != payload_offset) {
    return fail(absl::InternalError(absl::StrFormat(
        "header size changed from the planned layout (%d != %d bytes)",
        prefix->size(), payload_offset)));
  }
  status = WriteAt(ops, fd, prefix->data(), prefix->size(), 0, tmp);
  if (!status.ok()) return fail(status);
  stage(PublishStage::kPrefixWritten);

  if (ops.fsync(fd) != 0) {
    // Never retry a failed fsync: the kernel may have dropped the pages.
    return fail(ErrnoStatus(errno, "fsync of", tmp));
  }
  stage(PublishStage::kSynced);
  const int close_result = ops.close(fd);
  fd = -1;
  if (close_result != 0) return fail(ErrnoStatus(errno, "closing", tmp));
  stage(PublishStage::kClosed);

  if (ops.rename(tmp.c_str(), path.c_str()) != 0) {
    return fail(ErrnoStatus(errno, "renaming temporary to", path));
  }
  tmp_exists = false;
  stage(PublishStage::kRenamed);
  const std::string dir = DirName(path);
  if (ops.fsync_directory(dir.c_str()) != 0) {
    return Annotate(ErrnoStatus(errno, "fsync of directory", dir),
                    absl::StrCat("publishing ", path,
                                 " (renamed into place, rename not yet "
                                 "durable)"));
  }
  stage(PublishStage::kDirectorySynced);
  if (!options.history_dir.empty()) {
    RETURN_IF_ERROR(Annotate(
        LinkIntoHistory(path, options.history_dir, update_count, &ops),
        absl::StrCat("publishing ", path, " (in place; its history link "
                     "failed)")));
    stage(PublishStage::kHistoryLinked);
  }
  return absl::OkStatus();
}

absl::Status LinkIntoHistory(const std::string& published_path,
                             const std::string& history_dir,
                             uint64_t update_count, const FileOps* file_ops) {
  const FileOps ops = file_ops != nullptr ? *file_ops : PosixFileOps();
  const std::string history = HistoryPath(history_dir, update_count);
  const std::string history_tmp = PublicationTemporaryPath(history);
  const RemoveOnInterruptScope remove_on_interrupt(history_tmp);
  if (ops.link(published_path.c_str(), history_tmp.c_str()) != 0) {
    const absl::Status link_error = ErrnoStatus(
        errno, absl::StrCat("hard-linking ", published_path, " as"),
        history_tmp);
    return absl::Status(
        link_error.code(),
        absl::StrCat(link_error.message(),
                     " (history_dir must be on the same filesystem as the "
                     "checkpoint)"));
  }
  if (ops.rename(history_tmp.c_str(), history.c_str()) != 0) {
    const int e = errno;
    ops.unlink(history_tmp.c_str());
    return ErrnoStatus(e, "renaming history link to", history);
  }
  if (ops.fsync_directory(history_dir.c_str()) != 0) {
    return ErrnoStatus(errno, "fsync of directory", history_dir);
  }
  return absl::OkStatus();
}

}  // namespace coppelius
