#include "tokenizer/vocabulary.h"

#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

using ::testing::HasSubstr;

// RFC 4648 §10 test vectors.
TEST(Base64, Rfc4648Vectors) {
  const std::pair<std::string, std::string> kVectors[] = {
      {"", ""},         {"f", "Zg=="},     {"fo", "Zm8="},
      {"foo", "Zm9v"},  {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : kVectors) {
    EXPECT_EQ(Base64Encode(plain), encoded);
    std::string decoded;
    size_t bad = 0;
    ASSERT_TRUE(Base64Decode(encoded, &decoded, &bad)) << encoded;
    EXPECT_EQ(decoded, plain);
  }
  // Bytes 0xFB 0xFF use the last two alphabet characters.
  EXPECT_EQ(Base64Encode("\xFB\xFF"), "+/8=");
}

TEST(Base64, RejectsNonCanonical) {
  std::string out;
  size_t bad = 0;
  EXPECT_FALSE(Base64Decode("Zg=", &out, &bad));    // length
  EXPECT_FALSE(Base64Decode("Zh==", &out, &bad));   // nonzero pad bits
  EXPECT_EQ(bad, 1u);
  EXPECT_FALSE(Base64Decode("Zm9=Zm9v", &out, &bad));  // '=' inside
  EXPECT_EQ(bad, 3u);
  EXPECT_FALSE(Base64Decode("Z=9v", &out, &bad));
  EXPECT_FALSE(Base64Decode("Zm=v", &out, &bad));
  EXPECT_FALSE(Base64Decode("Zm9-", &out, &bad));  // urlsafe alphabet
  EXPECT_EQ(bad, 3u);
  EXPECT_FALSE(Base64Decode("Zm 9", &out, &bad));
}

// The 256 single-byte lines, then `extra` merged tokens.
std::string RankFile(const std::vector<std::string>& extra) {
  std::string s;
  for (int b = 0; b < 256; ++b) {
    absl::StrAppend(&s, Base64Encode(std::string(1, static_cast<char>(b))),
                    " ", b, "\n");
  }
  for (size_t i = 0; i < extra.size(); ++i) {
    absl::StrAppend(&s, Base64Encode(extra[i]), " ", 256 + i, "\n");
  }
  return s;
}

TEST(Vocabulary, ParsesAndRoundTrips) {
  std::string text = RankFile({"ab", "abc", " the"});
  auto v = Vocabulary::Parse(text, "v.tiktoken", 260);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->num_ranks(), 259u);
  EXPECT_EQ(v->vocab_size(), 260u);
  EXPECT_EQ(v->end_of_text_id(), 259u);
  EXPECT_EQ(v->Rank("abc"), 257u);
  EXPECT_EQ(v->Rank(" the"), 258u);
  EXPECT_EQ(v->Rank("A"), 65u);
  EXPECT_EQ(v->Rank("zz"), Vocabulary::kNoRank);
  EXPECT_EQ(v->token(256), "ab");
  EXPECT_EQ(v->Serialize(), text);
  // A known line from tiktoken's own files: " the" is "IHRoZQ==".
  EXPECT_THAT(text, HasSubstr("IHRoZQ== 258\n"));
  Vocabulary copy = *v;
  EXPECT_EQ(copy.Rank("ab"), 256u);
}

absl::Status ParseError(const std::string& text, int expected = 0) {
  return Vocabulary::Parse(text, "v.tiktoken", expected).status();
}

void ExpectDataLoss(const std::string& text, const std::string& needle) {
  absl::Status s = ParseError(text);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(needle));
  EXPECT_THAT(std::string(s.message()), HasSubstr("v.tiktoken"));
  EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos);
}

TEST(Vocabulary, HostileInputs) {
  const std::string good = RankFile({"ab"});
  ExpectDataLoss("", "empty file");
  ExpectDataLoss(good.substr(0, good.size() - 1), ":257 (byte");
  ExpectDataLoss(good.substr(0, good.size() - 1), "no newline");
  {
    std::string head = RankFile({});
    size_t pos = 0;
    for (int i = 0; i < 20; ++i) pos = head.find('\n', pos) + 1;
    ExpectDataLoss(head.substr(0, pos), "20 ranks; expected at least");
  }
  // Bad base64: '!' at the first byte of line 257.
  const size_t line257 = RankFile({}).size();
  ExpectDataLoss(RankFile({}) + "Y!== 256\n",
                 absl::StrCat(":257 (byte ", line257, "): bad base64 at byte ",
                              line257 + 1));
  ExpectDataLoss(RankFile({}) + "YWI 256\n", "not a multiple of 4");
  ExpectDataLoss(RankFile({}) + "YWJ= 256\n", "bad base64");  // pad bits
  ExpectDataLoss(RankFile({}) + "YWI=256\n", "no space");
  ExpectDataLoss(RankFile({}) + " 256\n", "empty token");
  ExpectDataLoss(RankFile({}) + "YWI= 256 \n", "not a decimal");
  ExpectDataLoss(RankFile({}) + "YWI= 0256\n", "leading zeros");
  ExpectDataLoss(RankFile({}) + "YWI= -1\n", "not a decimal");
  ExpectDataLoss(RankFile({}) + "\n", "no space");  // empty line
  ExpectDataLoss(RankFile({"ab"}) + "YWI= 257\n",
                 "token \"ab\" duplicates rank 256");
  ExpectDataLoss(RankFile({"ab"}) + "YWJj 256\n",
                 "rank 256 (duplicate or out of order); expected rank 257");
  ExpectDataLoss(RankFile({}) + "YWI= 258\n", "ranks missing");
  // A rank of only digits that cannot be a u32 id is out of range.
  ExpectDataLoss(RankFile({}) + "YWI= 99999999999\n",
                 "rank 99999999999 at byte " +
                     std::to_string(line257 + 5) +
                     " is out of range (expected < 4294967296");
  ExpectDataLoss(RankFile({}) + "YWI= 99999999999999999999\n",
                 absl::StrCat(":257 (byte ", line257,
                              "): rank 99999999999999999999 at byte ",
                              line257 + 5, " is out of range"));
  ExpectDataLoss(RankFile({}) + "YWI= 4294967296\n", "is out of range");
  ExpectDataLoss(RankFile({}) + "YWI= 4294967295\n", "ranks missing");
  // Single-byte ranks must be the bytes themselves, in order.
  std::string swapped = RankFile({});
  swapped.replace(swapped.find("QQ== 65"), 7, "Qg== 65");
  ExpectDataLoss(swapped, "rank 65 is \"B\"; expected the single byte 0x41");
  // A long token is quoted by its first 60 bytes and its length (a
  // message is one short line, not megabytes).
  const std::string long_token(1000000, 'a');
  {
    const absl::Status dup =
        ParseError(RankFile({long_token}) + Base64Encode(long_token) + " 257\n");
    EXPECT_EQ(dup.code(), absl::StatusCode::kDataLoss) << dup.message().substr(0, 200);
    EXPECT_THAT(std::string(dup.message()),
                HasSubstr("token \"" + std::string(60, 'a') +
                          "...\" (1000000 bytes) duplicates rank 256"));
    EXPECT_LT(dup.message().size(), 300u);
    std::string first_long = RankFile({});
    first_long.replace(0, first_long.find('\n'),
                       Base64Encode(long_token) + " 0");
    const absl::Status rank0 = ParseError(first_long);
    EXPECT_THAT(std::string(rank0.message()),
                HasSubstr("rank 0 is \"" + std::string(60, 'a') +
                          "...\" (1000000 bytes); expected the single byte "
                          "0x00"));
    EXPECT_LT(rank0.message().size(), 300u);
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.push_back(std::string(1, char(b)));
    t.push_back(long_token);
    t.push_back(long_token);
    const auto from_tokens = Vocabulary::FromTokens(t);
    EXPECT_THAT(std::string(from_tokens.status().message()),
                HasSubstr("...\" (1000000 bytes) duplicates rank 256"));
    EXPECT_LT(from_tokens.status().message().size(), 300u);
  }
  // CRLF line ends are not the format.
  std::string crlf = RankFile({});
  crlf.insert(crlf.find('\n'), "\r");
  ExpectDataLoss(crlf, ":1 (byte 0)");

  absl::Status s = ParseError(RankFile({"ab"}), 12288);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("258 ids; expected vocabulary size 12288"));
}

// Random truncations and byte flips: never a crash; every error is one line
// naming the file; an accepted file is a valid vocabulary that re-serializes
// to itself.
TEST(Vocabulary, MutatedFilesFailCleanly) {
  const std::string good = RankFile({"ab", "abc", " the", "\xFF\xFE"});
  std::mt19937 rng(17);
  int accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text = good;
    if (iter % 3 == 0) {
      text.resize(rng() % text.size());
    } else {
      for (int k = 1 + rng() % 3; k > 0; --k) {
        text[rng() % text.size()] = static_cast<char>(
            iter % 2 ? rng() : "= \nAZaz09+/"[rng() % 12]);
      }
    }
    auto v = Vocabulary::Parse(text, "m.tiktoken");
    if (v.ok()) {
      ++accepted;
      EXPECT_EQ(v->Serialize(), text);
      continue;
    }
    const std::string msg(v.status().message());
    ASSERT_EQ(msg.find('\n'), std::string::npos) << msg;
    ASSERT_EQ(msg.rfind("m.tiktoken", 0), 0u) << msg;
    ASSERT_EQ(v.status().code(), absl::StatusCode::kDataLoss) << msg;
  }
  EXPECT_LT(accepted, 300);
}

TEST(Vocabulary, DecodeKnownBytesAndOutOfRangeId) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
  tokens.push_back(" the");  // 256; <|endoftext|> is 257
  auto v = Vocabulary::FromTokens(tokens);
  ASSERT_TRUE(v.ok()) << v.status();
  std::string out;
  ASSERT_TRUE(v->Decode({'a', 256, 257, 0}, &out).ok());
  EXPECT_EQ(out, std::string("a the<|endoftext|>\0", 19));
  absl::Status s = v->Decode({1, 258}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("id 258 at position 1 is out of range [0, 258)"));
}

TEST(Vocabulary, LoadMissingFile) {
  auto v = Vocabulary::Load("/nonexistent/v.tiktoken");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("/nonexistent/v"));
}

TEST(Vocabulary, SaveAndLoad) {
  auto v = Vocabulary::FromTokens([] {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.push_back(std::string(1, char(b)));
    t.push_back("xy");
    return t;
  }());
  ASSERT_TRUE(v.ok()) << v.status();
  const std::string path = absl::StrCat(getenv("TEST_TMPDIR"), "/v.tiktoken");
  ASSERT_TRUE(v->Save(path).ok());
  auto w = Vocabulary::Load(path, 258);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->tokens(), v->tokens());
}

TEST(Vocabulary, FromTokensRejectsBadTokens) {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, char(b)));
  auto few = Vocabulary::FromTokens({"a"});
  EXPECT_EQ(few.status().code(), absl::StatusCode::kInvalidArgument);
  t.push_back("a");
  auto dup = Vocabulary::FromTokens(t);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dup.status().message()), HasSubstr("duplicates"));
}

}  // namespace
}  // namespace coppelius
