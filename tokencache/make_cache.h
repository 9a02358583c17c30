// File: tokencache/make_cache.h
//
// `make-cache`: encodes a text into a token cache (token_cache.h, SPEC §2).
//
//   make-cache --vocab=vocab.tiktoken SOURCE|- -o corpus.tok [--force]
//              [--threads=N]
//
// The source is encoded with special tokens allowed (SPEC §3), so each
// "<|endoftext|>" becomes id V-1 and separates independently pre-tokenized
// segments. The header records the source's st_mtim (ns) and size; for stdin
// ("-") mtime 0 and the number of bytes read. The cache is written to a
// temporary in the output directory, fsynced, renamed, and the directory
// fsynced; a killed run leaves no partial cache under the final name, and
// its temporary is removed by the next run.
//
// If the output exists and its header equals the source's current mtime and
// size, nothing is done (the cache is fresh) unless `force`, or unless the
// cache still fails to be this source's: the vocabulary file is newer than
// the cache (as make(1) treats a prerequisite; a vocabulary from a pipe,
// which has no time to compare, counts as newer), the cache has no ids for a
// non-empty source or an id >= V, or its ids, decoded with the vocabulary,
// are not exactly the source's bytes (tokencache/decode_check.h: a cache
// cut short at any id, or made with another vocabulary; this reads the
// source, but encodes nothing). Not caught: a cache made with another
// vocabulary whose ids all decode the same (one that only adds merges, say)
// and older than the cache; after changing the vocabulary so, use --force. An existing
// Coppelius checkpoint or result file is never replaced, even with `force`
// (FailedPrecondition naming what it is: tokenizer/output_checks.h).
#ifndef COPPELIUS_TOKENCACHE_MAKE_CACHE_H_
#define COPPELIUS_TOKENCACHE_MAKE_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace coppelius {

struct MakeCacheOptions {
  std::string vocab_path;   // tiktoken rank file (V - 1 ranks)
  std::string source_path;  // text; "-" = stdin
  std::string output_path;  // token cache; "-" = stdout (never "fresh")
  bool force = false;       // rebuild even when the cache is fresh
  int threads = 0;          // encoder threads; <= 0: hardware concurrency
  bool progress = false;    // progress bar (MB/s, ETA) on stderr
  bool summary = true;      // one summary line on stderr at the end
  // The text is encoded in blocks of about this many bytes, each ending just
  // after an "<|endoftext|>" (the encoding of the whole is unchanged: a
  // special token ends a segment); progress is reported per block.
  size_t block_bytes = 8 << 20;
};

struct MakeCacheReport {
  bool was_fresh = false;     // nothing written: the cache was fresh
  uint64_t source_bytes = 0;  // bytes encoded
  uint64_t num_tokens = 0;    // ids written (N)
  double encode_seconds = 0;  // encoding only (vocabulary load excluded)
  double total_seconds = 0;   // whole run
};

// Errors: InvalidArgument (missing option, output path equal to the source),
// NotFound (vocabulary or source missing), DataLoss (bad vocabulary file),
// FailedPrecondition (source changed while being read), OS errors from
// writing. `report` may be null.
absl::Status RunMakeCache(const MakeCacheOptions& options,
                          MakeCacheReport* report = nullptr);

}  // namespace coppelius

#endif  // COPPELIUS_TOKENCACHE_MAKE_CACHE_H_
