#include "tokenizer/encoder.h"

#include <pthread.h>
#include <time.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocabulary.h"
#include "common/refuse_threads.h"

namespace coppelius {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Vocabulary MakeVocabulary(const std::vector<std::string>& merged) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
  tokens.insert(tokens.end(), merged.begin(), merged.end());
  auto v = Vocabulary::FromTokens(tokens);
  EXPECT_TRUE(v.ok()) << v.status();
  return *std::move(v);
}

// Reference: tiktoken's byte_pair_merge written directly over byte ranges
// (src/lib.rs): merge the adjacent parts whose concatenated bytes have the
// lowest rank, leftmost on ties; quadratic, for testing only.
std::vector<uint32_t> ReferenceBpe(const Vocabulary& v,
                                   const std::string& piece) {
  if (v.Rank(piece) != Vocabulary::kNoRank) return {v.Rank(piece)};
  std::vector<size_t> starts;
  for (size_t i = 0; i <= piece.size(); ++i) starts.push_back(i);
  while (starts.size() > 2) {
    uint32_t best = Vocabulary::kNoRank;
    size_t best_i = 0;
    for (size_t i = 0; i + 2 < starts.size(); ++i) {
      uint32_t r = v.Rank(piece.substr(starts[i], starts[i + 2] - starts[i]));
      if (r < best) {
        best = r;
        best_i = i;
      }
    }
    if (best == Vocabulary::kNoRank) break;
    starts.erase(starts.begin() + best_i + 1);
  }
  std::vector<uint32_t> ids;
  for (size_t i = 0; i + 1 < starts.size(); ++i) {
    ids.push_back(v.Rank(piece.substr(starts[i], starts[i + 1] - starts[i])));
  }
  return ids;
}

std::vector<uint32_t> EncodePiece(const Encoder& e, const std::string& piece) {
  std::vector<uint32_t> ids;
  e.EncodePiece(piece, &ids);
  return ids;
}

TEST(Encoder, KnownMerges) {
  // 256 "ab", 257 "bc", 258 "abc", 259 "aa".
  Encoder e(MakeVocabulary({"ab", "bc", "abc", "aa"}));
  EXPECT_THAT(EncodePiece(e, "abc"), ElementsAre(258));  // whole piece
  // ab (256) beats bc (257); then "ab"+"c" = "abc" (258).
  EXPECT_THAT(EncodePiece(e, "abcb"), ElementsAre(258, 'b'));
  // Leftmost on ties.
  EXPECT_THAT(EncodePiece(e, "aaa"), ElementsAre(259, 'a'));
  EXPECT_THAT(EncodePiece(e, "aaaa"), ElementsAre(259, 259));
  EXPECT_THAT(EncodePiece(e, "xbc"), ElementsAre('x', 257));
}

TEST(Encoder, WholePieceShortcutBeatsMergeOrder) {
  // "abc" is a token but unreachable by merges ("ab", "bc" absent): tiktoken
  // still emits it whole when the piece is exactly "abc".
  Encoder e(MakeVocabulary({"abc"}));
  EXPECT_THAT(EncodePiece(e, "abc"), ElementsAre(256));
  EXPECT_THAT(EncodePiece(e, "abcd"), ElementsAre('a', 'b', 'c', 'd'));
}

TEST(Encoder, MatchesReferenceOnRandomPiecesShortAndLong) {
  std::vector<std::string> merged = {"ab", "ba", "aa", "bb", "aab", "abab",
                                     "bba", "aaaa", "abba", "ca", "cab",
                                     "aaaaaaaa", "babab", "cc", "ccc"};
  Vocabulary v = MakeVocabulary(merged);
  Encoder e(v);
  std::mt19937 rng(3);
  for (int iter = 0; iter < 3000; ++iter) {
    size_t n = 1 + rng() % (iter % 10 == 0 ? 600 : 150);
    std::string piece;
    for (size_t i = 0; i < n; ++i) piece += "abc"[rng() % 3];
    ASSERT_EQ(EncodePiece(e, piece), ReferenceBpe(v, piece)) << piece;
  }
}

TEST(Encoder, SpecialTokens) {
  Encoder e(MakeVocabulary({"ab"}));
  const uint32_t eot = e.end_of_text_id();
  EXPECT_EQ(eot, 257u);
  std::vector<uint32_t> ids;
  e.Encode("ab<|endoftext|>ab", true, &ids);
  EXPECT_THAT(ids, ElementsAre(256, 257, 256));
  ids.clear();
  e.Encode("ab<|endoftext|>ab", false, &ids);
  // Pieces "ab" "<|" "endoftext" "|>" "ab": 1 + 2 + 9 + 2 + 1 ids.
  EXPECT_EQ(ids.size(), 15u);
  EXPECT_EQ(ids.front(), 256u);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eot), 0);
  // Whitespace right before the special ends its segment: "\s++$".
  ids.clear();
  e.Encode("a  <|endoftext|>", true, &ids);
  std::vector<absl::string_view> pieces;
  Pretokenize("a  ", &pieces);
  EXPECT_THAT(pieces, ElementsAre("a", "  "));
  EXPECT_THAT(ids, ElementsAre('a', ' ', ' ', eot));
}

TEST(Encoder, DecodeRoundTripsRandomBytes) {
  Encoder e(MakeVocabulary({"ab", " t", "he", " the", "\xFF\xFE", "\n\n"}));
  std::mt19937 rng(5);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    size_t n = rng() % 100;
    for (size_t i = 0; i < n; ++i) {
      text += (rng() % 2) ? static_cast<char>(rng()) : " the\nab"[rng() % 7];
    }
    if (iter % 7 == 0) text += "<|endoftext|>";
    for (bool allow : {false, true}) {
      std::vector<uint32_t> ids;
      e.Encode(text, allow, &ids);
      std::string back;
      ASSERT_TRUE(e.Decode(ids, &back).ok());
      ASSERT_EQ(back, text);
    }
  }
}

TEST(Encoder, DecodeRejectsOutOfRangeIds) {
  Encoder e(MakeVocabulary({}));
  std::string out;
  absl::Status s = e.Decode({1, 256, 257}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("id 257 at position 2 is out of range [0, 257)"));
  out.clear();
  EXPECT_TRUE(e.Decode({256}, &out).ok());
  EXPECT_EQ(out, "<|endoftext|>");
}

TEST(Encoder, ParallelOutputIndependentOfThreadCount) {
  Encoder e(MakeVocabulary({"th", "the", " the", "e ", "\n\n", "ca", "cat"}));
  std::mt19937 rng(9);
  const char* words[] = {"the", " cat", "\n", "\n\n", "  ", "<|endoftext|>",
                         "x", "\xE3\x80\x80", "'s", " 42"};
  std::string text;
  while (text.size() < (3u << 20)) text += words[rng() % 10];
  // Also long segments (cut inside) between a few specials.
  std::string sparse;
  while (sparse.size() < (3u << 20)) {
    sparse += (rng() % 50000 == 0) ? words[5] : words[rng() % 5];
  }
  for (const std::string& t : {text, sparse}) {
  for (bool allow : {false, true}) {
    std::vector<uint32_t> serial;
    e.Encode(t, allow, &serial);
    for (int threads : {1, 2, 3, 8}) {
      std::vector<uint32_t> parallel;
      e.EncodeParallel(t, allow, threads, &parallel);
      ASSERT_EQ(parallel, serial) << threads;
    }
  }
  }
}


TEST(Encoder, ParallelCopesWithRefusedThreads) {
  Encoder e(MakeVocabulary({"th", "the", " the", "e ", "ca", "cat"}));
  std::mt19937 rng(13);
  const char* words[] = {"the", " cat", "\n", "<|endoftext|>", " 42"};
  std::string text;
  while (text.size() < (3u << 20)) text += words[rng() % 5];
  std::vector<uint32_t> serial;
  e.Encode(text, true, &serial);
  std::vector<uint32_t> parallel;
  {
    RefuseNewThreads refuse;
    e.EncodeParallel(text, true, 8, &parallel);
  }
  EXPECT_EQ(parallel, serial);
}

// This thread's CPU time, in seconds: unlike wall time, not lengthened by
// other processes sharing the cores (Bazel runs tests side by side; on the
// 2-core CI machine a wall-time ratio of 8.1 failed a linear encoder).
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The least CPU time of three encodes of `text`.
double SecondsToEncode(const Encoder& e, const std::string& text) {
  double best = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<uint32_t> ids;
    const double t0 = ThreadCpuSeconds();
    e.Encode(text, false, &ids);
    best = std::min(best, ThreadCpuSeconds() - t0);
  }
  return best;
}

// Long runs of one character must not be quadratic: 4x the input may take
// at most 10x the CPU time (linear: 4x, n log n: ~4.4x, quadratic: 16x). A
// complexity check with a wide margin, not a speed target (those live in
// encoder_benchmark).
TEST(Encoder, LongRunsAreNotQuadratic) {
  std::vector<std::string> merged;
  for (const char* c : {"a", " ", "^"}) {
    for (int len = 2; len <= 64; len *= 2) merged.push_back(std::string(len, *c));
  }
  Encoder e(MakeVocabulary(merged));
  for (char c : {'a', ' ', '^', '\n'}) {
    const std::string small(1 << 18, c), large(1 << 20, c);
    const std::string text_small = "x" + small + "x";
    const std::string text_large = "x" + large + "x";
    double t_small = SecondsToEncode(e, text_small);
    double t_large = SecondsToEncode(e, text_large);
    EXPECT_LT(t_large, 10 * t_small + 0.05)
        << "char " << int(c) << ": 256 KiB " << t_small << " s, 1 MiB "
        << t_large << " s";
  }
}

// Many tokens split several ways (every prefix and suffix chain of tokens
// over {a, b}): the (left, right) -> rank table must give what tiktoken's
// lookup of the concatenated bytes gives.
TEST(Encoder, MatchesReferenceWithNestedTokens) {
  std::mt19937 rng(11);
  std::vector<std::string> merged;
  absl::flat_hash_set<std::string> seen;
  while (merged.size() < 400) {
    std::string t;
    const size_t n = 2 + rng() % 11;
    for (size_t i = 0; i < n; ++i) t += "ab"[rng() % 2];
    if (seen.insert(t).second) merged.push_back(t);
  }
  Vocabulary v = MakeVocabulary(merged);
  Encoder e(v);
  for (int iter = 0; iter < 2000; ++iter) {
    const size_t n = 1 + rng() % (iter % 10 == 0 ? 400 : 60);
    std::string piece;
    for (size_t i = 0; i < n; ++i) piece += "ab"[rng() % 2];
    ASSERT_EQ(EncodePiece(e, piece), ReferenceBpe(v, piece)) << piece;
  }
}

// The least CPU time of three encoder builds (ThreadCpuSeconds; the
// constructor runs on the calling thread).
double SecondsToBuild(const Vocabulary& v) {
  double best = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    Vocabulary copy = v;
    const double t0 = ThreadCpuSeconds();
    Encoder e(std::move(copy));
    best = std::min(best, ThreadCpuSeconds() - t0);
  }
  return best;
}

// A valid vocabulary may hold a token of megabytes: building the encoder
// must not look up every prefix of it (a 1 MB token took 20 s). 4x the
// token may take at most 10x the CPU time (linear: 4x, quadratic: 16x).
TEST(Encoder, LongTokenBuildIsNotQuadratic) {
  std::vector<std::string> merged;
  for (int len = 2; len <= 64; len *= 2) merged.push_back(std::string(len, 'a'));
  std::vector<std::string> small = merged, large = merged;
  small.push_back(std::string(1 << 18, 'a'));
  large.push_back(std::string(1 << 20, 'a'));
  Vocabulary v_small = MakeVocabulary(small);
  Vocabulary v_large = MakeVocabulary(large);
  const double t_small = SecondsToBuild(v_small);
  const double t_large = SecondsToBuild(v_large);
  EXPECT_LT(t_large, 10 * t_small + 0.05)
      << "256 KiB token " << t_small << " s, 1 MiB token " << t_large << " s";
  Encoder e(v_large);
  EXPECT_THAT(EncodePiece(e, large.back()), ElementsAre(256 + 6));
  // "aaaa" = "aa" + "aa" merges (rank 257), never the long token.
  EXPECT_THAT(EncodePiece(e, "aaaaa"), ElementsAre(257, 'a'));
}

}  // namespace
}  // namespace coppelius
