#include "tokencache/make_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file_io.h"
#include "common/status_line.h"
#include "common/status_macros.h"
#include "common/threads.h"
#include "tokencache/decode_check.h"
#include "tokencache/token_cache.h"
#include "tokenizer/encoder.h"
#include "tokenizer/output_checks.h"
#include "tokenizer/vocabulary.h"

namespace coppelius {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// End of the block that starts at `begin`: just after the first
// "<|endoftext|>" ending at or after begin + block_bytes, or the text end.
size_t BlockEnd(absl::string_view text, size_t begin, size_t block_bytes) {
  const absl::string_view special = Vocabulary::kEndOfText;
  if (text.size() - begin <= block_bytes) return text.size();
  size_t from = begin + block_bytes;
  from = from >= special.size() ? from - (special.size() - 1) : 0;
  size_t at = text.find(special, std::max(from, begin));
  return at == absl::string_view::npos ? text.size() : at + special.size();
}

void PrintProgress(uint64_t done, uint64_t total, double seconds) {
  const double mb = done / 1e6;
  const double rate = seconds > 0 ? mb / seconds : 0;
  const double eta = rate > 0 ? (total - done) / 1e6 / rate : 0;
  const int width = 30;
  const int filled =
      total > 0 ? static_cast<int>(width * static_cast<double>(done) / total)
                : width;
  absl::FPrintF(stderr, "\rmake-cache [%s%s] %6.1f/%.1f MB %5.1f MB/s ETA %3.0f s",
                std::string(filled, '#'), std::string(width - filled, '.'), mb,
                total / 1e6, rate, eta);
}

// Why a cache whose header matches its source must still be rebuilt ("" if
// it need not): the vocabulary file changed after the cache was written, a
// non-empty source with no tokens (a cache cut short), an id the
// vocabulary does not have, or ids that do not decode to the source's bytes
// (a cache cut short at any id, or made with another vocabulary, whatever
// the files' times: tokencache/decode_check.h). The source's bytes, when
// the decode needs them, are read into `*text` (which the encoding then
// reuses: the source is read once). A source that cannot be read is an
// error, not a reason to rebuild (the rebuild would fail to read it too).
absl::StatusOr<std::string> StaleReason(const TokenCache& cache,
                                        const struct stat& cache_st,
                                        const Vocabulary& vocabulary,
                                        const std::string& vocab_path,
                                        const std::string& source_path,
                                        const SourceStat& source,
                                        std::optional<std::string>* text) {
  // The rule inspect --source --vocab applies too (decode_check.h).
  const std::optional<std::string> newer =
      VocabularyNewerThanCache(vocab_path, cache_st.st_mtim);
  if (!newer) {
    return std::string(
        "the vocabulary comes from a stream, whose modification time is "
        "unknown (give it as a file to keep a fresh cache)");
  }
  if (!newer->empty()) return *newer;
  if (source.size_bytes > 0 && cache.num_tokens() == 0) {
    return absl::StrCat("it holds no tokens for ", source.size_bytes,
                        " source bytes");
  }
  const absl::Status ids = cache.CheckIdRange(vocabulary.vocab_size());
  if (!ids.ok()) return std::string(ids.message());
  ASSIGN_OR_RETURN(*text, ReadFile(source_path));
  CacheDecodeCheck check(vocabulary, **text, "");
  check.Feed(0, cache.token_span());
  return check.Difference();
}

// The refusal of an output that is not a token cache (`why`: what the
// cache rules found), --force not given.
absl::Status NotATokenCacheRefusal(const std::string& output,
                                   absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "-o %s: exists and is not a token cache (%s); refusing to replace it "
      "(--force replaces it)",
      output, why));
}

// The output's checks made again right before the finished cache replaces
// it (TokenCacheWriter::Commit's before_replace; break-it, session 24: a
// checkpoint copied to -o while make-cache ran was replaced): never a
// checkpoint or result (CheckOutputBeforeReplacing), and without --force
// nothing that is not a token cache (the start's rule, without its
// exceptions for this source's own cache: the file the start judged,
// `at_start`, same device, inode, size and modification time, passes as
// it did).
absl::Status CheckCacheOutputAgain(const std::string& target, bool force,
                                   const struct stat* at_start) {
  RETURN_IF_ERROR(CheckOutputBeforeReplacing(target, false));
  struct stat now;
  if (force || stat(target.c_str(), &now) != 0 || !S_ISREG(now.st_mode) ||
      now.st_size == 0) {
    return absl::OkStatus();
  }
  if (at_start != nullptr && now.st_dev == at_start->st_dev &&
      now.st_ino == at_start->st_ino && now.st_size == at_start->st_size &&
      now.st_mtim.tv_sec == at_start->st_mtim.tv_sec &&
      now.st_mtim.tv_nsec == at_start->st_mtim.tv_nsec) {
    return absl::OkStatus();
  }
  absl::StatusOr<TokenCache> cache = TokenCache::Open(target);
  const std::string not_a_cache =
      cache.ok() ? CacheHeaderProblemWithoutVocabulary(
                       cache->header(), cache->num_tokens(), absl::Now())
                 : std::string(cache.status().message());
  if (not_a_cache.empty()) return absl::OkStatus();
  return FoundBeforeReplacing(NotATokenCacheRefusal(target, not_a_cache));
}

}  // namespace

absl::Status RunMakeCache(const MakeCacheOptions& given,
                          MakeCacheReport* report) {
  // An output given as a symbolic link is published to its target (the
  // rename would replace the link); a link to nothing is refused.
  MakeCacheOptions resolved = given;
  ASSIGN_OR_RETURN(resolved.output_path, OutputTarget(given.output_path, "-o "));
  const MakeCacheOptions& options = resolved;
  const Clock::time_point start = Clock::now();
  MakeCacheReport local_report;
  if (report == nullptr) report = &local_report;
  *report = MakeCacheReport();
  if (options.vocab_path.empty()) {
    return UsageError("--vocab=FILE is required");
  }
  if (options.source_path.empty()) {
    return UsageError("a SOURCE path (or -) is required");
  }
  if (options.output_path.empty()) {
    return UsageError("-o OUTPUT is required");
  }
  RETURN_IF_ERROR(CheckThreadsFlag(options.threads));
  const bool from_stdin = options.source_path == "-";
  const bool to_stdout = options.output_path == "-";
  // -o naming a FIFO, socket or character device (`-o >(...)`, a named
  // pipe, /dev/null) is written to as standard output is: nothing to
  // replace, nothing to keep fresh, ids that cannot be taken back.
  const bool to_stream = to_stdout || IsStreamPath(options.output_path);
  RETURN_IF_ERROR(CheckStandardInputReadOnce(
      {{"--vocab=", options.vocab_path}, {"SOURCE ", options.source_path}}));
  // The output may not be the source or the vocabulary, by name or, with
  // -o -, as the file standard output was redirected to (`> SOURCE` empties
  // it before make-cache reads it).
  RETURN_IF_ERROR(CheckOutputIsNotInput(options.output_path, "source",
                                        options.source_path));
  RETURN_IF_ERROR(CheckOutputIsNotInput(options.output_path,
                                        "vocabulary --vocab",
                                        options.vocab_path));
  if (!to_stream) {
    // The cache is published by rename (a directory is refused here).
    RETURN_IF_ERROR(CheckRegularFileOrAbsent(options.output_path, "-o"));
    RETURN_IF_ERROR(CheckOutputPathUsable(options.output_path, "-o"));
  }
  // A checkpoint or result file is never replaced, --force or not, nor
  // appended to (-o - into `>> FILE`): the rules `tokenize` refuses them by
  // (tokenizer/output_checks.h; for "-" they examine standard output's file).
  RETURN_IF_ERROR(CheckNotCoppeliusFile(options.output_path));
  RETURN_IF_ERROR(CheckNotAResultFile(options.output_path));
  // The output as the start's checks see it, for the same checks made
  // again right before the cache replaces it (CheckCacheOutputAgain).
  struct stat output_at_start;
  const bool output_existed =
      !to_stream && stat(options.output_path.c_str(), &output_at_start) == 0;
  if (to_stdout) {
    // `-o - >> FILE` with FILE not empty: a cache begins with its header,
    // so one appended to FILE is never a cache, and FILE (another cache, a
    // vocabulary) is damaged, where `-o FILE` would not replace it without
    // --force. Refused whatever the flags.
    if (const uint64_t bytes = StandardOutputFileBytes(); bytes > 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "-o - (standard output, an existing file of %d bytes): a token "
          "cache starts with its header at offset 0, so it cannot be "
          "appended to a file that is not empty (give the cache its own "
          "file: -o PATH)",
          bytes));
    }
  }

  SourceStat source_stat;
  if (!from_stdin) {
    absl::StatusOr<SourceStat> stat = StatSource(options.source_path);
    struct stat st;
    if (absl::IsInvalidArgument(stat.status()) &&
        ::stat(options.source_path.c_str(), &st) == 0 &&
        !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
      // A named pipe or `<(...)`: the header records the source's size and
      // modification time, which a stream does not have; standard input is
      // the way to give one (the README's rule reads pipes elsewhere).
      return absl::InvalidArgumentError(absl::StrCat(
          "source: ", stat.status().message(),
          " (the cache records its source's size and modification time; "
          "give a stream on standard input as '-')"));
    }
    if (!stat.ok()) return Annotate(stat.status(), "source");
    source_stat = *stat;
    // A cache of a source dated more than a year ahead would not pass the
    // rule that tells caches from other files (CacheHeaderProblem) once the
    // source changed: refused before anything is written.
    if (SourceMtimeTooFarAhead(source_stat.mtime_ns, absl::Now())) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: modification time %d ns is more than a year ahead; correct "
          "it (touch) or the clock",
          options.source_path, source_stat.mtime_ns));
    }
  }
  // The vocabulary is loaded (and so checked) even when the cache turns out
  // fresh: a cache is fresh only for a usable vocabulary. The encoder's
  // tables are built only if the source is encoded.
  absl::StatusOr<Vocabulary> vocabulary = Vocabulary::Load(options.vocab_path);
  if (!vocabulary.ok()) return Annotate(vocabulary.status(), "--vocab");

  // The source's bytes, once read (by the freshness check's decode, or for
  // the encoding).
  std::optional<std::string> source_text;
  // An existing output: a cache of this source that is still fresh is kept;
  // a file that is not a token cache is never replaced without --force.
  struct stat out_st;
  if (!to_stream && !options.force &&
      stat(options.output_path.c_str(), &out_st) == 0 && out_st.st_size > 0) {
    absl::StatusOr<TokenCache> existing = TokenCache::Open(options.output_path);
    std::string not_a_cache;
    char head[kTokenCacheHeaderBytes];
    if (!existing.ok() && !from_stdin &&
        ReadFileHead(options.output_path, head, sizeof(head)) &&
        TokenCacheHeaderOf(head) == source_stat) {
      // This source's cache, cut inside an id (16 + 4N + 1..3 bytes): its
      // header is the source's own stat. Rebuilt, as a cut at an id's end is.
      if (options.summary) {
        absl::FPrintF(stderr,
                      "make-cache: %s matches the source but %s; rebuilding\n",
                      EscapeControlCharacters(options.output_path),
                      EscapeControlCharacters(existing.status().message()));
      }
    } else if (!existing.ok()) {
      not_a_cache = std::string(existing.status().message());
    } else if (from_stdin || existing->header() != source_stat) {
      // A header that matches the source's stat is this source's cache
      // (fresh or to be rebuilt below); any other must look like a cache.
      // Without this vocabulary's bound: the cache may have been made with
      // another vocabulary (tokenize tells caches the same way).
      not_a_cache = CacheHeaderProblemWithoutVocabulary(
          existing->header(), existing->num_tokens(), absl::Now());
    }
    if (!not_a_cache.empty()) {
      return NotATokenCacheRefusal(options.output_path, not_a_cache);
    }
    if (existing.ok() && !from_stdin && existing->header() == source_stat) {
      // A cache that fails the readers' rule (one that an older make-cache
      // could write: more than kMaxSourceBytesPerToken source bytes per id)
      // is never fresh: rebuilt, which then says why it cannot be written.
      // (This vocabulary's own bound needs no test here: ids beyond it
      // cannot decode to the source, which StaleReason checks.)
      std::string stale = CacheHeaderProblemWithoutVocabulary(
          existing->header(), existing->num_tokens(), absl::Now());
      if (stale.empty()) {
        ASSIGN_OR_RETURN(
            stale,
            StaleReason(*existing, out_st, *vocabulary, options.vocab_path,
                        options.source_path, source_stat, &source_text));
      }
      if (stale.empty()) {
        report->was_fresh = true;
        report->num_tokens = existing->num_tokens();
        report->source_bytes = source_stat.size_bytes;
        if (options.summary) {
          absl::FPrintF(stderr,
                        "make-cache: %s is fresh (source %s: mtime %d ns, "
                        "%d bytes; %d tokens); nothing to do (--force "
                        "rebuilds)\n",
                        EscapeControlCharacters(options.output_path),
                        EscapeControlCharacters(options.source_path),
                        static_cast<int64_t>(source_stat.mtime_ns),
                        source_stat.size_bytes,
                        existing->num_tokens());
        }
        // What killed writers of the output left (a rebuild clears it when
        // it makes its own temporary; this run writes nothing).
        RemoveStaleTemporaries(options.output_path);
        return absl::OkStatus();
      }
      if (options.summary) {
        absl::FPrintF(stderr, "make-cache: %s matches the source but %s; "
                              "rebuilding\n",
                      EscapeControlCharacters(options.output_path),
                      EscapeControlCharacters(stale));
      }
    }
  }

  // With tokens longer than kMaxSourceBytesPerToken the source may encode
  // to fewer ids than a cache must hold, which is known only at the end:
  // ids for standard output or another stream (which cannot be taken back)
  // are then held until the count is checked.
  const bool hold_ids =
      to_stream && vocabulary->longest_token_bytes() > kMaxSourceBytesPerToken;
  std::vector<uint32_t> held;
  const Encoder encoder(*std::move(vocabulary));
  if (!source_text.has_value()) {
    ASSIGN_OR_RETURN(source_text, ReadFile(options.source_path));
  }
  const std::string& text = *source_text;
  if (from_stdin) {
    source_stat.mtime_ns = 0;
    source_stat.size_bytes = text.size();
  } else {
    ASSIGN_OR_RETURN(SourceStat after, StatSource(options.source_path));
    if (after == source_stat && text.size() != source_stat.size_bytes) {
      // Unchanged, yet not its size in bytes (/proc files report 0).
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %d bytes read from a file whose size says %d; a cache's "
          "header records the source's size, so the source must be a "
          "regular file whose size is its content",
          options.source_path, text.size(), source_stat.size_bytes));
    }
    if (after != source_stat || text.size() != source_stat.size_bytes) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: changed while being read (size %d -> %d bytes, mtime %d -> %d "
          "ns); run again",
          options.source_path, source_stat.size_bytes, after.size_bytes,
          static_cast<int64_t>(source_stat.mtime_ns),
          static_cast<int64_t>(after.mtime_ns)));
    }
  }

  ASSIGN_OR_RETURN(TokenCacheWriter writer,
                   TokenCacheWriter::Create(options.output_path, source_stat));
  // Memory that runs out while encoding (in worker threads) ends the
  // process naming the source; the writer's temporary is removed then
  // (ExitOnOutOfMemory).
  const OutOfMemoryContext out_of_memory(absl::StrFormat(
      "encoding %s (%d bytes)", options.source_path, text.size()));
  const Clock::time_point encode_start = Clock::now();
  const absl::string_view all(text);
  std::vector<uint32_t> ids;
  const size_t block_bytes = std::max<size_t>(1, options.block_bytes);
  for (size_t begin = 0; begin < all.size();) {
    const size_t end = BlockEnd(all, begin, block_bytes);
    ids.clear();
    encoder.EncodeParallel(all.substr(begin, end - begin),
                           /*allow_special=*/true, options.threads, &ids);
    if (hold_ids) {
      held.insert(held.end(), ids.begin(), ids.end());
    } else {
      RETURN_IF_ERROR(writer.Append(ids));
    }
    begin = end;
    if (options.progress) {
      PrintProgress(end, all.size(), SecondsSince(encode_start));
    }
  }
  report->encode_seconds = SecondsSince(encode_start);
  if (options.progress) absl::FPrintF(stderr, "\n");
  const uint64_t num_ids = hold_ids ? held.size() : writer.num_tokens();
  report->num_tokens = num_ids;
  report->source_bytes = all.size();
  // A cache above kMaxSourceBytesPerToken could not be told from a raw id
  // file by the readers' rule (CacheHeaderProblem): not published (the
  // writer's temporary is removed; standard output got nothing).
  if (AboveMaxSourceBytesPerToken(all.size(), num_ids)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d bytes encode to %d ids, more than %d source bytes per id "
        "(the vocabulary %s has tokens that long); a token cache holds at "
        "least one id per %d source bytes, the rule that tells caches from "
        "other files (docs/FORMATS.md); not written",
        options.source_path, all.size(), num_ids, kMaxSourceBytesPerToken,
        options.vocab_path, kMaxSourceBytesPerToken));
  }
  if (hold_ids) RETURN_IF_ERROR(writer.Append(held));
  RETURN_IF_ERROR(writer.Commit([&](const std::string& target) {
    return CheckCacheOutputAgain(target, options.force,
                                 output_existed ? &output_at_start : nullptr);
  }));
  report->total_seconds = SecondsSince(start);
  if (options.summary) {
    absl::FPrintF(stderr,
                  "make-cache: wrote %s: %d tokens (%d contexts of 1,024, the "
                  "coppelius context; other configs: inspect --config) from "
                  "%d bytes; encoding %.2f s (%.1f MB/s), total %.2f s\n",
                  EscapeControlCharacters(options.output_path),
                  report->num_tokens,
                  NumContexts(report->num_tokens, 1024), report->source_bytes,
                  report->encode_seconds,
                  report->encode_seconds > 0
                      ? report->source_bytes / 1e6 / report->encode_seconds
                      : 0.0,
                  report->total_seconds);
  }
  return absl::OkStatus();
}

}  // namespace coppelius
