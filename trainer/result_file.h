// File: trainer/result_file.h
//
// The result file (SPEC §7): what one `train` invocation leaves for
// `inspect`. The run loop writes it through ResultWriter; inspect reads it
// with ReadResult. No CUDA and no model config here: a file's geometry is
// three plain numbers (ResultGeometry: V vocabulary, T context, steps).
//
// Layout (all little-endian, offsets in bytes; docs/FORMATS.md "## Result
// file" documents every field of the fixed blocks byte by byte):
//
//   region            offset                     bytes
//   forward record    0                          12 V   (3 V fp32)
//   step windows      12 V                       4 T per step (T fp32)
//   input stat        12 V + 4 T steps           160
//   loss block        + 160                      16,384 (4 x 1,024 fp32)
//   final record      + 16,384                   4 V    (V fp32)
//   semaphore region  + 4 V                      96     (3 x 32)
//   error notifier    + 96                       64
//   host status       + 64                       160
//   timestamp table   + 160                      64 (steps + 2)
//
// For the Coppelius config (V 12,288, T 1,024, 10,000 steps) a complete
// file is 41,813,600 bytes; for `tiny` (V 512, T 64, 8 steps) 27,744.
//
// Lifecycle: Create() puts a new file holding the 8-byte marker be ba fe ca
// be ba fe ca at offset 0, where the forward record goes, under the path
// (renamed over any file there, which is not written); WriteForwardRecord() overwrites
// it; AppendStepWindow() writes each step's window at its offset as the
// step completes (no fsync); Finish() writes the tail (input stat .. end)
// and fsyncs. A run killed before Finish() leaves the forward record and the
// completed windows: ReadResult reports such a file as incomplete (not an
// error) with its number of complete step windows.
#ifndef COPPELIUS_TRAINER_RESULT_FILE_H_
#define COPPELIUS_TRAINER_RESULT_FILE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/model_config.h"

namespace coppelius {

// The three numbers every size and offset of a result file is a function of.
struct ResultGeometry {
  int64_t V = 0;      // vocabulary size, e.g. 12288
  int64_t T = 0;      // context in tokens, e.g. 1024 (a multiple of 4)
  int64_t steps = 0;  // steps per invocation, e.g. 10000
};

// The result geometry of a config: {V, T, run_steps}.
ResultGeometry ResultGeometryOf(const ModelConfig& config);

// Checks 1 <= V <= 2^24, 4 <= T <= 2^20 with T % 4 == 0, and
// 1 <= steps <= 2^30 (so every size below fits in 63 bits).
// Errors: InvalidArgument naming the field and its value.
absl::Status ValidateResultGeometry(const ResultGeometry& geometry);

// Submission kinds of the plan (semaphore region order, timestamp kinds).
enum class SubmissionKind : uint32_t { kForward = 0, kUpdate = 1, kFinal = 2 };
inline constexpr int kNumSubmissionKinds = 3;
// "forward", "update", "final"; "invalid" otherwise.
const char* SubmissionKindName(SubmissionKind kind);

// Fixed sizes (bytes).
inline constexpr int64_t kResultInputStatBytes = 160;
inline constexpr int64_t kResultLossBlockBytes = 16384;
inline constexpr int64_t kResultLossWindowFloats = 1024;
inline constexpr int64_t kResultSemaphoreBytes = 32;  // per kind
inline constexpr int64_t kResultErrorNotifierBytes = 64;
inline constexpr int64_t kResultHostStatusBytes = 160;
inline constexpr int64_t kResultTimestampBytes = 64;  // per submission
inline constexpr int64_t kResultMarkerBytes = 8;
// be ba fe ca be ba fe ca.
extern const unsigned char kResultMarker[8];
// The host status block's first 8 bytes.
inline constexpr char kResultHostTag[9] = "CPLSRES1";
// Capacities of the NUL-padded text fields (at most capacity - 1 bytes of
// printable ASCII, so the field always ends with a NUL).
inline constexpr int kResultBackendNameBytes = 16;
inline constexpr int kResultErrorTextBytes = 40;

// Byte offsets and sizes of every region, from a validated geometry.
struct ResultLayout {
  int64_t forward_offset = 0, forward_bytes = 0;   // 12 V
  int64_t windows_offset = 0, window_bytes = 0;    // 12 V; 4 T
  int64_t input_stat_offset = 0;                   // 12 V + 4 T steps
  int64_t loss_block_offset = 0;
  int64_t final_offset = 0, final_bytes = 0;       // 4 V
  int64_t semaphore_offset = 0;
  int64_t error_offset = 0;
  int64_t host_offset = 0;
  int64_t timestamp_offset = 0;
  int64_t num_timestamps = 0;                      // steps + 2
  int64_t complete_bytes = 0;                      // size of a complete file
};
// Precondition: ValidateResultGeometry(geometry).ok().
ResultLayout ComputeResultLayout(const ResultGeometry& geometry);

// Input stat (160 bytes): the checkpoint input as the run read it, plus
// three u32 submission counters (at byte 96, 100, 104 of the block).
struct ResultInputStat {
  uint64_t size_bytes = 0;    // st_size of the checkpoint input (0 = fresh)
  uint64_t mtime_ns = 0;      // st_mtim, ns since the Unix epoch
  uint64_t update_count = 0;  // its in-band update count c0 (0 when fresh)
  uint64_t inode = 0;         // st_ino
  std::array<uint8_t, 32> header_digest{};  // SHA-256 of its header; 0 fresh
  bool fresh = true;          // the input was a 0-byte file
  uint32_t submissions_completed = 0;  // byte 96
  uint32_t submissions_issued = 0;     // byte 100 (steps + 2 when complete)
  uint32_t update_last_release = 0;    // byte 104: update semaphore value
};

// Loss block: four windows of 1,024 fp32. A window whose source has fewer
// than 1,024 values (T < 1,024 for the row losses) is padded with +0.0;
// only the first 1,024 values of a longer source are kept. Read back, each
// vector holds exactly 1,024 values.
struct ResultLossBlock {
  std::vector<float> last_row_losses;              // last step, T rows
  std::vector<float> embedding_gradient_head;      // first 1,024 of dL/dE
  std::vector<float> embedding_parameter_head;     // after the final update
  std::vector<float> embedding_first_moment_head;  // AdamW m of the same
};

// One semaphore record (32 bytes) per submission kind.
struct ResultSemaphore {
  uint32_t completion_value = 0;  // last release value of its last issue
  uint32_t fence_value = 0;       // the value the host waited for
  uint64_t device_start_ns = 0;   // device timestamp at its start (0: none)
  uint64_t device_end_ns = 0;     // device timestamp at its end (0: none)
  uint32_t issues = 0;            // times issued: 1, steps, 1
};

// Error notifier (64 bytes): device-side error state.
struct ResultErrors {
  int64_t first_nonfinite_step = -1;  // -1: no step had a non-finite loss
  uint64_t nonfinite_steps = 0;       // steps with a non-finite loss
  bool invalid_token_seen = false;    // an id >= V was met
  int32_t cuda_error = 0;             // cudaError_t of the first error, 0 none
  std::string text;                   // <= 39 printable ASCII bytes
};

// One next-token prediction (rows T/4-1, T/2-1, T-1 of the final record's
// forward): the argmax token id; valid = that row's logits were all finite.
struct ResultPrediction {
  uint32_t token = 0;
  bool valid = false;
};

// Host status (160 bytes).
struct ResultHostStatus {
  std::string backend;          // "reference" or "cuda" (<= 15 bytes)
  uint64_t first_context = 0;   // c0
  uint64_t steps_done = 0;      // == geometry.steps in a complete file
  uint64_t update_count = 0;    // after the run: c0 + steps_done
  uint32_t publications = 0;    // checkpoints published by the run
  uint64_t start_unix_ns = 0;   // wall clock at start (ns since the epoch)
  uint64_t end_unix_ns = 0;     // wall clock at Finish
  uint64_t forward_wall_ns = 0; // host time in the forward record
  uint64_t steps_wall_ns = 0;   // host time from first enqueue to last poll
  uint64_t publish_wall_ns = 0; // host time spent publishing checkpoints
  uint64_t peak_device_memory_bytes = 0;  // 0 for the reference backend
  std::array<ResultPrediction, 3> predictions{};
};

// One timestamp-table entry (64 bytes) per submission issued, in issue
// order: entry 0 the forward (context c0, step -1), entries 1..steps the
// updates (step s on context c0 + s), the last the final (context
// c0 + steps - 1, step -1). Host times are CLOCK_MONOTONIC ns; device times
// are the device's ns clock (0 where the backend has none).
struct ResultTimestamp {
  SubmissionKind kind = SubmissionKind::kForward;
  uint64_t context = 0;
  int64_t step = -1;
  uint64_t host_issue_ns = 0;
  uint64_t host_complete_ns = 0;
  uint64_t device_start_ns = 0;
  uint64_t device_end_ns = 0;
  uint32_t release_value = 0;  // the semaphore value this issue released
};

// Everything Finish() writes after the step windows.
struct ResultTail {
  ResultInputStat input;
  ResultLossBlock loss;
  std::vector<float> final_logits;  // V fp32: row T-1 of the final forward
  std::array<ResultSemaphore, kNumSubmissionKinds> semaphores{};
  ResultErrors errors;
  ResultHostStatus host;
  std::vector<ResultTimestamp> timestamps;  // steps + 2 entries
};

// Checks the tail's invariants for `geometry` (the same checks ReadResult
// applies to a file; docs/FORMATS.md "## Result file" lists them per
// block): vector sizes (loss windows <= 1,024, final record V, steps + 2
// timestamps); a fresh input has size 0, update count 0 and a zero digest;
// issued == steps + 2, completed <= issued, update_last_release == the
// update semaphore's completion value; semaphore issue counts 1, steps, 1;
// first non-finite step -1 iff the count is 0; steps_done == steps,
// first_context == the input's update count, update_count == first_context
// + steps, publications <= steps; peak device memory 0 for backend
// "reference"; prediction tokens < V where valid; text
// fields printable and short enough; timestamp order, kinds, steps and
// contexts as documented on ResultTimestamp; end >= start wherever both
// are set.
// Errors: InvalidArgument naming the field, what was expected and found.
absl::Status ValidateResultTail(const ResultGeometry& geometry,
                                const ResultTail& tail);

// Writes a result file (see the file comment for the call order).
class ResultWriter {
 public:
  // Creates a new file holding the marker at offset 0 and renames it to
  // `path` (a temporary NewTemporaryPath(path) in its directory; the
  // directory is fsynced): a file already at `path` is replaced, never
  // written, so its other names (hard links) keep their bytes. The new file
  // stays locked (flock(2), exclusive) while the writer lives, and an old
  // one is locked before it is replaced: the same file under another name
  // cannot be written by two runs at once. On a file system without flock
  // (common/file_lock.h FlockUnsupported) both go unlocked, as train's lock
  // files do there. Errors: InvalidArgument
  // (geometry); FailedPrecondition if another process holds the old file's
  // lock (nothing is changed then); NotFound / Internal / ... from open(2),
  // write(2) and rename(2), naming the path.
  static absl::StatusOr<std::unique_ptr<ResultWriter>> Create(
      const std::string& path, const ResultGeometry& geometry);

  ~ResultWriter();
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;

  // Writes the forward record: `logits` is 3 V fp32, rows T/4-1, T/2-1,
  // T-1 in that order. Errors: FailedPrecondition after Finish or a failed
  // write; I/O errors naming path and offset.
  absl::Status WriteForwardRecord(const float* logits);

  // Writes step `step`'s T per-row cross-entropies at offset
  // 12 V + 4 T step. Steps must come in order 0, 1, ..., steps - 1
  // (FailedPrecondition otherwise, naming the expected step).
  absl::Status AppendStepWindow(int64_t step, const float* row_losses);

  // Writes the tail after ValidateResultTail, then fsyncs and closes.
  // Requires the forward record and all `steps` windows (FailedPrecondition
  // otherwise); InvalidArgument for a tail that fails validation.
  absl::Status Finish(const ResultTail& tail);

  const std::string& path() const { return path_; }
  int64_t steps_written() const { return steps_written_; }

 private:
  ResultWriter(std::string path, const ResultGeometry& geometry, int fd);
  absl::Status Pwrite(const void* data, size_t size, int64_t offset,
                      absl::string_view what);

  std::string path_;
  ResultGeometry geometry_;
  ResultLayout layout_;
  int fd_ = -1;
  bool forward_written_ = false;
  bool failed_ = false;
  int64_t steps_written_ = 0;
};

// A parsed result file.
struct ResultFile {
  ResultGeometry geometry;
  uint64_t file_size = 0;
  // True when the file has every region (size == complete_bytes).
  bool complete = false;
  // Step windows wholly present (== steps when complete).
  int64_t complete_steps = 0;
  // The forward record is wholly present (size >= 12 V).
  bool forward_present = false;
  // The marker is still at offset 0: the forward record was never written.
  bool marker_left = false;
  std::vector<float> forward_logits;  // 3 V when forward_present, else empty
  std::vector<float> step_losses;     // complete_steps * T, step-major
  ResultTail tail;                    // meaningful only when complete
};

// Parses `bytes` (the whole file; `name` only labels errors). A file shorter
// than complete_bytes is incomplete, not an error. Errors: InvalidArgument
// (geometry); DataLoss for a size above complete_bytes or a tail field that
// fails validation, naming `name`, the byte offset, the field and the
// expectation.
absl::StatusOr<ResultFile> ParseResult(absl::string_view bytes,
                                       const ResultGeometry& geometry,
                                       absl::string_view name);

// Reads and parses `path` ("-" for stdin). Errors as ParseResult plus
// NotFound / I/O errors naming the path.
absl::StatusOr<ResultFile> ReadResult(const std::string& path,
                                      const ResultGeometry& geometry);

// How a file of `size` bytes is recognised as a result of `geometry` once
// its marker is gone (the marker at offset 0 is each caller's own first
// check): `head` holds its first bytes, `host_tag` the 8 bytes at the host
// status offset (empty when not read).
//   kHostTag: size >= the complete size and the host tag at its offset (a
//     complete file, or one with bytes appended);
//   kForwardRecord: a size from the forward record's (12 V) to the complete
//     size, the first bytes reading as logits (LooksLikeForwardRecord): a
//     run killed after its forward record, cut anywhere, or a complete file
//     whose host tag is damaged.
// The one rule inspect's kind detection and tokenize's refusal to replace
// results share.
enum class ResultSignature { kNone, kHostTag, kForwardRecord };
ResultSignature ResultSignatureOf(uint64_t size, absl::string_view head,
                                  absl::string_view host_tag,
                                  const ResultGeometry& geometry);

// What the regular file at `path` shows of a result file whose marker is
// gone, for any of the configs `train` runs (ModelConfigNames), as a phrase
// for messages: "config NAME, host tag at byte N" (kHostTag) or "config
// NAME, incomplete: a killed run's" (kForwardRecord, and where the first
// step window is present its values read as losses, none finite and below
// 0, and agree with the forward record, StepZeroAgreesWithForwardRecord:
// an exported fp32 array of such a size does not pass); "" when
// it shows neither, is not a regular file or cannot be read. The test tokenize's
// refusal to replace results (tokenizer/output_checks.h
// CheckNotAResultFile) and train's --overwrite (trainer/run.h) share.
std::string ResultFileEvidence(const std::string& path);

// Whether the first bytes of `head` (at most `forward_bytes`, the forward
// record's 12 V) read as fp32 logits: every value is 0, non-finite (a run
// that diverged) or of magnitude 2^-64 .. 2^64 (biased exponent 63 .. 190),
// and at least one is non-finite or of magnitude 2^-8 or more (a model's
// logits at any point of training: at the SPEC's initialization they have
// a standard deviation of about 0.45). Random bytes pass this with
// probability about 2^-1000 over 1,024 values; u32 token ids (denormals),
// English text (a lower-case letter in a float's top byte reads as 2^67
// or more) and text of numbers (digits, spaces and newlines in every byte:
// at most 2^-11) fail it, and so does a length-prefixed header (such as a
// safetensors file: a small u64 whose low word is a denormal).
// ResultSignatureOf's test of a forward record.
bool LooksLikeForwardRecord(absl::string_view head, uint64_t forward_bytes);

// Whether `window` (fp32 values, little-endian; a trailing partial value is
// ignored) reads as per-row losses: no finite value below 0 (NaN and
// infinities are a diverged run's; zeros a preallocated window's). What
// tells a result's step window from another fp32 array (ResultFileEvidence,
// inspect's kind detection).
// When it returns false and `first_negative` is not null, the index of
// the first finite negative value (in values, not bytes) is stored there.
bool ReadsAsLosses(absl::string_view window,
                   int64_t* first_negative = nullptr);

// Whether step 0's window agrees with the forward record, both fp32
// little-endian as a result file holds them: the forward record's logits
// `[3][V]` are rows T/4 - 1, T/2 - 1, T - 1 of a forward of the input
// parameters on context c0, the same forward as step 0's (SPEC §7), so the
// window's cross-entropy at each of those rows, logsumexp(l) - l[target]
// for some target, lies in [logsumexp(l) - max(l), logsumexp(l) - min(l)]
// (computed in double; tolerance 0.01 + 1e-3 x (|logsumexp| + |min|) for
// the backends' own arithmetic). Rows not in `first_window` (a file cut
// short), non-finite (a diverged run) or exactly +0 (a window not yet
// written: zeros after a crash) are not checked; true when none is
// checked. An fp32 array of a result's size passes this by chance with
// odds of about 1e-4 per row for |N(0, 1)| values over V = 512.
// `forward_record` must hold 12 V bytes.
// When it returns false and `disagreement` is not null, the first row that
// disagrees is stored there: its row, loss, and the bounds its forward row
// allows (tolerance included).
struct StepZeroDisagreement {
  int64_t row = -1;
  float loss = 0.0f;
  double low = 0.0, high = 0.0;
};
bool StepZeroAgreesWithForwardRecord(
    absl::string_view forward_record, absl::string_view first_window,
    const ResultGeometry& geometry,
    StepZeroDisagreement* disagreement = nullptr);

// Whether the file at `path`, of `size` bytes (at least the forward
// record's 12 V: false below), reads as a run's start: its first step
// window, as far as the file goes, reads as losses (ReadsAsLosses) and
// agrees with its forward record (StepZeroAgreesWithForwardRecord). The
// one test of a result recognised by its forward record that
// ResultFileEvidence and inspect's kind and config detection share.
// Errors: NotFound / I/O errors naming the path.
absl::StatusOr<bool> FirstWindowReadsAsStepZero(const std::string& path,
                                                uint64_t size,
                                                const ResultGeometry& geometry);

// Step s's mean loss over its T rows (a file's per-step curve).
std::vector<double> StepMeanLosses(const ResultFile& result);

// A loss as text for people: `digits` decimals ("5.2803"), or `digits`
// significant digits where decimals would print dozens of digits (a
// diverged run's "3e+38", from 1e6 on) or the value is not finite ("nan").
// train's progress line (4) and inspect's result report (6).
std::string LossText(double loss, int digits);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_RESULT_FILE_H_
