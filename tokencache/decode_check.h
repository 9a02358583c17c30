// File: tokencache/decode_check.h
//
// Whether a token cache's ids are this source's encoding as far as a
// vocabulary can tell without encoding again: decoding undoes encoding
// (SPEC §3: any byte string encodes and decodes back to itself), so the ids
// of the source's cache, decoded with the vocabulary it was made with, give
// exactly the source's bytes. The 16-byte header (source mtime and size)
// cannot tell a cache cut short at a multiple of 4 bytes, or one made with
// another vocabulary, from a fresh one; this check does, at the cost of
// reading the source (no encoding): any id missing at the end leaves source
// bytes undecoded, and an id whose bytes differ in the other vocabulary
// differs from the source.
//
// What it cannot see: a cache made with another vocabulary in which every id
// it uses has the same bytes (a vocabulary that only adds merges, say) but
// whose encoding of the source differs; only encoding again tells that
// (make-cache --force).
#ifndef COPPELIUS_TOKENCACHE_DECODE_CHECK_H_
#define COPPELIUS_TOKENCACHE_DECODE_CHECK_H_

#include <time.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tokenizer/vocabulary.h"

namespace coppelius {

// make-cache's freshness rule for a cache whose header matches its source,
// beyond the header (make-cache and inspect --source --vocab both apply
// it, by these two): VocabularyNewerThanCache, then the ids decoded with
// CacheDecodeCheck. A cache passes only when both say "".
//
// "the vocabulary PATH is newer than the cache" when the file at
// `vocab_path` was modified after the cache (`cache_mtime`, its st_mtim):
// make(1)'s rule for a prerequisite, since the header does not name its
// vocabulary. "" when it was not, or when `vocab_path` cannot be stat'ed
// (loading it fails then). std::nullopt when the vocabulary has no
// modification time to compare: a stream ("-" on a pipe, a named pipe);
// "-" with a regular file redirected to standard input (`< v.tiktoken`) is
// compared by that file's time.
std::optional<std::string> VocabularyNewerThanCache(
    const std::string& vocab_path, const struct timespec& cache_mtime);

// Compares a cache's ids, fed in file order, decoded with `vocabulary`,
// against `source` (the whole source text; both must outlive this object).
// `cache_path` only names the file in Difference() ("PATH: " before the
// reason; nothing when empty).
class CacheDecodeCheck {
 public:
  CacheDecodeCheck(const Vocabulary& vocabulary, absl::string_view source,
                   std::string cache_path);

  // Ids `first`, `first` + 1, ... (consecutive calls continue where the last
  // one ended). Stops comparing at the first difference.
  void Feed(uint64_t first, absl::Span<const uint32_t> ids);

  // After every id was fed: "" when they decode to exactly the source; else
  // one line naming the cache and what differs: the token (index, byte
  // offset 16 + 4 i, id) whose bytes are not the source's at that point (or
  // an id the vocabulary does not have), or how many source bytes the ids
  // leave undecoded (a cache cut short).
  std::string Difference() const;

 private:
  const Vocabulary& vocabulary_;
  absl::string_view source_;
  std::string prefix_;  // "PATH: " or ""
  uint64_t decoded_ = 0;  // source bytes matched so far
  uint64_t ids_ = 0;      // ids fed
  std::string difference_;
};

}  // namespace coppelius

#endif  // COPPELIUS_TOKENCACHE_DECODE_CHECK_H_
