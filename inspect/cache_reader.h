// File: inspect/cache_reader.h
//
// inspect's reader of token caches (layout: tokencache/token_cache.h and
// docs/FORMATS.md "Token cache": a 16-byte header, then N u32 LE ids). It
// reads with pread in bounded chunks instead of mapping the file as
// TokenCache does: a cache that shrinks while inspect reads it (a truncate,
// another writer) is a one-line DataLoss naming the offset, not a SIGBUS.
//
// Errors name the file: NotFound (missing), InvalidArgument (not a regular
// file), DataLoss (size not 16 + 4 N; "file shrank while being read" with
// the offset where the bytes ran out), other errno failures as ErrnoStatus.
#ifndef COPPELIUS_INSPECT_CACHE_READER_H_
#define COPPELIUS_INSPECT_CACHE_READER_H_

#include <time.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "tokencache/token_cache.h"

namespace coppelius {

// What the header and the size (at open) say.
struct CacheFileInfo {
  uint64_t file_bytes = 0;  // 16 + 4 num_tokens
  SourceStat header;        // bytes 0-15
  uint64_t num_tokens = 0;
  struct timespec file_mtime = {};  // the cache file's st_mtim, at open
};

// Called for consecutive runs of ids in file order; `first` is the index of
// ids[0]. A non-OK status stops the read and is returned as is.
using CacheIdsVisitor =
    std::function<absl::Status(uint64_t first, absl::Span<const uint32_t> ids)>;

// Called once with the header and the size, before any id is read (so that
// what the ids are checked for can depend on them). A non-OK status stops
// the read and is returned as is.
using CacheOpenedVisitor = std::function<absl::Status(const CacheFileInfo&)>;

// Ids per read (4 MiB).
inline constexpr size_t kCacheReadIds = size_t{1} << 20;

// Opens `path`, checks its size (>= 16 and 16 + 4 N, as TokenCache::Open),
// reads the header, hands it to `opened` when set and, when `visit` is set,
// reads the N ids counted at open, at most `chunk_ids` (>= 1) per pread,
// handing each run to `visit`.
absl::StatusOr<CacheFileInfo> ReadCacheChunked(
    const std::string& path, const CacheIdsVisitor& visit,
    size_t chunk_ids = kCacheReadIds,
    const CacheOpenedVisitor& opened = nullptr);

// Why the header cannot be a source's (one line naming `path`), or "" when
// it can: tokencache/token_cache.h CacheHeaderProblemWithoutVocabulary
// (make-cache's rule with a vocabulary-free bound: inspect has no
// vocabulary), the rule train applies too, so that `inspect verify` fails
// what make-cache calls not a token cache.
std::string CacheHeaderProblem(const std::string& path,
                               const CacheFileInfo& info, absl::Time now);

}  // namespace coppelius

#endif  // COPPELIUS_INSPECT_CACHE_READER_H_
