// File: common/status_line_test.cc
#include "common/status_line.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

TEST(StatusLineTest, ControlCharactersAreEscapedOthersKept) {
  EXPECT_EQ(EscapeControlCharacters("a\nb\tc\rd\x1b[31me\x7f"),
            "a\\nb\\tc\\rd\\x1b[31me\\x7f");
  EXPECT_EQ(EscapeControlCharacters("caf\xc3\xa9 \xe2\x9c\x93"),
            "caf\xc3\xa9 \xe2\x9c\x93");  // UTF-8 unchanged
  EXPECT_EQ(EscapeControlCharacters(std::string("n\0l", 3)), "n\\x00l");
  // Bytes that begin no well-formed UTF-8 sequence: a lone 0xff, a lone
  // continuation byte, an overlong "/" (c0 af), a cut-off sequence.
  EXPECT_EQ(EscapeControlCharacters("a\xff\x80" "b\xc0\xaf\xe2\x9c"),
            "a\\xff\\x80b\\xc0\\xaf\\xe2\\x9c");
}

TEST(StatusLineTest, OneLineForAPathWithANewline) {
  const absl::Status s = absl::NotFoundError("opening no\nsuch: No such file");
  EXPECT_EQ(StatusLine("tokenize", s),
            "tokenize: NOT_FOUND: opening no\\nsuch: No such file");
}

// A usage error (common/status_macros.h) exits 2, any other error 1; its
// line shows no payload, and Annotate keeps it a usage error.
TEST(StatusLineTest, UsageErrorsExitTwoOtherErrorsOne) {
  EXPECT_EQ(ExitCodeOf(absl::OkStatus()), 0);
  const absl::Status usage = UsageError("--threads=-1: expected 0..1024");
  EXPECT_EQ(ExitCodeOf(usage), 2);
  EXPECT_EQ(ExitCodeOf(Annotate(usage, "make-cache")), 2);
  EXPECT_EQ(StatusLine("tool", Annotate(usage, "ctx")),
            "tool: INVALID_ARGUMENT: ctx: --threads=-1: expected 0..1024");
  EXPECT_EQ(ExitCodeOf(absl::InvalidArgumentError("x.res: not a regular file")),
            1);
  EXPECT_EQ(ExitCodeOf(absl::DataLossError("bad")), 1);
}

// An allocation that cannot succeed ends the process with one line, rc 1.
TEST(StatusLineDeathTest, OutOfMemoryIsOneLineAndExitCodeOne) {
  EXPECT_EXIT(
      {
        ExitOnOutOfMemory("tool");
        std::vector<char> huge;
        huge.reserve(static_cast<size_t>(1) << 62);  // fails
      },
      testing::ExitedWithCode(1), "^tool: RESOURCE_EXHAUSTED: out of memory\n$");
}

// Out of memory inside an OutOfMemoryContext: the line says what ran out
// (one line, control characters escaped), and the temporaries registered
// for interrupts are removed, as an interrupt removes them (make-cache
// left its partial cache's temporary behind).
TEST(StatusLineDeathTest, OutOfMemoryNamesItsContextAndRemovesTemporaries) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string tmp =
      std::string(dir != nullptr ? dir : "/tmp") + "/out.tok.tmp-1-00000000";
  ASSERT_TRUE(WriteFileAtomically(tmp, "partial").ok());
  EXPECT_EXIT(
      {
        ExitOnOutOfMemory("tool");
        RemoveOnInterrupt(tmp);
        const OutOfMemoryContext outer("reading");
        const OutOfMemoryContext inner("encoding in\nput.txt (5 bytes)");
        std::vector<char> huge;
        huge.reserve(static_cast<size_t>(1) << 62);  // fails
      },
      testing::ExitedWithCode(1),
      "^tool: RESOURCE_EXHAUSTED: out of memory while encoding "
      "in\\\\nput.txt \\(5 bytes\\)\n$");
  EXPECT_NE(access(tmp.c_str(), F_OK), 0) << tmp << " was left behind";
  unlink(tmp.c_str());
}

}  // namespace
}  // namespace coppelius
