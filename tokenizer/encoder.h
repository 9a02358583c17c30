// File: tokenizer/encoder.h
//
// Byte-level BPE encoder/decoder with tiktoken 0.14 semantics (SPEC §3):
//   1. With `allow_special`, each "<|endoftext|>" in the text emits the
//      special id V - 1 and cuts the text into segments that are
//      pre-tokenized independently; otherwise it is ordinary text.
//   2. Each segment is split into pieces by Pretokenize (pretokenizer.h).
//   3. A piece whose bytes are a token is emitted whole (tiktoken's
//      whole-piece shortcut).
//   4. Otherwise tiktoken's `byte_pair_merge` (openai/tiktoken src/lib.rs):
//      start from single bytes and repeatedly merge the adjacent pair whose
//      concatenated bytes have the lowest rank, leftmost first on ties,
//      until no pair is a token. Every part is always a token, so this is
//      implemented over ids with a (left id, right id) -> rank table built
//      from every split of every token into two tokens (equivalent to
//      tiktoken's lookup of the concatenated bytes). Pieces of 128+ bytes use
//      a heap over a linked list (O(n log n)), shorter ones a linear scan.
// Ids are u32: 0..N-1 the ranks, N = V - 1 the special token.
//
// Speed (docs/PERFORMANCE.md "Tokenizer"): token and pair lookups are
// open-addressing tables; BPE results of non-token pieces are memoized in a
// per-thread PieceCache. Construction sorts the tokens and is otherwise
// linear in their total length, whatever the length of each token.
//
// Thread safety: an Encoder is immutable after construction; all methods are
// const and may be called concurrently.
#ifndef COPPELIUS_TOKENIZER_ENCODER_H_
#define COPPELIUS_TOKENIZER_ENCODER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tokenizer/vocabulary.h"

namespace coppelius {

// Memo of BPE results for pieces that are not whole tokens. One per thread;
// bounded (cleared when it grows past a few million ids).
class PieceCache {
 public:
  PieceCache() = default;
  PieceCache(const PieceCache&) = delete;
  PieceCache& operator=(const PieceCache&) = delete;

 private:
  friend class Encoder;
  struct Entry {
    uint32_t hash;
    uint32_t bytes_offset;  // into bytes_
    uint32_t length;        // piece bytes
    uint32_t ids_offset;    // into ids_
    uint32_t ids_count;
  };
  // Open addressing: slots_[i] is 0 (empty) or 1 + an index into entries_.
  std::vector<uint32_t> slots_;
  std::vector<Entry> entries_;
  std::string bytes_;
  std::vector<uint32_t> ids_;
};

class Encoder {
 public:
  explicit Encoder(Vocabulary vocabulary);

  const Vocabulary& vocabulary() const { return vocabulary_; }
  // V (ranks + the special token).
  uint32_t vocab_size() const { return vocabulary_.vocab_size(); }
  uint32_t end_of_text_id() const { return vocabulary_.end_of_text_id(); }

  // Appends the ids of `text` (arbitrary bytes) to `ids`. `cache` may be null
  // (a call-local cache is used).
  void Encode(absl::string_view text, bool allow_special,
              std::vector<uint32_t>* ids, PieceCache* cache = nullptr) const;

  // As Encode, using up to `threads` threads (<= 0: hardware concurrency;
  // at most kMaxThreadCount, common/threads.h; fewer if the system refuses
  // to start more). The output is identical to Encode's for every thread
  // count: the text is cut only at special tokens and at positions that are
  // piece boundaries whatever precedes them (NextSafeCut in pretokenizer.h).
  void EncodeParallel(absl::string_view text, bool allow_special, int threads,
                      std::vector<uint32_t>* ids) const;

  // Appends the ids of one piece (steps 3 and 4). Precondition: non-empty.
  void EncodePiece(absl::string_view piece, std::vector<uint32_t>* ids,
                   PieceCache* cache = nullptr) const;

  // Appends the bytes of `ids` to `bytes`; the special id decodes to
  // "<|endoftext|>". InvalidArgument "id X at position I is out of range
  // [0, V)" for an id >= V. Decode(Encode(b)) == b for every byte string b.
  // Same as vocabulary().Decode.
  absl::Status Decode(absl::Span<const uint32_t> ids, std::string* bytes) const;

 private:
  static constexpr uint32_t kNoRank = Vocabulary::kNoRank;
  // A piece's lookup key: its length and two words that, with the length,
  // identify pieces of <= 16 bytes exactly (first/last bytes otherwise).
  struct PieceKey {
    uint64_t w0, w1;
    uint64_t hash;
  };
  static PieceKey MakeKey(absl::string_view piece);
  // Rank of the token with bytes `piece`, or kNoRank.
  uint32_t FindToken(absl::string_view piece, const PieceKey& key) const;
  static uint64_t PairKey(uint32_t left, uint32_t right) {
    return (static_cast<uint64_t>(left) << 32) | right;
  }
  static size_t PairHash(uint64_t key) {
    key = (key ^ (key >> 29)) * 0xBF58476D1CE4E5B9ull;
    return static_cast<size_t>(key >> 32);
  }
  // Rank of the token with bytes token(left) + token(right), or kNoRank.
  uint32_t PairRank(uint32_t left, uint32_t right) const {
    const uint64_t key = PairKey(left, right);
    const size_t mask = pair_slots_.size() - 1;
    for (size_t i = PairHash(key) & mask;; i = (i + 1) & mask) {
      const PairSlot& slot = pair_slots_[i];
      if (slot.key == key) return slot.rank;
      if (slot.key == kEmptyPair) return kNoRank;
    }
  }
  // `pieces` is scratch space.
  void EncodeSegmentRange(absl::string_view segment, size_t begin, size_t end,
                          std::vector<uint32_t>* ids, PieceCache* cache,
                          std::vector<absl::string_view>* pieces) const;
  void BytePairMergeShort(absl::string_view piece,
                          std::vector<uint32_t>* ids) const;
  void BytePairMergeLong(absl::string_view piece,
                         std::vector<uint32_t>* ids) const;

  Vocabulary vocabulary_;
  // Open-addressing index of the tokens (linear probing, load <= 1/2):
  // rank kNoRank when empty; token bytes concatenated in token_bytes_ at
  // token_offsets_[rank] .. token_offsets_[rank + 1].
  struct TokenSlot {
    uint64_t w0, w1;
    uint32_t length;
    uint32_t rank;
  };
  std::vector<TokenSlot> token_slots_;
  std::string token_bytes_;
  std::vector<uint32_t> token_offsets_;
  // (left id, right id) -> rank of the concatenated bytes, for every token
  // that splits into two tokens.
  // Open addressing (linear probing, load <= 1/2); key kEmptyPair = empty.
  static constexpr uint64_t kEmptyPair = ~0ull;
  struct PairSlot {
    uint64_t key;
    uint32_t rank;
  };
  std::vector<PairSlot> pair_slots_;
};

}  // namespace coppelius

#endif  // COPPELIUS_TOKENIZER_ENCODER_H_
