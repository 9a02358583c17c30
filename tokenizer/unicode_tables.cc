#include "tokenizer/unicode_tables.h"

namespace coppelius {

Utf8Char DecodeUtf8(const unsigned char* p, const unsigned char* end) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {b0, 1, true};
  // Lead byte: number of continuation bytes and the allowed range of the
  // first continuation byte (Unicode 16 Table 3-7).
  int needed;
  unsigned char lo = 0x80, hi = 0xBF;
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    needed = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    needed = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    needed = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0xFFFD, 1, false};  // 80..C1, F5..FF: never a lead byte.
  }
  int consumed = 1;
  for (int i = 0; i < needed; ++i) {
    if (p + consumed >= end) return {0xFFFD, consumed, false};
    const unsigned char b = p[consumed];
    if (b < lo || b > hi) return {0xFFFD, consumed, false};
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
    ++consumed;
  }
  return {cp, consumed, true};
}

}  // namespace coppelius
