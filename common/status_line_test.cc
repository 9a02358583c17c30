// File: common/status_line_test.cc
#include "common/status_line.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

TEST(StatusLineTest, ControlCharactersAreEscapedOthersKept) {
  EXPECT_EQ(EscapeControlCharacters("a\nb\tc\rd\x1b[31me\x7f"),
            "a\\nb\\tc\\rd\\x1b[31me\\x7f");
  EXPECT_EQ(EscapeControlCharacters("caf\xc3\xa9 \xe2\x9c\x93"),
            "caf\xc3\xa9 \xe2\x9c\x93");  // UTF-8 unchanged
  EXPECT_EQ(EscapeControlCharacters(std::string("n\0l", 3)), "n\\x00l");
}

TEST(StatusLineTest, OneLineForAPathWithANewline) {
  const absl::Status s = absl::NotFoundError("opening no\nsuch: No such file");
  EXPECT_EQ(StatusLine("tokenize", s),
            "tokenize: NOT_FOUND: opening no\\nsuch: No such file");
}

}  // namespace
}  // namespace coppelius
