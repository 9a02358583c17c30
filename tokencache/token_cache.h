// File: tokencache/token_cache.h
//
// The token cache (SPEC §2; byte layout in docs/FORMATS.md "Token cache"):
//
//   offset  size  field
//   0       8     source modification time, u64 LE, ns since the Unix epoch
//                 (st_mtim of the text the cache was made from; 0 for stdin)
//   8       8     source size in bytes, u64 LE
//   16      4·N   token ids, u32 LE, nothing else (file size = 16 + 4·N)
//
// Context c (context length T, e.g. 1,024) is ids [T·c, T·c + T] inclusive:
// T + 1 ids, inputs the first T, targets the last T. A stream of N ids holds
// floor((N - 1) / T) contexts (0 when N = 0).
//
// `TokenCache` maps a cache read-only; `TokenCacheWriter` writes one through
// a temporary in the output directory (fsync, rename, fsync of the directory),
// so a final name never holds a partial cache.
//
// Errors: NotFound (missing file), InvalidArgument (not a regular file),
// DataLoss (size not 16 + 4·N, id out of range), Internal/ResourceExhausted
// from the OS. Every message names the file and the offset or field.
//
// The host must be little-endian (the ids are used in place).
#ifndef COPPELIUS_TOKENCACHE_TOKEN_CACHE_H_
#define COPPELIUS_TOKENCACHE_TOKEN_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/file_io.h"
#include "absl/base/internal/endian.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the token cache is used in place: little-endian hosts only");

namespace coppelius {

// Header bytes before the first id.
inline constexpr uint64_t kTokenCacheHeaderBytes = 16;
// Bytes per token id.
inline constexpr uint64_t kTokenBytes = 4;

// The identity of the source text: what the header stores.
struct SourceStat {
  uint64_t mtime_ns = 0;    // st_mtim in ns since the epoch; 0 for stdin
  uint64_t size_bytes = 0;  // st_size (for stdin: bytes read)

  bool operator==(const SourceStat& o) const {
    return mtime_ns == o.mtime_ns && size_bytes == o.size_bytes;
  }
  bool operator!=(const SourceStat& o) const { return !(*this == o); }
};

// The header a cache's first kTokenCacheHeaderBytes bytes hold: source mtime
// (ns) and size, u64 little-endian each (docs/FORMATS.md).
inline SourceStat TokenCacheHeaderOf(const void* head) {
  const char* h = static_cast<const char*>(head);
  return {absl::little_endian::Load64(h), absl::little_endian::Load64(h + 8)};
}

// The number of ids in a cache file of `size` bytes (16 + 4·N); DataLoss
// naming `path` when the size is shorter than the header or leaves a partial
// id (a truncated or corrupt file).
absl::StatusOr<uint64_t> TokenCountOfFileSize(const std::string& path,
                                              uint64_t size);

// Whether a source modification time (ns, the header's signed reading) is
// more than a year after `now`: such a source's cache would fail
// CacheHeaderProblem, so make-cache refuses the source up front.
bool SourceMtimeTooFarAhead(uint64_t mtime_ns, absl::Time now);

// The most source bytes per id, on average, that a token cache may record
// in its header, whatever the vocabulary: text encodes to a few bytes per
// id, while a raw u32 id file read as a cache (what `tokenize encode`
// writes, passed where a cache belongs) names gigabytes of source in bytes
// 8..15 once its fourth id is 1 or more. make-cache refuses to write a
// cache above it (a vocabulary with tokens this long and text made of
// them), so that every reader, with or without the vocabulary, tells
// caches from other files by the same rule.
constexpr uint64_t kMaxSourceBytesPerToken = 1024;

// Whether `source_bytes` for `num_tokens` ids (> 0) is more than
// kMaxSourceBytesPerToken per id (computed without overflow).
inline bool AboveMaxSourceBytesPerToken(uint64_t source_bytes,
                                        uint64_t num_tokens) {
  return num_tokens > 0 &&
         static_cast<unsigned __int128>(num_tokens) * kMaxSourceBytesPerToken <
             source_bytes;
}

// Why a cache header could not have been written for `num_tokens` ids ("" if
// it could): the source's mtime (signed: before 1970 is negative) is at
// most a year after `now` (0, stdin, passes; text read as a time is year
// 2043 or later); a source with bytes has ids; and the source holds at
// least one byte per id, at most kMaxSourceBytesPerToken bytes per id and,
// when `max_token_bytes` > 0 (the vocabulary's longest token), at most that
// many bytes per id. The header has no magic number (docs/FORMATS.md), so
// this is what tells a cache from another file: make-cache refuses to
// replace a file that fails it without --force, `tokenize` replaces no
// file that passes it, and `inspect verify` fails it.
std::string CacheHeaderProblem(const SourceStat& header, uint64_t num_tokens,
                               uint64_t max_token_bytes, absl::Time now);

// CacheHeaderProblem without a vocabulary's bound: for readers that have
// none (inspect, train), and for telling whether an existing file is a
// cache at all (make-cache's and tokenize's output checks: a cache may
// have been made with another vocabulary).
std::string CacheHeaderProblemWithoutVocabulary(const SourceStat& header,
                                                uint64_t num_tokens,
                                                absl::Time now);

// stat(2) of `path`: NotFound if missing, InvalidArgument if not a regular
// file.
absl::StatusOr<SourceStat> StatSource(const std::string& path);

// Whether a cache still matches its source. When both mtime and size differ,
// kSizeDiffers is reported.
enum class Staleness {
  kFresh,          // header equals the source's current mtime and size
  kMtimeDiffers,   // same size, other modification time
  kSizeDiffers,    // other size
  kSourceMissing,  // the source path does not exist
};

// "fresh", "stale: source modification time differs", ... (one phrase).
absl::string_view StalenessName(Staleness staleness);

struct StalenessReport {
  Staleness staleness = Staleness::kFresh;
  SourceStat header;  // what the cache says
  SourceStat source;  // what the source is now (zeros when missing)
};

// Floor((num_tokens - 1) / context_tokens); 0 when num_tokens == 0.
// Precondition: context_tokens > 0.
uint64_t NumContexts(uint64_t num_tokens, uint64_t context_tokens);

// `header` (the header of the token cache at `path`) against the current
// stat of `source`. A missing source is a result (kSourceMissing), not an
// error; size is compared before mtime; other stat failures are errors,
// prefixed "checking the source of PATH". TokenCache::Staleness and
// inspect's chunked reader (which maps no file) both classify with it.
absl::StatusOr<StalenessReport> CacheStaleness(const std::string& path,
                                               const SourceStat& header,
                                               const std::string& source);

// A token cache file opened read-only: a regular file (opened with
// O_NONBLOCK, so a FIFO without a writer is refused, not waited on) whose
// size is 16 + 4·N (TokenCountOfFileSize). The caller owns `fd`. Errors:
// the open/fstat errno naming the file; InvalidArgument "PATH: not a
// regular file, expected a token cache"; TokenCountOfFileSize's DataLoss.
struct TokenCacheFile {
  int fd = -1;
  uint64_t size_bytes = 0;
  uint64_t num_tokens = 0;
};
absl::StatusOr<TokenCacheFile> OpenTokenCacheFile(const std::string& path);

// A read-only memory mapping of a token cache. Movable, not copyable.
class TokenCache {
 public:
  // Maps `path` and checks its size: >= 16 and (size - 16) % 4 == 0, else
  // DataLoss naming the file, its size and the expectation.
  static absl::StatusOr<TokenCache> Open(const std::string& path);

  TokenCache(TokenCache&& other) noexcept;
  TokenCache& operator=(TokenCache&& other) noexcept;
  TokenCache(const TokenCache&) = delete;
  TokenCache& operator=(const TokenCache&) = delete;
  ~TokenCache();

  const std::string& path() const { return path_; }
  // The 16-byte header: the source's mtime (ns) and size (bytes).
  const SourceStat& header() const { return header_; }
  // File size in bytes (16 + 4·num_tokens()).
  uint64_t file_size_bytes() const { return file_size_; }
  // N, the number of ids.
  uint64_t num_tokens() const { return num_tokens_; }
  // Contexts of `context_tokens` (T) inputs each: floor((N - 1) / T).
  uint64_t NumContexts(uint64_t context_tokens) const {
    return ::coppelius::NumContexts(num_tokens_, context_tokens);
  }
  // The ids, in place in the mapping (nullptr when N == 0).
  const uint32_t* tokens() const { return tokens_; }
  absl::Span<const uint32_t> token_span() const {
    return absl::Span<const uint32_t>(tokens_, num_tokens_);
  }

  // Scans every id: OK if all are < vocab_size, else DataLoss naming the
  // first offending token index, its byte offset and its id.
  absl::Status CheckIdRange(uint32_t vocab_size) const;

  // Compares the header with the current stat of `source_path`. A missing
  // source is a result (kSourceMissing), not an error; other stat failures
  // are errors.
  absl::StatusOr<StalenessReport> Staleness(
      const std::string& source_path) const;

 private:
  TokenCache() = default;
  void Release();

  std::string path_;
  void* mapping_ = nullptr;  // nullptr when the file is exactly the header
  uint64_t file_size_ = 0;
  SourceStat header_;
  uint64_t num_tokens_ = 0;
  const uint32_t* tokens_ = nullptr;
};

// Writes a token cache: header first, then ids appended in order, to
// "<path>.tmp-<pid>-<random>" in the output directory; Commit() fsyncs,
// renames over `path` and fsyncs the directory. Destroying an uncommitted
// writer removes the temporary. `path` "-" writes straight to stdout, and a
// `path` that exists and is a FIFO, socket or character device (`-o
// >(...)`, a named pipe, /dev/null) straight to it, as WriteFileAtomically
// (common/file_io.h) writes one: no atomicity (a rename would replace it).
// Create() also removes stale temporaries of `path` left by dead processes
// (kill -9 during a previous run).
class TokenCacheWriter {
 public:
  static absl::StatusOr<TokenCacheWriter> Create(const std::string& path,
                                                 const SourceStat& header);

  TokenCacheWriter(TokenCacheWriter&& other) noexcept;
  TokenCacheWriter& operator=(TokenCacheWriter&& other) noexcept;
  TokenCacheWriter(const TokenCacheWriter&) = delete;
  TokenCacheWriter& operator=(const TokenCacheWriter&) = delete;
  ~TokenCacheWriter();

  // Appends ids (buffered). Errors name the temporary file and offset.
  absl::Status Append(absl::Span<const uint32_t> ids);
  // Flushes, fsyncs, renames to the final path, fsyncs the directory.
  // `before_replace`, when given, runs right before the rename (not for
  // stdout) with the final path, as WriteFileAtomically's
  // (common/file_io.h) does: its error is returned, the temporary removed
  // and the final path untouched.
  absl::Status Commit(const BeforeReplace& before_replace = {});

  uint64_t num_tokens() const { return num_tokens_; }
  // The temporary's path ("" for stdout or another stream).
  const std::string& temporary_path() const { return tmp_path_; }
  // Whether the ids go straight to standard output or another stream.
  bool streams() const { return stream_; }

 private:
  TokenCacheWriter() = default;
  absl::Status Flush();
  void Abandon();

  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  bool stream_ = false;  // stdout or a stream path: no temporary, no rename
  std::vector<char> buffer_;
  uint64_t written_bytes_ = 0;
  uint64_t num_tokens_ = 0;
};

}  // namespace coppelius

#endif  // COPPELIUS_TOKENCACHE_TOKEN_CACHE_H_
