// File: tokenizer/vocabulary.h
//
// A byte-level BPE vocabulary: the mergeable tokens (ranks 0..N-1) of a
// tiktoken rank file plus the special token `<|endoftext|>` with id N.
// Vocabulary size V = N + 1 (12,288 for Coppelius). Rank = id = merge
// priority (lower merges first). Ranks 0..255 are the single bytes 0x00..0xFF
// with id = byte value (SPEC §3).
//
// File format (tiktoken's `.tiktoken`, see docs/FORMATS.md "Vocabulary file
// (.tiktoken)"): one line per rank, `base64(token bytes) SP decimal rank LF`,
// ranks 0..N-1 in order; the special token is not in the file.
//
// Errors of Parse/Load (one line each, naming the file and line):
//   NotFound       the file does not exist (Load);
//   DataLoss       malformed line (not `token SP rank LF`), bad base64, rank
//                  not a decimal without leading zeros, rank >= 2^32 (out of
//                  range: ids are u32), rank not equal to the line's index
//                  (duplicate, missing or out of order), duplicate token bytes, empty token, ranks 0..255
//                  not the single bytes, empty file, missing final newline;
//   InvalidArgument  `expected_vocab_size` given and N + 1 differs.
#ifndef COPPELIUS_TOKENIZER_VOCABULARY_H_
#define COPPELIUS_TOKENIZER_VOCABULARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace coppelius {

class Vocabulary {
 public:
  // The document separator, id N = V - 1.
  static constexpr absl::string_view kEndOfText = "<|endoftext|>";
  // Not found (for Rank()).
  static constexpr uint32_t kNoRank = 0xFFFFFFFFu;

  // Builds a vocabulary from the tokens of ranks 0..N-1 (tokens[r] = bytes of
  // rank r). InvalidArgument if there are fewer than 256 tokens, tokens[b] is
  // not the single byte b for b < 256, or two tokens are equal.
  static absl::StatusOr<Vocabulary> FromTokens(std::vector<std::string> tokens);

  // Parses rank-file `contents`; `name` (a path) prefixes every error.
  // expected_vocab_size > 0 also requires N + 1 == expected_vocab_size.
  static absl::StatusOr<Vocabulary> Parse(absl::string_view contents,
                                          absl::string_view name,
                                          int expected_vocab_size = 0);

  // Reads `path` ("-" = stdin) and parses it.
  static absl::StatusOr<Vocabulary> Load(const std::string& path,
                                         int expected_vocab_size = 0);

  // The rank file text (byte-identical to tiktoken's dump_tiktoken_bpe).
  std::string Serialize() const;

  // Writes Serialize() to `path` atomically ("-" = stdout).
  absl::Status Save(const std::string& path) const;

  // N: number of mergeable tokens (ranks 0..N-1).
  uint32_t num_ranks() const { return static_cast<uint32_t>(tokens_.size()); }
  // V = N + 1, counting the special token.
  uint32_t vocab_size() const { return num_ranks() + 1; }
  // Id of `<|endoftext|>`: N.
  uint32_t end_of_text_id() const { return num_ranks(); }

  // Bytes of rank `rank` (precondition: rank < N).
  absl::string_view token(uint32_t rank) const { return tokens_[rank]; }
  // Bytes id `id` decodes to (precondition: id < V): its rank's token, or
  // "<|endoftext|>" for id N.
  absl::string_view IdBytes(uint32_t id) const {
    return id < num_ranks() ? absl::string_view(tokens_[id]) : kEndOfText;
  }
  const std::vector<std::string>& tokens() const { return tokens_; }
  // The most bytes one id decodes to: the longest token, or <|endoftext|>'s
  // 13 (O(V); the bound CacheHeaderProblem puts on source bytes per id).
  uint64_t longest_token_bytes() const;

  // Appends the bytes of `ids` to `bytes`; id N decodes to "<|endoftext|>".
  // InvalidArgument "id X at position I is out of range [0, V)" for an
  // id >= V. (Decoding needs no Encoder.)
  absl::Status Decode(absl::Span<const uint32_t> ids, std::string* bytes) const;

  // Rank of the token with exactly these bytes, or kNoRank.
  uint32_t Rank(absl::string_view bytes) const {
    auto it = ranks_.find(bytes);
    return it == ranks_.end() ? kNoRank : it->second;
  }

  Vocabulary(Vocabulary&&) = default;
  Vocabulary& operator=(Vocabulary&&) = default;
  Vocabulary(const Vocabulary& other) { *this = other; }
  Vocabulary& operator=(const Vocabulary& other);

 private:
  Vocabulary() = default;
  void BuildIndex();

  std::vector<std::string> tokens_;
  // Views into tokens_ (std::string storage does not move when the vector
  // moves, but short strings do: the index is rebuilt on copy).
  absl::flat_hash_map<absl::string_view, uint32_t> ranks_;
};

// RFC 4648 base64 with padding (what Python's base64.b64encode writes).
std::string Base64Encode(absl::string_view bytes);

// Strict RFC 4648 decoding: standard alphabet, '=' padding required, no
// whitespace, zero pad bits. Returns false on any violation; *error_offset is
// then the offset of the first offending character in `text`.
bool Base64Decode(absl::string_view text, std::string* bytes,
                  size_t* error_offset);

}  // namespace coppelius

#endif  // COPPELIUS_TOKENIZER_VOCABULARY_H_
