#include "checkpoint/reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "common/threads.h"

namespace coppelius {
namespace {

// Closes a file descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

bool DigestEquals(const Sha256Digest& actual, const std::string& expected) {
  return expected.size() == kSha256Bytes &&
         std::memcmp(actual.data(), expected.data(), kSha256Bytes) == 0;
}

}  // namespace

CheckpointReader::CheckpointReader(CheckpointReader&& other) noexcept {
  *this = std::move(other);
}

CheckpointReader& CheckpointReader::operator=(
    CheckpointReader&& other) noexcept {
  if (this == &other) return *this;
  if (map_ != nullptr) {
    UnregisterMapping(map_);
    munmap(map_, map_bytes_);
  }
  path_ = std::move(other.path_);
  fresh_ = other.fresh_;
  file_bytes_ = other.file_bytes_;
  file_mtime_ns_ = other.file_mtime_ns_;
  preamble_ = other.preamble_;
  header_ = std::move(other.header_);
  map_ = std::exchange(other.map_, nullptr);
  map_bytes_ = std::exchange(other.map_bytes_, 0);
  payload_ = std::exchange(other.payload_, nullptr);
  return *this;
}

CheckpointReader::~CheckpointReader() {
  if (map_ != nullptr) {
    UnregisterMapping(map_);
    munmap(map_, map_bytes_);
  }
}

uint64_t CheckpointReader::num_chunks() const {
  return fresh_ ? 0 : NumChunks(preamble_.payload_bytes, preamble_.chunk_bytes);
}

absl::StatusOr<CheckpointReader> CheckpointReader::Open(
    const std::string& path) {
  // O_NONBLOCK: a FIFO with no writer would block open(); it is refused
  // below as not a regular file (reads of regular files ignore the flag).
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "opening checkpoint", path);
  FdCloser closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoStatus(errno, "stat of checkpoint", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a regular file (a checkpoint is an envelope file, or a "
              "0-byte file for a fresh start)"));
  }
  CheckpointReader r;
  r.path_ = path;
  r.file_bytes_ = static_cast<uint64_t>(st.st_size);
  r.file_mtime_ns_ = static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull +
                     static_cast<uint64_t>(st.st_mtim.tv_nsec);
  if (r.file_bytes_ == 0) {
    r.fresh_ = true;
    r.preamble_ = Preamble();
    r.preamble_.version = 0;
    return r;
  }

  std::string preamble_bytes(std::min(r.file_bytes_, kPreambleBytes), '\0');
  RETURN_IF_ERROR(PreadAll(fd, preamble_bytes.data(), preamble_bytes.size(),
                           0, path));
  ASSIGN_OR_RETURN(r.preamble_,
                   DecodePreamble(preamble_bytes, r.file_bytes_, path));
  const Preamble& p = r.preamble_;

  // Bounded by kMaxHeaderBytes and the file size (DecodePreamble).
  std::string header_bytes(p.header_bytes, '\0');
  RETURN_IF_ERROR(PreadAll(fd, header_bytes.data(), header_bytes.size(),
                           kPreambleBytes, path));
  const Sha256Digest header_digest = Sha256(header_bytes);
  if (header_digest != p.header_sha256) {
    return absl::DataLossError(absl::StrFormat(
        "%s: header at offset %d (%d bytes): SHA-256 is %s, the preamble "
        "records %s (corrupt header)",
        path, kPreambleBytes, p.header_bytes, Sha256Hex(header_digest),
        Sha256Hex(p.header_sha256)));
  }
  if (!r.header_.ParseFromString(header_bytes)) {
    return absl::DataLossError(absl::StrFormat(
        "%s: header at offset %d (%d bytes) is not a valid "
        "coppelius.CheckpointHeader",
        path, kPreambleBytes, p.header_bytes));
  }
  RETURN_IF_ERROR(ValidateHeader(r.header_, p, path));

  const uint64_t padding_begin = kPreambleBytes + p.header_bytes;
  std::string padding(p.payload_offset - padding_begin, '\0');
  RETURN_IF_ERROR(
      PreadAll(fd, padding.data(), padding.size(), padding_begin, path));
  for (size_t i = 0; i < padding.size(); ++i) {
    if (padding[i] != '\0') {
      return absl::DataLossError(absl::StrFormat(
          "%s: offset %d: padding byte is 0x%02x, expected 0", path,
          padding_begin + i, static_cast<unsigned char>(padding[i])));
    }
  }

  r.map_bytes_ = static_cast<size_t>(r.file_bytes_);
  void* map = mmap(nullptr, r.map_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    r.map_bytes_ = 0;
    return ErrnoStatus(errno, "mapping checkpoint", path);
  }
  r.map_ = map;
  // A SIGBUS in it (the file shrunk by another process, which the publisher
  // never does) is then one line naming the file (common/file_io.h
  // ReportShrunkMappings).
  RegisterMapping(map, r.map_bytes_, path);
  r.payload_ = static_cast<const unsigned char*>(map) + p.payload_offset;
  return r;
}

absl::Status CheckpointReader::FreshError() const {
  return absl::FailedPreconditionError(absl::StrCat(
      path_, ": is a 0-byte (fresh-start) checkpoint input; it has no "
             "header or payload"));
}

absl::Status CheckpointReader::CheckIdentity(
    const CheckpointIdentity& expected) const {
  if (fresh_) return FreshError();
  return CompareIdentity(identity(), expected, path_);
}

absl::Status CheckpointReader::ChunkError(uint64_t index,
                                          const Sha256Digest& actual,
                                          uint64_t bad_chunks) const {
  const uint64_t begin = index * preamble_.chunk_bytes;
  const uint64_t size =
      std::min(preamble_.chunk_bytes, preamble_.payload_bytes - begin);
  return absl::DataLossError(absl::StrFormat(
      "%s: payload chunk %d of %d (file offset %d, %d bytes): SHA-256 is %s, "
      "the header records %s (%d of %d chunks differ)",
      path_, index, num_chunks(), preamble_.payload_offset + begin, size,
      Sha256Hex(actual), BytesHex(header_.chunk_sha256(index)), bad_chunks,
      num_chunks()));
}

absl::Status CheckpointReader::VerifyChunk(uint64_t index) const {
  if (fresh_) return FreshError();
  if (index >= num_chunks()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: chunk index %d out of range (%d chunks)", path_, index,
        num_chunks()));
  }
  const uint64_t begin = index * preamble_.chunk_bytes;
  const uint64_t size =
      std::min(preamble_.chunk_bytes, preamble_.payload_bytes - begin);
  const Sha256Digest actual = Sha256(payload_ + begin, size);
  if (!DigestEquals(actual, header_.chunk_sha256(index))) {
    return ChunkError(index, actual, 1);
  }
  return absl::OkStatus();
}

namespace {

// Digests each chunk of `data` (after `copy(i, begin, size)` if given) and
// compares it with `expected`; returns the lowest bad index (or n) and the
// count of bad chunks, with the bad chunk's actual digest.
struct ScanResult {
  uint64_t first_bad;
  uint64_t bad_count;
  Sha256Digest first_bad_digest;
};

ScanResult ScanChunks(
    const unsigned char* data, uint64_t total, uint64_t chunk_bytes,
    const CheckpointHeader& header, int threads,
    const std::function<void(uint64_t, uint64_t)>& copy) {
  const uint64_t n = NumChunks(total, chunk_bytes);
  std::vector<char> bad(n, 0);
  std::vector<Sha256Digest> actual(n);
  ParallelFor(static_cast<int64_t>(n), threads, [&](int64_t i) {
    const uint64_t begin = i * chunk_bytes;
    const uint64_t size = std::min(chunk_bytes, total - begin);
    if (copy) copy(begin, size);
    actual[i] = Sha256(data + begin, size);
    bad[i] = !DigestEquals(actual[i], header.chunk_sha256(static_cast<int>(i)));
  });
  ScanResult result{n, 0, {}};
  for (uint64_t i = 0; i < n; ++i) {
    if (!bad[i]) continue;
    if (result.bad_count++ == 0) {
      result.first_bad = i;
      result.first_bad_digest = actual[i];
    }
  }
  return result;
}

}  // namespace

absl::Status CheckpointReader::VerifyPayload(int threads) const {
  if (fresh_) return FreshError();
  ScanResult r = ScanChunks(payload_, preamble_.payload_bytes,
                            preamble_.chunk_bytes, header_, threads, nullptr);
  if (r.bad_count == 0) return absl::OkStatus();
  return ChunkError(r.first_bad, r.first_bad_digest, r.bad_count);
}

absl::Status CheckpointReader::ReadPayload(void* dst, size_t dst_bytes,
                                           int threads) const {
  if (fresh_) return FreshError();
  if (dst_bytes != preamble_.payload_bytes || dst == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: reading the payload into a %d-byte buffer, expected %d bytes",
        path_, dst_bytes, preamble_.payload_bytes));
  }
  unsigned char* out = static_cast<unsigned char*>(dst);
  ScanResult r = ScanChunks(
      out, preamble_.payload_bytes, preamble_.chunk_bytes, header_, threads,
      [&](uint64_t begin, uint64_t size) {
        std::memcpy(out + begin, payload_ + begin, size);
      });
  if (r.bad_count == 0) return absl::OkStatus();
  return ChunkError(r.first_bad, r.first_bad_digest, r.bad_count);
}

}  // namespace coppelius
