// File: tokenizer/bpe_trainer.h
//
// Byte-level BPE training (SPEC §3), deterministic for any thread count.
//
// Algorithm (the GPT-2 / HF `BpeTrainer` family; see
// /work/shared/notes/tokenizer.md §2):
//   1. The corpus is cut at each "<|endoftext|>" (SplitOnSpecial); the
//      special token itself is never trained. Each segment is pre-tokenized
//      (Pretokenize, tiktoken r50k semantics) and the distinct pre-tokens are
//      counted with u64 counts, in per-thread hash maps summed afterwards
//      (addition commutes, so the counts do not depend on the thread count).
//   2. Ids 0..255 are the single bytes. Every distinct pre-token becomes a
//      sequence of ids weighted by its count. Adjacent pairs are counted with
//      overlap ("aaa" holds (a,a) twice).
//   3. Repeat until ranks 0..V-2 are filled: take the pair with the highest
//      count, ties broken by (left id, right id) ascending (a total order, so
//      no hash-iteration dependence); replace its occurrences in every
//      pre-token left to right without overlap; update the counts of the
//      neighbouring pairs incrementally. Pre-tokens are linked lists of
//      symbols in one array; each pair keeps the positions where it occurs
//      and a lazy max-heap orders the pairs, so a merge costs O(occurrences
//      of the pair), even inside one huge pre-token. Memory is bounded by the
//      bytes of the distinct pre-tokens (about 30 bytes per byte, besides the
//      corpus and the counting maps).
//   4. The merged token's bytes are bytes(left) + bytes(right).
//        - If those bytes are already a token (another pair produced them
//          earlier), the merge still happens in the pre-tokens, with the
//          existing id, but adds no new id ("a merge whose bytes already form
//          a token adds no new id").
//        - Otherwise the token gets the next rank (256, 257, ...).
//      With left-to-right merging the first case cannot arise: a stretch of
//      a pre-token whose symbols never merged with its neighbours is split
//      exactly as the same bytes alone would be at that point, so all such
//      stretches with bytes T become two symbols at the same time, by the
//      same pair, and that merge turns them all into T. It is handled (and
//      counted in `duplicate_merges`) only defensively; a random search over
//      10^5 small corpora, the test corpora and the Coppelius corpus found
//      none.
//   5. A pair whose concatenated bytes do not pre-tokenize as exactly one
//      piece on their own is never merged (it is skipped for good). Such
//      pairs occur inside contractions ("'l" of "'ll", "'r", "'v") and
//      where a UTF-8 fragment meets a whole character (on the Coppelius
//      corpus: 5 pairs inside CJK words, e.g. "代" + the first byte of "码",
//      a letter then an ill-formed byte). Skipping them guarantees the SPEC
//      property that every token encodes to itself: tiktoken emits a piece
//      that is a token whole, and a token whose bytes split into two pieces
//      could never be emitted.
//   Id V-1 is reserved for "<|endoftext|>" and is not in the output.
//
// Errors: InvalidArgument for vocab_size outside [kMinVocabSize,
// kMaxVocabSize] (257 .. 2^22), threads > kMaxThreadCount
// (common/threads.h) or a corpus too small or too repetitive to fill the
// vocabulary (no pair left: the message gives how many merges were
// possible); ResourceExhausted
// if the system refuses to start a counting thread; NotFound/DataLoss/Internal
// from reading and writing files.
#ifndef COPPELIUS_TOKENIZER_BPE_TRAINER_H_
#define COPPELIUS_TOKENIZER_BPE_TRAINER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coppelius {

// The smallest V: the 256 single bytes and <|endoftext|>.
constexpr int kMinVocabSize = 257;
// The largest V (2^22 = 4,194,304; Coppelius uses 12,288): the trainer
// reserves memory for every rank up front, so a larger V fails at once with
// InvalidArgument instead of exhausting memory (ids are u32, but no corpus
// we train on fills even this many ranks).
constexpr int kMaxVocabSize = 1 << 22;

struct TrainVocabularyOptions {
  std::string corpus_path;  // text to train on; "-" = stdin
  std::string output_path;  // .tiktoken rank file; "-" = stdout
  int vocab_size = 12288;   // V, counting <|endoftext|> (id V-1, not saved);
                            // kMinVocabSize .. kMaxVocabSize
  int threads = 0;          // counting threads; <= 0: hardware concurrency
                            // (at most kMaxThreadCount, common/threads.h)
  bool progress = true;     // progress lines on stderr
};

// Reads the corpus, trains (TrainBpe), writes the tiktoken rank file
// atomically (temporary, fsync, rename, fsync of the directory). Before
// reading: InvalidArgument when the output is the corpus (output_path names
// it, or is "-" and standard output is that file: CheckOutputIsNotInput),
// FailedPrecondition when it is a Coppelius checkpoint or result file
// (CheckNotCoppeliusFile, output_checks.h).
absl::Status RunTrainVocabulary(const TrainVocabularyOptions& options);

struct BpeTrainingResult {
  // Token bytes by rank: tokens[r] for r in [0, vocab_size - 1); tokens[b]
  // is the single byte b for b < 256.
  std::vector<std::string> tokens;
  uint64_t total_pretokens = 0;     // pre-tokens in the corpus
  uint64_t distinct_pretokens = 0;  // distinct pre-tokens
  uint64_t merges = 0;              // pair merges applied (incl. duplicates)
  uint64_t duplicate_merges = 0;    // merges whose bytes were already a token
  uint64_t skipped_pairs = 0;       // pairs skipped by rule 5
};

// Trains on `corpus` (arbitrary bytes; "<|endoftext|>" separates
// documents). `threads` <= 0 means hardware concurrency (capped at
// kMaxThreadCount); the result does not depend on it. `progress` prints a
// line every few seconds to stderr. InvalidArgument for threads >
// kMaxThreadCount (common/threads.h); ResourceExhausted if the system
// refuses to start a thread.
absl::StatusOr<BpeTrainingResult> TrainBpe(absl::string_view corpus,
                                           int vocab_size, int threads,
                                           bool progress = false);

// Steps 2-5 on given pre-token counts (bytes, count > 0), e.g. for tests.
// Pre-tokens may be given in any order and may repeat (counts are summed).
absl::StatusOr<BpeTrainingResult> TrainBpeOnCounts(
    std::vector<std::pair<std::string, uint64_t>> pretoken_counts,
    int vocab_size, bool progress = false);

}  // namespace coppelius

#endif  // COPPELIUS_TOKENIZER_BPE_TRAINER_H_
