// File: common/utf8.cc (see utf8.h).
#include "common/utf8.h"

namespace coppelius {

size_t Utf8SequenceLength(absl::string_view text, size_t i) {
  const unsigned char c = text[i];
  auto cont = [&](size_t k) {
    return i + k < text.size() &&
           (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
  };
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    if (!cont(1) || !cont(2)) return 0;
    const unsigned char c1 = text[i + 1];
    if (c == 0xe0 && c1 < 0xa0) return 0;  // overlong
    if (c == 0xed && c1 > 0x9f) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    const unsigned char c1 = text[i + 1];
    if (c == 0xf0 && c1 < 0x90) return 0;  // overlong
    if (c == 0xf4 && c1 > 0x8f) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;  // a continuation byte, 0xc0, 0xc1 or 0xf5..0xff
}

size_t FirstNonUtf8Byte(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) return i;
    i += n;
  }
  return absl::string_view::npos;
}

}  // namespace coppelius
