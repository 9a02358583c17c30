// File: common/utf8.h
//
// UTF-8 well-formedness, by the Unicode Standard's table 3-7 ("Well-Formed
// UTF-8 Byte Sequences"): no overlong forms, no surrogates (U+D800..DFFF),
// nothing above U+10FFFF, no sequence cut short by the end of the text.
#ifndef COPPELIUS_COMMON_UTF8_H_
#define COPPELIUS_COMMON_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace coppelius {

// Length in bytes (1..4) of the well-formed UTF-8 sequence that begins at
// text[i] (i < text.size()), or 0 if none does.
size_t Utf8SequenceLength(absl::string_view text, size_t i);

// Offset of the first byte of `text` that begins no well-formed sequence,
// or absl::string_view::npos when all of `text` is UTF-8.
size_t FirstNonUtf8Byte(absl::string_view text);

}  // namespace coppelius

#endif  // COPPELIUS_COMMON_UTF8_H_
