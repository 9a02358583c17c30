#include "inspect/cache_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"

namespace coppelius {

namespace {

// Closes the descriptor on every return path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly `size` bytes at `offset`; a file that ends first shrank
// after it was opened with `file_bytes` bytes.
absl::Status ReadAt(int fd, void* data, size_t size, uint64_t offset,
                    uint64_t file_bytes, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "reading token cache", path);
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrFormat(
          "%s: offset %d: file shrank while being read: it ends here, "
          "expected %d bytes (its size when opened)",
          path, offset, file_bytes));
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CacheFileInfo> ReadCacheChunked(const std::string& path,
                                               const CacheIdsVisitor& visit,
                                               size_t chunk_ids) {
  // O_NONBLOCK: a FIFO with no writer would block open(); refused below.
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) return ErrnoStatus(errno, "opening token cache", path);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return ErrnoStatus(errno, "stat of token cache", path);
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a regular file, expected a token cache"));
  }
  CacheFileInfo info;
  info.file_bytes = static_cast<uint64_t>(st.st_size);
  const uint64_t size = info.file_bytes;
  absl::StatusOr<uint64_t> num_tokens = TokenCountOfFileSize(path, size);
  if (!num_tokens.ok()) return num_tokens.status();
  info.num_tokens = *num_tokens;
  unsigned char header[kTokenCacheHeaderBytes];
  absl::Status s = ReadAt(fd.get(), header, sizeof(header), 0, size, path);
  if (!s.ok()) return s;
  auto le64 = [&](int at) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | header[at + i];
    return v;
  };
  info.header.mtime_ns = le64(0);
  info.header.size_bytes = le64(8);
  if (!visit || info.num_tokens == 0) return info;
  chunk_ids = std::max<size_t>(1, chunk_ids);
  std::vector<uint32_t> ids(
      static_cast<size_t>(std::min<uint64_t>(chunk_ids, info.num_tokens)));
  for (uint64_t first = 0; first < info.num_tokens;) {
    const size_t n = static_cast<size_t>(
        std::min<uint64_t>(ids.size(), info.num_tokens - first));
    s = ReadAt(fd.get(), ids.data(), n * kTokenBytes,
               kTokenCacheHeaderBytes + kTokenBytes * first, size, path);
    if (!s.ok()) return s;
    // Little-endian host (token_cache.h): the bytes are the ids.
    s = visit(first, absl::Span<const uint32_t>(ids.data(), n));
    if (!s.ok()) return s;
    first += n;
  }
  return info;
}

std::string CacheHeaderProblem(const std::string& path,
                               const CacheFileInfo& info, absl::Time now) {
  // No vocabulary here: the rule without its upper bound.
  const std::string why = ::coppelius::CacheHeaderProblem(
      info.header, info.num_tokens, /*max_token_bytes=*/0, now);
  if (why.empty()) return "";
  return absl::StrCat(path, ": ", why,
                      "; make-cache refuses it as not a token cache");
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
    return absl::Status(now.status().code(),
                        absl::StrCat("checking the source of ", path, ": ",
                                     now.status().message()));
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

}  // namespace coppelius
