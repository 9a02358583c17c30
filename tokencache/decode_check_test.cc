#include "tokencache/decode_check.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "tokenizer/vocabulary.h"

namespace coppelius {
namespace {

// The 256 single bytes, then `merges` (ranks 256, 257, ...); <|endoftext|>
// is the id after them.
Vocabulary Make(std::vector<std::string> merges) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
  tokens.insert(tokens.end(), merges.begin(), merges.end());
  return *Vocabulary::FromTokens(tokens);
}

std::string Check(const Vocabulary& v, const std::string& source,
                  const std::vector<uint32_t>& ids, size_t split = 0) {
  CacheDecodeCheck check(v, source, "c.tok");
  const absl::Span<const uint32_t> all(ids);
  check.Feed(0, all.subspan(0, split));
  check.Feed(split, all.subspan(split));
  return check.Difference();
}

// Ids written by hand for "abcab<|endoftext|>x" (19 bytes) with the
// vocabulary {..., 256 "ab", 257 "abc"}, <|endoftext|> = 258.
TEST(CacheDecodeCheck, TheSourcesIdsPassAndEveryCutIsSeen) {
  const Vocabulary v = Make({"ab", "abc"});
  const std::string source = "abcab<|endoftext|>x";
  const std::vector<uint32_t> ids = {257, 256, 258, 'x'};
  for (size_t split : {0, 1, 2, 4}) {
    EXPECT_EQ(Check(v, source, ids, split), "") << split;
  }
  // A cache cut short at any id boundary (what a truncate to 16 + 4 k
  // bytes leaves): the source bytes left undecoded are named.
  EXPECT_EQ(Check(v, source, {257, 256, 258}),
            "c.tok: its 3 ids decode to the first 18 of the source's 19 "
            "bytes: a cache cut short");
  EXPECT_EQ(Check(v, source, {}),
            "c.tok: its 0 ids decode to the first 0 of the source's 19 "
            "bytes: a cache cut short");
  EXPECT_EQ(Check(v, "", {}), "");
}

TEST(CacheDecodeCheck, AnotherVocabularysIdsDiffer) {
  const std::string source = "abcab<|endoftext|>x";
  // The same ids read with the merges in another order.
  EXPECT_EQ(Check(Make({"abc", "ab"}), source, {257, 256, 258, 'x'}),
            "c.tok: token 1 (byte offset 20), id 256, decodes to \"abc\" but "
            "the source has \"cab\" at byte 2: not this source's encoding "
            "with this vocabulary (made with another?)");
  // A smaller vocabulary: its special token is another id.
  EXPECT_EQ(Check(Make({"ab"}), source, {257, 256, 258, 'x'}),
            "c.tok: token 0 (byte offset 16), id 257, decodes to "
            "\"<|endoftext|>\" but the source has \"abcab<|endoft\" at "
            "byte 0: not this source's encoding with this vocabulary (made "
            "with another?)");
  EXPECT_EQ(Check(Make({"ab"}), source, {256, 'c', 256, 257, 'x', 300}),
            "c.tok: token 5 (byte offset 36) is id 300, not in the "
            "vocabulary (258 ids)");
}

}  // namespace
}  // namespace coppelius
