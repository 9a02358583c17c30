// File: common/status_line.h
//
// The one line a binary prints for an error: "prog: CODE: message" with
// every control character of the message (a newline or escape sequence in
// a file name the user gave, say) written as a C escape (\n, \t, \x1b), so
// that the error stays one line whatever the paths in it hold.
#ifndef COPPELIUS_COMMON_STATUS_LINE_H_
#define COPPELIUS_COMMON_STATUS_LINE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace coppelius {

// `text` with bytes below 0x20 and 0x7f escaped (\n, \r, \t, else \xNN),
// and every byte that begins no well-formed UTF-8 sequence (common/utf8.h)
// as \xNN; well-formed UTF-8 and the rest unchanged. (A file name's raw
// 0xff byte sent to a terminal is not a character.)
std::string EscapeControlCharacters(absl::string_view text);

// "<program>: " + status.ToString() without payloads ("CODE: message"),
// control characters escaped (no trailing newline).
std::string StatusLine(absl::string_view program, const absl::Status& status);

// A binary's exit status for `status`: 0 when OK, 2 for a usage error
// (common/status_macros.h UsageError: the command line is wrong in itself),
// 1 for every other error.
int ExitCodeOf(const absl::Status& status);

// For main() only: installs a new-handler (std::set_new_handler) under
// which an allocation that fails ends the process with the one line
// "<program>: RESOURCE_EXHAUSTED: out of memory" (then " while WHAT" inside
// an OutOfMemoryContext) on stderr and exit code 1, instead of an uncaught
// std::bad_alloc (abort, rc 134, two lines), after removing the temporaries
// registered for interrupts (RemoveRegisteredTemporaries,
// common/file_io.h): no partial output is left behind. `program` must
// outlive the process (a string literal). Allocations whose failure should
// be an error instead: CatchOutOfMemory (common/file_io.h).
void ExitOnOutOfMemory(const char* program);

// While it lives, the line ExitOnOutOfMemory's handler prints names the
// work that ran out of memory: "... out of memory while `what`" ("encoding
// corpus.txt (3221225472 bytes)"), control characters escaped. Scopes nest
// (the innermost is named); made and ended by one thread.
class OutOfMemoryContext {
 public:
  explicit OutOfMemoryContext(absl::string_view what);
  ~OutOfMemoryContext();
  OutOfMemoryContext(const OutOfMemoryContext&) = delete;
  OutOfMemoryContext& operator=(const OutOfMemoryContext&) = delete;

 private:
  std::string what_;
  const char* previous_;
};

}  // namespace coppelius

#endif  // COPPELIUS_COMMON_STATUS_LINE_H_
