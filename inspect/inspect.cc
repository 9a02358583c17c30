#include "inspect/inspect.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_format.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "checkpoint/envelope.h"
#include "checkpoint/reader.h"
#include "checkpoint/sha256.h"
#include "common/file_io.h"
#include "common/status_line.h"
#include "common/status_macros.h"
#include "common/threads.h"
#include "inspect/cache_reader.h"
#include "inspect/json_writer.h"
#include "tokencache/decode_check.h"
#include "tokencache/token_cache.h"
#include "tokenizer/output_checks.h"
#include "tokenizer/vocabulary.h"
#include "trainer/pmv_state.h"
#include "trainer/run_identity.h"

namespace coppelius {

namespace {

// ---------------------------------------------------------------- helpers

// Bytes of a file's head that kind detection reads.
constexpr size_t kProbeHeadBytes = 4096;

// Up to `n` bytes from the start of `path` and at `offset`; the file size.
struct FileProbe {
  uint64_t size = 0;
  std::string head;  // first kProbeHeadBytes (fewer if the file is shorter)
};

absl::StatusOr<FileProbe> Probe(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "opening", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return ErrnoStatus(e, "stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file",
                     S_ISDIR(st.st_mode) ? " (a directory)" : ""));
  }
  FileProbe p;
  p.size = st.st_size;
  p.head.resize(std::min<uint64_t>(kProbeHeadBytes, p.size));
  absl::Status s = PreadAll(fd, p.head.data(), p.head.size(), 0, path);
  close(fd);
  RETURN_IF_ERROR(s);
  return p;
}

absl::StatusOr<std::string> PreadString(const std::string& path,
                                        uint64_t offset, size_t n) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "opening", path);
  std::string s(n, '\0');
  absl::Status st = PreadAll(fd, s.data(), n, offset, path);
  close(fd);
  RETURN_IF_ERROR(st);
  return s;
}

uint64_t LeU64(absl::string_view b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

// The name of WithStreamsSpooled's temporary copy of a stream (under
// $TMPDIR), which the reports then name as the stream ("-" or its path).
constexpr char kStdinSpoolPrefix[] = "inspect-stdin.";
bool IsStdinSpool(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return absl::StartsWith(
      slash == absl::string_view::npos ? path : path.substr(slash + 1),
      kStdinSpoolPrefix);
}

// Signed `ns` since the Unix epoch and its UTC date.
std::string SignedNsAndDate(int64_t ns) {
  return absl::StrCat(ns, " (",
                      absl::FormatTime("%Y-%m-%dT%H:%M:%E9SZ",
                                       absl::FromUnixNanos(ns),
                                       absl::UTCTimeZone()),
                      ")");
}

// `ns` since the Unix epoch and its UTC date. An int64 holds times up to
// 2262-04-11T23:47:16.854775807Z; a larger u64 is no real time (a corrupt or
// hostile field) and says so rather than print that date.
std::string FormatUnixNs(uint64_t ns) {
  if (ns == 0) return "0 (unknown)";
  if (ns > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::StrCat(ns, " (beyond 2262-04-11, not a real time)");
  }
  return SignedNsAndDate(static_cast<int64_t>(ns));
}

// A cache header's source mtime (i64 in the file: a source dated before
// 1970 is negative) and its UTC date.
std::string FormatSourceMtime(uint64_t raw) {
  const int64_t ns = static_cast<int64_t>(raw);
  return ns >= 0 ? FormatUnixNs(raw) : SignedNsAndDate(ns);
}

std::string Hex(absl::string_view bytes) {
  return absl::BytesToHexString(bytes);
}

std::string DigestHex(const std::array<uint8_t, 32>& d) {
  return Hex(absl::string_view(reinterpret_cast<const char*>(d.data()), 32));
}

// Printable form of token bytes: C-escaped, in quotes.
std::string Printable(absl::string_view bytes) {
  return absl::StrCat("\"", absl::CHexEscape(bytes), "\"");
}

double Mean(const std::vector<double>& v, size_t from, size_t to) {
  if (to <= from) return std::nan("");
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return s / static_cast<double>(to - from);
}

// Whether a run of `config` accepts `reader`'s checkpoint: the same check
// `train --config=NAME --checkpoint-in=FILE` makes (trainer/run.cc:
// CheckIdentity against RunCheckpointIdentity), so inspect refuses exactly
// what train refuses: the five identities, payload size, chunk size and run
// steps.
absl::Status RunRefusal(const CheckpointReader& reader,
                        const ModelConfig& config) {
  return reader.CheckIdentity(RunCheckpointIdentity(config));
}

// ---------------------------------------------------------------- cache

struct CacheReport {
  std::string path;
  uint64_t file_bytes = 0;
  SourceStat header;
  uint64_t num_tokens = 0;
  uint64_t contexts = 0;
  uint32_t min_id = 0, max_id = 0;
  uint64_t ids_out_of_range = 0;  // ids >= V
  uint64_t first_out_of_range = 0;
  uint32_t first_out_of_range_id = 0;
  std::string source;  // --source, or "" (no staleness checked)
  std::optional<StalenessReport> staleness;
  // With --source and --vocab, for a cache fresh by its header: "" when its
  // ids decode to exactly the source's bytes, else what differs
  // (tokencache/decode_check.h). Unset when not checked.
  std::optional<std::string> decode_difference;
  // With --source and --vocab, why the ids were not decoded: the check that
  // failed first ("the header is stale", "the header cannot be a source's",
  // "ids >= V=512"); "" when they were, or when not asked to be.
  std::string decode_skipped;
  // Why the header cannot be a source's (make-cache's rule), or "".
  std::string header_problem;
  // With --source and --vocab, for a cache fresh by its header: make-cache's
  // rule that a vocabulary file modified after the cache makes it stale
  // (tokencache/decode_check.h VocabularyNewerThanCache), or "".
  std::string vocabulary_newer;
  // Which input had no time, so that rule could not be applied: "the
  // cache", "the vocabulary" or "the cache and the vocabulary" (from
  // streams, pipes, which have no modification time), or "". The ids are
  // still decoded against the source.
  std::string timeless_input;
  bool vocabulary_time_unknown() const { return !timeless_input.empty(); }
};

// The spools of streams that had no modification time (pipes), as
// WithStreamsSpooled made them for the command running; a spool of a
// regular file on standard input carries that file's times instead.
std::set<std::string>& TimelessSpools() {
  static std::set<std::string>* spools = new std::set<std::string>();
  return *spools;
}

// The vocabulary and the source text of the decode check (--vocab with
// --source), read when the first cache that is checked needs them and kept
// for every cache after it: a verify of several caches reads each once
// (a --vocab=- on standard input can be read only once). A failure to read
// them is kept too, and is the failure of every cache that needs them.
class DecodeInputs {
 public:
  DecodeInputs(std::string source, std::string vocab)
      : source_(std::move(source)), vocab_(std::move(vocab)) {}
  DecodeInputs(const DecodeInputs&) = delete;
  DecodeInputs& operator=(const DecodeInputs&) = delete;

  // Whether the check is asked for: --source and --vocab both given.
  bool wanted() const { return !source_.empty() && !vocab_.empty(); }

  // Reads both on the first call; later calls return its outcome.
  absl::Status Load() {
    RETURN_IF_ERROR(LoadVocabulary());
    if (!loaded_) loaded_ = Read();
    return *loaded_;
  }
  // Reads the vocabulary alone (Load reads the source too): make-cache's
  // rule, the vocabulary is loaded whether or not the cache is decoded, so
  // a malformed one is reported before any staleness.
  absl::Status LoadVocabulary() {
    if (!vocabulary_loaded_) {
      absl::StatusOr<Vocabulary> loaded = Vocabulary::Load(vocab_);
      if (loaded.ok()) {
        vocabulary_.emplace(*std::move(loaded));
        vocabulary_loaded_ = absl::OkStatus();
      } else {
        vocabulary_loaded_ = Annotate(loaded.status(), "--vocab");
      }
    }
    return *vocabulary_loaded_;
  }
  // After Load() succeeded.
  const Vocabulary& vocabulary() const { return *vocabulary_; }
  const std::string& vocab_path() const { return vocab_; }
  absl::string_view source_text() const { return source_text_; }

 private:
  absl::Status Read() {
    absl::StatusOr<std::string> text = ReadFile(source_);
    if (!text.ok()) return Annotate(text.status(), "--source");
    source_text_ = *std::move(text);
    return absl::OkStatus();
  }

  const std::string source_, vocab_;
  std::optional<absl::Status> loaded_;
  std::optional<absl::Status> vocabulary_loaded_;
  std::optional<Vocabulary> vocabulary_;
  std::string source_text_;
};

// Reads the cache with pread in bounded chunks (inspect/cache_reader.h), not
// through TokenCache's mapping: a cache truncated while it is read is a
// DataLoss naming the offset instead of a SIGBUS.
// With `source` given, the header is checked against it (staleness); when
// `decode_inputs` is wanted, the ids are also decoded against the source
// (make-cache's freshness check: the header cannot tell a cache cut to
// 16 + 4k bytes, or one of another vocabulary, from a fresh one), unless a
// check before it failed: a header that cannot be a source's or a stale
// one (both known before any id is read), or an id >= V (the decode stops
// there); `decode_skipped` then says which.
absl::StatusOr<CacheReport> AnalyzeCache(const std::string& path,
                                         const std::string& source,
                                         DecodeInputs& decode_inputs,
                                         const ModelConfig& config) {
  CacheReport r;
  r.path = path;
  r.source = source;
  uint32_t lo = std::numeric_limits<uint32_t>::max(), hi = 0;
  const uint32_t V = static_cast<uint32_t>(config.V);
  std::optional<CacheDecodeCheck> decode;
  auto opened = [&](const CacheFileInfo& info) -> absl::Status {
    r.header_problem = CacheHeaderProblem(path, info, absl::Now());
    if (!source.empty()) {
      ASSIGN_OR_RETURN(r.staleness, CacheStaleness(path, info.header, source));
    }
    if (!decode_inputs.wanted()) return absl::OkStatus();
    RETURN_IF_ERROR(decode_inputs.LoadVocabulary());
    if (!r.header_problem.empty()) {
      r.decode_skipped = "the header cannot be a source's";
    } else if (r.staleness && r.staleness->staleness != Staleness::kFresh) {
      r.decode_skipped = "the header is stale";
    } else {
      // The vocabulary's time against the cache's, unless either came from
      // a stream (no time; nullopt from VocabularyNewerThanCache for the
      // vocabulary's).
      const bool cache_timeless = TimelessSpools().count(path) != 0;
      const std::optional<std::string> newer = VocabularyNewerThanCache(
          decode_inputs.vocab_path(), info.file_mtime);
      if (!cache_timeless && newer && !newer->empty()) {
        r.vocabulary_newer = *newer;
        r.decode_skipped = "the vocabulary is newer than the cache";
        return absl::OkStatus();
      }
      r.timeless_input = cache_timeless && !newer
                             ? "the cache and the vocabulary"
                         : cache_timeless ? "the cache"
                         : !newer         ? "the vocabulary"
                                          : "";
      RETURN_IF_ERROR(decode_inputs.Load());
      decode.emplace(decode_inputs.vocabulary(), decode_inputs.source_text(),
                     "");
    }
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(
      CacheFileInfo info,
      ReadCacheChunked(
          path,
          [&](uint64_t first, absl::Span<const uint32_t> ids) {
            for (size_t k = 0; k < ids.size(); ++k) {
              const uint32_t id = ids[k];
              lo = std::min(lo, id);
              hi = std::max(hi, id);
              if (id >= V) {
                if (r.ids_out_of_range == 0) {
                  r.first_out_of_range = first + k;
                  r.first_out_of_range_id = id;
                }
                ++r.ids_out_of_range;
              }
            }
            if (decode && r.ids_out_of_range > 0) {
              decode.reset();
              r.decode_skipped = absl::StrCat("ids >= V=", config.V);
            }
            if (decode) decode->Feed(first, ids);
            return absl::OkStatus();
          },
          kCacheReadIds, opened));
  r.file_bytes = info.file_bytes;
  r.header = info.header;
  r.num_tokens = info.num_tokens;
  r.contexts = NumContexts(info.num_tokens, config.T);
  if (r.num_tokens > 0) {
    r.min_id = lo;
    r.max_id = hi;
  }
  if (decode) r.decode_difference = decode->Difference();
  return r;
}

// Why a cache is stale against --source, one line naming the cache and the
// source (the header's mtime and size, and the source's now), or "" when it
// is fresh or no source was given.
std::string StaleProblem(const CacheReport& r) {
  if (!r.vocabulary_newer.empty()) {
    return absl::StrCat(r.path, ": stale against ", r.source, ": ",
                        r.vocabulary_newer, " (make-cache rebuilds it)");
  }
  if (!r.staleness || r.staleness->staleness == Staleness::kFresh) return "";
  const StalenessReport& s = *r.staleness;
  return absl::StrCat(
      r.path, ": header (offset 0: mtime ",
      static_cast<int64_t>(s.header.mtime_ns), ", size ", s.header.size_bytes,
      "): ", StalenessName(s.staleness), "; source ", r.source,
      s.staleness == Staleness::kSourceMissing
          ? " does not exist"
          : absl::StrCat(" now has mtime ",
                         static_cast<int64_t>(s.source.mtime_ns), ", size ",
                         s.source.size_bytes));
}

// What makes a cache fail, one line each: ids >= V of `config` (the first
// offending token, its byte offset and id, and the count), a header that
// cannot be a source's, ids that do not decode to the source, then
// staleness against --source (StaleProblem).
std::vector<std::string> CacheProblems(const CacheReport& r,
                                       const ModelConfig& config) {
  std::vector<std::string> problems;
  if (r.ids_out_of_range > 0) {
    problems.push_back(absl::StrCat(
      r.path, ": token ", r.first_out_of_range, " (byte offset ",
      kTokenCacheHeaderBytes + kTokenBytes * r.first_out_of_range,
      ") has id ", r.first_out_of_range_id, ", expected < ", config.V,
      " (the vocabulary size of config ", config.name, "); ids >= ",
      config.V, ": ", r.ids_out_of_range));
  }
  if (!r.header_problem.empty()) problems.push_back(r.header_problem);
  if (r.decode_difference && !r.decode_difference->empty()) {
    problems.push_back(absl::StrCat(
        r.path, ": fresh by its header, but ", *r.decode_difference));
  }
  if (std::string stale = StaleProblem(r); !stale.empty()) {
    problems.push_back(std::move(stale));
  }
  return problems;
}

void PrintCache(const CacheReport& r, const ModelConfig& config,
                const std::string& config_source, bool json,
                std::ostream& out) {
  if (json) {
    JsonWriter j;
    j.BeginObject();
    j.Field("kind", "cache");
    j.Field("path", r.path);
    j.FieldUint("file_bytes", r.file_bytes);
    j.FieldInt("source_mtime_ns", static_cast<int64_t>(r.header.mtime_ns));
    j.FieldUint("source_size_bytes", r.header.size_bytes);
    j.FieldBool("header_plausible", r.header_problem.empty());
    j.Field("header_problem", r.header_problem);
    j.FieldUint("num_tokens", r.num_tokens);
    j.Field("config", config.name);
    j.FieldInt("context_tokens", config.T);
    j.FieldUint("contexts", r.contexts);
    j.FieldUint("full_runs", r.contexts / config.run_steps);
    j.Key("min_id");
    if (r.num_tokens) j.Uint(r.min_id); else j.Null();
    j.Key("max_id");
    if (r.num_tokens) j.Uint(r.max_id); else j.Null();
    j.FieldInt("vocab_size", config.V);
    j.FieldUint("ids_out_of_range", r.ids_out_of_range);
    if (r.staleness) {
      j.Key("staleness");
      j.BeginObject();
      j.Field("state", StalenessName(r.staleness->staleness));
      // null: the vocabulary rule could not be applied (a stream's time).
      j.Key("fresh");
      if (r.vocabulary_time_unknown() &&
          r.staleness->staleness == Staleness::kFresh) {
        j.Null();
      } else {
        j.Bool(r.staleness->staleness == Staleness::kFresh &&
               r.vocabulary_newer.empty());
      }
      j.Key("vocabulary_newer");
      if (r.vocabulary_time_unknown()) {
        j.Null();
      } else {
        j.Bool(!r.vocabulary_newer.empty());
      }
      j.FieldInt("source_mtime_ns",
                 static_cast<int64_t>(r.staleness->source.mtime_ns));
      j.FieldUint("source_size_bytes", r.staleness->source.size_bytes);
      j.EndObject();
    }
    j.Key("decodes_to_source");
    if (r.decode_difference) {
      j.Bool(r.decode_difference->empty());
    } else {
      j.Null();
    }
    j.EndObject();
    out << j.str() << "\n";
    return;
  }
  out << "token cache " << EscapeControlCharacters(r.path) << " ("
      << r.file_bytes << " bytes)\n";
  out << "  header: source mtime " << FormatSourceMtime(r.header.mtime_ns)
      << ", source size " << r.header.size_bytes << " bytes\n";
  if (!r.header_problem.empty()) {
    out << "  PROBLEM: " << r.header_problem << "\n";
  }
  if (r.staleness) {
    out << "  staleness: " << StalenessName(r.staleness->staleness)
        << " (source now: mtime "
        << FormatSourceMtime(r.staleness->source.mtime_ns) << ", size "
        << r.staleness->source.size_bytes << ")\n";
  } else {
    out << "  staleness: not checked (no --source)\n";
  }
  if (!r.vocabulary_newer.empty()) {
    out << "  vocabulary: stale: " << r.vocabulary_newer
        << " (make-cache rebuilds it)\n";
  } else if (r.vocabulary_time_unknown()) {
    out << "  vocabulary: not compared with the cache's time ("
        << r.timeless_input
        << " came from a stream, which has none; make-cache rebuilds when "
           "its vocabulary is one)\n";
  }
  if (r.decode_difference) {
    out << "  ids decoded against the source: "
        << (r.decode_difference->empty() ? "its bytes exactly"
                                         : *r.decode_difference)
        << "\n";
  } else if (!r.decode_skipped.empty()) {
    out << "  ids decoded against the source: not checked ("
        << r.decode_skipped << ")\n";
  } else if (r.staleness && r.staleness->staleness == Staleness::kFresh) {
    out << "  ids decoded against the source: not checked (no --vocab: "
           "fresh by the header's mtime and size only)\n";
  }
  out << "  tokens: " << r.num_tokens << "\n";
  out << "  contexts of " << config.T << " (" << config.name << ", "
      << config_source << "): " << r.contexts << " (" << r.contexts / config.run_steps
      << " full runs of " << config.run_steps << " steps)\n";
  if (r.num_tokens) {
    out << "  id range: min " << r.min_id << ", max " << r.max_id;
  } else {
    out << "  id range: empty";
  }
  out << "; ids >= V=" << config.V << ": " << r.ids_out_of_range;
  if (r.ids_out_of_range) {
    out << " (first at token " << r.first_out_of_range << ", file offset "
        << 16 + 4 * r.first_out_of_range << ")";
  }
  out << "\n";
}

// ---------------------------------------------------------------- checkpoint

struct PlaneStats {
  std::string tensor;
  TensorStats p, m, v;
};

void PrintStatsJson(JsonWriter& j, absl::string_view key,
                    const TensorStats& s) {
  j.Key(key);
  j.BeginObject();
  // Statistics of the finite values; null when there is none (every value
  // NaN or infinite), not zeros that read as a tensor of zeros.
  const bool any_finite = s.nonfinite < s.count;
  for (const auto& [name, value] :
       {std::pair<const char*, double>{"mean", s.mean},
        {"std", s.std},
        {"min", s.min},
        {"max", s.max}}) {
    if (any_finite) {
      j.FieldDouble(name, value);
    } else {
      j.Key(name);
      j.Null();
    }
  }
  j.FieldInt("nonfinite", s.nonfinite);
  j.EndObject();
}

// The five identities of a checkpoint's header (or a config's), as an
// object under `key`.
void PrintIdentitiesJson(JsonWriter& j, absl::string_view key,
                         absl::string_view state, absl::string_view learner,
                         absl::string_view data,
                         absl::string_view initialization,
                         absl::string_view model) {
  j.Key(key);
  j.BeginObject();
  j.Field("state", state);
  j.Field("learner", learner);
  j.Field("data", data);
  j.Field("initialization", initialization);
  j.Field("model", model);
  j.EndObject();
}

std::string StatsText(const TensorStats& s) {
  if (s.count > 0 && s.nonfinite == s.count) {
    return absl::StrFormat("no finite value (nonfinite %d of %d)", s.nonfinite,
                           s.count);
  }
  return absl::StrFormat("mean %+.6g std %.6g min %+.6g max %+.6g nonfinite %d",
                         s.mean, s.std, s.min, s.max, s.nonfinite);
}

// PmvStateProblems of a checkpoint's payload (trainer/pmv_state.h); none
// when its size is not three planes of fp32 values.
std::vector<std::string> CheckpointStateProblems(const std::string& path,
                                                 const CheckpointReader& reader,
                                                 const ModelConfig& config) {
  if (reader.payload_bytes() % 12 != 0) return {};
  return PmvStateProblems(path, reader.payload_offset(),
                          static_cast<const float*>(reader.payload()),
                          reader.payload_bytes() / 12, config);
}

absl::Status InspectCheckpoint(const InspectOptions& o, const FileDetection& d,
                               std::ostream& out) {
  const ModelConfig& config = d.config;
  ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(o.path));
  if (reader.IsFresh()) {
    if (o.json) {
      JsonWriter j;
      j.BeginObject();
      j.Field("kind", "checkpoint");
      j.Field("path", o.path);
      j.FieldBool("fresh", true);
      j.FieldUint("file_bytes", 0);
      j.EndObject();
      out << j.str() << "\n";
    } else {
      out << "checkpoint " << EscapeControlCharacters(o.path)
          << ": 0 bytes, a fresh-start input (no envelope)\n";
    }
    return absl::OkStatus();
  }
  const CheckpointHeader& h = reader.header();
  const absl::Status identity_status = RunRefusal(reader, config);
  const absl::Status digest_status = reader.VerifyPayload(o.threads);
  // A state no healthy run writes (checked where the digests hold: a
  // corrupt payload's values say nothing).
  const std::vector<std::string> state_problems =
      digest_status.ok() ? CheckpointStateProblems(o.path, reader, config)
                         : std::vector<std::string>();
  // The exit status: corrupt digests, an identity that a run of the
  // config the user named explicitly (--config) refuses, or such a state.
  const absl::Status outcome =
      !digest_status.ok() ? digest_status
      : (d.config_source == "--config" && !identity_status.ok())
          ? identity_status
      : !state_problems.empty() ? absl::DataLossError(state_problems[0])
                                : absl::OkStatus();

  // Per-tensor statistics when the parameter count fits the config.
  const uint64_t parameters = reader.payload_bytes() / 12;
  const bool layout_fits =
      reader.payload_bytes() % 12 == 0 &&
      parameters == static_cast<uint64_t>(NumParameters(config));
  std::vector<PlaneStats> stats;
  if (layout_fits) {
    const float* plane = static_cast<const float*>(reader.payload());
    for (const TensorInfo& t : ParameterLayout(config)) {
      PlaneStats s;
      s.tensor = t.name;
      s.p = ComputeTensorStats(plane + t.offset, t.num_elements());
      s.m = ComputeTensorStats(plane + parameters + t.offset,
                               t.num_elements());
      s.v = ComputeTensorStats(plane + 2 * parameters + t.offset,
                               t.num_elements());
      stats.push_back(std::move(s));
    }
  }

  if (o.json) {
    JsonWriter j;
    j.BeginObject();
    j.Field("kind", "checkpoint");
    j.Field("path", o.path);
    j.FieldBool("fresh", false);
    j.FieldUint("file_bytes", reader.file_bytes());
    // Read from "-": the spool file's mtime says nothing about the input.
    j.FieldUint("file_mtime_ns",
                IsStdinSpool(o.path) ? 0 : reader.file_mtime_ns());
    j.FieldUint("version", reader.preamble().version);
    j.FieldUint("payload_offset", reader.payload_offset());
    j.FieldUint("payload_bytes", reader.payload_bytes());
    j.FieldUint("chunk_bytes", reader.chunk_bytes());
    j.FieldUint("chunks", reader.num_chunks());
    j.FieldUint("parameter_count", h.parameter_count());
    j.FieldUint("run_steps", h.run_steps());
    j.FieldUint("update_count", reader.update_count());
    PrintIdentitiesJson(j, "identities", h.state_identity(),
                        h.learner_identity(), h.data_identity(),
                        h.initialization_identity(), h.model_identity());
    j.Field("config", config.name);
    j.Field("config_source", d.config_source);
    j.FieldBool("identity_matches_config", identity_status.ok());
    // What a run of the config expects (the refusal abbreviates it).
    {
      const CheckpointIdentity want = RunCheckpointIdentity(config);
      PrintIdentitiesJson(j, "config_identities", want.state, want.learner,
                          want.data, want.initialization, want.model);
    }
    j.Field("refusal", identity_status.ok()
                           ? std::string()
                           : std::string(identity_status.message()));
    j.Key("provenance");
    j.BeginObject();
    j.Field("writer", h.writer());
    j.Field("backend", h.backend());
    j.FieldUint("created_unix_nanos", h.created_unix_nanos());
    j.Field("host", h.host());
    j.Field("parent_header_sha256", Hex(h.parent_header_sha256()));
    j.EndObject();
    j.Field("header_sha256", Sha256Hex(reader.header_sha256()));
    j.FieldBool("digests_verified", digest_status.ok());
    j.Field("digest_error", digest_status.ok()
                                ? std::string()
                                : std::string(digest_status.message()));
    j.Key("problems");
    j.BeginArray();
    for (const std::string& p : state_problems) j.String(p);
    j.EndArray();
    j.Key("tensors");
    j.BeginArray();
    for (const PlaneStats& s : stats) {
      j.BeginObject();
      j.Field("name", s.tensor);
      PrintStatsJson(j, "p", s.p);
      PrintStatsJson(j, "m", s.m);
      PrintStatsJson(j, "v", s.v);
      j.EndObject();
    }
    j.EndArray();
    j.EndObject();
    out << j.str() << "\n";
    return outcome;
  }

  out << "checkpoint " << EscapeControlCharacters(o.path) << " ("
      << reader.file_bytes() << " bytes, "
      << (IsStdinSpool(o.path)
              ? std::string("from standard input")
              : absl::StrCat("mtime ", FormatUnixNs(reader.file_mtime_ns())))
      << ")\n";
  out << "  envelope: version " << reader.preamble().version
      << ", payload at " << reader.payload_offset() << ", "
      << reader.payload_bytes() << " bytes in " << reader.num_chunks()
      << " chunks of " << reader.chunk_bytes() << "\n";
  out << "  parameters: " << h.parameter_count() << " x 3 planes (P, M, V)\n";
  out << "  update count: " << reader.update_count() << " (run steps "
      << h.run_steps() << ")\n";
  out << "  identities:\n";
  // The file's text, control bytes escaped as in every other line that
  // quotes a file (a forged newline or terminal escape stays on its line).
  out << "    state:          " << EscapeControlCharacters(h.state_identity())
      << "\n";
  out << "    learner:        "
      << EscapeControlCharacters(h.learner_identity()) << "\n";
  out << "    data:           " << EscapeControlCharacters(h.data_identity())
      << "\n";
  out << "    initialization: "
      << EscapeControlCharacters(h.initialization_identity()) << "\n";
  out << "    model:          " << EscapeControlCharacters(h.model_identity())
      << "\n";
  if (identity_status.ok()) {
    out << "  identity: matches config " << config.name << " ("
        << d.config_source << ")\n";
  } else {
    out << "  identity: a run of config " << config.name << " ("
        << d.config_source << ") refuses it: " << identity_status.message()
        << "\n";
    // The refusal names each text identity by its first differing part;
    // here, in full, what the config's run expects instead.
    const CheckpointIdentity want = RunCheckpointIdentity(config);
    for (const auto& [name, have, expected] :
         {std::tuple<const char*, const std::string*, const std::string*>{
              "state:         ", &h.state_identity(), &want.state},
          {"learner:       ", &h.learner_identity(), &want.learner},
          {"data:          ", &h.data_identity(), &want.data},
          {"initialization:", &h.initialization_identity(),
           &want.initialization},
          {"model:         ", &h.model_identity(), &want.model}}) {
      if (*have != *expected) {
        out << "    expected " << name << " " << *expected << "\n";
      }
    }
  }
  out << "  provenance: writer " << Printable(h.writer()) << ", backend "
      << Printable(h.backend()) << ", host " << Printable(h.host())
      << ", created " << FormatUnixNs(h.created_unix_nanos()) << "\n";
  out << "  header sha256: " << Sha256Hex(reader.header_sha256()) << "\n";
  out << "  parent header sha256: "
      << (h.parent_header_sha256().empty() ? "(none: fresh start)"
                                            : Hex(h.parent_header_sha256()))
      << "\n";
  if (digest_status.ok()) {
    out << "  digests: all " << reader.num_chunks()
        << " chunk SHA-256 digests verified\n";
  } else {
    out << "  digests: FAILED: " << digest_status.message() << "\n";
  }
  for (const std::string& p : state_problems) {
    out << "  PROBLEM: " << p << "\n";
  }
  if (!layout_fits) {
    out << "  tensors: payload holds " << parameters
        << " parameters, config " << config.name << " has "
        << NumParameters(config) << ": no per-tensor statistics\n";
    return outcome;
  }
  out << "  tensors (" << stats.size() << "):\n";
  for (const PlaneStats& s : stats) {
    out << "    " << s.tensor << "\n";
    out << "      P " << StatsText(s.p) << "\n";
    out << "      M " << StatsText(s.m) << "\n";
    out << "      V " << StatsText(s.v) << "\n";
  }
  // Corrupt: the report above says so; the exit status too.
  return outcome;
}

// ---------------------------------------------------------------- result

int Argmax(const float* v, int64_t n) {
  int best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = static_cast<int>(i);
  return best;
}

std::string TokenText(const std::optional<Vocabulary>& vocab, uint32_t id) {
  if (!vocab) return "";
  if (id == vocab->end_of_text_id()) {
    return std::string(Vocabulary::kEndOfText);
  }
  if (id >= vocab->num_ranks()) return "";
  return std::string(vocab->token(id));
}

struct DeviceTimes {
  int64_t count = 0;      // updates with both device stamps
  double mean_ns = 0, min_ns = 0, max_ns = 0;
  int64_t host_count = 0;  // updates with both host stamps
  double host_mean_ns = 0;
  std::vector<double> per_step_ns;  // device (or 0)
};

DeviceTimes UpdateTimes(const ResultFile& r) {
  DeviceTimes d;
  double sum = 0, host_sum = 0;
  d.min_ns = std::numeric_limits<double>::infinity();
  d.max_ns = 0;
  for (const ResultTimestamp& ts : r.tail.timestamps) {
    if (ts.kind != SubmissionKind::kUpdate) continue;
    double dev = 0;
    if (ts.device_start_ns && ts.device_end_ns) {
      dev = static_cast<double>(ts.device_end_ns - ts.device_start_ns);
      ++d.count;
      sum += dev;
      d.min_ns = std::min(d.min_ns, dev);
      d.max_ns = std::max(d.max_ns, dev);
    }
    d.per_step_ns.push_back(dev);
    if (ts.host_issue_ns && ts.host_complete_ns) {
      ++d.host_count;
      host_sum += static_cast<double>(ts.host_complete_ns - ts.host_issue_ns);
    }
  }
  if (d.count) {
    d.mean_ns = sum / d.count;
  } else {
    d.min_ns = 0;
  }
  if (d.host_count) d.host_mean_ns = host_sum / d.host_count;
  return d;
}

// ReadResult for `config`, with a size above the complete size named as
// trailing bytes.
absl::StatusOr<ResultFile> ReadResultOf(const std::string& path,
                                        const ModelConfig& config) {
  const ResultGeometry g = ResultGeometryOf(config);
  RETURN_IF_ERROR(ValidateResultGeometry(g));
  const ResultLayout layout = ComputeResultLayout(g);
  ASSIGN_OR_RETURN(FileProbe p, Probe(path));
  if (p.size > static_cast<uint64_t>(layout.complete_bytes)) {
    return absl::DataLossError(absl::StrCat(
        path, ": offset ", layout.complete_bytes, ": ",
        p.size - layout.complete_bytes,
        " trailing bytes after a complete result of config ", config.name,
        " (", layout.complete_bytes, " bytes), expected end of file"));
  }
  return ReadResult(path, g);
}

// The first row where the loss block's copy of the last step's window
// differs (bitwise) from that window, or -1 (also for a file with no
// complete step).
int64_t FirstLossBlockMismatch(const ResultFile& r) {
  if (!r.complete || r.complete_steps == 0) return -1;
  const int64_t rows_kept = std::min<int64_t>(r.geometry.T, 1024);
  const float* window = r.step_losses.data() + r.step_losses.size() -
                        static_cast<size_t>(r.geometry.T);
  for (int64_t i = 0; i < rows_kept; ++i) {
    if (std::memcmp(&r.tail.loss.last_row_losses[i], &window[i],
                    sizeof(float)) != 0) {
      return i;
    }
  }
  return -1;
}

// Why a result shorter than complete is incomplete, from where it ends: in
// the forward record, in the step windows (a run that stopped: the tail is
// written only when a run finishes), or in the tail (all windows there, the
// tail cut short).
std::string IncompleteReason(const ResultFile& r, const ResultLayout& layout) {
  const int64_t size = static_cast<int64_t>(r.file_size);
  if (size == kResultMarkerBytes && r.marker_left) {
    return "it holds only the marker: the run stopped before its forward "
           "record";
  }
  if (size < layout.forward_bytes) {
    return absl::StrCat("it ends inside the forward record (bytes 0..",
                        layout.forward_bytes,
                        ", written whole before the first step): the file "
                        "was cut short");
  }
  if (size < layout.input_stat_offset) {
    const int64_t partial = size - layout.windows_offset -
                            r.complete_steps * layout.window_bytes;
    return absl::StrCat(
        "the run stopped after ", r.complete_steps, " of ", r.geometry.steps,
        " steps: its step windows end at byte ",
        layout.windows_offset + r.complete_steps * layout.window_bytes,
        partial > 0 ? absl::StrCat(", then ", partial, " bytes of step ",
                                   r.complete_steps, "'s")
                    : std::string(),
        "; the tail, from offset ", layout.input_stat_offset,
        ", is written only when a run finishes");
  }
  return absl::StrCat(
      "all ", r.geometry.steps, " step windows are there, but the tail (bytes ",
      layout.input_stat_offset, "..", layout.complete_bytes,
      ", written whole when the run finished) ends at byte ", size,
      ": the file was cut short");
}

// True if the error notifier records what `train` writes for a run that
// completed with non-finite losses (trainer/run.cc): the text "non-finite
// loss", a count above 0, and no other error.
bool RecordsNonFiniteLosses(const ResultTail& t) {
  return t.errors.text == "non-finite loss" && t.errors.nonfinite_steps > 0 &&
         t.errors.cuda_error == 0 && !t.errors.invalid_token_seen;
}

// What makes a parsed result corrupt or incomplete, one line each: the
// forward record never written, missing tail (unless `count_incomplete` is
// false: plot draws a run still going or killed, and a file holding only
// the marker is such a run's; `d`, when given, lets the line say that a
// too-short file's config was assumed), and the cross-field checks (the
// notifier's non-finite steps against the step windows; the row T-1
// prediction against the final record; the loss block's first window
// against the last step window; an invalid token or a CUDA error in the
// notifier: a run that meets one stops before its tail), and, unless
// `count_nonfinite_record` is false (plot draws such a run), the text of a
// run that completed with non-finite losses (train then exits 1).
std::vector<std::string> ResultProblems(const std::string& path,
                                        const ResultFile& r,
                                        bool count_incomplete = true,
                                        const FileDetection* d = nullptr,
                                        bool count_nonfinite_record = true) {
  std::vector<std::string> problems;
  const ResultLayout layout = ComputeResultLayout(r.geometry);
  // The marker alone (no window yet) is a run killed before its forward
  // record: incomplete; with windows after it, the file is corrupt.
  if (r.marker_left &&
      (count_incomplete || r.complete || r.complete_steps > 0)) {
    problems.push_back(absl::StrCat(
        path, ": offset 0 (forward record): marker be ba fe ca be ba fe "
              "ca still present, expected the forward logits"));
  }
  // The step windows hold cross-entropies (logsumexp minus a logit), never
  // negative; step 0's agree with the forward record (the same forward).
  // Both hold for any run's file, complete or cut short (whole windows
  // only: a window cut short is not checked).
  const absl::string_view windows(
      reinterpret_cast<const char*>(r.step_losses.data()),
      r.step_losses.size() * sizeof(float));
  if (int64_t i = -1; !ReadsAsLosses(windows, &i)) {
    problems.push_back(absl::StrFormat(
        "%s: offset %d (step %d's window, row %d): %.9g, expected a "
        "cross-entropy (>= 0, or non-finite in a diverged run)",
        path, layout.windows_offset + 4 * i, i / r.geometry.T,
        i % r.geometry.T, r.step_losses[i]));
  }
  if (r.forward_present && !r.marker_left && r.complete_steps > 0) {
    const absl::string_view forward(
        reinterpret_cast<const char*>(r.forward_logits.data()),
        r.forward_logits.size() * sizeof(float));
    const absl::string_view window =
        windows.substr(0, static_cast<size_t>(r.geometry.T) * sizeof(float));
    StepZeroDisagreement bad;
    if (!StepZeroAgreesWithForwardRecord(forward, window, r.geometry, &bad)) {
      problems.push_back(absl::StrFormat(
          "%s: offset %d (step 0's window, row %d): %.9g, expected a "
          "cross-entropy of the forward record's logits of row %d, between "
          "%.6g and %.6g (logsumexp - max and logsumexp - min: the same "
          "forward, SPEC section 7)",
          path, layout.windows_offset + 4 * bad.row, bad.row, bad.loss,
          bad.row, bad.low, bad.high));
    }
  }
  if (!r.complete) {
    if (!count_incomplete) return problems;
    // A file too short to tell its config is measured against the
    // default's geometry: say so, and how to name another.
    const std::string assumed =
        d != nullptr && d->config_source != "--config" &&
                absl::StartsWith(d->config_source, "default")
            ? absl::StrCat(" for config ", d->config.name,
                           ", assumed: the file does not tell; --config=NAME "
                           "names another")
            : "";
    problems.push_back(absl::StrCat(
        path, ": incomplete: size ", r.file_size, " bytes, expected ",
        layout.complete_bytes, assumed, " (", IncompleteReason(r, layout),
        ")"));
    return problems;
  }
  const ResultTail& t = r.tail;
  const std::vector<double> means = StepMeanLosses(r);
  int64_t nonfinite = 0, first = -1;
  for (size_t s = 0; s < means.size(); ++s) {
    if (std::isfinite(means[s])) continue;
    if (first < 0) first = static_cast<int64_t>(s);
    ++nonfinite;
  }
  if (static_cast<uint64_t>(nonfinite) != t.errors.nonfinite_steps) {
    problems.push_back(absl::StrCat(
        path, ": offset ", layout.error_offset + 8,
        " (error notifier.nonfinite_steps): ", t.errors.nonfinite_steps,
        ", expected ", nonfinite,
        " (steps whose window mean is non-finite",
        first >= 0 ? absl::StrCat(", first step ", first, " at offset ",
                                  layout.windows_offset +
                                      first * layout.window_bytes)
                   : std::string(),
        ")"));
  } else if (t.errors.first_nonfinite_step != first) {
    problems.push_back(absl::StrCat(
        path, ": offset ", layout.error_offset,
        " (error notifier.first_nonfinite_step): ",
        t.errors.first_nonfinite_step, ", expected ", first,
        " (the first step whose window mean is non-finite)"));
  }
  int64_t first_bad_logit = -1;
  for (size_t i = 0; i < t.final_logits.size(); ++i) {
    if (!std::isfinite(t.final_logits[i])) {
      first_bad_logit = static_cast<int64_t>(i);
      break;
    }
  }
  const bool row_finite = first_bad_logit < 0;
  const ResultPrediction& last = t.host.predictions[2];
  // The run issues forward, `steps` updates and final, and completes them
  // all before it writes the tail.
  const uint32_t submissions = static_cast<uint32_t>(r.geometry.steps + 2);
  if (t.input.submissions_issued != submissions ||
      t.input.submissions_completed != submissions) {
    problems.push_back(absl::StrCat(
        path, ": offsets ", layout.input_stat_offset + 96, "/",
        layout.input_stat_offset + 100,
        " (input stat.submissions completed/issued): ",
        t.input.submissions_completed, "/", t.input.submissions_issued,
        ", expected ", submissions, "/", submissions,
        " (forward, every step, final) in a complete result"));
  }
  // The prediction is the argmax of the same logits the final record holds
  // (first maximum), so they cannot differ in an intact file.
  if (row_finite && last.valid && !t.final_logits.empty()) {
    const int argmax = Argmax(t.final_logits.data(),
                              static_cast<int64_t>(t.final_logits.size()));
    if (static_cast<uint32_t>(argmax) != last.token) {
      problems.push_back(absl::StrCat(
          path, ": offset ", layout.host_offset + 120 + 2 * 8,
          " (host status.predictions[2].token, row ", r.geometry.T - 1,
          "): ", last.token, ", expected ", argmax,
          " (the argmax of the final record at offset ", layout.final_offset,
          ")"));
    }
  }
  if (last.valid != row_finite) {
    problems.push_back(absl::StrCat(
        path, ": offset ", layout.host_offset + 120 + 2 * 8 + 4,
        " (host status.predictions[2].valid, row ", r.geometry.T - 1, "): ",
        last.valid ? 1 : 0, ", expected ", row_finite ? 1 : 0,
        row_finite ? " (the final record's logits are all finite)"
                   : absl::StrCat(" (the final record's logit ",
                                  first_bad_logit, " at offset ",
                                  layout.final_offset + 4 * first_bad_logit,
                                  " is not finite)")));
  }
  // The loss block's first window is the last step's window, copied: an
  // intact file has the same bits in both.
  if (const int64_t i = FirstLossBlockMismatch(r); i >= 0) {
    const int64_t last = r.geometry.steps - 1;
    problems.push_back(absl::StrFormat(
        "%s: offset %d (loss block.last_row_losses, row %d): %.9g, but step "
        "%d's window holds %.9g at offset %d (the block copies that window)",
        path, layout.loss_block_offset + 4 * i, i, t.loss.last_row_losses[i],
        last, r.step_losses[last * r.geometry.T + i],
        layout.windows_offset + last * layout.window_bytes + 4 * i));
  }
  // A run that met an error stops before its tail (SPEC §5), so a complete
  // result recording one did not come from a successful run.
  if (t.errors.invalid_token_seen) {
    problems.push_back(absl::StrCat(
        path, ": offset ", layout.error_offset + 16,
        " (error notifier.invalid_token_seen): 1, expected 0 (the run met a "
        "token id >= V)"));
  }
  if (t.errors.cuda_error != 0) {
    problems.push_back(absl::StrCat(
        path, ": offset ", layout.error_offset + 20,
        " (error notifier.cuda_error): ", t.errors.cuda_error, " with text \"",
        t.errors.text, "\", expected 0 (the run met a CUDA error)"));
  } else if (!t.errors.text.empty() &&
             (count_nonfinite_record || !RecordsNonFiniteLosses(t))) {
    // The text without a CUDA error: "non-finite loss" (train completes
    // such a run, then exits 1).
    problems.push_back(absl::StrCat(
        path, ": offset ", layout.error_offset + 24,
        " (error notifier.text): \"", t.errors.text,
        "\", expected no text (the run recorded an error",
        t.errors.nonfinite_steps > 0
            ? absl::StrCat(": ", t.errors.nonfinite_steps,
                           t.errors.nonfinite_steps == 1 ? " step" : " steps",
                           " with a non-finite loss, the first step ",
                           t.errors.first_nonfinite_step)
            : "",
        ")"));
  }
  return problems;
}

// Writes the report of `r`; `problems` are ResultProblems(o.path, r).
void PrintResult(const InspectOptions& o, const FileDetection& d,
                 const ResultFile& r, const std::vector<std::string>& problems,
                 const std::optional<Vocabulary>& vocab, std::ostream& out) {
  const ModelConfig& config = d.config;
  const ResultGeometry g = ResultGeometryOf(config);
  const ResultLayout layout = ComputeResultLayout(g);
  const std::vector<double> means = StepMeanLosses(r);
  const int window = std::max(1, o.smoothing_steps);
  const std::vector<double> smoothed = SmoothedCurve(means, window);
  const size_t w = std::min<size_t>(100, means.size());
  const double first_window = Mean(means, 0, w);
  const double last_window = Mean(means, means.size() - w, means.size());
  int64_t nonfinite_steps = 0;
  for (double m : means) nonfinite_steps += !std::isfinite(m);

  // Rows T/4-1, T/2-1, T-1: forward record argmax (before training).
  const int64_t rows[3] = {g.T / 4 - 1, g.T / 2 - 1, g.T - 1};
  int forward_argmax[3] = {0, 0, 0};
  if (r.forward_present && !r.marker_left) {
    for (int k = 0; k < 3; ++k)
      forward_argmax[k] = Argmax(r.forward_logits.data() + k * g.V, g.V);
  }
  const ResultTail& t = r.tail;
  int final_argmax = 0;
  bool final_consistent = true;
  bool final_all_zero = false;
  const bool loss_block_matches = FirstLossBlockMismatch(r) < 0;
  DeviceTimes times;
  if (r.complete) {
    final_argmax = Argmax(t.final_logits.data(), g.V);
    final_consistent = !t.host.predictions[2].valid ||
                       t.host.predictions[2].token ==
                           static_cast<uint32_t>(final_argmax);
    times = UpdateTimes(r);
    final_all_zero = std::all_of(t.final_logits.begin(), t.final_logits.end(),
                                 [](float x) { return x == 0.0f; });
  }
  const char* status = r.complete ? "complete" : "incomplete";

  if (o.json) {
    JsonWriter j;
    j.BeginObject();
    j.Field("kind", "result");
    j.Field("path", o.path);
    j.Field("config", config.name);
    j.Field("config_source", d.config_source);
    j.Key("problems");
    j.BeginArray();
    for (const std::string& p : problems) j.String(p);
    j.EndArray();
    j.Key("geometry");
    j.BeginObject();
    j.FieldInt("V", g.V);
    j.FieldInt("T", g.T);
    j.FieldInt("steps", g.steps);
    j.EndObject();
    j.FieldUint("file_bytes", r.file_size);
    j.FieldInt("complete_bytes", layout.complete_bytes);
    j.Field("status", status);
    j.FieldBool("complete", r.complete);
    j.FieldInt("complete_steps", r.complete_steps);
    j.FieldBool("forward_present", r.forward_present);
    j.FieldBool("forward_marker_left", r.marker_left);
    j.DoubleArray("step_mean_loss", means);
    j.FieldInt("smoothing_steps", window);
    j.DoubleArray("smoothed_loss", smoothed);
    j.FieldInt("window_steps", static_cast<int64_t>(w));
    j.FieldDouble("first_window_mean", first_window);
    j.FieldDouble("last_window_mean", last_window);
    j.FieldInt("nonfinite_step_means", nonfinite_steps);
    if (r.forward_present && !r.marker_left) {
      j.Key("forward_argmax");
      j.BeginArray();
      for (int k = 0; k < 3; ++k) j.Int(forward_argmax[k]);
      j.EndArray();
    }
    if (r.complete) {
      j.Key("input");
      j.BeginObject();
      j.FieldBool("fresh", t.input.fresh);
      j.FieldUint("size_bytes", t.input.size_bytes);
      j.FieldUint("mtime_ns", t.input.mtime_ns);
      j.FieldUint("update_count", t.input.update_count);
      j.FieldUint("inode", t.input.inode);
      j.Field("header_sha256", DigestHex(t.input.header_digest));
      j.FieldUint("submissions_completed", t.input.submissions_completed);
      j.FieldUint("submissions_issued", t.input.submissions_issued);
      j.FieldUint("update_last_release", t.input.update_last_release);
      j.EndObject();
      j.Key("host");
      j.BeginObject();
      j.Field("backend", t.host.backend);
      j.FieldUint("first_context", t.host.first_context);
      j.FieldUint("steps_done", t.host.steps_done);
      j.FieldUint("update_count", t.host.update_count);
      j.FieldUint("publications", t.host.publications);
      j.FieldUint("start_unix_ns", t.host.start_unix_ns);
      j.FieldUint("end_unix_ns", t.host.end_unix_ns);
      j.FieldUint("forward_wall_ns", t.host.forward_wall_ns);
      j.FieldUint("steps_wall_ns", t.host.steps_wall_ns);
      j.FieldUint("publish_wall_ns", t.host.publish_wall_ns);
      j.FieldUint("peak_device_memory_bytes",
                  t.host.peak_device_memory_bytes);
      j.EndObject();
      j.Key("predictions");
      j.BeginArray();
      for (int k = 0; k < 3; ++k) {
        const ResultPrediction& p = t.host.predictions[k];
        j.BeginObject();
        j.FieldInt("row", rows[k]);
        j.FieldUint("token", p.token);
        j.FieldBool("valid", p.valid);
        if (vocab && p.valid) {
          const std::string text = TokenText(vocab, p.token);
          j.Field("text", text);
          j.Field("bytes_hex", Hex(text));
        }
        j.EndObject();
      }
      j.EndArray();
      j.FieldInt("final_argmax_row_last", final_argmax);
      j.FieldBool("final_record_matches_prediction", final_consistent);
      j.FieldBool("final_record_all_zero", final_all_zero);
      j.FieldBool("loss_block_matches_last_window", loss_block_matches);
      j.Key("errors");
      j.BeginObject();
      j.FieldInt("first_nonfinite_step", t.errors.first_nonfinite_step);
      j.FieldUint("nonfinite_steps", t.errors.nonfinite_steps);
      j.FieldBool("invalid_token_seen", t.errors.invalid_token_seen);
      j.FieldInt("cuda_error", t.errors.cuda_error);
      j.Field("text", t.errors.text);
      j.EndObject();
      j.Key("semaphores");
      j.BeginArray();
      for (int k = 0; k < kNumSubmissionKinds; ++k) {
        const ResultSemaphore& s = t.semaphores[k];
        j.BeginObject();
        j.Field("kind", SubmissionKindName(SubmissionKind(k)));
        j.FieldUint("completion_value", s.completion_value);
        j.FieldUint("fence_value", s.fence_value);
        j.FieldUint("device_start_ns", s.device_start_ns);
        j.FieldUint("device_end_ns", s.device_end_ns);
        j.FieldUint("issues", s.issues);
        j.EndObject();
      }
      j.EndArray();
      j.Key("device_time_per_step");
      j.BeginObject();
      j.FieldInt("steps_with_device_clock", times.count);
      j.FieldDouble("mean_ns", times.mean_ns);
      j.FieldDouble("min_ns", times.min_ns);
      j.FieldDouble("max_ns", times.max_ns);
      j.FieldDouble("host_mean_ns", times.host_mean_ns);
      j.DoubleArray("per_step_ns", times.per_step_ns);
      j.EndObject();
      j.Key("loss_block");
      j.BeginObject();
      const int64_t rows_kept = std::min<int64_t>(g.T, 1024);
      std::vector<double> last(t.loss.last_row_losses.begin(),
                               t.loss.last_row_losses.begin() + rows_kept);
      j.FieldDouble("last_step_mean_loss", Mean(last, 0, last.size()));
      j.FieldInt("rows_kept", rows_kept);
      PrintStatsJson(j, "embedding_gradient_head",
                     ComputeTensorStats(t.loss.embedding_gradient_head.data(),
                                        kResultLossWindowFloats));
      PrintStatsJson(j, "embedding_parameter_head",
                     ComputeTensorStats(t.loss.embedding_parameter_head.data(),
                                        kResultLossWindowFloats));
      PrintStatsJson(
          j, "embedding_first_moment_head",
          ComputeTensorStats(t.loss.embedding_first_moment_head.data(),
                             kResultLossWindowFloats));
      j.EndObject();
    }
    j.EndObject();
    out << j.str() << "\n";
    return;
  }

  out << "result " << EscapeControlCharacters(o.path) << " ("
      << r.file_size << " bytes; config "
      << config.name << " (" << d.config_source << "): V=" << g.V
      << " T=" << g.T << " steps=" << g.steps << ", complete size "
      << layout.complete_bytes << ")\n";
  for (const std::string& p : problems) out << "  PROBLEM: " << p << "\n";
  out << "  status: " << status << ", " << r.complete_steps << " of "
      << g.steps << " step windows\n";
  if (r.marker_left) {
    out << "  forward record: NOT WRITTEN (marker be ba fe ca be ba fe ca "
           "still at offset 0)\n";
  } else if (!r.forward_present) {
    out << "  forward record: cut short (" << r.file_size << " of "
        << layout.forward_bytes << " bytes)\n";
  } else {
    out << "  forward record: argmax of rows " << rows[0] << ", " << rows[1]
        << ", " << rows[2] << " = " << forward_argmax[0] << ", "
        << forward_argmax[1] << ", " << forward_argmax[2] << "\n";
  }
  if (!means.empty()) {
    out << absl::StrFormat(
        "  loss: first %d-step window mean %s, last %d-step window mean "
        "%s; %d %s with a non-finite mean\n",
        w, LossText(first_window, 6), w, LossText(last_window, 6),
        nonfinite_steps, nonfinite_steps == 1 ? "step" : "steps");
    out << "  per-step mean loss (smoothed over " << window << " steps):\n";
    const size_t n = means.size();
    const size_t shown = std::min<size_t>(n, 20);
    for (size_t i = 0; i < shown; ++i) {
      const size_t s = shown == 1 ? 0 : i * (n - 1) / (shown - 1);
      out << absl::StrFormat("    step %6d  loss %s  smoothed %s\n", s,
                             LossText(means[s], 6),
                             LossText(smoothed[s], 6));
    }
  }
  if (!r.complete) {
    out << "  tail: absent (the run did not finish)\n";
    return;
  }
  out << "  backend: " << t.host.backend << ", c0 " << t.host.first_context
      << ", steps done " << t.host.steps_done << ", update count "
      << t.host.update_count << ", publications " << t.host.publications
      << "\n";
  out << "  wall: start " << FormatUnixNs(t.host.start_unix_ns) << ", end "
      << FormatUnixNs(t.host.end_unix_ns) << "; forward "
      << t.host.forward_wall_ns << " ns, steps " << t.host.steps_wall_ns
      << " ns, publishing " << t.host.publish_wall_ns << " ns; peak device "
      << "memory " << t.host.peak_device_memory_bytes << " bytes\n";
  out << "  input: "
      << (t.input.fresh ? "fresh (0 bytes)" : "continuation") << ", size "
      << t.input.size_bytes << ", mtime " << t.input.mtime_ns
      << ", update count " << t.input.update_count << ", header sha256 "
      << DigestHex(t.input.header_digest) << "\n";
  out << "  submissions: " << t.input.submissions_completed << " completed of "
      << t.input.submissions_issued << " issued; update semaphore last "
      << "release " << t.input.update_last_release << "\n";
  if (times.count) {
    out << absl::StrFormat(
        "  device time per step: mean %.1f ns, min %.0f, max %.0f (%d "
        "steps)\n",
        times.mean_ns, times.min_ns, times.max_ns, times.count);
  } else {
    out << "  device time per step: no device clock (backend "
        << t.host.backend << ")\n";
  }
  if (times.host_count) {
    // Steps overlap (a backend runs ahead), so a step's issue-to-completion
    // latency is not its cost; the wall time of the steps over their count is.
    out << absl::StrFormat(
        "  host wall time per step: %.3f ms (steps wall / steps); "
        "issue-to-completion latency mean %.3f ms\n",
        t.host.steps_done ? t.host.steps_wall_ns * 1e-6 / t.host.steps_done
                          : 0.0,
        times.host_mean_ns * 1e-6);
  }
  {
    const int64_t rows_kept = std::min<int64_t>(g.T, 1024);
    std::vector<double> last(t.loss.last_row_losses.begin(),
                             t.loss.last_row_losses.begin() + rows_kept);
    out << absl::StrFormat("  loss block: last step mean loss %s over %d "
                           "rows\n",
                           LossText(Mean(last, 0, last.size()), 6), rows_kept);
    out << "    embedding gradient head (1024): "
        << StatsText(ComputeTensorStats(t.loss.embedding_gradient_head.data(),
                                        kResultLossWindowFloats))
        << "\n";
    out << "    embedding parameter head (1024): "
        << StatsText(ComputeTensorStats(t.loss.embedding_parameter_head.data(),
                                        kResultLossWindowFloats))
        << "\n";
    out << "    AdamW first moment head (1024): "
        << StatsText(
               ComputeTensorStats(t.loss.embedding_first_moment_head.data(),
                                  kResultLossWindowFloats))
        << "\n";
  }
  out << "  errors: ";
  if (t.errors.nonfinite_steps == 0 && !t.errors.invalid_token_seen &&
      t.errors.cuda_error == 0 && t.errors.text.empty()) {
    out << "none\n";
  } else {
    out << "first non-finite step " << t.errors.first_nonfinite_step
        << ", non-finite steps " << t.errors.nonfinite_steps
        << ", invalid token " << (t.errors.invalid_token_seen ? "yes" : "no")
        << ", CUDA error " << t.errors.cuda_error << ", text "
        << Printable(t.errors.text) << "\n";
  }
  out << "  predictions (final submission):\n";
  for (int k = 0; k < 3; ++k) {
    const ResultPrediction& p = t.host.predictions[k];
    out << "    row " << rows[k] << ": ";
    if (!p.valid) {
      out << "invalid (non-finite logits)\n";
      continue;
    }
    out << "token " << p.token;
    if (vocab) out << " " << Printable(TokenText(vocab, p.token));
    out << "\n";
  }
  if (final_all_zero) {
    out << "  WARNING: the final record's " << g.V
        << " logits are all +0.0: the final submission did not write row "
        << g.T - 1 << "\n";
  }
  if (!final_consistent) {
    out << "  WARNING: final record argmax " << final_argmax
        << " differs from the row " << rows[2] << " prediction "
        << t.host.predictions[2].token << "\n";
  }
}

absl::Status InspectResult(const InspectOptions& o, const FileDetection& d,
                           std::ostream& out) {
  if (!d.mismatch.empty()) return absl::FailedPreconditionError(d.mismatch);
  ASSIGN_OR_RETURN(ResultFile r, ReadResultOf(o.path, d.config));
  std::optional<Vocabulary> vocab;
  if (!o.vocab.empty()) {
    ASSIGN_OR_RETURN(Vocabulary v, Vocabulary::Load(o.vocab, d.config.V));
    vocab = std::move(v);
  }
  const std::vector<std::string> problems =
      ResultProblems(o.path, r, /*count_incomplete=*/true, &d);
  PrintResult(o, d, r, problems, vocab, out);
  if (problems.empty()) return absl::OkStatus();
  return absl::DataLossError(
      problems.size() == 1
          ? problems[0]
          : absl::StrCat(problems[0], " (and ", problems.size() - 1,
                         " more problems)"));
}


// ---------------------------------------------------------------- verify

// VerifyOutcome::kind of a file whose kind could not be detected.
constexpr char kUnknownKind[] = "unknown";

struct VerifyOutcome {
  std::string kind;
  std::string config, config_source;  // as detected ("" when not)
  // What the verdict was checked against, when the file does not say it
  // (a cache's ids against a config's V): printed after the kind.
  std::string checked;
  std::vector<std::string> failures;  // one line each
  std::string kind_note;              // FileDetection::kind_note
};

VerifyOutcome VerifyOne(const std::string& path, const VerifyOptions& o,
                        DecodeInputs& decode_inputs) {
  VerifyOutcome v;
  absl::StatusOr<FileDetection> d = DetectFile(path, o.kind, o.config);
  if (!d.ok()) {
    v.kind = kUnknownKind;
    v.failures.push_back(std::string(d.status().message()));
    return v;
  }
  const FileKind kind = d->kind;
  const ModelConfig& config = d->config;
  v.kind_note = d->kind_note;
  v.kind = FileKindName(kind);
  v.config = config.name;
  v.config_source = d->config_source;
  switch (kind) {
    case FileKind::kCheckpoint: {
      absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(path);
      if (!reader.ok()) {
        v.failures.push_back(std::string(reader.status().message()));
        return v;
      }
      if (reader->IsFresh()) {
        v.failures.push_back(absl::StrCat(
            path, ": 0 bytes: a fresh-start input, not a complete "
                  "checkpoint"));
        return v;
      }
      if (d->config_source == "--config") {
        absl::Status id = RunRefusal(*reader, config);
        if (!id.ok()) v.failures.push_back(std::string(id.message()));
      }
      if (reader->VerifyPayload(o.threads).ok()) {
        for (std::string& p : CheckpointStateProblems(path, *reader, config)) {
          v.failures.push_back(std::move(p));
        }
      } else {
        // One line per bad chunk; the reader's per-chunk message ends with
        // "(1 of N chunks differ)", replaced by the true count.
        std::vector<std::string> lines;
        for (uint64_t i = 0; i < reader->num_chunks(); ++i) {
          absl::Status s = reader->VerifyChunk(i);
          if (s.ok()) continue;
          std::string line(s.message());
          const size_t paren = line.rfind(" (");
          if (paren != std::string::npos &&
              absl::EndsWith(line, "chunks differ)")) {
            line.resize(paren);
          }
          lines.push_back(std::move(line));
        }
        for (std::string& line : lines) {
          v.failures.push_back(absl::StrCat(line, " (", lines.size(), " of ",
                                            reader->num_chunks(),
                                            " chunks differ)"));
        }
      }
      return v;
    }
    case FileKind::kResult: {
      if (!d->mismatch.empty()) {
        v.failures.push_back(d->mismatch);
        return v;
      }
      absl::StatusOr<ResultFile> r = ReadResultOf(path, config);
      if (!r.ok()) {
        v.failures.push_back(std::string(r.status().message()));
        return v;
      }
      v.failures = ResultProblems(path, *r, /*count_incomplete=*/true, &*d);
      return v;
    }
    case FileKind::kCache:
    case FileKind::kAuto: {
      absl::StatusOr<CacheReport> cache =
          AnalyzeCache(path, o.source, decode_inputs, config);
      if (!cache.ok()) {
        v.failures.push_back(std::string(cache.status().message()));
        return v;
      }
      v.failures = CacheProblems(*cache, config);
      // A cache does not name its vocabulary: say which V its ids were
      // checked against, and, when no --config named it, that it was
      // assumed (a cache for `tiny` passes against Coppelius's 12,288).
      v.checked = absl::StrCat(
          "ids < ", config.V, ", the V of config ", config.name,
          d->config_source == "--config"
              ? std::string()
              : absl::StrCat(": assumed, a cache does not name its "
                             "vocabulary; --config=NAME checks another"));
      // Fresh against --source: by the header alone, or also by its ids
      // decoded against the source (--vocab).
      if (cache->decode_difference && cache->vocabulary_time_unknown()) {
        absl::StrAppend(&v.checked,
                        "; its ids decode to the source (the vocabulary's "
                        "time not compared with the cache's: ",
                        cache->timeless_input,
                        " came from a stream, which has none)");
      } else if (cache->decode_difference) {
        absl::StrAppend(&v.checked, "; fresh: its ids decode to the source");
      } else if (cache->staleness &&
                 cache->staleness->staleness == Staleness::kFresh &&
                 cache->vocabulary_newer.empty()) {
        absl::StrAppend(&v.checked,
                        "; fresh by its header's mtime and size only: "
                        "--vocab=V also decodes its ids against the source");
      }
      // --vocab asked for a decode that an earlier failure made pointless.
      if (!cache->decode_skipped.empty() && !v.failures.empty()) {
        absl::StrAppend(&v.failures[0],
                        "; ids not decoded against the source (",
                        cache->decode_skipped, ")");
      }
      return v;
    }
  }
  return v;
}

// ---------------------------------------------------------------- svg

std::string SvgEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 &&
            static_cast<unsigned char>(c) < 0x7f)
          out += c;
        else
          out += '?';
    }
  }
  return out;
}

// A "nice" tick step for a range (1, 2 or 5 times a power of ten).
double NiceStep(double range, int ticks) {
  if (!(range > 0)) return 1;
  const double raw = range / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

// Axis labels: integers as integers ("12000", not "1.2e+04"), else 4
// significant digits.
std::string FormatTick(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    return absl::StrFormat("%.0f", v);
  }
  return absl::StrFormat("%.4g", v);
}

// Where a mode's one-line warnings go: its options' `warnings` stream, or
// standard error when none is set.
template <typename Options>
std::ostream& WarningsOf(const Options& o) {
  return o.warnings != nullptr ? *o.warnings : std::cerr;
}

// Whether `path` is read as a stream: "-" (stdin), or a pipe or character
// device (a named pipe, the shell's `<(...)`, /dev/stdin), which cannot be
// read by offset or mapped.
bool IsStream(const std::string& path) {
  if (path == "-") return true;
  struct stat st;
  return stat(path.c_str(), &st) == 0 &&
         (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode));
}

// Runs `run` on `paths` with each stream (IsStream; each at most once)
// replaced by a spool of its bytes: a temporary file under $TMPDIR
// (checkpoints are mapped, caches and results read by offset, so they need
// a file), removed afterwards. The status, the warnings `run` writes to
// the stream it is given (sent on to `warnings`), and the report when
// `report_names_paths`, name the stream ("-" or its path), not the spool.
absl::Status WithStreamsSpooled(
    const std::vector<std::string>& paths, bool report_names_paths,
    std::ostream& out, std::ostream& warnings,
    const std::function<absl::Status(const std::vector<std::string>&,
                                     std::ostream& out,
                                     std::ostream& warnings)>& run) {
  std::vector<NamedInput> inputs;
  for (const std::string& path : paths) inputs.push_back({"", path});
  RETURN_IF_ERROR(CheckStandardInputReadOnce(inputs));
  std::vector<std::string> spooled = paths;
  std::vector<std::pair<std::string, std::string>> names;  // spool, stream
  absl::Cleanup remove_spools = [&names] {
    for (const auto& [spool, stream] : names) {
      unlink(spool.c_str());
      KeepOnInterrupt(spool);
      TimelessSpools().erase(spool);
    }
  };
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string& path = paths[i];
    if (!IsStream(path)) continue;
    // Standard input under any of its names was refused above; a named
    // pipe given twice under one spelling is refused here.
    const int64_t given = std::count(paths.begin(), paths.end(), path);
    if (given > 1) {
      return UsageError(absl::StrCat(path, " (a stream) is given ", given,
                                     " times; it can be read once"));
    }
    const char* tmpdir = std::getenv("TMPDIR");
    std::string spool =
        absl::StrCat(tmpdir != nullptr && *tmpdir ? tmpdir : "/tmp", "/",
                     kStdinSpoolPrefix, "XXXXXX");
    // The spool named with the stream it copies: "writing
    // /tmp/inspect-stdin.XXXXXX: No space left on device" alone did not say
    // that standard input was being read, nor why a temporary was written.
    const auto spool_name = [&path](absl::string_view spool_path) {
      return absl::StrCat(spool_path, " (the copy of ", InputName(path),
                          " under $TMPDIR or /tmp)");
    };
    int fd = mkstemp(spool.data());
    if (fd < 0) return ErrnoStatus(errno, "creating", spool_name(spool));
    RemoveOnInterrupt(spool);  // Ctrl-C while a large input is read
    names.emplace_back(spool, path);
    // Copied piece by piece: memory stays small whatever the stream holds
    // (up to kMaxStreamBytes, common/file_io.h, as every tool reads one).
    absl::Status w = CopyStream(path, fd, spool_name(spool), kMaxStreamBytes);
    // The stream's times, where it has them (a regular file redirected to
    // standard input), so that the copy is judged as the file would be;
    // a pipe's spool is marked as having none (TimelessSpools).
    struct stat stream_st;
    const int got = path == "-" ? fstat(STDIN_FILENO, &stream_st)
                                : stat(path.c_str(), &stream_st);
    const struct timespec times[2] = {stream_st.st_atim, stream_st.st_mtim};
    if (!(w.ok() && got == 0 && S_ISREG(stream_st.st_mode) &&
          futimens(fd, times) == 0)) {
      TimelessSpools().insert(spool);
    }
    close(fd);
    if (!w.ok()) return w;
    spooled[i] = spool;
  }
  std::ostringstream report, spool_warnings;
  absl::Status status =
      run(spooled, report_names_paths ? report : out, spool_warnings);
  std::move(remove_spools).Invoke();
  warnings << absl::StrReplaceAll(spool_warnings.str(), names);
  if (report_names_paths) out << absl::StrReplaceAll(report.str(), names);
  if (status.ok()) return status;
  return WithMessage(status, absl::StrReplaceAll(status.message(), names));
}

}  // namespace

// ---------------------------------------------------------------- public

static absl::Status InspectPath(const InspectOptions& o, std::ostream& out);

static absl::Status CheckThreads(int threads) {
  if (threads < 1) {
    return UsageError(
        absl::StrCat("--threads=", threads, ": expected an integer >= 1"));
  }
  if (threads > kMaxThreadCount) {
    return UsageError(absl::StrCat(
        "--threads=", threads, ": expected at most ", kMaxThreadCount));
  }
  return absl::OkStatus();
}

static absl::Status CheckSmoothing(int steps) {
  if (steps >= 1) return absl::OkStatus();
  return UsageError(
      absl::StrCat("--smoothing=", steps, ": expected an integer >= 1"));
}

absl::StatusOr<FileKind> ParseFileKind(absl::string_view name) {
  if (name.empty() || name == "auto") return FileKind::kAuto;
  if (name == "cache") return FileKind::kCache;
  if (name == "checkpoint") return FileKind::kCheckpoint;
  if (name == "result") return FileKind::kResult;
  return UsageError(absl::StrCat(
      "--kind=", name, ": expected auto, cache, checkpoint or result"));
}

const char* FileKindName(FileKind kind) {
  switch (kind) {
    case FileKind::kAuto:
      return "auto";
    case FileKind::kCache:
      return "cache";
    case FileKind::kCheckpoint:
      return "checkpoint";
    case FileKind::kResult:
      return "result";
  }
  return "auto";
}

namespace {

uint32_t LeU32(absl::string_view b, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

// Bytes in which the first 8 bytes of `head` differ from `sig` (8 when
// `head` is shorter).
int ByteDistance8(absl::string_view head, const void* sig) {
  if (head.size() < 8) return 8;
  const unsigned char* s = static_cast<const unsigned char*>(sig);
  int d = 0;
  for (int i = 0; i < 8; ++i) d += static_cast<unsigned char>(head[i]) != s[i];
  return d;
}

bool LooksLikeCheckpointPreamble(absl::string_view head, uint64_t size) {
  if (head.size() < 40) return false;
  if (LeU32(head, 8) == kCheckpointVersion &&
      LeU32(head, 12) == kPreambleBytes) {
    return true;
  }
  const uint64_t header_bytes = LeU64(head, 16);
  const uint64_t payload_offset = LeU64(head, 24);
  const uint64_t payload_bytes = LeU64(head, 32);
  return header_bytes >= 1 && header_bytes <= kMaxHeaderBytes &&
         payload_offset == PayloadOffsetFor(header_bytes) &&
         payload_bytes <= size && payload_offset == size - payload_bytes;
}

bool LooksLikeCache(absl::string_view head, uint64_t size) {
  if (size < kTokenCacheHeaderBytes || (size - kTokenCacheHeaderBytes) % 4) {
    return false;
  }
  if (LeU64(head, 0) >= 4102444800ull * 1000000000ull ||  // 2100-01-01
      LeU64(head, 8) >= (1ull << 50)) {
    return false;
  }
  for (size_t at = 16; at + 4 <= head.size(); at += 4) {
    if (LeU32(head, at) >= (1u << 24)) return false;
  }
  return true;
}

// No control bytes other than tab, newline, carriage return, form feed.
bool LooksLikeText(absl::string_view head) {
  if (head.empty()) return false;
  for (unsigned char c : head) {
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f') ||
        c == 0x7f) {
      return false;
    }
  }
  return true;
}

struct KnownLayout {
  ModelConfig config;
  ResultLayout layout;
};

absl::StatusOr<std::vector<KnownLayout>> KnownLayouts() {
  std::vector<KnownLayout> out;
  for (const std::string& name : ModelConfigNames()) {
    ASSIGN_OR_RETURN(ModelConfig c, ModelConfigByName(name));
    out.push_back({c, ComputeResultLayout(ResultGeometryOf(c))});
  }
  return out;
}

// The config whose host tag sits at its host status offset (size at least
// that config's complete size), or null.
absl::StatusOr<const KnownLayout*> HostTagConfig(
    const std::string& path, uint64_t size,
    const std::vector<KnownLayout>& known) {
  for (const KnownLayout& k : known) {
    if (size < static_cast<uint64_t>(k.layout.complete_bytes)) continue;
    ASSIGN_OR_RETURN(std::string tag,
                     PreadString(path, k.layout.host_offset, 8));
    if (ResultSignatureOf(size, "", tag, ResultGeometryOf(k.config)) ==
        ResultSignature::kHostTag) {
      return &k;
    }
  }
  return nullptr;
}

// The kind a file's name gives it (detection rule 2), and the extension.
struct KindName {
  const char* extension;
  FileKind kind;
};
std::optional<KindName> KindByExtension(absl::string_view path) {
  for (const KindName& k : {KindName{".ckpt", FileKind::kCheckpoint},
                            KindName{".tok", FileKind::kCache},
                            KindName{".res", FileKind::kResult}}) {
    if (absl::EndsWith(path, k.extension)) return k;
  }
  return std::nullopt;
}

// Rule 1: the exact signatures (the checkpoint magic, the result marker, a
// result's host tag); nullopt when the file has none.
absl::StatusOr<std::optional<FileKind>> KindBySignature(
    const std::string& path, const FileProbe& p,
    const std::vector<KnownLayout>& known) {
  if (ByteDistance8(p.head, kCheckpointMagic) == 0) {
    return FileKind::kCheckpoint;
  }
  if (ByteDistance8(p.head, kResultMarker) == 0) return FileKind::kResult;
  ASSIGN_OR_RETURN(const KnownLayout* tagged,
                   HostTagConfig(path, p.size, known));
  if (tagged != nullptr) return FileKind::kResult;
  return std::nullopt;
}

// Rules 3-8: what a file without a signature reads as by its content alone
// (not its name); DataLoss when it reads as none.
absl::StatusOr<FileKind> KindByContent(const std::string& path,
                                       const FileProbe& p,
                                       const std::vector<KnownLayout>& known) {
  const absl::string_view head = p.head;
  // 3. Empty: a fresh-start checkpoint input.
  if (p.size == 0) return FileKind::kCheckpoint;
  // 4. A checkpoint near miss.
  if (ByteDistance8(head, kCheckpointMagic) == 1 ||
      LooksLikeCheckpointPreamble(head, p.size)) {
    return FileKind::kCheckpoint;
  }
  // 5. A result marker near miss.
  if (ByteDistance8(head, kResultMarker) == 1) return FileKind::kResult;
  // 6. A cache.
  if (LooksLikeCache(head, p.size)) return FileKind::kCache;
  // 7. A result by size (incomplete, or complete with a damaged host tag)
  // whose forward record reads as logits.
  // Its first step window, as far as the file goes, must read as step 0
  // of that forward record (losses, and at the recorded rows
  // cross-entropies of its logits): an exported fp32 array of a result's
  // size is not taken for a killed run's (break-it, session 23).
  const bool text = LooksLikeText(head);
  if (!text) {
    for (const KnownLayout& k : known) {
      if (ResultSignatureOf(p.size, head, "", ResultGeometryOf(k.config)) !=
          ResultSignature::kForwardRecord) {
        continue;
      }
      ASSIGN_OR_RETURN(const bool step_zero,
                       FirstWindowReadsAsStepZero(path, p.size,
                                                  ResultGeometryOf(k.config)));
      if (step_zero) return FileKind::kResult;
    }
    // 8. A result cut inside its forward record: shorter than a config's
    // 12 V, but the whole head (4,096 bytes: as many values as rule 7
    // reads) reads as logits. Reported, not recognised by tokenize's
    // refusal to replace results (ResultSignatureOf): such a file holds no
    // step, and the writer removes one it leaves (ResultWriter). With no
    // step window to check, the head must also hold a negative logit (a
    // model's logits, centred near 0 at initialization, are not all of one
    // sign) or a non-finite one (a diverged run's): an array of magnitudes
    // is not taken for one.
    bool negative = false, nonfinite = false;
    for (size_t at = 0; at + 4 <= head.size(); at += 4) {
      float x;
      std::memcpy(&x, head.data() + at, sizeof(x));
      nonfinite |= !std::isfinite(x);
      negative |= x < 0.0f;
    }
    for (const KnownLayout& k : known) {
      if (head.size() == kProbeHeadBytes &&
          p.size < static_cast<uint64_t>(k.layout.forward_bytes) &&
          LooksLikeForwardRecord(head, k.layout.forward_bytes) &&
          (negative || nonfinite)) {
        return FileKind::kResult;
      }
    }
  }
  return absl::DataLossError(absl::StrCat(
      path, ": offset 0: not a token cache, checkpoint or result file (",
      p.size, " bytes", text ? ", text" : "",
      "; no checkpoint magic, result marker or host tag, not a plausible "
      "cache header or forward record of logits); pass --kind to read it as "
      "one"));
}

// Rules 1-8 in order (the file comment's): a signature, else the extension,
// else the content. When rule 2 decides and `decided_by_name` is not null,
// the extension's kind is stored there.
absl::StatusOr<FileKind> DetectKind(
    const std::string& path, const FileProbe& p,
    const std::vector<KnownLayout>& known,
    std::optional<KindName>* decided_by_name = nullptr) {
  ASSIGN_OR_RETURN(const std::optional<FileKind> signed_kind,
                   KindBySignature(path, p, known));
  if (signed_kind) return *signed_kind;
  if (const std::optional<KindName> by_name = KindByExtension(path)) {
    if (decided_by_name != nullptr) *decided_by_name = by_name;
    return by_name->kind;
  }
  return KindByContent(path, p, known);
}

// Whether a result of `size` bytes, by its size one of `k`'s, has step
// windows where `k` puts them: false when the file could also be another
// known config's forward record cut short (its size below that 12 V) and
// its first step window, as far as the file goes, does not read as step 0
// of `k`'s run (FirstWindowReadsAsStepZero: a negative finite value, or
// rows T/4 - 1, T/2 - 1, T - 1 that are no cross-entropies of the forward
// record's logits). A step window holds per-row cross-entropies, logsumexp
// minus a logit, never negative; a forward record holds logits of both
// signs. So a Coppelius result cut at 20,000 bytes is not read as tiny's.
absl::StatusOr<bool> WindowsWhereTheConfigPutsThem(
    const std::string& path, uint64_t size, const KnownLayout& k,
    const std::vector<KnownLayout>& known) {
  const bool ambiguous = std::any_of(
      known.begin(), known.end(), [size](const KnownLayout& other) {
        return size < static_cast<uint64_t>(other.layout.forward_bytes);
      });
  if (!ambiguous) return true;
  return FirstWindowReadsAsStepZero(path, size, ResultGeometryOf(k.config));
}

// The config the file's content names, if any; `evidence` says how.
absl::StatusOr<std::optional<ModelConfig>> ConfigOfFile(
    const std::string& path, FileKind kind, uint64_t size,
    const std::vector<KnownLayout>& known, std::string* evidence) {
  if (kind == FileKind::kCheckpoint && size > 0) {
    absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(path);
    if (!reader.ok()) return std::nullopt;  // reported by the subcommand
    for (const KnownLayout& k : known) {
      if (RunRefusal(*reader, k.config).ok()) {
        *evidence = "checkpoint identity";
        return k.config;
      }
    }
    for (const KnownLayout& k : known) {
      if (reader->payload_bytes() ==
          12 * static_cast<uint64_t>(NumParameters(k.config))) {
        *evidence = "checkpoint payload size";
        return k.config;
      }
    }
  }
  if (kind == FileKind::kResult) {
    ASSIGN_OR_RETURN(const KnownLayout* tagged,
                     HostTagConfig(path, size, known));
    if (tagged != nullptr) {
      *evidence = "result size and host tag";
      return tagged->config;
    }
    for (const KnownLayout& k : known) {
      if (size >= static_cast<uint64_t>(k.layout.forward_bytes) &&
          size <= static_cast<uint64_t>(k.layout.complete_bytes)) {
        ASSIGN_OR_RETURN(const bool windows,
                         WindowsWhereTheConfigPutsThem(path, size, k, known));
        if (!windows) continue;
        *evidence = "result size";
        return k.config;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

absl::Status CheckStandardOutputIsNotCoppeliusFile(absl::string_view use) {
  const std::string examined = StandardOutputFileToExamine();
  if (examined.empty()) return absl::OkStatus();
  absl::StatusOr<FileDetection> d = DetectFile(examined, FileKind::kAuto, "");
  if (!d.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      use, ": standard output is an existing Coppelius ", FileKindName(d->kind),
      " file (", StandardOutputFileBytes(), " bytes); writing to it would "
      "damage it (choose another output)"));
}

absl::StatusOr<FileDetection> DetectFile(const std::string& path,
                                         FileKind kind,
                                         absl::string_view config_name) {
  ASSIGN_OR_RETURN(FileProbe p, Probe(path));
  ASSIGN_OR_RETURN(std::vector<KnownLayout> known, KnownLayouts());
  FileDetection d;
  d.kind = kind;
  if (d.kind == FileKind::kAuto) {
    std::optional<KindName> by_name;
    ASSIGN_OR_RETURN(d.kind, DetectKind(path, p, known, &by_name));
    // A kind named by the extension, against what the content reads as
    // (an empty file reads as a fresh-start checkpoint by rule 3 only: no
    // evidence against the extension). Rule 1 found no signature already.
    if (by_name && p.size > 0) {
      absl::StatusOr<FileKind> content = KindByContent(path, p, known);
      if (content.ok() && *content != d.kind) {
        d.kind_note = absl::StrCat(
            "the kind comes from the extension ", by_name->extension,
            "; the content reads as a ", FileKindName(*content),
            ": --kind=", FileKindName(*content), " reads it as one");
      }
    }
  }
  std::string evidence;
  ASSIGN_OR_RETURN(std::optional<ModelConfig> file_config,
                   ConfigOfFile(path, d.kind, p.size, known, &evidence));
  if (!config_name.empty()) {
    ASSIGN_OR_RETURN(d.config, ModelConfigByName(config_name));
    d.config_source = "--config";
    if (file_config && file_config->name != d.config.name) {
      d.mismatch = absl::StrCat(path, ": ", evidence, " (", p.size,
                                " bytes) fit config ", file_config->name,
                                ", not --config=", d.config.name);
    }
  } else if (file_config) {
    d.config = *file_config;
    d.config_source = evidence;
  } else {
    ASSIGN_OR_RETURN(d.config, ModelConfigByName("coppelius"));
    d.config_source = "default: the file does not tell";
  }
  return d;
}

absl::StatusOr<FileKind> DetectFileKind(const std::string& path) {
  ASSIGN_OR_RETURN(FileDetection d, DetectFile(path, FileKind::kAuto, ""));
  return d.kind;
}

TensorStats ComputeTensorStats(const float* values, int64_t n) {
  TensorStats s;
  s.count = n;
  double sum = 0;
  int64_t finite = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (int64_t i = 0; i < n; ++i) {
    const double v = values[i];
    if (!std::isfinite(v)) {
      ++s.nonfinite;
      continue;
    }
    ++finite;
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (finite == 0) return s;
  s.mean = sum / finite;
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = values[i];
    if (std::isfinite(v)) sq += (v - s.mean) * (v - s.mean);
  }
  s.std = std::sqrt(sq / finite);
  s.min = lo;
  s.max = hi;
  return s;
}

std::vector<double> SmoothedCurve(const std::vector<double>& per_step,
                                  int window) {
  window = std::max(1, window);
  std::vector<double> out(per_step.size());
  double sum = 0;
  int64_t finite = 0;  // finite values in the window
  for (size_t i = 0; i < per_step.size(); ++i) {
    const double in = per_step[i];
    if (std::isfinite(in)) {
      sum += in;
      ++finite;
    }
    if (i >= static_cast<size_t>(window)) {
      const double old = per_step[i - window];
      if (std::isfinite(old)) {
        sum -= old;
        --finite;
      }
    }
    out[i] = finite > 0 ? sum / static_cast<double>(finite) : std::nan("");
  }
  return out;
}

// --source must be a file (its size and modification time are what a
// cache's header records), and standard input can be read once: as a FILE
// or as --vocab, not both.
static absl::Status CheckSourceAndStdin(const std::vector<std::string>& paths,
                                        const std::string& source,
                                        const std::string& vocab) {
  if (source == "-") {
    return UsageError(
        "--source=-: a cache's header records its source's size and "
        "modification time, which standard input does not have; give the "
        "source as a file path");
  }
  std::vector<NamedInput> inputs = {{"--vocab=", vocab}, {"--source=", source}};
  for (const std::string& path : paths) inputs.push_back({"FILE ", path});
  return CheckStandardInputReadOnce(inputs);
}

absl::Status RunInspect(const InspectOptions& options, std::ostream& out) {
  if (options.path.empty()) {
    return UsageError("inspect: no FILE given");
  }
  RETURN_IF_ERROR(
      CheckSourceAndStdin({options.path}, options.source, options.vocab));
  RETURN_IF_ERROR(CheckThreads(options.threads));
  RETURN_IF_ERROR(CheckSmoothing(options.smoothing_steps));
  auto report_on = [&](std::ostream& report) {
    if (!IsStream(options.path)) return InspectPath(options, report);
    return WithStreamsSpooled(
        {options.path}, true, report,
        WarningsOf(options),
        [&](const std::vector<std::string>& paths, std::ostream& spooled,
            std::ostream& warnings) {
          InspectOptions o = options;
          o.path = paths[0];
          o.warnings = &warnings;
          return InspectPath(o, spooled);
        });
  };
  if (!options.json) return report_on(out);
  // With --json, a file that cannot be reported on at all (unreadable, not
  // a kind inspect knows, a checkpoint whose envelope fails) still gives one
  // JSON object, so that scripts always parse stdout.
  std::ostringstream report;
  const absl::Status status = report_on(report);
  if (status.ok() || !report.str().empty()) {
    out << report.str();
    return status;
  }
  JsonWriter j;
  j.BeginObject();
  j.Field("path", options.path);
  j.FieldBool("ok", false);
  j.Field("code", absl::StatusCodeToString(status.code()));
  j.Field("error", status.message());
  j.EndObject();
  out << j.str() << "\n";
  return status;
}

static absl::Status InspectDetected(const InspectOptions& o,
                                    const FileDetection& d, std::ostream& out);

static absl::Status InspectPath(const InspectOptions& o, std::ostream& out) {
  ASSIGN_OR_RETURN(FileDetection d, DetectFile(o.path, o.kind, o.config));
  const absl::Status status = InspectDetected(o, d, out);
  if (status.ok() || d.kind_note.empty()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), " (", d.kind_note, ")"));
}

static absl::Status InspectDetected(const InspectOptions& o,
                                    const FileDetection& d, std::ostream& out) {
  std::ostream& warnings = WarningsOf(o);
  if (!o.source.empty() && d.kind != FileKind::kCache) {
    warnings << "inspect: warning: --source is for token caches; "
             << o.path << " is a " << FileKindName(d.kind)
             << ": --source ignored" << std::endl;
  }
  if (!o.vocab.empty() && d.kind != FileKind::kResult &&
      !(d.kind == FileKind::kCache && !o.source.empty())) {
    warnings << "inspect: warning: --vocab is for result files (and caches "
                "with --source); "
             << o.path << " is a " << FileKindName(d.kind)
             << ": --vocab ignored" << std::endl;
  }
  switch (d.kind) {
    case FileKind::kCheckpoint:
      return InspectCheckpoint(o, d, out);
    case FileKind::kResult:
      return InspectResult(o, d, out);
    case FileKind::kCache:
    case FileKind::kAuto: {
      DecodeInputs decode_inputs(o.source, o.vocab);
      ASSIGN_OR_RETURN(CacheReport r,
                       AnalyzeCache(o.path, o.source, decode_inputs, d.config));
      PrintCache(r, d.config, d.config_source, o.json, out);
      // Ids the config's vocabulary does not have, a header no source has,
      // ids that do not decode to --source: reported above, then DataLoss;
      // stale against --source and nothing else: FailedPrecondition (verify
      // fails the same cache).
      const std::vector<std::string> problems = CacheProblems(r, d.config);
      if (problems.empty()) return absl::OkStatus();
      const bool only_stale =
          problems.size() == 1 && problems[0] == StaleProblem(r);
      return absl::Status(
          only_stale ? absl::StatusCode::kFailedPrecondition
                     : absl::StatusCode::kDataLoss,
          problems.size() == 1
              ? problems[0]
              : absl::StrCat(problems[0], " (and ", problems.size() - 1,
                             " more problem", problems.size() > 2 ? "s" : "",
                             ")"));
    }
  }
  return absl::InternalError("inspect: unhandled kind");
}

absl::Status RunVerify(const VerifyOptions& o, std::ostream& out) {
  if (o.paths.empty()) {
    return UsageError("verify: no FILE given");
  }
  if (std::count(o.paths.begin(), o.paths.end(), "") > 0) {
    return UsageError("verify: an empty FILE argument (\"\"); expected a path or -");
  }
  RETURN_IF_ERROR(CheckSourceAndStdin(o.paths, o.source, o.vocab));
  RETURN_IF_ERROR(CheckThreads(o.threads));
  if (!o.config.empty()) RETURN_IF_ERROR(ModelConfigByName(o.config).status());
  if (std::any_of(o.paths.begin(), o.paths.end(), IsStream)) {
    return WithStreamsSpooled(
        o.paths, true, out, WarningsOf(o),
        [&](const std::vector<std::string>& paths, std::ostream& report,
            std::ostream& warnings) {
          VerifyOptions spooled = o;
          spooled.paths = paths;
          spooled.warnings = &warnings;
          return RunVerify(spooled, report);
        });
  }
  // Read once for all the caches (--vocab, --source).
  DecodeInputs decode_inputs(o.source, o.vocab);
  int failed = 0;
  bool any_cache = false;
  // A FILE whose kind is not known (missing, unreadable) may be the cache
  // the flags were meant for: no warning that they were ignored then.
  bool any_unknown = false;
  JsonWriter j;
  j.BeginObject();
  j.Key("files");
  j.BeginArray();
  for (const std::string& path : o.paths) {
    VerifyOutcome v = VerifyOne(path, o, decode_inputs);
    if (!v.failures.empty() && !v.kind_note.empty()) {
      absl::StrAppend(&v.failures[0], " (", v.kind_note, ")");
    }
    failed += !v.failures.empty();
    any_cache |= v.kind == FileKindName(FileKind::kCache);
    any_unknown |= v.kind == kUnknownKind;
    if (o.json) {
      j.BeginObject();
      j.Field("path", path);
      j.Field("kind", v.kind);
      j.Field("config", v.config);
      j.Field("config_source", v.config_source);
      j.FieldBool("ok", v.failures.empty());
      j.Key("failures");
      j.BeginArray();
      for (const std::string& f : v.failures) j.String(f);
      j.EndArray();
      j.EndObject();
      continue;
    }
    if (v.failures.empty()) {
      out << "OK " << EscapeControlCharacters(path) << " (" << v.kind
          << (v.checked.empty() ? "" : "; ") << v.checked << ")\n";
    }
    // A failure naming the file first ("PATH: offset ...", as every
    // error does) is printed once after FAIL, not "FAIL PATH: PATH: ..."
    // (new-user pass, session 23).
    for (const std::string& f : v.failures) {
      absl::string_view text = f;
      absl::ConsumePrefix(&text, absl::StrCat(path, ": "));
      out << "FAIL " << EscapeControlCharacters(path) << ": "
          << EscapeControlCharacters(text) << "\n";
    }
  }
  j.EndArray();
  j.FieldBool("ok", failed == 0);
  j.FieldInt("failed", failed);
  j.FieldInt("checked", static_cast<int64_t>(o.paths.size()));
  j.EndObject();
  if (o.json) out << j.str() << "\n";
  if (!o.source.empty() && !any_cache && !any_unknown) {
    WarningsOf(o)
        << "inspect: warning: --source is for token caches; no FILE is one: "
           "--source ignored"
        << std::endl;
  }
  if (!o.vocab.empty() && (o.source.empty() || (!any_cache && !any_unknown))) {
    WarningsOf(o)
        << "inspect: warning: verify uses --vocab only for a token cache "
           "with --source (its ids decoded against the source): --vocab "
           "ignored"
        << std::endl;
  }
  out.flush();
  RETURN_IF_ERROR(StreamStatus(out, "verify: the report"));
  if (failed) {
    return absl::DataLossError(absl::StrCat("verify: ", failed, " of ",
                                            o.paths.size(), " files failed"));
  }
  return absl::OkStatus();
}

std::string RenderLossSvg(const std::vector<double>& per_step,
                          const std::vector<double>& smoothed,
                          const std::vector<size_t>& run_starts,
                          absl::string_view title, uint64_t first_step,
                          absl::string_view x_label) {
  const double width = 800, height = 480;
  const double left = 70, right = 20, top = 40, bottom = 50;
  const double pw = width - left - right, ph = height - top - bottom;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : per_step) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  // A flat series, or one flatter than its magnitude can resolve (1e17 + 0.5
  // rounds to 1e17): widen the axis around it by 0.5, or by 1% of the value
  // where that is more. Halves (hi / 2 - lo / 2) keep every span finite up to
  // +-DBL_MAX.
  const double magnitude = std::max(std::fabs(lo), std::fabs(hi));
  if (hi - lo < std::max(1e-9, 1e-12 * magnitude)) {
    const double mid = lo / 2 + hi / 2;
    const double pad = std::max(0.5, 0.01 * std::fabs(mid));
    lo = std::max(mid - pad, -std::numeric_limits<double>::max());
    hi = std::min(mid + pad, std::numeric_limits<double>::max());
  }
  const double ystep = NiceStep(hi / 2 - lo / 2, 3);  // NiceStep(hi - lo, 6)
  // Outward to a multiple of the step, unless that overflows.
  if (std::isfinite(std::floor(lo / ystep) * ystep)) {
    lo = std::floor(lo / ystep) * ystep;
  }
  if (std::isfinite(std::ceil(hi / ystep) * ystep)) {
    hi = std::ceil(hi / ystep) * ystep;
  }
  // Gridlines counted, not stepped: lo + k * ystep for k = 0 .. yticks
  // (at most 1,000, so the loop ends whatever the values).
  const double yticks =
      std::min(1000.0, std::round((hi / 2 - lo / 2) / ystep * 2));
  const double n = static_cast<double>(std::max<size_t>(per_step.size(), 2) - 1);
  auto X = [&](double s) { return left + pw * s / n; };
  auto Y = [&](double v) {
    return top + ph * ((hi / 2 - v / 2) / (hi / 2 - lo / 2));
  };

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
      "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n",
      width, height, width, height);
  absl::StrAppend(&svg, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  absl::StrAppend(&svg, absl::StrFormat(
      "<text x=\"%.1f\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">%s</text>\n",
      left + pw / 2, SvgEscape(title)));
  // Axes.
  absl::StrAppend(&svg, absl::StrFormat(
      "<path d=\"M%.1f %.1f V%.1f H%.1f\" stroke=\"black\" fill=\"none\"/>\n",
      left, top, top + ph, left + pw));
  for (int k = 0; k <= yticks; ++k) {
    const double v = lo + k * ystep;
    if (!std::isfinite(v)) break;
    absl::StrAppend(&svg, absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
        left, Y(v), left + pw, Y(v), left - 6, Y(v) + 4, FormatTick(v)));
  }
  const double xstep = NiceStep(n, 8);
  for (double s = 0; s <= n + 1e-9; s += xstep) {
    absl::StrAppend(&svg, absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
        X(s), top + ph, X(s), top + ph + 5, X(s), top + ph + 20,
        FormatTick(static_cast<double>(first_step) + s)));
  }
  absl::StrAppend(&svg, absl::StrFormat(
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
      left + pw / 2, height - 10, SvgEscape(x_label)));
  absl::StrAppend(&svg, absl::StrFormat(
      "<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" "
      "transform=\"rotate(-90 16 %.1f)\">mean cross-entropy loss (nats)</text>\n",
      top + ph / 2, top + ph / 2));
  for (size_t start : run_starts) {
    absl::StrAppend(&svg, absl::StrFormat(
        "<line class=\"run-start\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
        "y2=\"%.1f\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>\n",
        X(start), top, X(start), top + ph));
  }
  // A path of the finite points, broken where a value is not finite (a
  // new subpath, "M", after each gap): a step without a finite loss is a
  // gap in the line, not bridged.
  auto polyline = [&](const std::vector<double>& v, const char* color,
                      const char* extra, const char* id) {
    std::string pts;
    bool in_gap = true;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i])) {
        in_gap = true;
        continue;
      }
      absl::StrAppend(&pts, in_gap ? "M" : "",
                      absl::StrFormat("%.2f,%.2f ", X(i), Y(v[i])));
      in_gap = false;
    }
    if (v.size() == 1 && std::isfinite(v[0])) {
      absl::StrAppend(&pts, absl::StrFormat("%.2f,%.2f ", X(1), Y(v[0])));
    }
    return absl::StrFormat(
        "<path id=\"%s\" fill=\"none\" stroke=\"%s\" %s d=\"%s\"/>\n",
        id, color, extra, pts);
  };
  absl::StrAppend(&svg, polyline(per_step, "#9ecae1", "stroke-width=\"1\"",
                                 "per-step"));
  absl::StrAppend(&svg, polyline(smoothed, "#08519c", "stroke-width=\"2\"",
                                 "smoothed"));
  absl::StrAppend(&svg, absl::StrFormat(
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#9ecae1\">per-step mean</text>"
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#08519c\">smoothed</text>\n",
      left + pw - 4, top + 14, left + pw - 4, top + 30));
  absl::StrAppend(&svg, "</svg>\n");
  return svg;
}

// Refuses an output path (plot, export) that names one of the inputs or an
// existing Coppelius file (cache, checkpoint, result): writing it would
// destroy data another run published.
absl::Status CheckOutputPath(const std::string& output,
                             const std::vector<std::string>& inputs) {
  if (output == "-") return absl::OkStatus();
  RETURN_IF_ERROR(CheckOutputPathUsable(output, "-o"));
  for (const std::string& in : inputs) {
    if (SameFile(output, in)) {
      return absl::InvalidArgumentError(
          absl::StrCat("-o ", output, ": names the input file ", in));
    }
  }
  struct stat st;
  if (stat(output.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size == 0) {
    return absl::OkStatus();
  }
  // What the file holds decides; a file it cannot read (the publication by
  // rename would replace it unseen) and one named like a Coppelius file are
  // refused as well, each said as what it is.
  RETURN_IF_ERROR(CheckOutputReadable(output));
  ASSIGN_OR_RETURN(const FileProbe p, Probe(output));
  ASSIGN_OR_RETURN(std::vector<KnownLayout> known, KnownLayouts());
  auto named = [](FileKind kind) {
    return kind == FileKind::kCache      ? "token cache"
           : kind == FileKind::kResult   ? "result file"
                                         : "checkpoint";
  };
  // What the file holds, by its content only (not its name): its signature
  // (the magic, the marker, a host tag) says so for certain; the other
  // rules (a cache's shape, a result's size) guess.
  const absl::StatusOr<std::optional<FileKind>> signed_kind =
      KindBySignature(output, p, known);
  std::optional<FileKind> kind;
  if (signed_kind.ok() && signed_kind->has_value()) {
    kind = **signed_kind;
  } else if (signed_kind.ok()) {
    if (absl::StatusOr<FileKind> content = KindByContent(output, p, known);
        content.ok()) {
      kind = *content;
    }
  }
  if (kind) {
    const bool signed_file = signed_kind->has_value();
    return absl::FailedPreconditionError(absl::StrCat(
        "-o ", output, ": exists (", p.size, " bytes) and ",
        signed_file ? "is a Coppelius " : "looks like a Coppelius ",
        named(*kind), signed_file ? "" : " by its content",
        "; refusing to replace it (choose another output path)"));
  }
  if (const std::optional<KindName> by_name = KindByExtension(output)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "-o ", output, ": exists (", p.size, " bytes",
        LooksLikeText(p.head) ? ", text" : "",
        ") and is named like a Coppelius ", named(by_name->kind),
        ", though it does not hold one; refusing to replace it "
        "(choose another output path, or remove it first)"));
  }
  return absl::OkStatus();
}

absl::Status RunPlot(const PlotOptions& o, std::ostream& out) {
  if (o.results.empty()) {
    return UsageError("plot: no RESULT file given");
  }
  if (o.output.empty()) {
    return UsageError("plot: -o OUTPUT (an .svg path or -) is required");
  }
  if (std::count(o.results.begin(), o.results.end(), "") > 0) {
    return UsageError(
        "plot: an empty RESULT argument (\"\"); expected a path or -");
  }
  RETURN_IF_ERROR(CheckSmoothing(o.smoothing_steps));
  if (std::any_of(o.results.begin(), o.results.end(), IsStream)) {
    return WithStreamsSpooled(
        o.results, false, out, WarningsOf(o),
        [&](const std::vector<std::string>& paths, std::ostream& svg_out,
            std::ostream& warnings) {
          PlotOptions spooled = o;
          spooled.results = paths;
          spooled.warnings = &warnings;
          return RunPlot(spooled, svg_out);
        });
  }
  RETURN_IF_ERROR(CheckOutputPath(o.output, o.results));
  ModelConfig config;
  std::vector<double> means;
  std::vector<size_t> run_starts;
  std::string previous;             // the previous file
  uint64_t previous_c0 = 0, previous_steps = 0;
  std::optional<uint64_t> first_c0;  // the first file's, when complete
  bool previous_complete = false;
  for (const std::string& path : o.results) {
    // --kind as for a report: detection's "pass --kind" advice holds here.
    ASSIGN_OR_RETURN(FileDetection d, DetectFile(path, o.kind, o.config));
    if (d.kind != FileKind::kResult) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plot: ", path, ": a ", FileKindName(d.kind),
          ", expected a result file"));
    }
    if (!d.mismatch.empty()) return absl::FailedPreconditionError(d.mismatch);
    if (previous.empty()) {
      config = d.config;
    } else if (d.config.name != config.name) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plot: ", path, " is a result of config ", d.config.name, ", ",
          o.results[0], " of config ", config.name));
    }
    ASSIGN_OR_RETURN(ResultFile r, ReadResultOf(path, config));
    // A corrupt file is not plotted (an incomplete one is: a run still
    // going or killed); `inspect verify` lists every problem.
    const std::vector<std::string> problems =
        ResultProblems(path, r, /*count_incomplete=*/false, nullptr,
                       /*count_nonfinite_record=*/false);
    if (!problems.empty()) {
      return absl::DataLossError(absl::StrCat(
          "plot: ", problems[0],
          problems.size() > 1
              ? absl::StrCat(" (and ", problems.size() - 1,
                             " more: inspect verify lists them)")
              : std::string()));
    }
    if (!previous.empty()) {
      if (!previous_complete) {
        return absl::InvalidArgumentError(absl::StrCat(
            "plot: ", previous, " is incomplete (no host status, so no c0 + "
            "steps for ", path, " to follow); only the last file may be "
            "incomplete"));
      }
      if (!r.complete) {
        WarningsOf(o)
            << "inspect: warning: plot: " << path
            << " is incomplete and names no c0; drawn as continuing "
            << previous << " at context " << previous_c0 + previous_steps
            << " (unchecked)" << std::endl;
      }
      if (r.complete && r.tail.host.first_context !=
                            previous_c0 + previous_steps) {
        return absl::InvalidArgumentError(absl::StrCat(
            "plot: ", path, " starts at context c0 ",
            r.tail.host.first_context, ", expected ",
            previous_c0 + previous_steps, " = c0 ", previous_c0, " + ",
            previous_steps, " steps of the previous file ", previous,
            " (give consecutive runs in order)"));
      }
    }
    // A run that completed with non-finite losses recorded it (train
    // exited 1): drawn, its non-finite steps as gaps, with a warning.
    if (r.complete && RecordsNonFiniteLosses(r.tail)) {
      WarningsOf(o)
          << "inspect: warning: plot: " << path << ": the run recorded \""
          << r.tail.errors.text << "\" ("
          << r.tail.errors.nonfinite_steps
          << (r.tail.errors.nonfinite_steps == 1 ? " step" : " steps")
          << " with a non-finite loss, the first step "
          << r.tail.errors.first_nonfinite_step
          << "); drawn with those steps as gaps in the per-step line (the "
             "smoothed line averages the finite steps)"
          << std::endl;
    }
    if (previous.empty() && r.complete) first_c0 = r.tail.host.first_context;
    previous = path;
    previous_complete = r.complete;
    if (r.complete) {
      previous_c0 = r.tail.host.first_context;
      previous_steps = r.tail.host.steps_done;
    }
    std::vector<double> m = StepMeanLosses(r);
    if (!means.empty() && !m.empty()) run_starts.push_back(means.size());
    means.insert(means.end(), m.begin(), m.end());
  }
  if (means.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plot: ", absl::StrJoin(o.results, ", "),
        ": no complete step window to plot"));
  }
  const std::vector<double> smoothed =
      SmoothedCurve(means, std::max(1, o.smoothing_steps));
  const std::string title = absl::StrCat(
      "Coppelius (", config.name, ") loss, ", o.results.size(), " run",
      o.results.size() == 1 ? "" : "s", ", ", means.size(), " steps");
  // Steps counted from the first run's c0: a step is labelled with the
  // context it trained on (c0 + s), as in the result's own numbering.
  const std::string x_label =
      first_c0.has_value()
          ? std::string("step (context trained on: c0 + s)")
          : std::string("step (from 0: the first file is incomplete and "
                        "names no c0)");
  const std::string svg = RenderLossSvg(means, smoothed, run_starts, title,
                                        first_c0.value_or(0), x_label);
  if (o.output == "-") {
    out << svg;
    out.flush();
    RETURN_IF_ERROR(StreamStatus(out, "plot: -o -"));
    return absl::OkStatus();
  }
  return WriteFileAtomically(o.output, svg);
}

absl::StatusOr<std::string> BuildSafetensors(
    const ModelConfig& config, const float* p_plane,
    const std::vector<std::pair<std::string, std::string>>& metadata) {
  const std::vector<TensorInfo> layout = ParameterLayout(config);
  const int64_t parameters = NumParameters(config);
  // Header JSON.
  std::string header = "{\"__metadata__\":{";
  for (size_t i = 0; i < metadata.size(); ++i) {
    if (i) header += ",";
    absl::StrAppend(&header, JsonQuote(metadata[i].first), ":",
                    JsonQuote(metadata[i].second));
  }
  header += "}";
  int64_t expected_begin = 0;
  for (const TensorInfo& t : layout) {
    const int64_t begin = 4 * t.offset, end = 4 * (t.offset + t.num_elements());
    // What safetensors' Metadata::validate checks: contiguous offsets and
    // sizes equal to prod(shape) * 4.
    if (begin != expected_begin || end < begin) {
      return absl::InternalError(absl::StrCat(
          "safetensors export: tensor ", t.name, " at bytes [", begin, ", ",
          end, "), expected to begin at ", expected_begin));
    }
    int64_t elements = 1;
    for (int64_t d : t.shape) elements *= d;
    if (elements * 4 != end - begin) {
      return absl::InternalError(absl::StrCat(
          "safetensors export: tensor ", t.name, " shape holds ", elements,
          " elements, its range ", (end - begin) / 4));
    }
    expected_begin = end;
    absl::StrAppend(&header, ",", JsonQuote(t.name),
                    ":{\"dtype\":\"F32\",\"shape\":[",
                    absl::StrJoin(t.shape, ","), "],\"data_offsets\":[",
                    begin, ",", end, "]}");
  }
  header += "}";
  if (expected_begin != 4 * parameters) {
    return absl::InternalError(absl::StrCat(
        "safetensors export: tensors cover ", expected_begin,
        " bytes, the P plane has ", 4 * parameters));
  }
  while (header.size() % 8 != 0) header += ' ';
  if (header.size() > 100000000) {
    return absl::InternalError("safetensors export: header over 100 MB");
  }
  std::string bytes;
  bytes.reserve(8 + header.size() + 4 * parameters);
  for (int i = 0; i < 8; ++i) {
    bytes += static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  }
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(p_plane), 4 * parameters);
  if (bytes.size() != 8 + header.size() + 4 * static_cast<size_t>(parameters)) {
    return absl::InternalError("safetensors export: length mismatch");
  }
  return bytes;
}

absl::Status RunExport(const ExportOptions& o, std::ostream& out) {
  if (o.checkpoint.empty() || o.output.empty()) {
    return UsageError(
        "export: expected --safetensors CHECKPOINT and -o OUTPUT");
  }
  RETURN_IF_ERROR(CheckThreads(o.threads));
  if (IsStream(o.checkpoint)) {
    return WithStreamsSpooled(
        {o.checkpoint}, false, out, WarningsOf(o),
        [&](const std::vector<std::string>& paths, std::ostream& bytes_out,
            std::ostream& warnings) {
          ExportOptions spooled = o;
          spooled.checkpoint = paths[0];
          spooled.warnings = &warnings;
          return RunExport(spooled, bytes_out);
        });
  }
  RETURN_IF_ERROR(CheckOutputPath(o.output, {o.checkpoint}));
  ASSIGN_OR_RETURN(FileDetection d,
                   DetectFile(o.checkpoint, o.kind, o.config));
  if (d.kind != FileKind::kCheckpoint) {
    return absl::InvalidArgumentError(absl::StrCat(
        "export: ", o.checkpoint, ": a ", FileKindName(d.kind),
        ", expected a checkpoint"));
  }
  const ModelConfig& config = d.config;
  ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(o.checkpoint));
  if (reader.IsFresh()) {
    return absl::FailedPreconditionError(absl::StrCat(
        o.checkpoint, ": 0 bytes (a fresh-start input): no parameters to "
                      "export"));
  }
  const uint64_t expected = 12 * static_cast<uint64_t>(NumParameters(config));
  if (reader.payload_bytes() != expected) {
    return absl::FailedPreconditionError(absl::StrCat(
        o.checkpoint, ": field payload_bytes is ", reader.payload_bytes(),
        ", config ", config.name, " expects ", expected, " (3 x 4 x ",
        NumParameters(config), ")"));
  }
  // The digests, then, with --config, what a run of that config refuses:
  // the order in which report and verify give them (break-it, session 24:
  // export checked only the payload size).
  RETURN_IF_ERROR(reader.VerifyPayload(o.threads));
  if (d.config_source == "--config") {
    RETURN_IF_ERROR(RunRefusal(reader, config));
  }
  // A state no healthy run writes (non-finite P or M, negative V): exported
  // as it is, the P plane being the file's, with the problems that make
  // verify fail it as warnings, as train warns before running from it.
  for (const std::string& problem :
       CheckpointStateProblems(o.checkpoint, reader, config)) {
    WarningsOf(o)
        << "inspect: warning: export: " << problem << "\n";
  }
  const CheckpointHeader& h = reader.header();
  const std::vector<std::pair<std::string, std::string>> metadata = {
      {"format", "pt"},
      {"state_identity", h.state_identity()},
      {"learner_identity", h.learner_identity()},
      {"data_identity", h.data_identity()},
      {"initialization_identity", h.initialization_identity()},
      {"model_identity", h.model_identity()},
      {"update_count", absl::StrCat(h.update_count())},
  };
  ASSIGN_OR_RETURN(
      std::string bytes,
      BuildSafetensors(config, static_cast<const float*>(reader.payload()),
                       metadata));
  if (o.output == "-") {
    out.write(bytes.data(), bytes.size());
    out.flush();
    RETURN_IF_ERROR(StreamStatus(out, "export: -o -"));
    return absl::OkStatus();
  }
  return WriteFileAtomically(o.output, bytes);
}

}  // namespace coppelius
