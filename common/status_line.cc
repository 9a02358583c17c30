// File: common/status_line.cc
#include "common/status_line.h"

#include <unistd.h>

#include <atomic>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "common/utf8.h"

namespace coppelius {

std::string EscapeControlCharacters(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      // A well-formed sequence is kept (a path in any script prints as
      // itself); a byte that begins none is escaped like a control byte.
      const size_t n = Utf8SequenceLength(text, i);
      if (n > 0) {
        out.append(text.data() + i, n);
        i += n;
      } else {
        out += absl::StrFormat("\\x%02x", c);
        ++i;
      }
      continue;
    }
    if (c >= 0x20 && c != 0x7f) {
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += absl::StrFormat("\\x%02x", c);
    }
    ++i;
  }
  return out;
}

std::string StatusLine(absl::string_view program, const absl::Status& status) {
  return absl::StrCat(program, ": ",
                      EscapeControlCharacters(status.ToString(
                          absl::StatusToStringMode::kWithNoExtraData)));
}

int ExitCodeOf(const absl::Status& status) {
  if (status.ok()) return 0;
  return IsUsageError(status) ? 2 : 1;
}

namespace {
const char* g_program = "coppelius";
std::atomic<const char*> g_context{nullptr};  // OutOfMemoryContext's

void OutOfMemory() {
  // No allocation here: unlink(2) of registered paths, write(2) of fixed
  // pieces.
  RemoveRegisteredTemporaries();
  const char* context = g_context.load();
  const char* parts[] = {g_program, ": RESOURCE_EXHAUSTED: out of memory",
                         context != nullptr ? " while " : "",
                         context != nullptr ? context : "", "\n"};
  for (const char* p : parts) WriteStderrSignalSafe(p);
  _exit(1);
}
}  // namespace

OutOfMemoryContext::OutOfMemoryContext(absl::string_view what)
    : what_(EscapeControlCharacters(what)),
      previous_(g_context.exchange(what_.c_str())) {}

OutOfMemoryContext::~OutOfMemoryContext() { g_context.store(previous_); }

void ExitOnOutOfMemory(const char* program) {
  g_program = program;
  std::set_new_handler(OutOfMemory);
}

}  // namespace coppelius
