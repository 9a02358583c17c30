#include "checkpoint/envelope.h"

#include <optional>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/utf8.h"

namespace coppelius {
namespace {

// Preamble field offsets (docs/FORMATS.md "## Checkpoint envelope").
constexpr size_t kMagicOffset = 0;
constexpr size_t kVersionOffset = 8;
constexpr size_t kPreambleBytesOffset = 12;
constexpr size_t kHeaderBytesOffset = 16;
constexpr size_t kPayloadOffsetOffset = 24;
constexpr size_t kPayloadBytesOffset = 32;
constexpr size_t kChunkBytesOffset = 40;
constexpr size_t kHeaderSha256Offset = 48;
constexpr size_t kPreambleSha256Offset = 80;
constexpr size_t kReservedOffset = 112;

void PutU32(std::string& out, size_t offset, uint32_t v) {
  absl::little_endian::Store32(&out[offset], v);
}
void PutU64(std::string& out, size_t offset, uint64_t v) {
  absl::little_endian::Store64(&out[offset], v);
}
uint32_t GetU32(absl::string_view in, size_t offset) {
  return absl::little_endian::Load32(in.data() + offset);
}
uint64_t GetU64(absl::string_view in, size_t offset) {
  return absl::little_endian::Load64(in.data() + offset);
}

std::string Quoted(absl::string_view s) {
  return absl::StrCat("\"", absl::CHexEscape(s), "\"");
}

// The first of the header's text fields (proto bytes that must hold UTF-8)
// that is not UTF-8: its name, the text and the offset of its first byte
// that begins no well-formed sequence (common/utf8.h); nullopt if none.
struct NonUtf8Field {
  const char* name;
  const std::string* text;
  size_t at;
};
std::optional<NonUtf8Field> FirstNonUtf8Field(const CheckpointHeader& h) {
  const std::pair<const char*, const std::string*> fields[] = {
      {"state_identity", &h.state_identity()},
      {"learner_identity", &h.learner_identity()},
      {"data_identity", &h.data_identity()},
      {"initialization_identity", &h.initialization_identity()},
      {"model_identity", &h.model_identity()},
      {"writer", &h.writer()},
      {"backend", &h.backend()},
      {"host", &h.host()}};
  for (const auto& [name, text] : fields) {
    const size_t at = FirstNonUtf8Byte(*text);
    if (at != absl::string_view::npos) return NonUtf8Field{name, text, at};
  }
  return std::nullopt;
}

uint64_t NowUnixNanos() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

bool CheckpointIdentity::operator==(const CheckpointIdentity& o) const {
  return state == o.state && learner == o.learner && data == o.data &&
         initialization == o.initialization && model == o.model &&
         payload_bytes == o.payload_bytes && chunk_bytes == o.chunk_bytes &&
         run_steps == o.run_steps;
}

CheckpointIdentity IdentityOfHeader(const CheckpointHeader& header) {
  CheckpointIdentity id;
  id.state = header.state_identity();
  id.learner = header.learner_identity();
  id.data = header.data_identity();
  id.initialization = header.initialization_identity();
  id.model = header.model_identity();
  id.payload_bytes = header.payload_bytes();
  id.chunk_bytes = header.chunk_bytes();
  id.run_steps = header.run_steps();
  return id;
}

namespace {

// `s` quoted and escaped; longer than 40 bytes, only its "name=" (if it
// starts with one) and the first 16 bytes after it (of a digest, its first
// 16 hex digits), and its length.
std::string Abbreviated(absl::string_view s) {
  constexpr size_t kMaxBytes = 40, kKeptBytes = 16, kMaxNameBytes = 24;
  if (s.size() <= kMaxBytes) return Quoted(s);
  const size_t eq = s.find('=');
  const size_t name = eq != absl::string_view::npos && eq < kMaxNameBytes
                          ? eq + 1
                          : 0;
  return absl::StrCat(Quoted(s.substr(0, name + kKeptBytes)), "... (",
                      s.size(), " bytes)");
}

// How text identities `actual` and `expected` differ, in their
// '|'-separated parts (an identity is `name|part=value|...`): the first
// part that differs, abbreviated, and how many more do (by position).
std::string TextDifference(absl::string_view actual,
                           absl::string_view expected) {
  const std::vector<absl::string_view> a = absl::StrSplit(actual, '|');
  const std::vector<absl::string_view> e = absl::StrSplit(expected, '|');
  const auto part = [](const std::vector<absl::string_view>& parts,
                       size_t i) {
    return i < parts.size() ? Abbreviated(parts[i]) : std::string("nothing");
  };
  size_t first = 0, differing = 0;
  for (size_t i = 0; i < std::max(a.size(), e.size()); ++i) {
    if (i < a.size() && i < e.size() && a[i] == e[i]) continue;
    if (differing++ == 0) first = i;
  }
  return absl::StrCat(
      "has ", part(a, first), ", the run expects ", part(e, first),
      differing > 1 ? absl::StrCat(" (+", differing - 1, " more part",
                                   differing > 2 ? "s" : "", ")")
                    : "");
}

}  // namespace

absl::Status CompareIdentity(const CheckpointIdentity& actual,
                             const CheckpointIdentity& expected,
                             absl::string_view file) {
  std::vector<std::string> diffs;
  auto text = [&](const char* name, const std::string& a,
                  const std::string& e) {
    if (a != e) {
      diffs.push_back(absl::StrCat(name, " ", TextDifference(a, e)));
    }
  };
  auto number = [&](const char* name, uint64_t a, uint64_t e) {
    if (a != e) {
      diffs.push_back(
          absl::StrCat(name, " is ", a, ", the run expects ", e));
    }
  };
  text("state", actual.state, expected.state);
  text("learner", actual.learner, expected.learner);
  text("data", actual.data, expected.data);
  text("initialization", actual.initialization, expected.initialization);
  text("model", actual.model, expected.model);
  number("payload_bytes", actual.payload_bytes, expected.payload_bytes);
  number("chunk_bytes", actual.chunk_bytes, expected.chunk_bytes);
  number("run_steps", actual.run_steps, expected.run_steps);
  if (diffs.empty()) return absl::OkStatus();
  if (diffs.size() == 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        file, ": checkpoint refused: identity field ", diffs[0]));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(file, ": checkpoint refused: ", diffs.size(),
                   " identity fields differ: ", absl::StrJoin(diffs, "; ")));
}

uint64_t PayloadOffsetFor(uint64_t header_bytes) {
  const uint64_t end = kPreambleBytes + header_bytes;
  return (end + kPayloadAlignment - 1) / kPayloadAlignment * kPayloadAlignment;
}

std::string EncodePreamble(const Preamble& p) {
  std::string out(kPreambleBytes, '\0');
  std::memcpy(&out[kMagicOffset], kCheckpointMagic, sizeof(kCheckpointMagic));
  PutU32(out, kVersionOffset, p.version);
  PutU32(out, kPreambleBytesOffset, static_cast<uint32_t>(kPreambleBytes));
  PutU64(out, kHeaderBytesOffset, p.header_bytes);
  PutU64(out, kPayloadOffsetOffset, p.payload_offset);
  PutU64(out, kPayloadBytesOffset, p.payload_bytes);
  PutU64(out, kChunkBytesOffset, p.chunk_bytes);
  std::memcpy(&out[kHeaderSha256Offset], p.header_sha256.data(), kSha256Bytes);
  const Sha256Digest self = Sha256(out.data(), kPreambleSha256Offset);
  std::memcpy(&out[kPreambleSha256Offset], self.data(), kSha256Bytes);
  return out;
}

absl::StatusOr<Preamble> DecodePreamble(absl::string_view bytes,
                                        uint64_t file_bytes,
                                        absl::string_view file) {
  if (bytes.size() < kPreambleBytes || file_bytes < kPreambleBytes) {
    return absl::DataLossError(absl::StrFormat(
        "%s: truncated: %d bytes, a checkpoint envelope starts with a "
        "%d-byte preamble",
        file, std::min<uint64_t>(bytes.size(), file_bytes), kPreambleBytes));
  }
  if (std::memcmp(bytes.data(), kCheckpointMagic, sizeof(kCheckpointMagic)) !=
      0) {
    return absl::DataLossError(absl::StrFormat(
        "%s: offset 0: magic is \"%s\", expected \"COPPCKPT\" (not a "
        "Coppelius checkpoint envelope)",
        file, absl::CHexEscape(bytes.substr(0, 8))));
  }
  Preamble p;
  p.version = GetU32(bytes, kVersionOffset);
  if (p.version != kCheckpointVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: offset 8: envelope version %d, this reader reads version %d",
        file, p.version, kCheckpointVersion));
  }
  const Sha256Digest self = Sha256(bytes.data(), kPreambleSha256Offset);
  if (std::memcmp(self.data(), bytes.data() + kPreambleSha256Offset,
                  kSha256Bytes) != 0) {
    return absl::DataLossError(absl::StrFormat(
        "%s: offset 80: preamble SHA-256 is %s, bytes 0..79 digest to %s "
        "(corrupt preamble)",
        file, BytesHex(bytes.substr(kPreambleSha256Offset, kSha256Bytes)),
        Sha256Hex(self)));
  }
  const uint32_t preamble_bytes = GetU32(bytes, kPreambleBytesOffset);
  if (preamble_bytes != kPreambleBytes) {
    return absl::DataLossError(absl::StrFormat(
        "%s: offset 12: preamble_bytes is %d, expected %d", file,
        preamble_bytes, kPreambleBytes));
  }
  for (size_t i = kReservedOffset; i < kPreambleBytes; ++i) {
    if (bytes[i] != '\0') {
      return absl::DataLossError(absl::StrFormat(
          "%s: offset %d: reserved preamble byte is 0x%02x, expected 0", file,
          i, static_cast<unsigned char>(bytes[i])));
    }
  }
  p.header_bytes = GetU64(bytes, kHeaderBytesOffset);
  p.payload_offset = GetU64(bytes, kPayloadOffsetOffset);
  p.payload_bytes = GetU64(bytes, kPayloadBytesOffset);
  p.chunk_bytes = GetU64(bytes, kChunkBytesOffset);
  std::memcpy(p.header_sha256.data(), bytes.data() + kHeaderSha256Offset,
              kSha256Bytes);
  if (p.header_bytes == 0 || p.header_bytes > kMaxHeaderBytes) {
    return absl::DataLossError(absl::StrFormat(
        "%s: offset 16: header_bytes is %d, expected 1..%d", file,
        p.header_bytes, kMaxHeaderBytes));
  }
  if (kPreambleBytes + p.header_bytes > file_bytes) {
    return absl::DataLossError(absl::StrFormat(
        "%s: offset 16: header_bytes %d runs past the end of the file "
        "(%d bytes; header ends at %d)",
        file, p.header_bytes, file_bytes, kPreambleBytes + p.header_bytes));
  }
  const uint64_t expected_offset = PayloadOffsetFor(p.header_bytes);
  if (p.payload_offset != expected_offset) {
    return absl::DataLossError(absl::StrFormat(
        "%s: offset 24: payload_offset is %d, expected %d (128 + header "
        "rounded up to %d)",
        file, p.payload_offset, expected_offset, kPayloadAlignment));
  }
  if (p.chunk_bytes == 0) {
    return absl::DataLossError(
        absl::StrFormat("%s: offset 40: chunk_bytes is 0, expected > 0", file));
  }
  if (p.payload_bytes > UINT64_MAX - p.payload_offset ||
      p.payload_offset + p.payload_bytes != file_bytes) {
    const bool overflow = p.payload_bytes > UINT64_MAX - p.payload_offset;
    return absl::DataLossError(absl::StrFormat(
        "%s: file is %d bytes, expected payload_offset %d + payload_bytes %d "
        "= %s (%s)",
        file, file_bytes, p.payload_offset, p.payload_bytes,
        overflow ? "overflow" : absl::StrCat(p.payload_offset + p.payload_bytes),
        overflow || file_bytes < p.payload_offset + p.payload_bytes
            ? "truncated or corrupt size"
            : "trailing bytes after the payload"));
  }
  return p;
}

absl::Status ValidateHeader(const CheckpointHeader& h, const Preamble& p,
                            absl::string_view file) {
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(file, ": header ", what));
  };
  if (const auto f = FirstNonUtf8Field(h)) {
    return bad(absl::StrFormat(
        "field %s is not UTF-8: its byte %d of %d (0x%02x) begins no "
        "well-formed sequence, expected UTF-8 text",
        f->name, f->at, f->text->size(),
        static_cast<unsigned char>((*f->text)[f->at])));
  }
  if (h.payload_bytes() != p.payload_bytes) {
    return bad(absl::StrFormat(
        "field payload_bytes is %d, the preamble says %d", h.payload_bytes(),
        p.payload_bytes));
  }
  if (h.chunk_bytes() != p.chunk_bytes) {
    return bad(absl::StrFormat("field chunk_bytes is %d, the preamble says %d",
                               h.chunk_bytes(), p.chunk_bytes));
  }
  if (h.plane_count() != kPlaneCount) {
    return bad(absl::StrFormat("field plane_count is %d, expected %d",
                               h.plane_count(), kPlaneCount));
  }
  if (h.bytes_per_scalar() != kBytesPerScalar) {
    return bad(absl::StrFormat("field bytes_per_scalar is %d, expected %d",
                               h.bytes_per_scalar(), kBytesPerScalar));
  }
  const uint64_t per_parameter = uint64_t{kPlaneCount} * kBytesPerScalar;
  if (h.parameter_count() > UINT64_MAX / per_parameter ||
      h.parameter_count() * per_parameter != h.payload_bytes()) {
    return bad(absl::StrFormat(
        "field parameter_count is %d, expected payload_bytes %d / 12",
        h.parameter_count(), h.payload_bytes()));
  }
  const uint64_t chunks = NumChunks(p.payload_bytes, p.chunk_bytes);
  if (static_cast<uint64_t>(h.chunk_sha256_size()) != chunks) {
    return bad(absl::StrFormat(
        "field chunk_sha256 has %d digests, expected %d (payload %d bytes in "
        "chunks of %d)",
        h.chunk_sha256_size(), chunks, p.payload_bytes, p.chunk_bytes));
  }
  for (int i = 0; i < h.chunk_sha256_size(); ++i) {
    if (h.chunk_sha256(i).size() != kSha256Bytes) {
      return bad(absl::StrFormat(
          "field chunk_sha256[%d] has %d bytes, expected %d", i,
          h.chunk_sha256(i).size(), kSha256Bytes));
    }
  }
  if (!h.parent_header_sha256().empty() &&
      h.parent_header_sha256().size() != kSha256Bytes) {
    return bad(absl::StrFormat(
        "field parent_header_sha256 has %d bytes, expected 0 or %d",
        h.parent_header_sha256().size(), kSha256Bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointHeader> MakeHeader(
    const CheckpointIdentity& identity, uint64_t update_count,
    const std::vector<Sha256Digest>& chunk_digests,
    const EnvelopeProvenance& provenance) {
  const uint64_t per_parameter = uint64_t{kPlaneCount} * kBytesPerScalar;
  if (identity.payload_bytes == 0 ||
      identity.payload_bytes % per_parameter != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "checkpoint payload_bytes %d: expected a positive multiple of 12 "
        "(3 fp32 planes)",
        identity.payload_bytes));
  }
  if (identity.chunk_bytes == 0) {
    return absl::InvalidArgumentError(
        "checkpoint chunk_bytes is 0, expected > 0");
  }
  const uint64_t chunks =
      NumChunks(identity.payload_bytes, identity.chunk_bytes);
  if (chunk_digests.size() != chunks) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "checkpoint has %d chunk digests, expected %d", chunk_digests.size(),
        chunks));
  }
  if (!provenance.parent_header_sha256.empty() &&
      provenance.parent_header_sha256.size() != kSha256Bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "parent_header_sha256 has %d bytes, expected 0 or 32",
        provenance.parent_header_sha256.size()));
  }
  CheckpointHeader h;
  h.set_state_identity(identity.state);
  h.set_learner_identity(identity.learner);
  h.set_data_identity(identity.data);
  h.set_initialization_identity(identity.initialization);
  h.set_model_identity(identity.model);
  h.set_payload_bytes(identity.payload_bytes);
  h.set_chunk_bytes(identity.chunk_bytes);
  h.set_run_steps(identity.run_steps);
  h.set_update_count(update_count);
  for (const Sha256Digest& d : chunk_digests) {
    h.add_chunk_sha256(reinterpret_cast<const char*>(d.data()), d.size());
  }
  h.set_parameter_count(identity.payload_bytes / per_parameter);
  h.set_plane_count(kPlaneCount);
  h.set_bytes_per_scalar(kBytesPerScalar);
  h.set_writer(provenance.writer);
  h.set_backend(provenance.backend);
  h.set_created_unix_nanos(provenance.created_unix_nanos != 0
                               ? provenance.created_unix_nanos
                               : NowUnixNanos());
  if (!provenance.host.empty()) {
    h.set_host(provenance.host);
  } else {
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) == 0) h.set_host(host);
  }
  h.set_parent_header_sha256(provenance.parent_header_sha256);
  // Never write a header the reader refuses (ValidateHeader: text fields
  // are UTF-8). The host name comes from the machine: its bytes outside
  // ASCII become '?' if it is not UTF-8; any other text field is the
  // caller's error.
  if (FirstNonUtf8Byte(h.host()) != absl::string_view::npos) {
    std::string host = h.host();
    for (char& c : host) {
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    }
    h.set_host(host);
  }
  if (const auto f = FirstNonUtf8Field(h)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "header field %s is not UTF-8 (byte %d of %d); expected UTF-8 text",
        f->name, f->at, f->text->size()));
  }
  return h;
}

absl::StatusOr<std::string> EncodeEnvelopePrefix(
    const CheckpointHeader& header) {
  std::string serialized;
  if (!header.SerializeToString(&serialized)) {
    return absl::InternalError("serializing the checkpoint header failed");
  }
  if (serialized.size() > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "checkpoint header is %d bytes, the limit is %d (too many chunks: "
        "raise chunk_bytes)",
        serialized.size(), kMaxHeaderBytes));
  }
  Preamble p;
  p.header_bytes = serialized.size();
  p.payload_offset = PayloadOffsetFor(p.header_bytes);
  p.payload_bytes = header.payload_bytes();
  p.chunk_bytes = header.chunk_bytes();
  p.header_sha256 = Sha256(serialized);
  std::string out = EncodePreamble(p);
  out += serialized;
  out.resize(p.payload_offset, '\0');
  return out;
}

}  // namespace coppelius
