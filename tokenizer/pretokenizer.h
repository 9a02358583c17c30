// File: tokenizer/pretokenizer.h
//
// The GPT-2 pre-tokenizer ("split pattern") with tiktoken 0.14 r50k_base
// semantics, hand-written (no regex engine). The pattern is
//
//   '(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s
//
// with \s = Unicode White_Space, \p{L}/\p{N} from Unicode 16.0 and `$` the end
// of the segment; contractions are case-sensitive. The look-ahead branch is
// emulated as in SPEC §3: a maximal whitespace run of L code points that does
// not end the segment yields L - 1 code points when L >= 2, leaving the last
// one to start the next piece (see /work/shared/notes/tokenizer.md §1).
//
// Input is arbitrary bytes. Each maximal ill-formed UTF-8 subpart (the rule of
// Python's errors="replace") counts as one character of class "other" and
// keeps its original bytes, so pieces always concatenate back to the input.
#ifndef COPPELIUS_TOKENIZER_PRETOKENIZER_H_
#define COPPELIUS_TOKENIZER_PRETOKENIZER_H_

#include <cstddef>
#include <vector>

#include "absl/strings/string_view.h"

namespace coppelius {

// Splits one segment (arbitrary bytes; no special-token handling) into GPT-2
// pieces with tiktoken 0.14 r50k semantics; appends views into `segment` to
// `pieces`. The appended pieces are non-empty and concatenate to `segment`.
void Pretokenize(absl::string_view segment,
                 std::vector<absl::string_view>* pieces);

// Cuts `text` at each occurrence of `special` (e.g. "<|endoftext|>"): appends
// the segments between them (possibly empty) to `segments`; the specials
// themselves are not included. k occurrences give k + 1 segments; occurrences
// are found left to right without overlap. Precondition: `special` non-empty.
void SplitOnSpecial(absl::string_view text, absl::string_view special,
                    std::vector<absl::string_view>* segments);

// Lower-level form of Pretokenize for callers that cut a segment into chunks:
// appends to `pieces` each piece of `segment` that starts at or after byte
// offset `begin` and before `stop`, scanning from `begin` (the last piece may
// extend past `stop`; matching sees the whole segment, so its end is still
// the only `$`). Precondition: `begin` is 0 or a piece boundary of `segment`.
// Returns the offset just after the last piece appended (`begin` if none).
size_t PretokenizeRange(absl::string_view segment, size_t begin, size_t stop,
                        std::vector<absl::string_view>* pieces);

// Returns the byte offset of the next position at or after `from` that is
// certainly a piece boundary of `segment` for any content before it (a byte
// 0x21..0x7E right after '\n'), or absl::string_view::npos if there is none.
// Used to cut a segment for parallel encoding.
size_t NextSafeCut(absl::string_view segment, size_t from);

}  // namespace coppelius

#endif  // COPPELIUS_TOKENIZER_PRETOKENIZER_H_
