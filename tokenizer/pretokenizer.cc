#include "tokenizer/pretokenizer.h"

#include <cstddef>
#include <vector>

#include "absl/strings/string_view.h"
#include "tokenizer/unicode_tables.h"

namespace coppelius {
namespace {

using Byte = unsigned char;

// Advances `p` over a run of characters of class `cls` (possibly none).
inline const Byte* SkipRun(const Byte* p, const Byte* end, CharClass cls) {
  while (p < end) {
    if (*p < 0x80) {
      if (kAsciiClass[*p] != cls) break;
      ++p;
      continue;
    }
    int length;
    if (NextCharClass(p, end, &length) != cls) break;
    p += length;
  }
  return p;
}

// Returns the end of the piece that starts at `p` (p < end). Follows the
// branches of the r50k pattern in order (leftmost-first alternation).
inline const Byte* PieceEnd(const Byte* p, const Byte* end) {
  const Byte b0 = *p;
  // '(?:[sdmt]|ll|ve|re)
  if (b0 == '\'' && p + 1 < end) {
    const Byte b1 = p[1];
    if (b1 == 's' || b1 == 'd' || b1 == 'm' || b1 == 't') return p + 2;
    if (p + 2 < end) {
      const Byte b2 = p[2];
      if ((b1 == 'l' && b2 == 'l') || (b1 == 'v' && b2 == 'e') ||
          (b1 == 'r' && b2 == 'e')) {
        return p + 3;
      }
    }
  }
  int length;
  CharClass cls = NextCharClass(p, end, &length);
  if (cls != kWhiteSpace) {
    // \p{L}++ | \p{N}++ | [^\s\p{L}\p{N}]++
    return SkipRun(p + length, end, cls);
  }
  if (b0 == ' ' && p + 1 < end) {
    // ' ?' followed by a letter, number or other run.
    int next_length;
    CharClass next = NextCharClass(p + 1, end, &next_length);
    if (next != kWhiteSpace) return SkipRun(p + 1 + next_length, end, next);
  }
  // Whitespace run of n code points: \s++$ takes all of it at the segment
  // end; otherwise \s+(?!\S) takes n - 1 when n >= 2, else \s takes 1.
  const Byte* last = p;  // Start of the run's last code point.
  const Byte* q = p + length;
  while (q < end) {
    int l;
    if (*q < 0x80) {
      if (kAsciiClass[*q] != kWhiteSpace) break;
      l = 1;
    } else if (NextCharClass(q, end, &l) != kWhiteSpace) {
      break;
    }
    last = q;
    q += l;
  }
  if (q == end) return end;
  if (last != p) return last;
  return q;
}

}  // namespace

size_t PretokenizeRange(absl::string_view segment, size_t begin, size_t stop,
                        std::vector<absl::string_view>* pieces) {
  const Byte* const base = reinterpret_cast<const Byte*>(segment.data());
  const Byte* const end = base + segment.size();
  const Byte* const limit = base + (stop < segment.size() ? stop : segment.size());
  const Byte* p = base + begin;
  while (p < limit) {
    const Byte* e = PieceEnd(p, end);
    pieces->emplace_back(reinterpret_cast<const char*>(p),
                         static_cast<size_t>(e - p));
    p = e;
  }
  return static_cast<size_t>(p - base);
}

void Pretokenize(absl::string_view segment,
                 std::vector<absl::string_view>* pieces) {
  PretokenizeRange(segment, 0, segment.size(), pieces);
}

void SplitOnSpecial(absl::string_view text, absl::string_view special,
                    std::vector<absl::string_view>* segments) {
  size_t start = 0;
  while (true) {
    size_t hit = text.find(special, start);
    if (hit == absl::string_view::npos) break;
    segments->push_back(text.substr(start, hit - start));
    start = hit + special.size();
  }
  segments->push_back(text.substr(start));
}

size_t NextSafeCut(absl::string_view segment, size_t from) {
  if (from == 0) from = 1;
  while (from < segment.size()) {
    size_t nl = segment.find('\n', from - 1);
    if (nl == absl::string_view::npos || nl + 1 >= segment.size()) break;
    const unsigned char c = static_cast<unsigned char>(segment[nl + 1]);
    if (c >= 0x21 && c <= 0x7E) return nl + 1;
    from = nl + 2;
  }
  return absl::string_view::npos;
}

}  // namespace coppelius
