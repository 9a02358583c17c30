#include "trainer/result_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"
#include "common/file_lock.h"
#include "common/status_macros.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "result_file.cc stores fp32 arrays with memcpy: little-endian hosts only"
#endif

namespace coppelius {

const unsigned char kResultMarker[8] = {0xbe, 0xba, 0xfe, 0xca,
                                        0xbe, 0xba, 0xfe, 0xca};

namespace {

// Field offsets inside the fixed blocks (docs/FORMATS.md "## Result file").
namespace stat_off {
constexpr int64_t kSize = 0, kMtime = 8, kUpdateCount = 16, kInode = 24,
                  kDigest = 32, kFresh = 64, kReserved1 = 68, kCompleted = 96,
                  kIssued = 100, kUpdateRelease = 104, kReserved2 = 108;
}  // namespace stat_off
namespace sem_off {
constexpr int64_t kCompletion = 0, kFence = 4, kStart = 8, kEnd = 16,
                  kIssues = 24, kReserved = 28;
}  // namespace sem_off
namespace err_off {
constexpr int64_t kFirst = 0, kCount = 8, kInvalidToken = 16, kCuda = 20,
                  kText = 24;
}  // namespace err_off
namespace host_off {
constexpr int64_t kTag = 0, kBackend = 8, kV = 24, kT = 28, kSteps = 32,
                  kFirstContext = 40, kStepsDone = 48, kUpdateCount = 56,
                  kPublications = 64, kReserved1 = 68, kStartUnix = 72,
                  kEndUnix = 80, kForwardWall = 88, kStepsWall = 96,
                  kPublishWall = 104, kPeakMemory = 112, kPredictions = 120,
                  kReserved2 = 144;
}  // namespace host_off
namespace ts_off {
constexpr int64_t kKind = 0, kRelease = 4, kContext = 8, kStep = 16,
                  kHostIssue = 24, kHostComplete = 32, kDeviceStart = 40,
                  kDeviceEnd = 48, kReserved = 56;
}  // namespace ts_off

// ---- little-endian encoding into a byte buffer ----
void PutU32(std::string& b, int64_t at, uint32_t v) {
  absl::little_endian::Store32(&b[at], v);
}
void PutU64(std::string& b, int64_t at, uint64_t v) {
  absl::little_endian::Store64(&b[at], v);
}
void PutFloats(std::string& b, int64_t at, const float* v, size_t n) {
  if (n > 0) std::memcpy(&b[at], v, n * sizeof(float));
}
void PutText(std::string& b, int64_t at, absl::string_view text) {
  std::memcpy(&b[at], text.data(), text.size());  // rest stays NUL
}

uint32_t GetU32(absl::string_view b, int64_t at) {
  return absl::little_endian::Load32(b.data() + at);
}
uint64_t GetU64(absl::string_view b, int64_t at) {
  return absl::little_endian::Load64(b.data() + at);
}
std::vector<float> GetFloats(absl::string_view b, int64_t at, int64_t n) {
  std::vector<float> v(n);
  if (n > 0) std::memcpy(v.data(), b.data() + at, n * sizeof(float));
  return v;
}

// Reports failures of tail checks. With a layout (the reader) messages name
// the file and the absolute byte offset; without (the writer) just the field.
class Checker {
 public:
  Checker(const ResultLayout* layout, absl::string_view name)
      : layout_(layout), name_(name) {}

  absl::Status Fail(int64_t offset, absl::string_view field,
                    absl::string_view expectation) const {
    if (layout_ == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("result tail field ", field, ": ", expectation));
    }
    return absl::DataLossError(absl::StrCat(name_, ": offset ", offset, " (",
                                            field, "): ", expectation));
  }
  int64_t Off(int64_t region, int64_t field) const {
    return layout_ == nullptr ? 0 : region + field;
  }

 private:
  const ResultLayout* layout_;
  std::string name_;
};

// A recorded interval: `end` (at end_offset, field `<field>.<end_name>`)
// not before `start`; 0 in either means not recorded, nothing to check.
absl::Status CheckInterval(const Checker& c, int64_t end_offset,
                           absl::string_view field, absl::string_view start_name,
                           absl::string_view end_name, uint64_t start,
                           uint64_t end) {
  if (start == 0 || end == 0 || end >= start) return absl::OkStatus();
  return c.Fail(end_offset, absl::StrCat(field, ".", end_name),
                absl::StrCat("expected >= ", start_name, " ", start,
                             ", found ", end));
}

absl::Status CheckText(const Checker& c, int64_t offset,
                       absl::string_view field, const std::string& text,
                       int capacity) {
  if (static_cast<int>(text.size()) > capacity - 1) {
    return c.Fail(offset, field,
                  absl::StrCat("expected at most ", capacity - 1,
                               " bytes, found ", text.size()));
  }
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char ch = text[i];
    if (ch < 0x20 || ch > 0x7e) {
      return c.Fail(offset + static_cast<int64_t>(i), field,
                    absl::StrFormat("expected printable ASCII, found byte "
                                    "0x%02x at index %d",
                                    ch, i));
    }
  }
  return absl::OkStatus();
}

// The shared validation of ValidateResultTail and ParseResult.
absl::Status CheckTail(const ResultGeometry& g, const ResultLayout& layout,
                       const ResultTail& t, const Checker& c) {
  const int64_t steps = g.steps;
  // Sizes (writer side; the parser always produces the right sizes).
  const std::vector<float>* loss_windows[4] = {
      &t.loss.last_row_losses, &t.loss.embedding_gradient_head,
      &t.loss.embedding_parameter_head, &t.loss.embedding_first_moment_head};
  const char* loss_names[4] = {
      "loss block.last_row_losses", "loss block.embedding_gradient_head",
      "loss block.embedding_parameter_head",
      "loss block.embedding_first_moment_head"};
  for (int w = 0; w < 4; ++w) {
    if (static_cast<int64_t>(loss_windows[w]->size()) >
        kResultLossWindowFloats) {
      return c.Fail(c.Off(layout.loss_block_offset, 4096 * w), loss_names[w],
                    absl::StrCat("expected at most 1024 values, found ",
                                 loss_windows[w]->size()));
    }
  }
  if (static_cast<int64_t>(t.final_logits.size()) != g.V) {
    return c.Fail(c.Off(layout.final_offset, 0), "final record",
                  absl::StrCat("expected V = ", g.V, " logits, found ",
                               t.final_logits.size()));
  }
  if (static_cast<int64_t>(t.timestamps.size()) != steps + 2) {
    return c.Fail(c.Off(layout.timestamp_offset, 0), "timestamp table",
                  absl::StrCat("expected steps + 2 = ", steps + 2,
                               " entries, found ", t.timestamps.size()));
  }

  // Input stat.
  const int64_t is = layout.input_stat_offset;
  if (t.input.fresh) {
    bool zero_digest = true;
    for (uint8_t b : t.input.header_digest) zero_digest &= b == 0;
    if (t.input.size_bytes != 0) {
      return c.Fail(c.Off(is, stat_off::kSize), "input stat.size",
                    absl::StrCat("expected 0 for a fresh input, found ",
                                 t.input.size_bytes));
    }
    if (t.input.update_count != 0) {
      return c.Fail(c.Off(is, stat_off::kUpdateCount),
                    "input stat.update_count",
                    absl::StrCat("expected 0 for a fresh input, found ",
                                 t.input.update_count));
    }
    if (!zero_digest) {
      return c.Fail(c.Off(is, stat_off::kDigest), "input stat.header_digest",
                    "expected all zero for a fresh input");
    }
  } else if (t.input.size_bytes == 0) {
    return c.Fail(c.Off(is, stat_off::kSize), "input stat.size",
                  "expected > 0 for a continuation input, found 0");
  }
  if (t.input.submissions_issued != static_cast<uint64_t>(steps + 2)) {
    return c.Fail(c.Off(is, stat_off::kIssued),
                  "input stat.submissions_issued",
                  absl::StrCat("expected steps + 2 = ", steps + 2, ", found ",
                               t.input.submissions_issued));
  }
  if (t.input.submissions_completed > t.input.submissions_issued) {
    return c.Fail(c.Off(is, stat_off::kCompleted),
                  "input stat.submissions_completed",
                  absl::StrCat("expected <= submissions issued (",
                               t.input.submissions_issued, "), found ",
                               t.input.submissions_completed));
  }
  const ResultSemaphore& update_sem =
      t.semaphores[static_cast<int>(SubmissionKind::kUpdate)];
  if (t.input.update_last_release != update_sem.completion_value) {
    return c.Fail(c.Off(is, stat_off::kUpdateRelease),
                  "input stat.update_last_release",
                  absl::StrCat("expected the update semaphore's completion "
                               "value ",
                               update_sem.completion_value, ", found ",
                               t.input.update_last_release));
  }

  // Semaphore region.
  const uint64_t expected_issues[3] = {1, static_cast<uint64_t>(steps), 1};
  for (int k = 0; k < kNumSubmissionKinds; ++k) {
    const ResultSemaphore& s = t.semaphores[k];
    const int64_t base = layout.semaphore_offset + kResultSemaphoreBytes * k;
    const std::string field =
        absl::StrCat("semaphore[", SubmissionKindName(SubmissionKind(k)), "]");
    if (s.issues != expected_issues[k]) {
      return c.Fail(c.Off(base, sem_off::kIssues),
                    absl::StrCat(field, ".issues"),
                    absl::StrCat("expected ", expected_issues[k], ", found ",
                                 s.issues));
    }
    // The n-th issue of a kind releases n: its last issue released `issues`.
    if (s.completion_value != s.issues) {
      return c.Fail(c.Off(base, sem_off::kCompletion),
                    absl::StrCat(field, ".completion_value"),
                    absl::StrCat("expected the release value of its last "
                                 "issue, ",
                                 s.issues, ", found ", s.completion_value));
    }
    RETURN_IF_ERROR(CheckInterval(c, c.Off(base, sem_off::kEnd), field,
                                  "device_start_ns", "device_end_ns",
                                  s.device_start_ns, s.device_end_ns));
  }

  // Error notifier.
  const int64_t eo = layout.error_offset;
  const ResultErrors& e = t.errors;
  if ((e.first_nonfinite_step < 0) != (e.nonfinite_steps == 0) ||
      e.first_nonfinite_step < -1 || e.first_nonfinite_step >= steps) {
    return c.Fail(c.Off(eo, err_off::kFirst),
                  "error notifier.first_nonfinite_step",
                  absl::StrCat("expected -1 with a count of 0, or a step in "
                               "[0, ",
                               steps, ") with a count > 0; found step ",
                               e.first_nonfinite_step, ", count ",
                               e.nonfinite_steps));
  }
  if (e.nonfinite_steps > static_cast<uint64_t>(steps)) {
    return c.Fail(c.Off(eo, err_off::kCount), "error notifier.nonfinite_steps",
                  absl::StrCat("expected <= steps ", steps, ", found ",
                               e.nonfinite_steps));
  }
  RETURN_IF_ERROR(CheckText(c, c.Off(eo, err_off::kText),
                            "error notifier.text", e.text,
                            kResultErrorTextBytes));

  // Host status.
  const int64_t ho = layout.host_offset;
  const ResultHostStatus& h = t.host;
  RETURN_IF_ERROR(CheckText(c, c.Off(ho, host_off::kBackend),
                            "host status.backend", h.backend,
                            kResultBackendNameBytes));
  if (h.backend.empty()) {
    return c.Fail(c.Off(ho, host_off::kBackend), "host status.backend",
                  "expected a backend name, found none");
  }
  if (h.steps_done != static_cast<uint64_t>(steps)) {
    return c.Fail(c.Off(ho, host_off::kStepsDone), "host status.steps_done",
                  absl::StrCat("expected steps = ", steps, ", found ",
                               h.steps_done));
  }
  if (h.first_context != t.input.update_count) {
    return c.Fail(c.Off(ho, host_off::kFirstContext),
                  "host status.first_context",
                  absl::StrCat("expected the input update count ",
                               t.input.update_count, ", found ",
                               h.first_context));
  }
  if (h.update_count != h.first_context + h.steps_done) {
    return c.Fail(c.Off(ho, host_off::kUpdateCount),
                  "host status.update_count",
                  absl::StrCat("expected first_context + steps_done = ",
                               h.first_context + h.steps_done, ", found ",
                               h.update_count));
  }
  if (h.publications > static_cast<uint64_t>(steps)) {
    return c.Fail(c.Off(ho, host_off::kPublications),
                  "host status.publications",
                  absl::StrCat("expected <= steps ", steps, ", found ",
                               h.publications));
  }
  if (h.start_unix_ns != 0 && h.end_unix_ns != 0 &&
      h.end_unix_ns < h.start_unix_ns) {
    return c.Fail(c.Off(ho, host_off::kEndUnix), "host status.end_unix_ns",
                  absl::StrCat("expected >= start_unix_ns ", h.start_unix_ns,
                               ", found ", h.end_unix_ns));
  }
  // The reference backend has no device memory (docs/FORMATS.md).
  if (h.backend == "reference" && h.peak_device_memory_bytes != 0) {
    return c.Fail(c.Off(ho, host_off::kPeakMemory),
                  "host status.peak_device_memory_bytes",
                  absl::StrCat("expected 0 for backend reference, found ",
                               h.peak_device_memory_bytes));
  }
  for (int r = 0; r < 3; ++r) {
    const ResultPrediction& p = h.predictions[r];
    if (p.valid && p.token >= static_cast<uint64_t>(g.V)) {
      return c.Fail(c.Off(ho, host_off::kPredictions + 8 * r),
                    absl::StrCat("host status.predictions[", r, "].token"),
                    absl::StrCat("expected a token id < V = ", g.V,
                                 ", found ", p.token));
    }
  }

  // Timestamp table.
  for (int64_t i = 0; i < steps + 2; ++i) {
    const ResultTimestamp& ts = t.timestamps[i];
    const int64_t base = layout.timestamp_offset + kResultTimestampBytes * i;
    const std::string field = absl::StrCat("timestamp[", i, "]");
    SubmissionKind kind;
    uint64_t context;
    int64_t step;
    if (i == 0) {
      kind = SubmissionKind::kForward, context = h.first_context, step = -1;
    } else if (i <= steps) {
      kind = SubmissionKind::kUpdate, context = h.first_context + i - 1;
      step = i - 1;
    } else {
      kind = SubmissionKind::kFinal;
      context = h.first_context + steps - 1, step = -1;
    }
    if (ts.kind != kind) {
      return c.Fail(c.Off(base, ts_off::kKind), absl::StrCat(field, ".kind"),
                    absl::StrCat("expected ", static_cast<uint32_t>(kind),
                                 " (", SubmissionKindName(kind), "), found ",
                                 static_cast<uint32_t>(ts.kind)));
    }
    if (ts.context != context) {
      return c.Fail(c.Off(base, ts_off::kContext),
                    absl::StrCat(field, ".context"),
                    absl::StrCat("expected ", context, ", found ",
                                 ts.context));
    }
    if (ts.step != step) {
      return c.Fail(c.Off(base, ts_off::kStep), absl::StrCat(field, ".step"),
                    absl::StrCat("expected ", step, ", found ", ts.step));
    }
    // The n-th issue of its kind: 1 for forward and final, s + 1 for step s.
    const uint64_t release = kind == SubmissionKind::kUpdate ? step + 1 : 1;
    if (ts.release_value != release) {
      return c.Fail(c.Off(base, ts_off::kRelease),
                    absl::StrCat(field, ".release_value"),
                    absl::StrCat("expected ", release, " (issue ", release,
                                 " of its kind), found ", ts.release_value));
    }
    RETURN_IF_ERROR(CheckInterval(c, c.Off(base, ts_off::kHostComplete),
                                  field, "host_issue_ns", "host_complete_ns",
                                  ts.host_issue_ns, ts.host_complete_ns));
    RETURN_IF_ERROR(CheckInterval(c, c.Off(base, ts_off::kDeviceEnd), field,
                                  "device_start_ns", "device_end_ns",
                                  ts.device_start_ns, ts.device_end_ns));
  }
  return absl::OkStatus();
}

// Encodes the tail (input stat .. end of the timestamp table).
std::string EncodeTail(const ResultGeometry& g, const ResultLayout& layout,
                       const ResultTail& t) {
  std::string b(layout.complete_bytes - layout.input_stat_offset, '\0');
  auto at = [&](int64_t absolute) { return absolute - layout.input_stat_offset; };

  const int64_t is = at(layout.input_stat_offset);
  PutU64(b, is + stat_off::kSize, t.input.size_bytes);
  PutU64(b, is + stat_off::kMtime, t.input.mtime_ns);
  PutU64(b, is + stat_off::kUpdateCount, t.input.update_count);
  PutU64(b, is + stat_off::kInode, t.input.inode);
  std::memcpy(&b[is + stat_off::kDigest], t.input.header_digest.data(), 32);
  PutU32(b, is + stat_off::kFresh, t.input.fresh ? 1 : 0);
  PutU32(b, is + stat_off::kCompleted, t.input.submissions_completed);
  PutU32(b, is + stat_off::kIssued, t.input.submissions_issued);
  PutU32(b, is + stat_off::kUpdateRelease, t.input.update_last_release);

  const int64_t lb = at(layout.loss_block_offset);
  const std::vector<float>* windows[4] = {
      &t.loss.last_row_losses, &t.loss.embedding_gradient_head,
      &t.loss.embedding_parameter_head, &t.loss.embedding_first_moment_head};
  for (int w = 0; w < 4; ++w) {
    PutFloats(b, lb + 4096 * w, windows[w]->data(), windows[w]->size());
  }

  PutFloats(b, at(layout.final_offset), t.final_logits.data(), g.V);

  for (int k = 0; k < kNumSubmissionKinds; ++k) {
    const int64_t so = at(layout.semaphore_offset) + kResultSemaphoreBytes * k;
    const ResultSemaphore& s = t.semaphores[k];
    PutU32(b, so + sem_off::kCompletion, s.completion_value);
    PutU32(b, so + sem_off::kFence, s.fence_value);
    PutU64(b, so + sem_off::kStart, s.device_start_ns);
    PutU64(b, so + sem_off::kEnd, s.device_end_ns);
    PutU32(b, so + sem_off::kIssues, s.issues);
  }

  const int64_t eo = at(layout.error_offset);
  PutU64(b, eo + err_off::kFirst,
         static_cast<uint64_t>(t.errors.first_nonfinite_step));
  PutU64(b, eo + err_off::kCount, t.errors.nonfinite_steps);
  PutU32(b, eo + err_off::kInvalidToken, t.errors.invalid_token_seen ? 1 : 0);
  PutU32(b, eo + err_off::kCuda, static_cast<uint32_t>(t.errors.cuda_error));
  PutText(b, eo + err_off::kText, t.errors.text);

  const int64_t ho = at(layout.host_offset);
  const ResultHostStatus& h = t.host;
  PutText(b, ho + host_off::kTag, absl::string_view(kResultHostTag, 8));
  PutText(b, ho + host_off::kBackend, h.backend);
  PutU32(b, ho + host_off::kV, static_cast<uint32_t>(g.V));
  PutU32(b, ho + host_off::kT, static_cast<uint32_t>(g.T));
  PutU64(b, ho + host_off::kSteps, static_cast<uint64_t>(g.steps));
  PutU64(b, ho + host_off::kFirstContext, h.first_context);
  PutU64(b, ho + host_off::kStepsDone, h.steps_done);
  PutU64(b, ho + host_off::kUpdateCount, h.update_count);
  PutU32(b, ho + host_off::kPublications, h.publications);
  PutU64(b, ho + host_off::kStartUnix, h.start_unix_ns);
  PutU64(b, ho + host_off::kEndUnix, h.end_unix_ns);
  PutU64(b, ho + host_off::kForwardWall, h.forward_wall_ns);
  PutU64(b, ho + host_off::kStepsWall, h.steps_wall_ns);
  PutU64(b, ho + host_off::kPublishWall, h.publish_wall_ns);
  PutU64(b, ho + host_off::kPeakMemory, h.peak_device_memory_bytes);
  for (int r = 0; r < 3; ++r) {
    PutU32(b, ho + host_off::kPredictions + 8 * r, h.predictions[r].token);
    PutU32(b, ho + host_off::kPredictions + 8 * r + 4,
           h.predictions[r].valid ? 1 : 0);
  }

  for (size_t i = 0; i < t.timestamps.size(); ++i) {
    const int64_t to = at(layout.timestamp_offset) + kResultTimestampBytes * i;
    const ResultTimestamp& ts = t.timestamps[i];
    PutU32(b, to + ts_off::kKind, static_cast<uint32_t>(ts.kind));
    PutU32(b, to + ts_off::kRelease, ts.release_value);
    PutU64(b, to + ts_off::kContext, ts.context);
    PutU64(b, to + ts_off::kStep, static_cast<uint64_t>(ts.step));
    PutU64(b, to + ts_off::kHostIssue, ts.host_issue_ns);
    PutU64(b, to + ts_off::kHostComplete, ts.host_complete_ns);
    PutU64(b, to + ts_off::kDeviceStart, ts.device_start_ns);
    PutU64(b, to + ts_off::kDeviceEnd, ts.device_end_ns);
  }
  return b;
}

// Fields the decoder checks itself (bytes that have no ResultTail field):
// reserved zeros, 0/1 flags, the host tag, the geometry copy, NUL padding.
absl::Status CheckZero(absl::string_view b, int64_t from, int64_t to,
                       absl::string_view field, const Checker& c) {
  for (int64_t i = from; i < to; ++i) {
    if (b[i] != 0) {
      return c.Fail(i, field,
                    absl::StrFormat("expected reserved zero, found 0x%02x",
                                    static_cast<unsigned char>(b[i])));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> GetFlag(absl::string_view b, int64_t at,
                             absl::string_view field, const Checker& c) {
  uint32_t v = GetU32(b, at);
  if (v > 1) {
    return c.Fail(at, field, absl::StrCat("expected 0 or 1, found ", v));
  }
  return v == 1;
}

absl::StatusOr<std::string> GetText(absl::string_view b, int64_t at,
                                    int capacity, absl::string_view field,
                                    const Checker& c) {
  int64_t n = 0;
  while (n < capacity && b[at + n] != 0) ++n;
  if (n == capacity) {
    return c.Fail(at + capacity - 1, field,
                  absl::StrCat("expected a NUL-terminated text of at most ",
                               capacity - 1, " bytes, found no NUL"));
  }
  RETURN_IF_ERROR(CheckZero(b, at + n, at + capacity,
                            absl::StrCat(field, " padding"), c));
  return std::string(b.substr(at, n));
}

absl::StatusOr<ResultTail> DecodeTail(absl::string_view b,
                                      const ResultGeometry& g,
                                      const ResultLayout& layout,
                                      const Checker& c) {
  ResultTail t;
  const int64_t is = layout.input_stat_offset;
  t.input.size_bytes = GetU64(b, is + stat_off::kSize);
  t.input.mtime_ns = GetU64(b, is + stat_off::kMtime);
  t.input.update_count = GetU64(b, is + stat_off::kUpdateCount);
  t.input.inode = GetU64(b, is + stat_off::kInode);
  std::memcpy(t.input.header_digest.data(), b.data() + is + stat_off::kDigest,
              32);
  ASSIGN_OR_RETURN(t.input.fresh,
                   GetFlag(b, is + stat_off::kFresh, "input stat.fresh", c));
  RETURN_IF_ERROR(CheckZero(b, is + stat_off::kReserved1,
                            is + stat_off::kCompleted, "input stat.reserved",
                            c));
  t.input.submissions_completed = GetU32(b, is + stat_off::kCompleted);
  t.input.submissions_issued = GetU32(b, is + stat_off::kIssued);
  t.input.update_last_release = GetU32(b, is + stat_off::kUpdateRelease);
  RETURN_IF_ERROR(CheckZero(b, is + stat_off::kReserved2,
                            is + kResultInputStatBytes, "input stat.reserved",
                            c));

  const int64_t lb = layout.loss_block_offset;
  t.loss.last_row_losses = GetFloats(b, lb, 1024);
  // T < 1,024 rows: +0.0 after them.
  RETURN_IF_ERROR(CheckZero(b, lb + 4 * std::min<int64_t>(g.T, 1024),
                            lb + 4096, "loss block.last_row_losses padding",
                            c));
  t.loss.embedding_gradient_head = GetFloats(b, lb + 4096, 1024);
  t.loss.embedding_parameter_head = GetFloats(b, lb + 8192, 1024);
  t.loss.embedding_first_moment_head = GetFloats(b, lb + 12288, 1024);

  t.final_logits = GetFloats(b, layout.final_offset, g.V);

  for (int k = 0; k < kNumSubmissionKinds; ++k) {
    const int64_t so = layout.semaphore_offset + kResultSemaphoreBytes * k;
    ResultSemaphore& s = t.semaphores[k];
    s.completion_value = GetU32(b, so + sem_off::kCompletion);
    s.fence_value = GetU32(b, so + sem_off::kFence);
    s.device_start_ns = GetU64(b, so + sem_off::kStart);
    s.device_end_ns = GetU64(b, so + sem_off::kEnd);
    s.issues = GetU32(b, so + sem_off::kIssues);
    RETURN_IF_ERROR(CheckZero(b, so + sem_off::kReserved,
                              so + kResultSemaphoreBytes,
                              "semaphore.reserved", c));
  }

  const int64_t eo = layout.error_offset;
  t.errors.first_nonfinite_step =
      static_cast<int64_t>(GetU64(b, eo + err_off::kFirst));
  t.errors.nonfinite_steps = GetU64(b, eo + err_off::kCount);
  ASSIGN_OR_RETURN(t.errors.invalid_token_seen,
                   GetFlag(b, eo + err_off::kInvalidToken,
                           "error notifier.invalid_token_seen", c));
  t.errors.cuda_error = static_cast<int32_t>(GetU32(b, eo + err_off::kCuda));
  ASSIGN_OR_RETURN(t.errors.text,
                   GetText(b, eo + err_off::kText, kResultErrorTextBytes,
                           "error notifier.text", c));

  const int64_t ho = layout.host_offset;
  if (b.substr(ho + host_off::kTag, 8) != absl::string_view(kResultHostTag, 8)) {
    return c.Fail(ho + host_off::kTag, "host status.tag",
                  absl::StrCat("expected \"", kResultHostTag, "\", found \"",
                               absl::CHexEscape(b.substr(ho, 8)), "\""));
  }
  ResultHostStatus& h = t.host;
  ASSIGN_OR_RETURN(h.backend,
                   GetText(b, ho + host_off::kBackend, kResultBackendNameBytes,
                           "host status.backend", c));
  const uint64_t file_v = GetU32(b, ho + host_off::kV);
  const uint64_t file_t = GetU32(b, ho + host_off::kT);
  const uint64_t file_steps = GetU64(b, ho + host_off::kSteps);
  if (file_v != static_cast<uint64_t>(g.V) ||
      file_t != static_cast<uint64_t>(g.T) ||
      file_steps != static_cast<uint64_t>(g.steps)) {
    return c.Fail(ho + host_off::kV, "host status.geometry",
                  absl::StrCat("expected V=", g.V, " T=", g.T,
                               " steps=", g.steps, ", found V=", file_v,
                               " T=", file_t, " steps=", file_steps));
  }
  h.first_context = GetU64(b, ho + host_off::kFirstContext);
  h.steps_done = GetU64(b, ho + host_off::kStepsDone);
  h.update_count = GetU64(b, ho + host_off::kUpdateCount);
  h.publications = GetU32(b, ho + host_off::kPublications);
  RETURN_IF_ERROR(CheckZero(b, ho + host_off::kReserved1,
                            ho + host_off::kStartUnix, "host status.reserved",
                            c));
  h.start_unix_ns = GetU64(b, ho + host_off::kStartUnix);
  h.end_unix_ns = GetU64(b, ho + host_off::kEndUnix);
  h.forward_wall_ns = GetU64(b, ho + host_off::kForwardWall);
  h.steps_wall_ns = GetU64(b, ho + host_off::kStepsWall);
  h.publish_wall_ns = GetU64(b, ho + host_off::kPublishWall);
  h.peak_device_memory_bytes = GetU64(b, ho + host_off::kPeakMemory);
  for (int r = 0; r < 3; ++r) {
    const int64_t po = ho + host_off::kPredictions + 8 * r;
    h.predictions[r].token = GetU32(b, po);
    ASSIGN_OR_RETURN(h.predictions[r].valid,
                     GetFlag(b, po + 4,
                             absl::StrCat("host status.predictions[", r,
                                          "].valid"),
                             c));
  }
  RETURN_IF_ERROR(CheckZero(b, ho + host_off::kReserved2,
                            ho + kResultHostStatusBytes,
                            "host status.reserved", c));

  t.timestamps.resize(layout.num_timestamps);
  for (int64_t i = 0; i < layout.num_timestamps; ++i) {
    const int64_t to = layout.timestamp_offset + kResultTimestampBytes * i;
    ResultTimestamp& ts = t.timestamps[i];
    const uint32_t kind = GetU32(b, to + ts_off::kKind);
    if (kind >= kNumSubmissionKinds) {
      return c.Fail(to + ts_off::kKind, absl::StrCat("timestamp[", i, "].kind"),
                    absl::StrCat("expected 0 (forward), 1 (update) or 2 "
                                 "(final), found ",
                                 kind));
    }
    ts.kind = static_cast<SubmissionKind>(kind);
    ts.release_value = GetU32(b, to + ts_off::kRelease);
    ts.context = GetU64(b, to + ts_off::kContext);
    ts.step = static_cast<int64_t>(GetU64(b, to + ts_off::kStep));
    ts.host_issue_ns = GetU64(b, to + ts_off::kHostIssue);
    ts.host_complete_ns = GetU64(b, to + ts_off::kHostComplete);
    ts.device_start_ns = GetU64(b, to + ts_off::kDeviceStart);
    ts.device_end_ns = GetU64(b, to + ts_off::kDeviceEnd);
    RETURN_IF_ERROR(CheckZero(b, to + ts_off::kReserved,
                              to + kResultTimestampBytes,
                              absl::StrCat("timestamp[", i, "].reserved"), c));
  }
  RETURN_IF_ERROR(CheckTail(g, layout, t, c));
  return t;
}

}  // namespace

const char* SubmissionKindName(SubmissionKind kind) {
  switch (kind) {
    case SubmissionKind::kForward:
      return "forward";
    case SubmissionKind::kUpdate:
      return "update";
    case SubmissionKind::kFinal:
      return "final";
  }
  return "invalid";
}

ResultGeometry ResultGeometryOf(const ModelConfig& config) {
  return ResultGeometry{config.V, config.T, config.run_steps};
}

absl::Status ValidateResultGeometry(const ResultGeometry& g) {
  if (g.V < 1 || g.V > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "result geometry: V = ", g.V, ", expected 1 <= V <= 16777216"));
  }
  if (g.T < 4 || g.T > (int64_t{1} << 20) || g.T % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("result geometry: T = ", g.T,
                     ", expected a multiple of 4 in [4, 1048576]"));
  }
  if (g.steps < 1 || g.steps > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("result geometry: steps = ", g.steps,
                     ", expected 1 <= steps <= 1073741824"));
  }
  return absl::OkStatus();
}

ResultLayout ComputeResultLayout(const ResultGeometry& g) {
  ResultLayout l;
  l.forward_offset = 0;
  l.forward_bytes = 12 * g.V;
  l.windows_offset = l.forward_bytes;
  l.window_bytes = 4 * g.T;
  l.input_stat_offset = l.windows_offset + l.window_bytes * g.steps;
  l.loss_block_offset = l.input_stat_offset + kResultInputStatBytes;
  l.final_offset = l.loss_block_offset + kResultLossBlockBytes;
  l.final_bytes = 4 * g.V;
  l.semaphore_offset = l.final_offset + l.final_bytes;
  l.error_offset =
      l.semaphore_offset + kResultSemaphoreBytes * kNumSubmissionKinds;
  l.host_offset = l.error_offset + kResultErrorNotifierBytes;
  l.timestamp_offset = l.host_offset + kResultHostStatusBytes;
  l.num_timestamps = g.steps + 2;
  l.complete_bytes = l.timestamp_offset + kResultTimestampBytes * l.num_timestamps;
  return l;
}

absl::Status ValidateResultTail(const ResultGeometry& geometry,
                                const ResultTail& tail) {
  RETURN_IF_ERROR(ValidateResultGeometry(geometry));
  const ResultLayout layout = ComputeResultLayout(geometry);
  return CheckTail(geometry, layout, tail, Checker(nullptr, ""));
}

// ---- writer ----

ResultWriter::ResultWriter(std::string path, const ResultGeometry& geometry,
                           int fd)
    : path_(std::move(path)),
      geometry_(geometry),
      layout_(ComputeResultLayout(geometry)),
      fd_(fd) {}

ResultWriter::~ResultWriter() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::unique_ptr<ResultWriter>> ResultWriter::Create(
    const std::string& path, const ResultGeometry& geometry) {
  RETURN_IF_ERROR(ValidateResultGeometry(geometry));
  // A file already at `path` is never written: a new one is renamed over
  // it, so every other name of the old file (a hard link) keeps its bytes.
  // It is locked first all the same, so that another run writing it under
  // another name is refused rather than having its output unlinked.
  int old_fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (old_fd < 0 && errno != ENOENT) {
    return ErrnoStatus(errno, "opening the existing result file", path);
  }
  if (old_fd >= 0 && flock(old_fd, LOCK_EX | LOCK_NB) != 0 &&
      !FlockUnsupported(errno)) {
    const int e = errno;
    close(old_fd);
    if (e == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "result file ", path, ": being written by another process (the "
          "same file under another name, such as a hard link?); refusing to "
          "write it too"));
    }
    return ErrnoStatus(e, "locking result file", path);
  }
  const std::string tmp = NewTemporaryPath(path);
  absl::Status status;
  int fd = -1;
  {
    RemoveOnInterruptScope remove_on_interrupt(tmp);
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      status = ErrnoStatus(errno, "creating result file", path);
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0 && !FlockUnsupported(errno)) {
      status = ErrnoStatus(errno, "locking result file", path);
    } else {
      status = WriteAll(fd, kResultMarker, kResultMarkerBytes, tmp);
    }
    if (status.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
      status = ErrnoStatus(errno, "replacing result file", path);
    }
    if (!status.ok()) unlink(tmp.c_str());
  }
  if (old_fd >= 0) close(old_fd);
  if (status.ok()) status = FsyncDirectory(DirName(path));
  if (!status.ok()) {
    if (fd >= 0) close(fd);
    return status;
  }
  std::unique_ptr<ResultWriter> writer(new ResultWriter(path, geometry, fd));
  return writer;
}

absl::Status ResultWriter::Pwrite(const void* data, size_t size,
                                  int64_t offset, absl::string_view what) {
  if (fd_ < 0 || failed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("result ", path_, ": writing ", what,
                     " after Finish or a failed write"));
  }
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = pwrite(fd_, p, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failed_ = true;
      return Annotate(ErrnoStatus(n < 0 ? errno : ENOSPC, "writing", path_),
                      absl::StrCat(what, " at offset ", offset));
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return absl::OkStatus();
}

absl::Status ResultWriter::WriteForwardRecord(const float* logits) {
  const absl::Status written = Pwrite(logits, layout_.forward_bytes,
                                      layout_.forward_offset, "forward record");
  if (!written.ok()) {
    // Part of a forward record over the marker is no result any reader
    // recognises, and it would block the next run: the file, new and ours
    // (Create), is removed; it held nothing else.
    if (!forward_written_ && steps_written_ == 0 &&
        unlink(path_.c_str()) == 0) {
      return WithMessage(written,
                         absl::StrCat(written.message(),
                                      "; the result file was removed (it held "
                                      "no step yet)"));
    }
    return written;
  }
  forward_written_ = true;
  return absl::OkStatus();
}

absl::Status ResultWriter::AppendStepWindow(int64_t step,
                                            const float* row_losses) {
  if (step != steps_written_ || step >= geometry_.steps) {
    return absl::FailedPreconditionError(absl::StrCat(
        "result ", path_, ": step window ", step, " appended, expected step ",
        steps_written_, " (of ", geometry_.steps, ")"));
  }
  RETURN_IF_ERROR(Pwrite(row_losses, layout_.window_bytes,
                         layout_.windows_offset + layout_.window_bytes * step,
                         absl::StrCat("step window ", step)));
  ++steps_written_;
  return absl::OkStatus();
}

absl::Status ResultWriter::Finish(const ResultTail& tail) {
  if (!forward_written_ || steps_written_ != geometry_.steps) {
    return absl::FailedPreconditionError(absl::StrCat(
        "result ", path_, ": Finish with forward record ",
        forward_written_ ? "written" : "missing", " and ", steps_written_,
        " of ", geometry_.steps, " step windows; expected all"));
  }
  RETURN_IF_ERROR(Annotate(ValidateResultTail(geometry_, tail),
                           absl::StrCat("result ", path_)));
  const std::string bytes = EncodeTail(geometry_, layout_, tail);
  RETURN_IF_ERROR(
      Pwrite(bytes.data(), bytes.size(), layout_.input_stat_offset, "tail"));
  if (fsync(fd_) != 0) {
    failed_ = true;
    return ErrnoStatus(errno, "fsync", path_);
  }
  int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) return ErrnoStatus(errno, "closing", path_);
  return absl::OkStatus();
}

// ---- reader ----

absl::StatusOr<ResultFile> ParseResult(absl::string_view bytes,
                                       const ResultGeometry& geometry,
                                       absl::string_view name) {
  RETURN_IF_ERROR(ValidateResultGeometry(geometry));
  const ResultLayout layout = ComputeResultLayout(geometry);
  const Checker checker(&layout, name);
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size > layout.complete_bytes) {
    return absl::DataLossError(absl::StrCat(
        name, ": size ", size, " bytes, expected at most ",
        layout.complete_bytes, " for a result of V=", geometry.V,
        " T=", geometry.T, " steps=", geometry.steps));
  }
  ResultFile r;
  r.geometry = geometry;
  r.file_size = size;
  r.complete = size == layout.complete_bytes;
  r.marker_left =
      size >= kResultMarkerBytes &&
      std::memcmp(bytes.data(), kResultMarker, kResultMarkerBytes) == 0;
  r.forward_present = size >= layout.forward_bytes;
  if (r.forward_present) {
    r.forward_logits = GetFloats(bytes, layout.forward_offset, 3 * geometry.V);
    r.complete_steps =
        std::min((size - layout.windows_offset) / layout.window_bytes,
                 geometry.steps);
    r.step_losses = GetFloats(bytes, layout.windows_offset,
                              r.complete_steps * geometry.T);
  }
  if (r.complete) {
    ASSIGN_OR_RETURN(r.tail, DecodeTail(bytes, geometry, layout, checker));
  }
  return r;
}

absl::StatusOr<ResultFile> ReadResult(const std::string& path,
                                      const ResultGeometry& geometry) {
  RETURN_IF_ERROR(ValidateResultGeometry(geometry));
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return ParseResult(bytes, geometry, path);
}

bool LooksLikeForwardRecord(absl::string_view head, uint64_t forward_bytes) {
  const size_t n = std::min<uint64_t>(head.size(), forward_bytes) / 4 * 4;
  if (n == 0) return false;
  bool some_large = false;
  for (size_t at = 0; at < n; at += 4) {
    const uint32_t bits = GetU32(head, at);
    const uint32_t exponent = (bits >> 23) & 0xff;
    if (exponent == 0xff) {  // non-finite: a run that diverged
      some_large = true;
      continue;
    }
    if ((bits & 0x7fffffffu) == 0) continue;
    if (exponent < 63 || exponent > 190) return false;
    if (exponent >= 119) some_large = true;  // |x| ≥ 2^-8
  }
  return some_large;
}

ResultSignature ResultSignatureOf(uint64_t size, absl::string_view head,
                                  absl::string_view host_tag,
                                  const ResultGeometry& geometry) {
  if (!ValidateResultGeometry(geometry).ok()) return ResultSignature::kNone;
  const ResultLayout layout = ComputeResultLayout(geometry);
  const uint64_t complete = static_cast<uint64_t>(layout.complete_bytes);
  if (size >= complete && host_tag == absl::string_view(kResultHostTag, 8)) {
    return ResultSignature::kHostTag;
  }
  if (size >= static_cast<uint64_t>(layout.forward_bytes) &&
      size <= complete && LooksLikeForwardRecord(head, layout.forward_bytes)) {
    return ResultSignature::kForwardRecord;
  }
  return ResultSignature::kNone;
}

std::vector<double> StepMeanLosses(const ResultFile& result) {
  std::vector<double> means(result.complete_steps);
  const int64_t T = result.geometry.T;
  for (int64_t s = 0; s < result.complete_steps; ++s) {
    double sum = 0;
    for (int64_t r = 0; r < T; ++r) sum += result.step_losses[s * T + r];
    means[s] = sum / static_cast<double>(T);
  }
  return means;
}

std::string LossText(double loss, int digits) {
  return std::isfinite(loss) && std::fabs(loss) < 1e6
             ? absl::StrFormat("%.*f", digits, loss)
             : absl::StrFormat("%.*g", digits, loss);
}

bool ReadsAsLosses(absl::string_view window, int64_t* first_negative) {
  for (size_t at = 0; at + 4 <= window.size(); at += 4) {
    float value;
    std::memcpy(&value, window.data() + at, sizeof(value));
    if (std::isfinite(value) && value < 0.0f) {
      if (first_negative != nullptr) {
        *first_negative = static_cast<int64_t>(at / 4);
      }
      return false;
    }
  }
  return true;
}

bool StepZeroAgreesWithForwardRecord(absl::string_view forward_record,
                                     absl::string_view first_window,
                                     const ResultGeometry& geometry,
                                     StepZeroDisagreement* disagreement) {
  const int64_t V = geometry.V, T = geometry.T;
  if (forward_record.size() < static_cast<size_t>(12 * V)) return false;
  const int64_t rows[3] = {T / 4 - 1, T / 2 - 1, T - 1};
  for (int k = 0; k < 3; ++k) {
    const int64_t r = rows[k];
    if (first_window.size() < static_cast<size_t>(4 * (r + 1))) continue;
    float loss;
    std::memcpy(&loss, first_window.data() + 4 * r, sizeof(loss));
    if (!std::isfinite(loss) || (loss == 0.0f && !std::signbit(loss))) {
      continue;
    }
    double max = -INFINITY, min = INFINITY;
    bool finite = true;
    std::vector<double> logits(V);
    for (int64_t v = 0; v < V; ++v) {
      float x;
      std::memcpy(&x, forward_record.data() + 4 * (k * V + v), sizeof(x));
      if (!std::isfinite(x)) finite = false;
      logits[v] = x;
      max = std::max(max, logits[v]);
      min = std::min(min, logits[v]);
    }
    if (!finite) continue;
    double sum = 0;
    for (double x : logits) sum += std::exp(x - max);
    const double logsumexp = max + std::log(sum);
    const double tolerance =
        0.01 + 1e-3 * (std::fabs(logsumexp) + std::fabs(min));
    const double low = logsumexp - max - tolerance,
                 high = logsumexp - min + tolerance;
    if (loss < low || loss > high) {
      if (disagreement != nullptr) *disagreement = {r, loss, low, high};
      return false;
    }
  }
  return true;
}

absl::StatusOr<bool> FirstWindowReadsAsStepZero(
    const std::string& path, uint64_t size, const ResultGeometry& geometry) {
  const ResultLayout layout = ComputeResultLayout(geometry);
  if (size < static_cast<uint64_t>(layout.forward_bytes)) return false;
  const uint64_t present = std::min<uint64_t>(
      size - layout.windows_offset, layout.window_bytes);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "opening", path);
  std::string forward(layout.forward_bytes, '\0');
  std::string window(present / 4 * 4, '\0');
  absl::Status s = PreadAll(fd, forward.data(), forward.size(), 0, path);
  if (s.ok()) {
    s = PreadAll(fd, window.data(), window.size(), layout.windows_offset,
                 path);
  }
  close(fd);
  RETURN_IF_ERROR(s);
  return ReadsAsLosses(window) &&
         StepZeroAgreesWithForwardRecord(forward, window, geometry);
}

std::string ResultFileEvidence(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  // The first bytes, for the forward record of any config (at most 4,096).
  std::string head(4096, '\0');
  const ssize_t head_bytes = pread(fd, head.data(), head.size(), 0);
  head.resize(head_bytes > 0 ? head_bytes : 0);
  std::string found;
  for (const std::string& name : ModelConfigNames()) {  // train's configs
    absl::StatusOr<ModelConfig> config = ModelConfigByName(name);
    if (!config.ok()) continue;
    const ResultGeometry geometry = ResultGeometryOf(*config);
    const ResultLayout layout = ComputeResultLayout(geometry);
    char tag[8] = {};
    const bool tag_read = st.st_size >= layout.complete_bytes &&
                          pread(fd, tag, sizeof(tag), layout.host_offset) == 8;
    switch (ResultSignatureOf(
        static_cast<uint64_t>(st.st_size), head,
        tag_read ? absl::string_view(tag, 8) : absl::string_view(),
        geometry)) {
      case ResultSignature::kHostTag:
        found = absl::StrCat("config ", name, ", host tag at byte ",
                             layout.host_offset);
        break;
      case ResultSignature::kForwardRecord: {
        // Logits alone can be any fp32 array (an exported tensor).
        absl::StatusOr<bool> step_zero = FirstWindowReadsAsStepZero(
            path, static_cast<uint64_t>(st.st_size), geometry);
        if (step_zero.ok() && *step_zero) {
          found = absl::StrCat("config ", name, ", incomplete: a killed run's");
        }
        break;
      }
      case ResultSignature::kNone:
        break;
    }
    if (!found.empty()) break;
  }
  close(fd);
  return found;
}

}  // namespace coppelius
