#include "tokenizer/tokenize.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/file_io.h"
#include "common/status_line.h"
#include "common/status_macros.h"
#include "tokenizer/encoder.h"
#include "tokenizer/output_checks.h"
#include "tokenizer/vocabulary.h"

namespace coppelius {

absl::StatusOr<IdFormat> ParseIdFormat(absl::string_view name) {
  if (name == "u32") return IdFormat::kU32;
  if (name == "text") return IdFormat::kText;
  return UsageError(
      absl::StrCat("--format=", name, ": expected u32 or text"));
}

std::string FormatIds(absl::Span<const uint32_t> ids, IdFormat format) {
  std::string out;
  if (format == IdFormat::kU32) {
    out.resize(ids.size() * 4);
    char* p = &out[0];
    for (uint32_t id : ids) {
      const uint32_t le = absl::little_endian::FromHost32(id);
      std::memcpy(p, &le, 4);
      p += 4;
    }
    return out;
  }
  out.reserve(ids.size() * 6);
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ' ';
    char* end = buf + sizeof(buf);
    char* p = end;
    uint32_t v = ids[i];
    do {
      *--p = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    out.append(p, end);
  }
  if (!ids.empty()) out += '\n';
  return out;
}

absl::StatusOr<std::vector<uint32_t>> ParseIds(absl::string_view data,
                                               IdFormat format,
                                               absl::string_view name) {
  std::vector<uint32_t> ids;
  if (format == IdFormat::kU32) {
    if (data.size() % 4 != 0) {
      return absl::DataLossError(absl::StrCat(
          name, ": size ", data.size(),
          " bytes is not a multiple of 4 (u32 ids); truncated at byte ",
          data.size() / 4 * 4));
    }
    ids.resize(data.size() / 4);
    for (size_t i = 0; i < ids.size(); ++i) {
      uint32_t le;
      std::memcpy(&le, data.data() + 4 * i, 4);
      ids[i] = absl::little_endian::ToHost32(le);
    }
    return ids;
  }
  size_t i = 0;
  while (i < data.size()) {
    if (absl::ascii_isspace(static_cast<unsigned char>(data[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < data.size() &&
           !absl::ascii_isspace(static_cast<unsigned char>(data[j]))) {
      ++j;
    }
    absl::string_view word = data.substr(i, j - i);
    uint32_t id;
    bool digits = true;
    for (char c : word) digits = digits && absl::ascii_isdigit(c);
    if (!digits || !absl::SimpleAtoi(word, &id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": byte ", i, ": \"", absl::CHexEscape(word.substr(0, 20)),
          "\" is not a decimal id (expected 0..4294967295)"));
    }
    ids.push_back(id);
    i = j;
  }
  return ids;
}

namespace {

// Refuses the vocabulary and the input both from standard input (it can be
// read once: the second read would see nothing), and an output that is the
// input or the vocabulary (writing it would destroy what is being read; with
// -o -, standard output that is one of them).
absl::Status CheckOutputIsNotAnInput(const std::string& output,
                                     const std::string& input,
                                     const std::string& vocab) {
  RETURN_IF_ERROR(
      CheckStandardInputReadOnce({{"--vocab=", vocab}, {"input ", input}}));
  RETURN_IF_ERROR(CheckOutputIsNotInput(output, "input file", input));
  return CheckOutputIsNotInput(output, "vocabulary file", vocab);
}

// The --vocab file, its errors saying which input they are about
// ("--vocab: /dev/zero: is a character device ..."), as make-cache's and
// inspect's do (break-it, session 24).
absl::StatusOr<Vocabulary> LoadVocabulary(const std::string& path) {
  absl::StatusOr<Vocabulary> vocabulary = Vocabulary::Load(path);
  if (!vocabulary.ok()) {
    return Annotate(vocabulary.status(), "--vocab");
  }
  return vocabulary;
}

}  // namespace

absl::Status RunEncode(const EncodeOptions& options) {
  RETURN_IF_ERROR(CheckOutputIsNotAnInput(options.output_path,
                                          options.input_path,
                                          options.vocab_path));
  RETURN_IF_ERROR(CheckNotCoppeliusFile(options.output_path));
  ASSIGN_OR_RETURN(Vocabulary vocabulary, LoadVocabulary(options.vocab_path));
  RETURN_IF_ERROR(CheckNotATokenCache(options.output_path));
  Encoder encoder(std::move(vocabulary));
  ASSIGN_OR_RETURN(std::string text, ReadFile(options.input_path));
  std::vector<uint32_t> ids;
  // Untouched capacity costs no memory; this avoids regrowth copies (text
  // averages > 2 bytes per id). Where memory is limited (ulimit -v), it is
  // an error naming the input.
  RETURN_IF_ERROR(CatchOutOfMemory(
      [&] { ids.reserve(text.size() / 2 + 16); },
      [&] {
        return absl::StrCat(options.input_path, ": the ids of its ",
                            text.size(), " bytes (room for ",
                            text.size() / 2 + 16, " reserved)");
      }));
  // The encoding's own memory (worker threads) ends the process if it runs
  // out, naming the input.
  const OutOfMemoryContext out_of_memory(absl::StrCat(
      "encoding ", options.input_path, " (", text.size(), " bytes)"));
  encoder.EncodeParallel(text, options.allow_special, options.threads, &ids);
  text.clear();
  text.shrink_to_fit();
  std::string formatted;
  absl::string_view out;
  if (options.format == IdFormat::kU32 && absl::little_endian::IsLittleEndian()) {
    out = absl::string_view(reinterpret_cast<const char*>(ids.data()),
                            ids.size() * sizeof(uint32_t));
  } else {
    formatted = FormatIds(ids, options.format);
    out = formatted;
  }
  return WriteOutputCheckedAgain(options.output_path, out, "writing ids to ");
}

absl::Status RunDecode(const DecodeOptions& options) {
  RETURN_IF_ERROR(CheckOutputIsNotAnInput(options.output_path,
                                          options.input_path,
                                          options.vocab_path));
  RETURN_IF_ERROR(CheckNotCoppeliusFile(options.output_path));
  // Decoding only concatenates token bytes: no Encoder (BPE tables) needed.
  ASSIGN_OR_RETURN(Vocabulary vocabulary, LoadVocabulary(options.vocab_path));
  RETURN_IF_ERROR(CheckNotATokenCache(options.output_path));
  ASSIGN_OR_RETURN(std::string data, ReadFile(options.input_path));
  // Parsing and decoding (one thread) take memory in proportion to the
  // input: running out is an error naming it.
  absl::Status parsed;
  std::vector<uint32_t> ids;
  std::string bytes;
  absl::Status decoded;
  RETURN_IF_ERROR(CatchOutOfMemory(
      [&] {
        absl::StatusOr<std::vector<uint32_t>> p =
            ParseIds(data, options.format, options.input_path);
        if (!p.ok()) {
          parsed = p.status();
          return;
        }
        ids = *std::move(p);
        decoded = vocabulary.Decode(ids, &bytes);
      },
      [&] {
        // What was decoded so far is let go first: the message needs
        // memory too.
        const size_t decoded_bytes = bytes.size();
        std::string().swap(bytes);
        return absl::StrCat(options.input_path, ": its ", data.size(),
                            " bytes of ids and their decoding (",
                            decoded_bytes, " bytes so far)");
      }));
  RETURN_IF_ERROR(parsed);
  // A token cache given where raw ids belong: its 16-byte header reads as
  // four huge ids. Say so when the header could be a source's.
  if (!decoded.ok() && options.format == IdFormat::kU32) {
    // (The rule without this vocabulary's bound: the cache may have been
    // made with another vocabulary.)
    if (const std::optional<uint64_t> n = TokenCacheIdCount(
            data, data.size(), /*max_token_bytes=*/0)) {
      decoded = absl::Status(
          decoded.code(),
          absl::StrCat(decoded.message(),
                       "; the file looks like a Coppelius token cache (a "
                       "16-byte header, then ",
                       *n, " ids): decode its ids with `tail -c +17 ",
                       options.input_path, " | tokenize decode ... -`"));
    }
  }
  RETURN_IF_ERROR(Annotate(decoded, options.input_path));
  return WriteOutputCheckedAgain(options.output_path, bytes,
                                 "writing bytes to ");
}

}  // namespace coppelius
