// File: tokenizer/tokenize.h
//
// The library behind the `tokenize` binary (tokenize_main.cc): encode text to
// ids and decode ids to bytes with a tiktoken rank file. Paths may be "-" for
// stdin/stdout. Outputs are written atomically (temporary + rename), so a
// failed run leaves no partial file under the output name.
//
// Id formats:
//   kU32   ids as little-endian u32, 4 bytes each, nothing else;
//   kText  decimal ids separated by single spaces, one final '\n' (none for
//          zero ids); on input any ASCII whitespace separates ids.
#ifndef COPPELIUS_TOKENIZER_TOKENIZE_H_
#define COPPELIUS_TOKENIZER_TOKENIZE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace coppelius {

enum class IdFormat { kU32, kText };

// "u32" or "text"; InvalidArgument otherwise.
absl::StatusOr<IdFormat> ParseIdFormat(absl::string_view name);

// Serializes ids in `format`.
std::string FormatIds(absl::Span<const uint32_t> ids, IdFormat format);

// Parses ids in `format` from `data`; `name` (a path) prefixes errors:
// DataLoss if a u32 stream's size is not a multiple of 4; InvalidArgument
// naming the byte offset for a text id that is not a decimal < 2^32.
absl::StatusOr<std::vector<uint32_t>> ParseIds(absl::string_view data,
                                               IdFormat format,
                                               absl::string_view name);

struct EncodeOptions {
  std::string vocab_path;   // tiktoken rank file
  std::string input_path;   // text bytes; "-" = stdin
  std::string output_path;  // ids; "-" = stdout
  bool allow_special = false;  // "<|endoftext|>" -> id V - 1
  IdFormat format = IdFormat::kU32;
  int threads = 0;  // <= 0: all hardware threads; at most kMaxThreadCount
};

// Encodes input_path to output_path. InvalidArgument when vocab_path and
// input_path both read standard input ("-", /dev/stdin on a pipe: it can be
// read once; CheckStandardInputReadOnce, common/file_io.h) or the output
// is the input or the vocabulary (output_path names it, or is "-" and
// standard output is that file: CheckOutputIsNotInput, output_checks.h);
// FailedPrecondition when it is a Coppelius checkpoint or result file
// (CheckNotCoppeliusFile, output_checks.h); errors from loading the vocabulary
// and reading/writing files, annotated with the path.
absl::Status RunEncode(const EncodeOptions& options);

struct DecodeOptions {
  std::string vocab_path;
  std::string input_path;   // ids; "-" = stdin
  std::string output_path;  // bytes; "-" = stdout
  IdFormat format = IdFormat::kU32;
};

// Decodes input_path to output_path. InvalidArgument naming the file, the id
// position and the id for an id >= V; the same path checks as RunEncode.
absl::Status RunDecode(const DecodeOptions& options);

}  // namespace coppelius

#endif  // COPPELIUS_TOKENIZER_TOKENIZE_H_
