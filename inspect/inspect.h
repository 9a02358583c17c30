// File: inspect/inspect.h
//
// The `inspect` tool's library (SPEC §8): reports on token caches (SPEC §2),
// checkpoints (SPEC §6) and result files (SPEC §7); `verify` (an exit code
// scripts can trust), `plot` (SVG loss curve) and `export` (the P plane as
// safetensors). inspect/inspect_main.cc is a thin flag layer over the Run*
// functions below. Every Run* writes its report to `out`; `--json` output is
// one JSON object followed by a newline. RunVerify, and RunPlot and
// RunExport to "-", fail when `out` does (common/file_io.h StreamStatus:
// with errno's reason when `out` is an FdOutputStream, as the binary's
// standard output is).
//
// Detection (DetectFile; every subcommand uses it). The kind, unless
// `--kind` forces one, in this order:
//   1. exact signatures: the checkpoint magic "COPPCKPT" at 0; the result
//      marker at 0; the result host tag "CPLSRES1" at the host status offset
//      of a known config (size >= that config's complete size, so a result
//      with trailing bytes is still a result);
//   2. the extension: ".ckpt" checkpoint, ".tok" cache, ".res" result;
//   3. an empty file: a (fresh-start) checkpoint;
//   4. near misses of a checkpoint: first 8 bytes one byte away from the
//      magic, or a preamble structure (version 1 and preamble_bytes 128 at
//      8 and 12, or payload_offset = round_up(128 + header_bytes, 4096) with
//      payload_offset + payload_bytes = size);
//   5. a result marker near miss: first 8 bytes one byte away from it;
//   6. a plausible cache: size 16 + 4 N, header mtime before 2100-01-01 and
//      source size < 2^50, the first ids (up to 1,020) < 2^24;
//   7. a result by size (incomplete, or complete with a damaged host tag):
//      not text, size from a known config's forward record to its complete
//      size, and its first bytes (up to 4,096, inside that forward record)
//      read as fp32 logits: each value 0, non-finite, or of magnitude
//      2^-64 .. 2^64 (random bytes and a safetensors file are not);
//   8. a result cut inside its forward record: not text, at least 4,096
//      bytes but shorter than a known config's forward record, and its
//      first 4,096 bytes read as logits as in 7 (a shorter file cannot
//      tell: --kind=result reads it as one);
//   otherwise DataLoss "not a token cache, checkpoint or result file".
// A kind from the extension (2) whose content, read by the other rules,
// is another kind is reported with the file's first failure
// (FileDetection::kind_note).
// The config, unless `--config` names one: a checkpoint's identity (or its
// payload size) matched against every known config; a result's size and
// host tag (or, incomplete, its size, unless the size could also be a
// longer config's forward record cut short and the first step window holds
// a negative value: cross-entropies never are, logits are); else
// "coppelius" (caches, fresh checkpoints, results too short to tell). An explicit `--config` the file
// contradicts is recorded in `mismatch`.
// Errors: InvalidArgument (bad options, unknown config or kind), NotFound
// (missing file) and the readers' DataLoss / FailedPrecondition, each naming
// the file and the offset or field. RunVerify returns DataLoss when any file
// fails, after writing one line per failure.
#ifndef COPPELIUS_INSPECT_INSPECT_H_
#define COPPELIUS_INSPECT_INSPECT_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/model_config.h"
#include "trainer/result_file.h"

namespace coppelius {

enum class FileKind { kAuto, kCache, kCheckpoint, kResult };

// "auto" (or ""), "cache", "checkpoint", "result"; InvalidArgument otherwise.
absl::StatusOr<FileKind> ParseFileKind(absl::string_view name);
const char* FileKindName(FileKind kind);

struct FileDetection {
  FileKind kind = FileKind::kAuto;
  ModelConfig config;
  // "--config", "checkpoint identity", "checkpoint payload size", "result
  // size and host tag", "result size" or "default: the file does not tell".
  std::string config_source;
  // Non-empty when an explicit config contradicts the file: one line naming
  // the file, the evidence and both configs.
  std::string mismatch;
  // Non-empty when the kind came from the file's extension (rule 2) and
  // its content, read without the extension, is another kind: "the kind
  // comes from the extension .res; the content reads as a token cache:
  // --kind=cache reads it as one". inspect and verify append it to the
  // file's first failure.
  std::string kind_note;
};

// Detects `path` as described in the file comment; `kind` kAuto detects the
// kind, `config_name` "" infers the config. Errors: NotFound, InvalidArgument
// (not a regular file, unknown config), DataLoss (nothing fits).
absl::StatusOr<FileDetection> DetectFile(const std::string& path,
                                         FileKind kind,
                                         absl::string_view config_name);
// DetectFile(path, kAuto, "").kind.
absl::StatusOr<FileKind> DetectFileKind(const std::string& path);

// Refuses (FailedPrecondition "USE: standard output is an existing
// Coppelius KIND file ...") to write to standard output when it is a
// non-empty regular file that DetectFile takes for a cache, checkpoint or
// result (`inspect run.res >> run.ckpt` would append the report to the
// checkpoint). `use` names the output ("the report", "-o -"). OK for
// anything else: a terminal, a pipe, an empty file, a log of reports.
absl::Status CheckStandardOutputIsNotCoppeliusFile(absl::string_view use);

// Statistics of n fp32 values: mean and population standard deviation
// (double accumulation) and min/max over the finite values; `nonfinite`
// counts NaN and ±Inf. All zero (min = max = 0) when no value is finite.
struct TensorStats {
  int64_t count = 0;
  int64_t nonfinite = 0;
  double mean = 0, std = 0;
  double min = 0, max = 0;
};
TensorStats ComputeTensorStats(const float* values, int64_t n);

// smoothed[s] = mean of the finite values among per_step[max(0, s - window
// + 1) .. s] (a trailing moving average of `window` >= 1 steps; NaN where
// the window holds no finite value).
std::vector<double> SmoothedCurve(const std::vector<double>& per_step,
                                  int window);

struct InspectOptions {
  std::string path;  // "-": stdin (spooled to a temporary file under $TMPDIR)
  FileKind kind = FileKind::kAuto;
  std::string config;                // ModelConfigByName; "" infers it
  std::string source;                // token cache: source text for staleness
  std::string vocab;                 // result: .tiktoken to decode predictions;
                                     // cache with `source`: ids decoded
                                     // against the source (as verify)
  bool json = false;
  int smoothing_steps = 100;         // window of the smoothed curve (>= 1)
  int threads = 2;                   // digest threads (1..kMaxThreadCount)
  std::ostream* warnings = nullptr;  // one-line warnings; null: std::cerr
};

// Reports on one file:
//   cache       header (source mtime, size), staleness vs `source`, token
//               count, contexts of T, id range (min, max, count >= V);
//   checkpoint  preamble, identities (and the refusal reasons against the
//               config's identity), update count, provenance, payload digests
//               verified, per-tensor statistics (SPEC §4 names) of the P, M
//               and V planes;
//   result      completeness, per-step mean loss, smoothed curve, first and
//               last window means, device/host time per step from the
//               timestamp table, error notifier, input stat, host status,
//               predictions (decoded with `vocab` when given).
// Caches are read with pread in bounded chunks (inspect/cache_reader.h), so
// one that shrinks while it is read is DataLoss naming the offset, not a
// crash. A file the readers refuse is an error (the reader's status). A file
// that opens but is corrupt or incomplete (a failed chunk digest; an
// incomplete result, its forward record never written, or the
// inconsistencies verify checks; a cache with ids >= V of the config or a
// header no source has, as verify checks) is reported in full, then DataLoss
// naming the first problem. A checkpoint that a run of the config named by
// `config` refuses (`train --config=NAME --checkpoint-in=FILE`'s check,
// CheckpointReader::CheckIdentity against RunCheckpointIdentity: the five
// identities, payload size, chunk size and run steps) is reported, then
// FailedPrecondition naming every differing field; with the config inferred,
// a refusal is only reported (the status is the checkpoint's integrity).
// With `source`, a cache stale against it (its header's mtime or size is
// not the source's now, or the source is missing) is reported, then
// FailedPrecondition naming the cache and the source (verify's failure
// line; DataLoss, naming the first problem, when the cache has others too).
// With `source` and `vocab`, a cache fresh by its header must also decode
// to exactly the source's bytes (tokencache/decode_check.h), else DataLoss
// after the report. `--source` for a non-cache or `--vocab` for anything
// but a result or a cache with `--source` writes a warning.
// InvalidArgument for threads outside 1..kMaxThreadCount (1,024) or
// smoothing_steps < 1.
absl::Status RunInspect(const InspectOptions& options, std::ostream& out);

struct VerifyOptions {
  std::vector<std::string> paths;  // "-" (once): stdin, spooled as RunInspect
  FileKind kind = FileKind::kAuto;
  std::string config;  // "" infers each file's config
  std::string source;  // caches: also fail when stale against this source
  // With `source`: a cache also fails unless its ids, decoded with this
  // vocabulary, are exactly the source's bytes (tokencache/decode_check.h).
  std::string vocab;
  bool json = false;
  int threads = 2;     // 1..kMaxThreadCount (common/threads.h)
  std::ostream* warnings = nullptr;  // null: std::cerr
};

// Checks every file: a checkpoint opens, is not a 0-byte fresh-start input,
// and every chunk digest matches (one failure line per bad chunk), and when
// `config` names a config, a run of that config accepts its identity (as
// RunInspect: what train refuses, verify fails). Without `config` a
// checkpoint's identity is not checked: verify then says the file is intact,
// not that a run would accept it (any known config's); a result file fits
// the config, is complete, parses, its forward record was written (marker
// gone), no step window holds a finite negative value (a cross-entropy
// never is), step 0's window agrees with the forward record
// (StepZeroAgreesWithForwardRecord), the error notifier's non-finite step
// count (and first step) equal those of the step windows' means, and the
// row T-1 prediction's valid flag equals "the final record is all finite";
// a cache has a valid size,
// every id < V, a header a source can have (make-cache's rule: source mtime
// not after tomorrow, at least one source byte per id) and is fresh against
// `source` when given (by its header's mtime and size; with `vocab` too,
// make-cache's rule, tokencache/decode_check.h: the vocabulary file not
// modified after the cache — not compared, and said so in the OK line,
// when the vocabulary or the cache comes from a pipe, which has no time —
// and its ids decoding to exactly the source's bytes: what a cache cut to
// 16 + 4k bytes or made with another vocabulary fails; the vocabulary and
// the source are read once, for all the caches, and a cache that failed
// an earlier check, stale, a header no source has, ids >= V, is not
// decoded, its first failure line saying so). Writes "OK <path>
// (<kind>)" ("OK <path> (cache; ids < V, the V of config NAME[: assumed,
// ...])" for a cache, which does not name its vocabulary) or one "FAIL
// <path>: <reason>" line per failure (or a JSON object, each file with its
// config and config_source). Returns OK only if every file passed, else DataLoss
// "verify: N of M files failed".
absl::Status RunVerify(const VerifyOptions& options, std::ostream& out);

struct PlotOptions {
  std::vector<std::string> results;  // consecutive runs, in order; "-"
                                     // (once): stdin, spooled
  std::string output;                // SVG path; "-" writes to `out`
  FileKind kind = FileKind::kAuto;   // kResult reads every file as a result
  std::string config;                // "" infers it from the files
  int smoothing_steps = 100;         // >= 1
  std::ostream* warnings = nullptr;  // nullptr: std::cerr
};

// Writes an SVG (per-step mean loss and its smoothed curve against the step
// counted across the given files from the first file's c0, labelled axes). Incomplete files
// contribute their complete steps. The runs must be consecutive: every file
// but the last must be complete, and each file's c0 (host status) must equal
// the previous file's c0 + steps done (an incomplete last file has no c0 to
// check). InvalidArgument if a file is not a result, no file has a step, the
// files' configs differ,
// the runs are not consecutive (naming both files and contexts; an
// incomplete last file after others is drawn as their continuation, with a
// one-line warning that this is unchecked) or
// smoothing_steps < 1; DataLoss, naming the first problem, if a file is
// corrupt as `verify` reads it (the marker left over the forward record,
// the error notifier or predictions contradicting the windows or final
// record: every problem but being incomplete).
absl::Status RunPlot(const PlotOptions& options, std::ostream& out);

// Renders the SVG text for per-step mean losses (pure; used by RunPlot).
// `run_starts` are the steps where a later run's file begins (dashed
// vertical lines; empty for one run). The x axis counts steps from
// `first_step` (RunPlot: the first file's c0, so a step is labelled with the
// context it trained on, c0 + s; 0 when that file is incomplete and has no
// c0), named in the axis label. Any values render: non-finite ones are
// left out of the curves, a flat series gets an axis around its value, and
// coordinates stay finite up to +-DBL_MAX.
std::string RenderLossSvg(const std::vector<double>& per_step,
                          const std::vector<double>& smoothed,
                          const std::vector<size_t>& run_starts,
                          absl::string_view title, uint64_t first_step = 0,
                          absl::string_view x_label = "step");

struct ExportOptions {
  std::string checkpoint;  // "-": stdin, spooled
  std::string output;  // safetensors path; "-" writes to `out`
  FileKind kind = FileKind::kAuto;  // kCheckpoint reads it as a checkpoint
  std::string config;  // "" infers it from the checkpoint's identity
  int threads = 2;     // 1..kMaxThreadCount (common/threads.h)
  std::ostream* warnings = nullptr;  // nullptr: std::cerr
};

// Exports the P plane of a verified checkpoint as safetensors: one F32
// tensor per ParameterLayout entry (the tied embedding once, as
// "embedding"), data in P-plane order, `__metadata__` = {"format": "pt",
// "state_identity", "learner_identity", "data_identity",
// "initialization_identity", "model_identity", "update_count"}, the header
// padded with spaces to a multiple of 8. Written atomically. With
// `config` named, a checkpoint that a run of that config refuses (its
// identities, run steps or chunk size; RunRefusal) is refused, as report
// and verify refuse it; without, the config is inferred and the identity
// not checked. A state no healthy run writes (non-finite P or M, negative
// V: PmvStateProblems, which make verify fail the file) is exported with
// one warning line per problem on `warnings`.
// Errors: InvalidArgument for a file detected as another kind;
// FailedPrecondition for a fresh (0-byte) input, a parameter count other
// than the config's or a checkpoint the named config's run refuses; the
// reader's DataLoss for a bad digest.
absl::Status RunExport(const ExportOptions& options, std::ostream& out);

// The safetensors bytes for `p_plane` (NumParameters(config) floats) laid
// out by ParameterLayout(config), with `metadata` (string pairs, in order)
// under "__metadata__". Validates the result as the safetensors reader does
// (contiguous offsets, sizes, exact length); Internal on a violation.
absl::StatusOr<std::string> BuildSafetensors(
    const ModelConfig& config, const float* p_plane,
    const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace coppelius

#endif  // COPPELIUS_INSPECT_INSPECT_H_
