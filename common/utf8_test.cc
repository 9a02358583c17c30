#include "common/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace coppelius {
namespace {

constexpr size_t kAll = absl::string_view::npos;

// Vectors from the Unicode Standard's table 3-7 and its boundaries.
TEST(Utf8Test, WellFormedSequences) {
  EXPECT_EQ(FirstNonUtf8Byte(""), kAll);
  EXPECT_EQ(FirstNonUtf8Byte("plain ASCII\x7f"), kAll);
  EXPECT_EQ(FirstNonUtf8Byte("\xc2\x80\xdf\xbf"), kAll);          // U+0080, U+07FF
  EXPECT_EQ(FirstNonUtf8Byte("\xe0\xa0\x80\xef\xbf\xbf"), kAll);  // U+0800, U+FFFF
  EXPECT_EQ(FirstNonUtf8Byte("\xed\x9f\xbf\xee\x80\x80"), kAll);  // U+D7FF, U+E000
  EXPECT_EQ(FirstNonUtf8Byte("\xf0\x90\x80\x80\xf4\x8f\xbf\xbf"),
            kAll);  // U+10000, U+10FFFF
  EXPECT_EQ(Utf8SequenceLength("a\xe2\x82\xac", 1), 3u);  // €
}

TEST(Utf8Test, IllFormedSequencesAreFoundAtTheirFirstByte) {
  EXPECT_EQ(FirstNonUtf8Byte("ab\x80"), 2u);              // lone continuation
  EXPECT_EQ(FirstNonUtf8Byte("\xc0\xaf"), 0u);            // overlong '/'
  EXPECT_EQ(FirstNonUtf8Byte("x\xc1\xbf"), 1u);           // overlong
  EXPECT_EQ(FirstNonUtf8Byte("\xe0\x9f\xbf"), 0u);        // overlong U+07FF
  EXPECT_EQ(FirstNonUtf8Byte("\xed\xa0\x80"), 0u);        // surrogate U+D800
  EXPECT_EQ(FirstNonUtf8Byte("\xf0\x8f\xbf\xbf"), 0u);    // overlong U+FFFF
  EXPECT_EQ(FirstNonUtf8Byte("\xf4\x90\x80\x80"), 0u);    // U+110000
  EXPECT_EQ(FirstNonUtf8Byte("\xf5\x80\x80\x80"), 0u);
  EXPECT_EQ(FirstNonUtf8Byte("ok\xe2\x82"), 2u);          // cut short
  EXPECT_EQ(FirstNonUtf8Byte("\xe2\x28\xa1"), 0u);        // bad continuation
  EXPECT_EQ(FirstNonUtf8Byte(std::string("\0\xff", 2)), 1u);
}

}  // namespace
}  // namespace coppelius
