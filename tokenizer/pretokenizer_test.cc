#include "tokenizer/pretokenizer.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

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
