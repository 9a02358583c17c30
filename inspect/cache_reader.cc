#include "inspect/cache_reader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"
#include "common/status_macros.h"

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

absl::StatusOr<CacheFileInfo> ReadCacheChunked(
    const std::string& path, const CacheIdsVisitor& visit, size_t chunk_ids,
    const CacheOpenedVisitor& opened) {
  ASSIGN_OR_RETURN(const TokenCacheFile file, OpenTokenCacheFile(path));
  Fd fd(file.fd);
  CacheFileInfo info;
  info.file_bytes = file.size_bytes;
  const uint64_t size = info.file_bytes;
  info.num_tokens = file.num_tokens;
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return ErrnoStatus(errno, "stat", path);
  }
  info.file_mtime = st.st_mtim;
  unsigned char header[kTokenCacheHeaderBytes];
  absl::Status s = ReadAt(fd.get(), header, sizeof(header), 0, size, path);
  if (!s.ok()) return s;
  info.header.mtime_ns = absl::little_endian::Load64(header);
  info.header.size_bytes = absl::little_endian::Load64(header + 8);
  if (opened) RETURN_IF_ERROR(opened(info));
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
  // No vocabulary here: the rule with the vocabulary-free bound.
  const std::string why =
      CacheHeaderProblemWithoutVocabulary(info.header, info.num_tokens, now);
  if (why.empty()) return "";
  return absl::StrCat(path, ": ", why,
                      "; not a token cache as make-cache writes them");
}

}  // namespace coppelius
