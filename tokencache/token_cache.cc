#include "tokencache/token_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace coppelius {
namespace {

constexpr size_t kWriteBufferBytes = 1 << 20;

}  // namespace

absl::StatusOr<SourceStat> StatSource(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat of", path);
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a directory, expected a text file"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file, expected a text file"));
  }
  SourceStat s;
  // The header holds the time as signed 64-bit nanoseconds since the epoch
  // (1677-09-21 to 2262-04-11); a time outside cannot be stored.
  int64_t ns = 0;
  if (__builtin_mul_overflow(static_cast<int64_t>(st.st_mtim.tv_sec),
                             int64_t{1000000000}, &ns) ||
      __builtin_add_overflow(ns, static_cast<int64_t>(st.st_mtim.tv_nsec),
                             &ns)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: modification time %d s since the epoch (%s) is outside what a "
        "token cache's header holds (signed 64-bit nanoseconds: 1677-09-21 "
        "to 2262-04-11); correct it (touch)",
        path, static_cast<int64_t>(st.st_mtim.tv_sec),
        absl::FormatTime("%Y-%m-%d", absl::FromUnixSeconds(st.st_mtim.tv_sec),
                         absl::UTCTimeZone())));
  }
  s.mtime_ns = static_cast<uint64_t>(ns);
  s.size_bytes = static_cast<uint64_t>(st.st_size);
  return s;
}

absl::string_view StalenessName(Staleness staleness) {
  switch (staleness) {
    case Staleness::kFresh:
      return "fresh";
    case Staleness::kMtimeDiffers:
      return "stale: source modification time differs";
    case Staleness::kSizeDiffers:
      return "stale: source size differs";
    case Staleness::kSourceMissing:
      return "stale: source missing";
  }
  return "unknown";
}

uint64_t NumContexts(uint64_t num_tokens, uint64_t context_tokens) {
  if (num_tokens == 0) return 0;
  return (num_tokens - 1) / context_tokens;
}

// ---------------------------------------------------------------------------
// TokenCache

absl::StatusOr<TokenCacheFile> OpenTokenCacheFile(const std::string& path) {
  // O_NONBLOCK: a FIFO with no writer would block open(); it is refused
  // below as not a regular file (reads of regular files ignore the flag).
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "opening token cache", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return ErrnoStatus(e, "stat of token cache", path);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a regular file, expected a token cache"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const absl::StatusOr<uint64_t> num_tokens = TokenCountOfFileSize(path, size);
  if (!num_tokens.ok()) {
    close(fd);
    return num_tokens.status();
  }
  return TokenCacheFile{fd, size, *num_tokens};
}

absl::StatusOr<TokenCache> TokenCache::Open(const std::string& path) {
  ASSIGN_OR_RETURN(const TokenCacheFile file, OpenTokenCacheFile(path));
  const int fd = file.fd;
  const uint64_t size = file.size_bytes;
  TokenCache cache;
  cache.path_ = path;
  cache.file_size_ = size;
  cache.num_tokens_ = file.num_tokens;
  void* mapping = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (mapping == MAP_FAILED) {
    int e = errno;
    close(fd);
    return ErrnoStatus(e, "mmap of token cache", path);
  }
  close(fd);  // the mapping keeps the file
  cache.mapping_ = mapping;
  // A SIGBUS in it (the file shrunk by another process) is then one line
  // naming the file (common/file_io.h ReportShrunkMappings).
  RegisterMapping(mapping, size, path);
  const auto* bytes = static_cast<const unsigned char*>(mapping);
  cache.header_ = TokenCacheHeaderOf(bytes);
  if (cache.num_tokens_ > 0) {
    cache.tokens_ =
        reinterpret_cast<const uint32_t*>(bytes + kTokenCacheHeaderBytes);
  }
  return cache;
}

TokenCache::TokenCache(TokenCache&& other) noexcept { *this = std::move(other); }

TokenCache& TokenCache::operator=(TokenCache&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    file_size_ = std::exchange(other.file_size_, 0);
    header_ = std::exchange(other.header_, SourceStat{});
    num_tokens_ = std::exchange(other.num_tokens_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
  }
  return *this;
}

TokenCache::~TokenCache() { Release(); }

void TokenCache::Release() {
  if (mapping_ != nullptr) {
    UnregisterMapping(mapping_);
    munmap(mapping_, file_size_);
  }
  mapping_ = nullptr;
  tokens_ = nullptr;
}

absl::Status TokenCache::CheckIdRange(uint32_t vocab_size) const {
  constexpr uint64_t kBlock = 4096;
  for (uint64_t begin = 0; begin < num_tokens_; begin += kBlock) {
    const uint64_t end = std::min(num_tokens_, begin + kBlock);
    uint32_t block_max = 0;
    for (uint64_t i = begin; i < end; ++i) {
      block_max = std::max(block_max, tokens_[i]);
    }
    if (block_max < vocab_size) continue;
    for (uint64_t i = begin; i < end; ++i) {
      if (tokens_[i] >= vocab_size) {
        return absl::DataLossError(absl::StrFormat(
            "%s: token %d (byte offset %d) has id %d, expected < %d (the "
            "vocabulary size)",
            path_, i, kTokenCacheHeaderBytes + kTokenBytes * i, tokens_[i],
            vocab_size));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StalenessReport> CacheStaleness(const std::string& path,
                                               const SourceStat& header,
                                               const std::string& source) {
  StalenessReport report;
  report.header = header;
  absl::StatusOr<SourceStat> now = StatSource(source);
  if (absl::IsNotFound(now.status())) {
    report.staleness = Staleness::kSourceMissing;
    return report;
  }
  if (!now.ok()) {
    return Annotate(now.status(), absl::StrCat("checking the source of ", path));
  }
  report.source = *now;
  if (now->size_bytes != header.size_bytes) {
    report.staleness = Staleness::kSizeDiffers;
  } else if (now->mtime_ns != header.mtime_ns) {
    report.staleness = Staleness::kMtimeDiffers;
  } else {
    report.staleness = Staleness::kFresh;
  }
  return report;
}

absl::StatusOr<StalenessReport> TokenCache::Staleness(
    const std::string& source_path) const {
  return CacheStaleness(path_, header_, source_path);
}

absl::StatusOr<uint64_t> TokenCountOfFileSize(const std::string& path,
                                              uint64_t size) {
  if (size < kTokenCacheHeaderBytes) {
    return absl::DataLossError(absl::StrFormat(
        "%s: %d bytes, shorter than the 16-byte token cache header "
        "(expected 16 + 4*N bytes)",
        path, size));
  }
  if ((size - kTokenCacheHeaderBytes) % kTokenBytes != 0) {
    return absl::DataLossError(absl::StrFormat(
        "%s: size %d bytes is not 16 + 4*N (%d bytes after the header, %d "
        "past the last whole u32 id at offset %d): truncated or corrupt",
        path, size, size - kTokenCacheHeaderBytes,
        (size - kTokenCacheHeaderBytes) % kTokenBytes,
        size - (size - kTokenCacheHeaderBytes) % kTokenBytes));
  }
  return (size - kTokenCacheHeaderBytes) / kTokenBytes;
}

bool SourceMtimeTooFarAhead(uint64_t mtime_ns, absl::Time now) {
  // st_mtim as written: before 1970 it is negative (two's complement). A
  // source may be dated ahead (clock skew, touch); text read as a time is
  // at least year 2043 (eight bytes >= 0x20), so a year ahead is allowed.
  return static_cast<int64_t>(mtime_ns) >
         absl::ToUnixNanos(now + absl::Hours(24 * 365));
}

std::string CacheHeaderProblem(const SourceStat& header, uint64_t num_tokens,
                               uint64_t max_token_bytes, absl::Time now) {
  if (SourceMtimeTooFarAhead(header.mtime_ns, now)) {
    return absl::StrFormat(
        "its header's source mtime %d ns (offset 0) is more than a year ahead",
        static_cast<int64_t>(header.mtime_ns));
  }
  if (num_tokens == 0 && header.size_bytes > 0) {
    return absl::StrFormat(
        "its header names %d source bytes (offset 8) but it holds no tokens",
        header.size_bytes);
  }
  if (num_tokens > header.size_bytes) {
    return absl::StrFormat(
        "its header names %d source bytes (offset 8) for %d tokens, fewer "
        "than one per token",
        header.size_bytes, num_tokens);
  }
  if (max_token_bytes > 0 && num_tokens > 0 &&
      static_cast<unsigned __int128>(num_tokens) * max_token_bytes <
          header.size_bytes) {
    return absl::StrFormat(
        "its header names %d source bytes (offset 8) for %d tokens, more than "
        "the vocabulary's longest token (%d bytes) per token",
        header.size_bytes, num_tokens, max_token_bytes);
  }
  if (AboveMaxSourceBytesPerToken(header.size_bytes, num_tokens)) {
    return absl::StrFormat(
        "its header names %d source bytes (offset 8) for %d tokens, more "
        "than %d per token where text encodes to a few (a raw u32 id file "
        "read as a cache?)",
        header.size_bytes, num_tokens, kMaxSourceBytesPerToken);
  }
  return "";
}

std::string CacheHeaderProblemWithoutVocabulary(const SourceStat& header,
                                                uint64_t num_tokens,
                                                absl::Time now) {
  return CacheHeaderProblem(header, num_tokens, 0, now);
}

// ---------------------------------------------------------------------------
// TokenCacheWriter

absl::StatusOr<TokenCacheWriter> TokenCacheWriter::Create(
    const std::string& path, const SourceStat& header) {
  TokenCacheWriter w;
  w.path_ = path;
  w.buffer_.reserve(kWriteBufferBytes);
  if (path == "-") {
    w.stream_ = true;
    w.fd_ = STDOUT_FILENO;
  } else if (IsStreamPath(path)) {
    w.stream_ = true;
    w.fd_ = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (w.fd_ < 0) return ErrnoStatus(errno, "opening", path);
  } else {
    w.tmp_path_ = NewTemporaryPath(path);
    // Registered before it exists: an interrupt in between leaves nothing.
    RemoveOnInterrupt(w.tmp_path_);
    w.fd_ = open(w.tmp_path_.c_str(),
                 O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w.fd_ < 0) {
      const int e = errno;
      KeepOnInterrupt(w.tmp_path_);
      return ErrnoStatus(e, "creating temporary token cache", w.tmp_path_);
    }
  }
  char h[kTokenCacheHeaderBytes];
  absl::little_endian::Store64(h, header.mtime_ns);
  absl::little_endian::Store64(h + 8, header.size_bytes);
  w.buffer_.insert(w.buffer_.end(), h, h + sizeof(h));
  return w;
}

TokenCacheWriter::TokenCacheWriter(TokenCacheWriter&& other) noexcept {
  *this = std::move(other);
}

TokenCacheWriter& TokenCacheWriter::operator=(
    TokenCacheWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    tmp_path_ = std::move(other.tmp_path_);
    fd_ = std::exchange(other.fd_, -1);
    stream_ = std::exchange(other.stream_, false);
    buffer_ = std::move(other.buffer_);
    written_bytes_ = std::exchange(other.written_bytes_, 0);
    num_tokens_ = std::exchange(other.num_tokens_, 0);
  }
  return *this;
}

TokenCacheWriter::~TokenCacheWriter() { Abandon(); }

void TokenCacheWriter::Abandon() {
  // Standard output stays open; a stream path's or the temporary's
  // descriptor is closed, and the temporary removed.
  if (fd_ >= 0 && path_ != "-") close(fd_);
  if (fd_ >= 0 && !stream_) {
    unlink(tmp_path_.c_str());
    KeepOnInterrupt(tmp_path_);
  }
  fd_ = -1;
}

absl::Status TokenCacheWriter::Flush() {
  if (buffer_.empty()) return absl::OkStatus();
  const std::string& name =
      !stream_ ? tmp_path_ : path_ == "-" ? std::string("<stdout>") : path_;
  RETURN_IF_ERROR(Annotate(
      WriteAll(fd_, buffer_.data(), buffer_.size(), name),
      absl::StrFormat("writing token cache at offset %d", written_bytes_)));
  written_bytes_ += buffer_.size();
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status TokenCacheWriter::Append(absl::Span<const uint32_t> ids) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": token cache writer already closed"));
  }
  const char* p = reinterpret_cast<const char*>(ids.data());
  size_t left = ids.size() * kTokenBytes;
  while (left > 0) {
    size_t room = kWriteBufferBytes - buffer_.size();
    if (room == 0) {
      RETURN_IF_ERROR(Flush());
      continue;
    }
    size_t n = std::min(room, left);
    buffer_.insert(buffer_.end(), p, p + n);
    p += n;
    left -= n;
  }
  num_tokens_ += ids.size();
  return absl::OkStatus();
}

absl::Status TokenCacheWriter::Commit(const BeforeReplace& before_replace) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": token cache writer already closed"));
  }
  absl::Status status = Flush();
  if (stream_) {
    if (path_ != "-" && close(fd_) != 0 && status.ok()) {
      status = ErrnoStatus(errno, "closing", path_);
    }
    fd_ = -1;
    return status;
  }
  if (status.ok() && fsync(fd_) != 0) {
    status = ErrnoStatus(errno, "fsync of", tmp_path_);
  }
  if (close(fd_) != 0 && status.ok()) {
    status = ErrnoStatus(errno, "closing", tmp_path_);
  }
  fd_ = -1;
  if (status.ok() && before_replace) status = before_replace(path_);
  if (status.ok() && rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("renaming ", tmp_path_, " to"),
                         path_);
  }
  if (!status.ok()) unlink(tmp_path_.c_str());
  KeepOnInterrupt(tmp_path_);
  if (!status.ok()) return status;
  return FsyncDirectory(DirName(path_));
}

}  // namespace coppelius
