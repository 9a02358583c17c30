#include "tokenizer/unicode_tables.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace coppelius {
namespace {

// Test-local UTF-8 encoder for scalar values (RFC 3629).
std::string EncodeUtf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Lengths of the characters DecodeUtf8 finds in `bytes`, with -n marking an
// ill-formed subpart of n bytes.
std::vector<int> Split(const std::string& bytes) {
  std::vector<int> out;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto* end = p + bytes.size();
  while (p < end) {
    Utf8Char c = DecodeUtf8(p, end);
    out.push_back(c.valid ? c.length : -c.length);
    if (!c.valid) {
      EXPECT_EQ(c.code_point, 0xFFFDu);
    }
    p += c.length;
  }
  return out;
}

TEST(DecodeUtf8, EveryScalarValueRoundTrips) {
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s = EncodeUtf8(cp);
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    Utf8Char c = DecodeUtf8(p, p + s.size());
    ASSERT_TRUE(c.valid) << cp;
    ASSERT_EQ(c.code_point, cp);
    ASSERT_EQ(c.length, static_cast<int>(s.size()));
  }
}

// Known answers from Unicode 16 §3.9, Table 3-8 and Python's
// b"...".decode("utf-8", "replace").
TEST(DecodeUtf8, MaximalSubparts) {
  EXPECT_EQ(Split("\xED\xA0\x80"), (std::vector<int>{-1, -1, -1}));  // surrogate
  EXPECT_EQ(Split("\xE2\x82" "a"), (std::vector<int>{-2, 1}));
  EXPECT_EQ(Split("\xF0\x9F\x98"), (std::vector<int>{-3}));  // truncated
  EXPECT_EQ(Split("\xC0\x80"), (std::vector<int>{-1, -1}));  // overlong
  EXPECT_EQ(Split("\xE0\x80\x80"), (std::vector<int>{-1, -1, -1}));
  EXPECT_EQ(Split("\xF4\x90\x80\x80"), (std::vector<int>{-1, -1, -1, -1}));
  EXPECT_EQ(Split("\xF5\xFF\x80"), (std::vector<int>{-1, -1, -1}));
  EXPECT_EQ(Split("\xC2"), (std::vector<int>{-1}));
  EXPECT_EQ(Split("\xF1\x80\x80" "\xE1\x80" "\xC2" "A"),
            (std::vector<int>{-3, -2, -1, 1}));  // Table 3-8's example
  EXPECT_EQ(Split("\xF4\x8F\xBF\xBF"), (std::vector<int>{4}));  // U+10FFFF
  EXPECT_EQ(Split("\xEF\xBF\xBD"), (std::vector<int>{3}));  // a real U+FFFD
}

TEST(CodePointClass, KnownCodePoints) {
  // Letters: General_Category L*.
  for (uint32_t cp : {0x41u, 0x7Au, 0xAAu /*Lo*/, 0xB5u /*Ll*/, 0x1C5u /*Lt*/,
                      0x2B0u /*Lm*/, 0x17Fu /*ſ*/, 0x4E00u, 0x20000u,
                      0x1C89u /*new in 16.0*/}) {
    EXPECT_EQ(CodePointClass(cp), kLetter) << std::hex << cp;
  }
  // Numbers: Nd, Nl, No.
  for (uint32_t cp : {0x30u, 0x39u, 0xB2u /*²*/, 0xBDu /*½*/, 0x216Bu /*Ⅻ*/,
                      0x661u, 0x10D40u /*Garay digit zero, new in 16.0*/}) {
    EXPECT_EQ(CodePointClass(cp), kNumber) << std::hex << cp;
  }
  // Marks, symbols, format, surrogates, unassigned: other.
  for (uint32_t cp : {0x27u, 0x1Cu /*isspace() but not White_Space*/, 0x1Fu,
                      0x200Bu, 0x200Du, 0xFE0Fu, 0x2764u, 0x1F468u, 0xD800u,
                      0xFFFDu, 0x10FFFFu, 0x301u}) {
    EXPECT_EQ(CodePointClass(cp), kOther) << std::hex << cp;
  }
}

TEST(CodePointClass, WhiteSpaceIsExactlyThe25CodePoints) {
  // PropList.txt White_Space.
  std::vector<uint32_t> expected = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,
                                    0x20,   0x85,   0xA0,   0x1680, 0x2000,
                                    0x2001, 0x2002, 0x2003, 0x2004, 0x2005,
                                    0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
                                    0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
  std::vector<uint32_t> found;
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (CodePointClass(cp) == kWhiteSpace) found.push_back(cp);
  }
  EXPECT_EQ(found, expected);
}

TEST(AsciiClass, MatchesCodePointClass) {
  for (uint32_t cp = 0; cp < 128; ++cp) {
    EXPECT_EQ(kAsciiClass[cp], CodePointClass(cp)) << cp;
  }
}

}  // namespace
}  // namespace coppelius
