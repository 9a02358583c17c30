#include "tokenizer/vocabulary.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace coppelius {
namespace {

// A token as messages quote it: C-escaped, cut after its first 60 bytes
// (a token may be megabytes long) with its length then given.
std::string QuoteToken(absl::string_view bytes) {
  constexpr size_t kShown = 60;
  if (bytes.size() <= kShown) {
    return absl::StrCat("\"", absl::CHexEscape(bytes), "\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(bytes.substr(0, kShown)),
                      "...\" (", bytes.size(), " bytes)");
}

constexpr char kBase64Alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// "`c`" for printable ASCII, else "byte 0xNN".
std::string Describe(char c) {
  unsigned char u = static_cast<unsigned char>(c);
  if (u >= 0x21 && u <= 0x7E) return absl::StrCat("'", std::string(1, c), "'");
  return absl::StrCat("byte 0x", absl::Hex(u, absl::kZeroPad2));
}

}  // namespace

std::string Base64Encode(absl::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = (b[i] << 16) | (b[i + 1] << 8) | b[i + 2];
    out += kBase64Alphabet[v >> 18];
    out += kBase64Alphabet[(v >> 12) & 63];
    out += kBase64Alphabet[(v >> 6) & 63];
    out += kBase64Alphabet[v & 63];
  }
  size_t rest = bytes.size() - i;
  if (rest == 1) {
    uint32_t v = b[i] << 16;
    out += kBase64Alphabet[v >> 18];
    out += kBase64Alphabet[(v >> 12) & 63];
    out += "==";
  } else if (rest == 2) {
    uint32_t v = (b[i] << 16) | (b[i + 1] << 8);
    out += kBase64Alphabet[v >> 18];
    out += kBase64Alphabet[(v >> 12) & 63];
    out += kBase64Alphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

bool Base64Decode(absl::string_view text, std::string* bytes,
                  size_t* error_offset) {
  bytes->clear();
  if (text.size() % 4 != 0) {
    *error_offset = text.size();
    return false;
  }
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      const char c = text[i + j];
      if (c == '=' && last && j >= 2) {
        // '=' only in the last two positions of the last quantum, and "x=y"
        // is invalid.
        if (j == 2 && text[i + 3] != '=') {
          *error_offset = i + j;
          return false;
        }
        v[j] = 0;
        ++pad;
        continue;
      }
      v[j] = Base64Value(c);
      if (v[j] < 0) {
        *error_offset = i + j;
        return false;
      }
    }
    const uint32_t word = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    // Canonical encoding: bits below the last byte must be zero.
    if ((pad == 1 && (word & 0xFF) != 0) || (pad == 2 && (word & 0xFFFF) != 0)) {
      *error_offset = i + 3 - pad;
      return false;
    }
    bytes->push_back(static_cast<char>(word >> 16));
    if (pad < 2) bytes->push_back(static_cast<char>((word >> 8) & 0xFF));
    if (pad < 1) bytes->push_back(static_cast<char>(word & 0xFF));
  }
  return true;
}

Vocabulary& Vocabulary::operator=(const Vocabulary& other) {
  if (this != &other) {
    tokens_ = other.tokens_;
    BuildIndex();
  }
  return *this;
}

void Vocabulary::BuildIndex() {
  ranks_.clear();
  ranks_.reserve(tokens_.size());
  for (uint32_t r = 0; r < tokens_.size(); ++r) ranks_.emplace(tokens_[r], r);
}

absl::StatusOr<Vocabulary> Vocabulary::FromTokens(
    std::vector<std::string> tokens) {
  if (tokens.size() < 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocabulary has ", tokens.size(),
                     " tokens; expected at least the 256 single bytes"));
  }
  if (tokens.size() >= 0x7FFFFFFFu) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocabulary has ", tokens.size(), " tokens; too many"));
  }
  Vocabulary v;
  v.tokens_ = std::move(tokens);
  for (uint32_t r = 0; r < 256; ++r) {
    if (v.tokens_[r] != std::string(1, static_cast<char>(r))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", r, " is ", QuoteToken(v.tokens_[r]),
          "; expected the single byte 0x", absl::Hex(r, absl::kZeroPad2)));
    }
  }
  v.ranks_.reserve(v.tokens_.size());
  for (uint32_t r = 0; r < v.tokens_.size(); ++r) {
    auto [it, inserted] = v.ranks_.emplace(v.tokens_[r], r);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", r, " token ", QuoteToken(v.tokens_[r]),
          " duplicates rank ", it->second));
    }
  }
  return v;
}

absl::StatusOr<Vocabulary> Vocabulary::Parse(absl::string_view contents,
                                             absl::string_view name,
                                             int expected_vocab_size) {
  if (contents.empty()) {
    return absl::DataLossError(absl::StrCat(
        name, ": empty file; expected a tiktoken rank file (`base64 rank` "
              "lines, at least the 256 single bytes)"));
  }
  std::vector<std::string> tokens;
  absl::flat_hash_map<std::string, uint32_t> seen;
  size_t offset = 0;
  uint64_t line_no = 0;
  std::string bytes;
  while (offset < contents.size()) {
    ++line_no;
    const size_t nl = contents.find('\n', offset);
    const std::string where =
        absl::StrCat(name, ":", line_no, " (byte ", offset, ")");
    if (nl == absl::string_view::npos) {
      return absl::DataLossError(absl::StrCat(
          where, ": last line has no newline; file truncated?"));
    }
    absl::string_view line = contents.substr(offset, nl - offset);
    const size_t sp = line.find(' ');
    if (sp == absl::string_view::npos) {
      return absl::DataLossError(absl::StrCat(
          where, ": expected `base64 rank`, found no space in \"",
          absl::CHexEscape(line.substr(0, 60)), "\""));
    }
    absl::string_view b64 = line.substr(0, sp);
    absl::string_view rank_text = line.substr(sp + 1);
    size_t bad = 0;
    if (b64.empty()) {
      return absl::DataLossError(
          absl::StrCat(where, ": empty token (no base64 before the space)"));
    }
    if (!Base64Decode(b64, &bytes, &bad)) {
      if (bad >= b64.size()) {
        return absl::DataLossError(absl::StrCat(
            where, ": bad base64 \"", absl::CHexEscape(b64.substr(0, 60)),
            "\": length ", b64.size(), " is not a multiple of 4"));
      }
      return absl::DataLossError(absl::StrCat(
          where, ": bad base64 at byte ", offset + bad, ": ",
          Describe(b64[bad]),
          " where a canonical padded base64 character is expected"));
    }
    bool ok =
        !rank_text.empty() && (rank_text.size() == 1 || rank_text[0] != '0');
    for (char c : rank_text) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) ok = false;
    }
    if (!ok) {
      return absl::DataLossError(absl::StrCat(
          where, ": rank \"", absl::CHexEscape(rank_text.substr(0, 20)),
          "\" at byte ", offset + sp + 1,
          " is not a decimal number without leading zeros"));
    }
    // A decimal of at most 10 digits fits in u64; ids are u32.
    uint64_t rank = 0;
    if (rank_text.size() <= 10) {
      for (char c : rank_text) {
        rank = rank * 10 + static_cast<uint64_t>(c - '0');
      }
    }
    if (rank_text.size() > 10 || rank > 0xFFFFFFFFu) {
      return absl::DataLossError(absl::StrCat(
          where, ": rank ", rank_text.substr(0, 20),
          rank_text.size() > 20 ? "..." : "", " at byte ", offset + sp + 1,
          " is out of range (expected < 4294967296: ids are u32)"));
    }
    if (rank != tokens.size()) {
      std::string why = rank < tokens.size() ? "duplicate or out of order"
                                             : "ranks missing before it";
      return absl::DataLossError(absl::StrCat(where, ": rank ", rank, " (",
                                              why, "); expected rank ",
                                              tokens.size()));
    }
    if (rank < 256 && bytes != std::string(1, static_cast<char>(rank))) {
      return absl::DataLossError(absl::StrCat(
          where, ": rank ", rank, " is ", QuoteToken(bytes),
          "; expected the single byte 0x",
          absl::Hex(rank, absl::kZeroPad2)));
    }
    auto [it, inserted] = seen.emplace(bytes, static_cast<uint32_t>(rank));
    if (!inserted) {
      return absl::DataLossError(absl::StrCat(
          where, ": token ", QuoteToken(bytes), " duplicates rank ",
          it->second));
    }
    tokens.push_back(bytes);
    offset = nl + 1;
  }
  if (tokens.size() < 256) {
    return absl::DataLossError(absl::StrCat(
        name, ": ", tokens.size(),
        " ranks; expected at least the 256 single bytes"));
  }
  if (expected_vocab_size > 0 &&
      tokens.size() + 1 != static_cast<uint64_t>(expected_vocab_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": ", tokens.size(), " ranks + <|endoftext|> = ",
        tokens.size() + 1, " ids; expected vocabulary size ",
        expected_vocab_size));
  }
  Vocabulary v;
  v.tokens_ = std::move(tokens);
  v.BuildIndex();
  return v;
}

absl::StatusOr<Vocabulary> Vocabulary::Load(const std::string& path,
                                            int expected_vocab_size) {
  ASSIGN_OR_RETURN(std::string contents, ReadFile(path));
  return Parse(contents, path, expected_vocab_size);
}

absl::Status Vocabulary::Decode(absl::Span<const uint32_t> ids,
                                std::string* bytes) const {
  const uint32_t n = num_ranks();
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t id = ids[i];
    if (id > n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "id ", id, " at position ", i, " is out of range [0, ", n + 1, ")"));
    }
    const absl::string_view token = IdBytes(id);
    bytes->append(token.data(), token.size());
  }
  return absl::OkStatus();
}

std::string Vocabulary::Serialize() const {
  std::string out;
  for (uint32_t r = 0; r < tokens_.size(); ++r) {
    absl::StrAppend(&out, Base64Encode(tokens_[r]), " ", r, "\n");
  }
  return out;
}

absl::Status Vocabulary::Save(const std::string& path) const {
  return Annotate(WriteFileAtomically(path, Serialize()),
                  absl::StrCat("writing vocabulary ", path));
}

uint64_t Vocabulary::longest_token_bytes() const {
  uint64_t longest = kEndOfText.size();
  for (const std::string& t : tokens_) {
    longest = std::max<uint64_t>(longest, t.size());
  }
  return longest;
}

}  // namespace coppelius
