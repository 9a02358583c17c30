#include "tokenizer/pretokenizer.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizer/unicode_tables.h"

namespace coppelius {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<std::string> Pieces(absl::string_view text) {
  std::vector<absl::string_view> views;
  Pretokenize(text, &views);
  return std::vector<std::string>(views.begin(), views.end());
}

// Expected pieces below are worked out by hand from the r50k pattern's
// branches (leftmost-first alternation); the same inputs are checked against
// tiktoken 0.14 itself in tiktoken_diff_test.
TEST(Pretokenize, Words) {
  EXPECT_THAT(Pieces("Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(Pieces("Hello, world!"),
              ElementsAre("Hello", ",", " world", "!"));
  EXPECT_THAT(Pieces("1,000 apples"), ElementsAre("1", ",", "000", " apples"));
  EXPECT_THAT(Pieces("abc123def"), ElementsAre("abc", "123", "def"));
  EXPECT_THAT(Pieces(""), IsEmpty());
}

TEST(Pretokenize, ContractionsAreCaseSensitive) {
  EXPECT_THAT(Pieces("don't"), ElementsAre("don", "'t"));
  EXPECT_THAT(Pieces("DON'T"), ElementsAre("DON", "'", "T"));
  EXPECT_THAT(Pieces("we'll they've you're I'm he'd"),
              ElementsAre("we", "'ll", " they", "'ve", " you", "'re", " I",
                          "'m", " he", "'d"));
  EXPECT_THAT(Pieces("'ſ"), ElementsAre("'", "ſ"));
  EXPECT_THAT(Pieces("!'s"), ElementsAre("!'", "s"));
  EXPECT_THAT(Pieces("''s"), ElementsAre("''", "s"));
  EXPECT_THAT(Pieces(" 's"), ElementsAre(" '", "s"));
  EXPECT_THAT(Pieces("'l"), ElementsAre("'", "l"));
  EXPECT_THAT(Pieces("'"), ElementsAre("'"));
}

TEST(Pretokenize, WhiteSpaceRuns) {
  EXPECT_THAT(Pieces("  a"), ElementsAre(" ", " a"));
  EXPECT_THAT(Pieces("a\n "), ElementsAre("a", "\n "));
  EXPECT_THAT(Pieces("x\r\n\t"), ElementsAre("x", "\r\n\t"));
  EXPECT_THAT(Pieces("a \n b"), ElementsAre("a", " \n", " b"));
  EXPECT_THAT(Pieces("a\n\nb"), ElementsAre("a", "\n", "\n", "b"));
  EXPECT_THAT(Pieces("   "), ElementsAre("   "));
  EXPECT_THAT(Pieces(" "), ElementsAre(" "));
  EXPECT_THAT(Pieces("a "), ElementsAre("a", " "));
  EXPECT_THAT(Pieces("\t!"), ElementsAre("\t", "!"));
  EXPECT_THAT(Pieces(" \xC2\x85" "0"), ElementsAre(" ", "\xC2\x85", "0"));
  EXPECT_THAT(Pieces("\xE3\x80\x80\xE3\x80\x80" "a"),
              ElementsAre("\xE3\x80\x80", "\xE3\x80\x80", "a"));
  // U+001C is Python-isspace but not White_Space: an "other" character.
  EXPECT_THAT(Pieces(" \x1C\x1C"), ElementsAre(" \x1C\x1C"));
}

TEST(Pretokenize, NumbersSymbolsAndMarks) {
  EXPECT_THAT(Pieces("½²Ⅻ١٢٣4567"), ElementsAre("½²Ⅻ١٢٣4567"));
  EXPECT_THAT(Pieces("❤️"), ElementsAre("❤️"));
  // ZWJ family: emoji and U+200D are all "other".
  EXPECT_THAT(Pieces("a 👨‍👩‍👧"), ElementsAre("a", " 👨‍👩‍👧"));
  // Combining mark after a letter splits the letter run.
  EXPECT_THAT(Pieces("e\xCC\x81t"), ElementsAre("e", "\xCC\x81", "t"));
  EXPECT_THAT(Pieces(std::string("a\0\0b", 4)),
              ElementsAre("a", std::string("\0\0", 2), "b"));
}

TEST(Pretokenize, IllFormedUtf8KeepsBytes) {
  EXPECT_THAT(Pieces("\xE2\x82" "a"), ElementsAre("\xE2\x82", "a"));
  EXPECT_THAT(Pieces("a\xFF\xFE" "b"), ElementsAre("a", "\xFF\xFE", "b"));
  EXPECT_THAT(Pieces(" \xFF"), ElementsAre(" \xFF"));
  EXPECT_THAT(Pieces("\xED\xA0\x80!"), ElementsAre("\xED\xA0\x80!"));
  EXPECT_THAT(Pieces("\xF0\x9F\x98"), ElementsAre("\xF0\x9F\x98"));
}

TEST(Pretokenize, PiecesConcatenateToInputOnRandomBytes) {
  std::mt19937 rng(7);
  const char kAlphabet[] = "a '\n\t1!\xC2\x85\xE3\x80\x80\xFF\xCC\x81";
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    int n = rng() % 40;
    for (int i = 0; i < n; ++i) {
      text += (rng() % 4 == 0) ? static_cast<char>(rng())
                               : kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
    }
    std::vector<absl::string_view> pieces;
    Pretokenize(text, &pieces);
    for (absl::string_view p : pieces) ASSERT_FALSE(p.empty());
    ASSERT_EQ(absl::StrJoin(pieces, ""), text);
  }
}

// SPEC §3: an ill-formed subpart splits exactly as U+FFFD would (one "other"
// character). Replacing each subpart by U+FFFD (the text tiktoken would see,
// as Python's errors="replace") must give the same pieces, subpart for
// U+FFFD; tiktoken_diff_test checks U+FFFD's own splitting against tiktoken.
TEST(Pretokenize, IllFormedSubpartsSplitLikeReplacementCharacter) {
  std::mt19937 rng(13);
  const unsigned char kBytes[] = {'a', ' ', '1', '!', '\'', 's', '\n', 0x80,
                                  0xC3, 0xA9, 0xE2, 0x82, 0xF0, 0x9F, 0xED,
                                  0xA0, 0xFF, 0xC2, 0x85};
  for (int iter = 0; iter < 5000; ++iter) {
    std::string raw, replaced;
    std::vector<size_t> raw_ends, replaced_ends;  // character boundaries
    const int n = rng() % 24;
    for (int i = 0; i < n; ++i) raw += static_cast<char>(kBytes[rng() % 19]);
    const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
    const auto* end = p + raw.size();
    while (p < end) {
      Utf8Char c = DecodeUtf8(p, end);
      replaced += c.valid ? std::string(reinterpret_cast<const char*>(p),
                                        c.length)
                          : std::string("\xEF\xBF\xBD");
      p += c.length;
      raw_ends.push_back(p - reinterpret_cast<const unsigned char*>(raw.data()));
      replaced_ends.push_back(replaced.size());
    }
    std::vector<absl::string_view> a, b;
    Pretokenize(raw, &a);
    Pretokenize(replaced, &b);
    ASSERT_EQ(a.size(), b.size()) << absl::CHexEscape(raw);
    size_t end_a = 0, end_b = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      end_a += a[i].size();
      end_b += b[i].size();
      // Piece i ends after the same number of characters in both.
      auto ka = std::find(raw_ends.begin(), raw_ends.end(), end_a);
      auto kb = std::find(replaced_ends.begin(), replaced_ends.end(), end_b);
      ASSERT_EQ(ka - raw_ends.begin(), kb - replaced_ends.begin())
          << absl::CHexEscape(raw);
    }
  }
}

TEST(PretokenizeRange, ChunksAtSafeCutsMatchWholeSegment) {
  std::mt19937 rng(11);
  const char* kWords[] = {"the", " cat", "\n", "\n\n", "  ", " \n", "'s",
                          "42", "!", "\xE3\x80\x80", "\xFF", "\t", "Z"};
  for (int iter = 0; iter < 500; ++iter) {
    std::string text;
    int n = rng() % 200;
    for (int i = 0; i < n; ++i) text += kWords[rng() % 13];
    std::vector<absl::string_view> whole;
    Pretokenize(text, &whole);
    std::vector<absl::string_view> chunked;
    size_t begin = 0;
    while (begin < text.size()) {
      size_t cut = NextSafeCut(text, begin + 1 + rng() % 8);
      if (cut == absl::string_view::npos) cut = text.size();
      ASSERT_EQ(PretokenizeRange(text, begin, cut, &chunked), cut);
      begin = cut;
    }
    ASSERT_EQ(whole, chunked) << text;
  }
}

TEST(SplitOnSpecial, Segments) {
  std::vector<absl::string_view> s;
  SplitOnSpecial("a<|e|>b<|e|><|e|>", "<|e|>", &s);
  EXPECT_THAT(s, ElementsAre("a", "b", "", ""));
  s.clear();
  SplitOnSpecial("", "<|e|>", &s);
  EXPECT_THAT(s, ElementsAre(""));
  s.clear();
  SplitOnSpecial("<|e<|e|>|>", "<|e|>", &s);
  EXPECT_THAT(s, ElementsAre("<|e", "|>"));
}

}  // namespace
}  // namespace coppelius
