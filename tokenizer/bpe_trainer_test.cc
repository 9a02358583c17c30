#include "tokenizer/bpe_trainer.h"

#include <pthread.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "common/file_io.h"
#include "gtest/gtest.h"
#include "tokenizer/encoder.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocabulary.h"
#include "common/refuse_threads.h"

namespace coppelius {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// Independent naive reference: sequential std::map counting, and a trainer
// that recounts every pair from scratch before each merge.

std::map<std::string, uint64_t> NaiveCounts(absl::string_view corpus) {
  std::map<std::string, uint64_t> counts;
  std::vector<absl::string_view> segments;
  SplitOnSpecial(corpus, "<|endoftext|>", &segments);
  for (absl::string_view segment : segments) {
    std::vector<absl::string_view> pieces;
    Pretokenize(segment, &pieces);
    for (absl::string_view p : pieces) ++counts[std::string(p)];
  }
  return counts;
}

// Returns the tokens by rank, or fewer if the pairs run out.
std::vector<std::string> NaiveTrain(const std::map<std::string, uint64_t>& counts,
                                    int vocab_size) {
  std::vector<std::string> tokens;
  std::map<std::string, int> id_of;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(std::string(1, static_cast<char>(b)));
    id_of[tokens.back()] = b;
  }
  // Words as lists of ids.
  std::vector<std::pair<std::vector<int>, uint64_t>> words;
  for (const auto& [bytes, count] : counts) {
    std::vector<int> ids;
    for (unsigned char ch : bytes) ids.push_back(ch);
    words.push_back({ids, count});
  }
  std::set<std::pair<int, int>> skipped;
  while (static_cast<int>(tokens.size()) < vocab_size - 1) {
    std::map<std::pair<int, int>, uint64_t> pair_counts;
    for (const auto& [ids, count] : words) {
      for (size_t i = 0; i + 1 < ids.size(); ++i) {
        pair_counts[{ids[i], ids[i + 1]}] += count;
      }
    }
    // Highest count; std::map iterates pairs ascending, so the first of the
    // highest wins ties.
    std::pair<int, int> best{-1, -1};
    uint64_t best_count = 0;
    for (const auto& [pair, count] : pair_counts) {
      if (skipped.count(pair)) continue;
      if (count > best_count) {
        best = pair;
        best_count = count;
      }
    }
    if (best_count == 0) break;
    std::string merged = tokens[best.first] + tokens[best.second];
    std::vector<absl::string_view> pieces;
    Pretokenize(merged, &pieces);
    if (pieces.size() != 1) {
      skipped.insert(best);
      continue;
    }
    int c;
    if (id_of.count(merged)) {
      c = id_of[merged];
    } else {
      c = static_cast<int>(tokens.size());
      tokens.push_back(merged);
      id_of[merged] = c;
    }
    for (auto& [ids, count] : words) {
      std::vector<int> out;
      for (size_t i = 0; i < ids.size();) {
        if (i + 1 < ids.size() && ids[i] == best.first &&
            ids[i + 1] == best.second) {
          out.push_back(c);
          i += 2;
        } else {
          out.push_back(ids[i++]);
        }
      }
      ids = out;
    }
  }
  return tokens;
}

std::vector<std::string> Merges(const std::vector<std::string>& tokens) {
  return std::vector<std::string>(tokens.begin() + 256, tokens.end());
}

// Random text over a small alphabet, so that many merges happen: words of
// letters (ASCII and 2-byte), numbers, punctuation, contractions, runs of
// spaces and newlines, invalid UTF-8, document separators.
std::string RandomCorpus(uint32_t seed, size_t approx_bytes,
                         bool separators = true) {
  std::mt19937 rng(seed);
  const std::vector<std::string> syllables = {
      "a", "b", "ab", "ba", "aa", "é", "ée", "c", "abc", "bca", "ca", "e"};
  const std::vector<std::string> glue = {
      " ", " ", " ", "  ", "\n", "\n\n", ", ", ". ", "'s ", "'ll ", "'re",
      " 12", "3", " --", "\xff", "\xc3", "  \n", "\t"};
  std::string out;
  while (out.size() < approx_bytes) {
    int n = 1 + rng() % 4;
    for (int i = 0; i < n; ++i) out += syllables[rng() % syllables.size()];
    out += glue[rng() % glue.size()];
    if (separators && rng() % 500 == 0) out += "<|endoftext|>";
  }
  return out;
}

// ---------------------------------------------------------------------------
// Known answers worked out by hand.

TEST(TrainBpe, KnownAnswerRepeatedWord) {
  // Pieces "ab", " ab", " ab": (a,b) 3, (' ',a) 2 -> "ab" (256); then
  // (' ', 256) 2 -> " ab" (257).
  auto r = TrainBpe("ab ab ab", 259, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Merges(r->tokens), ElementsAre("ab", " ab"));
  EXPECT_EQ(r->total_pretokens, 3u);
  EXPECT_EQ(r->distinct_pretokens, 2u);
}

TEST(TrainBpe, TiesBrokenByLeftThenRightIdAscending) {
  // Pieces "xy", " ba": (x,y), (' ',b), (b,a) all 1. (32,98) is smallest ->
  // " b"; then (120,121) < (256,97) -> "xy"; then " ba".
  auto r = TrainBpe("xy ba", 260, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Merges(r->tokens), ElementsAre(" b", "xy", " ba"));
}

TEST(TrainBpe, TieOnLeftIdBrokenByRightId) {
  // "ac" and "ab" once each: same left id 97; (97,98) before (97,99).
  auto r = TrainBpeOnCounts({{"ac", 1}, {"ab", 1}}, 259);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Merges(r->tokens), ElementsAre("ab", "ac"));
}

TEST(TrainBpe, OverlappingPairsCountTwice) {
  // "aaaa" x1 holds (a,a) three times; "ab" x3 holds (a,b) 3 times. Tie at
  // 3 -> (97,97) first: "aa". Then (256,256) 1 < (a,b) 3 -> "ab"; then
  // "aaaa". (Counting without overlap would give "ab" first.)
  auto r = TrainBpeOnCounts({{"aaaa", 1}, {"ab", 3}}, 260);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Merges(r->tokens), ElementsAre("aa", "ab", "aaaa"));
}

TEST(TrainBpe, MergesLeftToRightWithoutOverlap) {
  // "aaa" x5: (a,a) 10 -> "aa"; word becomes [aa, a], so (256, 97) 5 ->
  // "aaa". A right-to-left merge would give [a, aa] and (97, 256).
  auto r = TrainBpeOnCounts({{"aaa", 5}}, 259);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Merges(r->tokens), ElementsAre("aa", "aaa"));
}

TEST(TrainBpe, ContractionFragmentIsSkipped) {
  // Two documents "'ll": pieces "'ll" x2. (',l) 2 and (l,l) 2 tie; (39,108)
  // wins, but "'l" pre-tokenizes as "'" + "l", so it is skipped; then "ll"
  // and "'ll".
  auto r = TrainBpe("'ll<|endoftext|>'ll", 259, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Merges(r->tokens), ElementsAre("ll", "'ll"));
  EXPECT_EQ(r->skipped_pairs, 1u);
}

TEST(TrainBpe, SpecialTokenIsNeverTrained) {
  // Without the cut, "<|endoftext|>" pieces ("<|", "endoftext", "|>") would
  // dominate. Only "ab" remains to merge.
  auto r = TrainBpe("ab<|endoftext|><|endoftext|>ab<|endoftext|>", 258, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Merges(r->tokens), ElementsAre("ab"));
  EXPECT_FALSE(TrainBpe("ab<|endoftext|>ab", 259, 1).ok());
}

TEST(TrainBpe, CorpusTooSmallIsInvalidArgument) {
  auto r = TrainBpe("ab ab", 300, 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("corpus too small"));
  EXPECT_THAT(r.status().message(), HasSubstr("after 2 merges"));
}

// A corpus of one repeated letter is large but runs out of pairs quickly:
// "aaaa…" merges into "aa", "aaaa", … one new token per doubling (31 merges
// for 2^31 letters; here 2^16), and the message says repetitive as well as
// small.
TEST(TrainBpe, RepetitiveCorpusIsNamedAsSuch) {
  auto r = TrainBpe(std::string(1 << 16, 'a'), 300, 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("too repetitive"));
  EXPECT_THAT(r.status().message(), HasSubstr("after 16 merges"));
}

TEST(TrainBpe, VocabSizeBelow257IsInvalidArgument) {
  auto r = TrainBpe("ab", 256, 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("vocab_size 256: expected >= 257"));
  auto zero = TrainBpe("", 257, 1);  // no merges needed
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->tokens.size(), 256u);
}

// A huge V used to abort with std::bad_alloc (its rank table is reserved
// before training); it is refused at once.
TEST(TrainBpe, VocabSizeAbove2To22IsInvalidArgument) {
  for (int v : {4194305, 100000000, 999999999, 2147483647}) {
    auto r = TrainBpe("ab ab", v, 1);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << v;
    EXPECT_THAT(r.status().message(),
                HasSubstr(absl::StrCat("vocab_size ", v,
                                       ": expected at most 4194304 (2^22")));
    EXPECT_EQ(TrainBpeOnCounts({{"ab", 1}}, v).status().code(),
              absl::StatusCode::kInvalidArgument);
    TrainVocabularyOptions o;
    o.corpus_path = "/nonexistent/corpus";  // refused before it is read
    o.output_path = "-";
    o.vocab_size = v;
    o.progress = false;
    EXPECT_EQ(RunTrainVocabulary(o).code(), absl::StatusCode::kInvalidArgument);
  }
  // 2^22 itself passes the check (then this corpus is too small for it).
  auto r = TrainBpe("ab ab", 4194304, 1);
  EXPECT_THAT(r.status().message(), HasSubstr("corpus too small"));
}

TEST(TrainBpe, BadCountsAreInvalidArgument) {
  EXPECT_EQ(TrainBpeOnCounts({{"", 1}}, 257).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainBpeOnCounts({{"ab", 0}}, 257).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// Against the naive reference.

TEST(TrainBpe, EqualsNaiveReferenceOnRandomCorpora) {
  uint64_t duplicates = 0, skipped = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    std::string corpus = RandomCorpus(seed, 3000 + 700 * seed);
    auto counts = NaiveCounts(corpus);
    // As many merges as the naive trainer can do, capped.
    std::vector<std::string> want = NaiveTrain(counts, 256 + 1 + 400);
    int vocab_size = static_cast<int>(want.size()) + 1;
    auto got = TrainBpe(corpus, vocab_size, 1 + seed % 3);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->tokens, want) << "seed " << seed;
    duplicates += got->duplicate_merges;
    skipped += got->skipped_pairs;
    if (static_cast<int>(want.size()) < 256 + 400) {
      // The naive trainer ran out of pairs: one more rank must fail.
      EXPECT_EQ(TrainBpe(corpus, vocab_size + 1, 2).status().code(),
                absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_GT(skipped, 0u) << "the random corpora should exercise rule 5";
  std::printf("duplicate merges %lu, skipped pairs %lu over 12 corpora\n",
              static_cast<unsigned long>(duplicates),
              static_cast<unsigned long>(skipped));
}

TEST(TrainBpeOnCounts, EqualsNaiveReferenceOnRandomCounts) {
  // Arbitrary byte strings (not pre-tokenizer output) with random counts,
  // so that pairs form in orders the pre-tokenizer would not give.
  uint64_t duplicates = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    std::map<std::string, uint64_t> counts;
    const char alphabet[] = "abcab";
    for (int i = 0; i < 30; ++i) {
      std::string w;
      int n = 2 + rng() % 9;
      for (int k = 0; k < n; ++k) w += alphabet[rng() % 5];
      counts[w] += 1 + rng() % 20;
    }
    std::vector<std::string> want = NaiveTrain(counts, 256 + 1 + 200);
    std::vector<std::pair<std::string, uint64_t>> input(counts.begin(),
                                                        counts.end());
    std::shuffle(input.begin(), input.end(), rng);
    auto got = TrainBpeOnCounts(input, static_cast<int>(want.size()) + 1);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->tokens, want) << "seed " << seed;
    duplicates += got->duplicate_merges;
  }
  std::printf("duplicate merges over 40 random count sets: %lu\n",
              static_cast<unsigned long>(duplicates));
}

TEST(TrainBpe, LongPreTokensEqualNaiveReference) {
  // Single pre-tokens of many bytes (letter runs over a 3-letter alphabet)
  // exercise overlapping and consecutive merges inside one pre-token.
  std::mt19937 rng(3);
  std::string corpus;
  for (int doc = 0; doc < 3; ++doc) {
    for (int i = 0; i < 6000; ++i) corpus += "abc"[rng() % 3];
    corpus += doc == 1 ? " " : "<|endoftext|>";
    for (int i = 0; i < 3000; ++i) corpus += "aab"[rng() % 3];
    corpus += "<|endoftext|>";
  }
  auto counts = NaiveCounts(corpus);
  EXPECT_LE(counts.size(), 8u);
  std::vector<std::string> want = NaiveTrain(counts, 256 + 1 + 300);
  auto got = TrainBpe(corpus, static_cast<int>(want.size()) + 1, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tokens, want);
}

TEST(TrainBpe, HugePreTokenIsFast) {
  // One 4 MB pre-token: the cost per merge is the pair's occurrences, not
  // the pre-token length (a full rescan per merge would take minutes).
  std::mt19937 rng(4);
  std::string corpus;
  for (int i = 0; i < (4 << 20); ++i) corpus += "abcdefgh"[rng() % 8];
  auto got = TrainBpe(corpus, 4000, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->distinct_pretokens, 1u);
  EXPECT_EQ(got->tokens.size(), 3999u);
}

TEST(TrainBpe, IdenticalForAnyThreadCount) {
  // Several documents plus one segment longer than the 1 MiB counting chunk
  // (cut at safe boundaries), so threads really split the work.
  std::string corpus = RandomCorpus(77, 600000);
  corpus += "<|endoftext|>";
  corpus += RandomCorpus(78, 2500000, /*separators=*/false);
  corpus += "<|endoftext|>";
  corpus += RandomCorpus(79, 300000);
  auto one = TrainBpe(corpus, 1000, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  for (int threads : {2, 3, 4}) {
    auto many = TrainBpe(corpus, 1000, threads);
    ASSERT_TRUE(many.ok()) << many.status();
    EXPECT_EQ(many->tokens, one->tokens) << threads << " threads";
    EXPECT_EQ(many->total_pretokens, one->total_pretokens);
    EXPECT_EQ(many->distinct_pretokens, one->distinct_pretokens);
  }
  // The parallel counting equals naive sequential counting.
  auto counts = NaiveCounts(corpus);
  uint64_t total = 0;
  for (const auto& [piece, count] : counts) total += count;
  EXPECT_EQ(one->total_pretokens, total);
  EXPECT_EQ(one->distinct_pretokens, counts.size());
  auto from_counts = TrainBpeOnCounts(
      std::vector<std::pair<std::string, uint64_t>>(counts.begin(),
                                                    counts.end()),
      1000);
  ASSERT_TRUE(from_counts.ok());
  EXPECT_EQ(from_counts->tokens, one->tokens);
}


TEST(TrainBpe, ThreadsAboveMaximumAreInvalidArgument) {
  auto r = TrainBpe("ab ab ab", 259, 1025);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("threads 1025: expected at most 1024"));
}

TEST(TrainBpe, RefusedThreadIsResourceExhaustedNotAnAbort) {
  absl::StatusOr<BpeTrainingResult> r;
  {
    RefuseNewThreads refuse;
    r = TrainBpe("ab ab ab", 259, 4);
  }
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted)
      << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("could not start counting thread 2 of 4"));
  // Threads allowed again: the same call trains ("ab" = 256, " ab" = 257).
  r = TrainBpe("ab ab ab", 259, 4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens[256], "ab");
  EXPECT_EQ(r->tokens[257], " ab");
}

TEST(TrainBpe, EveryTokenEncodesToItself) {
  std::string corpus = RandomCorpus(5, 400000);
  auto r = TrainBpe(corpus, 1200, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  auto vocabulary = Vocabulary::FromTokens(r->tokens);
  ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
  Encoder encoder(*std::move(vocabulary));
  for (uint32_t rank = 0; rank < r->tokens.size(); ++rank) {
    std::vector<uint32_t> ids;
    encoder.Encode(r->tokens[rank], /*allow_special=*/true, &ids);
    ASSERT_THAT(ids, ElementsAre(rank))
        << "token \"" << absl::CEscape(r->tokens[rank]) << "\"";
  }
}

TEST(RunTrainVocabulary, WritesTiktokenFile) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string corpus_path = dir + "/corpus.txt";
  const std::string corpus = "ab ab ab";
  FILE* f = fopen(corpus_path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  fwrite(corpus.data(), 1, corpus.size(), f);
  fclose(f);
  TrainVocabularyOptions options;
  options.corpus_path = corpus_path;
  options.output_path = dir + "/vocab.tiktoken";
  options.vocab_size = 259;
  options.progress = false;
  ASSERT_TRUE(RunTrainVocabulary(options).ok());
  auto vocabulary = Vocabulary::Load(options.output_path, 259);
  ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
  EXPECT_EQ(vocabulary->token(256), "ab");
  EXPECT_EQ(vocabulary->token(257), " ab");
  // Rank 257 line, written independently: base64(" ab") = "IGFi".
  std::string text;
  f = fopen(options.output_path.c_str(), "rb");
  char buf[8192];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  fclose(f);
  EXPECT_THAT(text, HasSubstr("\nYWI= 256\nIGFi 257\n"));
  EXPECT_TRUE(absl::StartsWith(text, "AA== 0\nAQ== 1\n"));

  options.corpus_path = dir + "/missing.txt";
  EXPECT_EQ(RunTrainVocabulary(options).code(), absl::StatusCode::kNotFound);
  options.corpus_path = corpus_path;
  options.vocab_size = 400;
  absl::Status s = RunTrainVocabulary(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("corpus.txt"));
}

}  // namespace
}  // namespace coppelius

namespace coppelius {
namespace {

TEST(RunTrainVocabulary, RefusesToWriteOverItsCorpus) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string corpus = std::string(dir ? dir : "/tmp") + "/own_corpus.txt";
  ASSERT_TRUE(WriteFileAtomically(corpus, "the cat the cat").ok());
  TrainVocabularyOptions o;
  o.corpus_path = corpus;
  o.output_path = corpus;
  o.vocab_size = 260;
  o.progress = false;
  absl::Status s = RunTrainVocabulary(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("names the corpus"), std::string::npos) << s;
  EXPECT_EQ(*ReadFile(corpus), "the cat the cat");
}

TEST(RunTrainVocabulary, RefusesToReplaceACheckpoint) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string base = std::string(dir ? dir : "/tmp");
  const std::string corpus = base + "/corpus_for_victim.txt";
  const std::string victim = base + "/victim.ckpt";
  const std::string checkpoint("COPPCKPT\x01\0\0\0rest", 16);
  ASSERT_TRUE(WriteFileAtomically(corpus, "the cat the cat").ok());
  ASSERT_TRUE(WriteFileAtomically(victim, checkpoint).ok());
  TrainVocabularyOptions o;
  o.corpus_path = corpus;
  o.output_path = victim;
  o.vocab_size = 258;
  o.progress = false;
  absl::Status s = RunTrainVocabulary(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("is a Coppelius checkpoint"), std::string::npos)
      << s;
  EXPECT_EQ(*ReadFile(victim), checkpoint);
  // An ordinary file is replaced by the vocabulary (258 ids = 257 lines).
  const std::string old_vocab = base + "/old.tiktoken";
  ASSERT_TRUE(WriteFileAtomically(old_vocab, "previous contents\n").ok());
  o.output_path = old_vocab;
  ASSERT_TRUE(RunTrainVocabulary(o).ok());
  const std::string written = *ReadFile(old_vocab);
  EXPECT_EQ(std::count(written.begin(), written.end(), '\n'), 257);
}

}  // namespace
}  // namespace coppelius
