// File: common/status_macros.h
//
// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status and absl::StatusOr,
// until the pinned Abseil (LTS 2022-06-23) ships its own. Also Annotate(),
// which prefixes a status message with what was being done ("reading
// corpus.tok at offset 16"), keeping the code (riegeli / tensorstore style),
// and UsageError(), the error of a command line that is wrong in itself.
#ifndef COPPELIUS_COMMON_STATUS_MACROS_H_
#define COPPELIUS_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace coppelius {

// `status` with its message replaced by `message`, its code and payloads
// kept (so a UsageError stays one); OK stays OK.
inline absl::Status WithMessage(const absl::Status& status,
                                absl::string_view message) {
  if (status.ok()) return status;
  absl::Status out(status.code(), message);
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    out.SetPayload(url, payload);
  });
  return out;
}

// Returns `status` with "`context`: " prefixed to its message (code and
// payloads kept); OK stays OK.
inline absl::Status Annotate(const absl::Status& status,
                             absl::string_view context) {
  if (status.ok()) return status;
  return WithMessage(status, absl::StrCat(context, ": ", status.message()));
}

// Usage errors. A command line that is wrong in itself, whatever the files
// it names, is a usage error: a missing or extra argument, an unknown
// subcommand, a required flag missing, a flag value outside its range or
// set (--threads=-1, --config=big, --format=hex), flags that contradict each
// other (standard input named twice). UsageError() is InvalidArgument
// carrying the payload kUsageErrorUrl, which Annotate and WithMessage keep;
// every binary exits 2 for it and 1 for any other error (a bad input or
// output file, a refused run, a failed check: common/status_line.h
// ExitCodeOf). InvalidArgument without the payload is not a usage error.
inline constexpr char kUsageErrorUrl[] = "type.coppelius/usage-error";
inline absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsageErrorUrl, absl::Cord("usage"));
  return status;
}
inline bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsageErrorUrl).has_value();
}

namespace status_macros_internal {
inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
inline const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace status_macros_internal

}  // namespace coppelius

#define COPPELIUS_CONCAT_INNER_(a, b) a##b
#define COPPELIUS_CONCAT_(a, b) COPPELIUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (a Status or StatusOr); returns its status if not OK.
#define RETURN_IF_ERROR(expr)                                              \
  do {                                                                     \
    const auto& _coppelius_status_or = (expr);                             \
    if (!::coppelius::status_macros_internal::GetStatus(_coppelius_status_or) \
             .ok())                                                        \
      return ::coppelius::status_macros_internal::GetStatus(               \
          _coppelius_status_or);                                           \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates the StatusOr `expr`; on error
// returns its status, else moves its value into `lhs` (which may declare).
#define ASSIGN_OR_RETURN(lhs, expr)                                      \
  ASSIGN_OR_RETURN_IMPL_(COPPELIUS_CONCAT_(_coppelius_statusor_, __LINE__), \
                         lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                           \
  if (!statusor.ok()) return statusor.status();     \
  lhs = std::move(statusor).value()

#endif  // COPPELIUS_COMMON_STATUS_MACROS_H_
