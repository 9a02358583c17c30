// File: inspect/inspect.h
//
// The `inspect` tool's library (SPEC §8): reports on token caches (SPEC §2),
// checkpoints (SPEC §6) and result files (SPEC §7); `verify` (an exit code
// scripts can trust), `plot` (SVG loss curve) and `export` (the P plane as
// safetensors). inspect/inspect_main.cc is a thin flag layer over the Run*
// functions below. Every Run* writes its report to `out`; `--json` output is
// one JSON object followed by a newline.
//
// Kind detection (FileKind::kAuto), for a model config (V, T, steps):
//   checkpoint  the first 8 bytes are "COPPCKPT", or the file is empty (a
//               0-byte fresh-start input);
//   result      the marker at 0; or a complete size with the host tag at
//               its offset; or a size below the complete size whose first
//               16 bytes are not a plausible cache header (mtime before
//               2100-01-01 and source size < 2^50);
//   cache       anything else.
// `--kind` overrides the detection.
//
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

// The result geometry of a config: {V, T, run_steps}.
ResultGeometry ResultGeometryOf(const ModelConfig& config);

// Detects the kind of `path` as described in the file comment.
absl::StatusOr<FileKind> DetectFileKind(const std::string& path,
                                        const ModelConfig& config);

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

// smoothed[s] = mean of per_step[max(0, s - window + 1) .. s] (a trailing
// moving average of `window` >= 1 steps).
std::vector<double> SmoothedCurve(const std::vector<double>& per_step,
                                  int window);

struct InspectOptions {
  std::string path;  // "-": stdin (spooled to a temporary file under $TMPDIR)
  FileKind kind = FileKind::kAuto;
  std::string config = "coppelius";  // ModelConfigByName
  std::string source;                // token cache: source text for staleness
  std::string vocab;                 // result: .tiktoken to decode predictions
  bool json = false;
  int smoothing_steps = 100;         // window of the smoothed curve
  int threads = 2;                   // digest threads
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
// A corrupt file is an error (the reader's status); an incomplete result
// file is reported, not an error.
absl::Status RunInspect(const InspectOptions& options, std::ostream& out);

struct VerifyOptions {
  std::vector<std::string> paths;
  FileKind kind = FileKind::kAuto;
  std::string config = "coppelius";
  std::string source;  // caches: also fail when stale against this source
  bool json = false;
  int threads = 2;
};

// Checks every file: a checkpoint opens, and every chunk digest matches (one
// failure line per bad chunk); a result file is complete, parses, and its
// forward record was written (marker gone); a cache has a valid size and
// every id < V (and is fresh against `source` when given). Writes "OK <path>
// (<kind>)" or one "FAIL <path>: <reason>" line per failure (or a JSON
// object). Returns OK only if every file passed, else DataLoss
// "verify: N of M files failed".
absl::Status RunVerify(const VerifyOptions& options, std::ostream& out);

struct PlotOptions {
  std::vector<std::string> results;  // consecutive runs, in order
  std::string output;                // SVG path; "-" writes to `out`
  std::string config = "coppelius";
  int smoothing_steps = 100;
};

// Writes an SVG (per-step mean loss and its smoothed curve against the step
// counted across the given files, labelled axes). Incomplete files
// contribute their complete steps. InvalidArgument if no file has a step.
absl::Status RunPlot(const PlotOptions& options, std::ostream& out);

// Renders the SVG text for per-step mean losses (pure; used by RunPlot).
// `run_starts` are the steps where a later run's file begins (dashed
// vertical lines; empty for one run).
std::string RenderLossSvg(const std::vector<double>& per_step,
                          const std::vector<double>& smoothed,
                          const std::vector<size_t>& run_starts,
                          absl::string_view title);

struct ExportOptions {
  std::string checkpoint;
  std::string output;  // safetensors path; "-" writes to `out`
  std::string config = "coppelius";
  int threads = 2;
};

// Exports the P plane of a verified checkpoint as safetensors: one F32
// tensor per ParameterLayout entry (the tied embedding once, as
// "embedding"), data in P-plane order, `__metadata__` = {"format": "pt",
// "state_identity", "learner_identity", "data_identity",
// "initialization_identity", "model_identity", "update_count"}, the header
// padded with spaces to a multiple of 8. Written atomically.
// Errors: FailedPrecondition for a fresh (0-byte) input or a parameter count
// other than the config's; the reader's DataLoss for a bad digest.
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
