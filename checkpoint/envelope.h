// File: checkpoint/envelope.h
//
// The Coppelius checkpoint envelope (SPEC §6): layout constants, the
// identity a run compares, and encoding/decoding of the fixed preamble and
// the serialized header. The byte layout is documented byte by byte in
// docs/FORMATS.md "## Checkpoint envelope"; in short:
//
//   offset 0    preamble, 128 bytes (all integers little-endian):
//     0   u8[8]  magic "COPPCKPT"
//     8   u32    version = 1
//     12  u32    preamble_bytes = 128
//     16  u64    header_bytes H (1 <= H <= kMaxHeaderBytes)
//     24  u64    payload_offset = round_up(128 + H, 4096)
//     32  u64    payload_bytes
//     40  u64    chunk_bytes
//     48  u8[32] header_sha256 = SHA-256 of the H header bytes
//     80  u8[32] preamble_sha256 = SHA-256 of preamble bytes [0, 80)
//     112 u8[16] reserved, zero
//   offset 128  H bytes: serialized coppelius.CheckpointHeader (proto3)
//   then        zero bytes up to payload_offset
//   payload_offset  payload_bytes: P, then M, then V, fp32 little-endian
//   end of file = payload_offset + payload_bytes exactly (no trailing bytes)
//
// Every byte of a valid file is covered by a check: the preamble by its
// digest (and magic/version/reserved), the header by the header digest, the
// padding must be zero, the payload by the per-chunk SHA-256 in the header,
// the length by the size equation.
//
// Errors: DataLoss for corrupt/truncated bytes (naming file, offset or field
// and the expectation), FailedPrecondition for an unsupported version or an
// identity mismatch, InvalidArgument for bad arguments to the encoders.
#ifndef COPPELIUS_CHECKPOINT_ENVELOPE_H_
#define COPPELIUS_CHECKPOINT_ENVELOPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/checkpoint_header.pb.h"
#include "checkpoint/sha256.h"

namespace coppelius {

// "COPPCKPT", the first 8 bytes of every envelope.
inline constexpr char kCheckpointMagic[8] = {'C', 'O', 'P', 'P',
                                             'C', 'K', 'P', 'T'};
inline constexpr uint32_t kCheckpointVersion = 1;
inline constexpr uint64_t kPreambleBytes = 128;
// Payload offsets are multiples of this, so the payload can be mmapped.
inline constexpr uint64_t kPayloadAlignment = 4096;
// Upper bound on the serialized header (a reader refuses larger ones before
// allocating): 16 MiB, room for ~500k chunk digests.
inline constexpr uint64_t kMaxHeaderBytes = 16ull << 20;
// The Coppelius chunk size (SPEC §1): 4 MiB.
inline constexpr uint64_t kCoppeliusChunkBytes = 4194304;
// P, M, V planes of IEEE binary32.
inline constexpr uint32_t kPlaneCount = 3;
inline constexpr uint32_t kBytesPerScalar = 4;

// What a run requires of a checkpoint: the five identity strings (SPEC §6)
// and the three numbers. Two identities match when every field is equal;
// a mismatch is reported by field name ("state", "learner", "data",
// "initialization", "model", "payload_bytes", "chunk_bytes", "run_steps").
struct CheckpointIdentity {
  std::string state;
  std::string learner;
  std::string data;
  std::string initialization;
  std::string model;
  uint64_t payload_bytes = 0;  // bytes of the P/M/V payload
  uint64_t chunk_bytes = 0;    // bytes per digested chunk (> 0)
  uint64_t run_steps = 0;      // steps per invocation

  bool operator==(const CheckpointIdentity& o) const;
  bool operator!=(const CheckpointIdentity& o) const { return !(*this == o); }
};

// The identity recorded in `header`.
CheckpointIdentity IdentityOfHeader(const CheckpointHeader& header);

// OK if `actual` (read from checkpoint `file`) equals `expected` (the run's);
// otherwise FailedPrecondition, one short line naming every differing field
// with both values: a number in full, a text identity by its first
// differing '|'-separated part (a part over 40 bytes cut to its "name=" and
// 16 bytes, with its length) and how many more parts differ, e.g.
//   ckpt.bin: checkpoint refused: identity field run_steps is 8, the run
//   expects 10000
//   ckpt.bin: checkpoint refused: 2 identity fields differ: data has
//   "vocabulary=512", the run expects "vocabulary=12288" (+1 more part);
//   run_steps is 8, the run expects 10000
// (`inspect FILE` prints the identities in full.)
absl::Status CompareIdentity(const CheckpointIdentity& actual,
                             const CheckpointIdentity& expected,
                             absl::string_view file);

// The decoded fixed preamble.
struct Preamble {
  uint32_t version = kCheckpointVersion;
  uint64_t header_bytes = 0;
  uint64_t payload_offset = 0;
  uint64_t payload_bytes = 0;
  uint64_t chunk_bytes = 0;
  Sha256Digest header_sha256{};
};

// round_up(kPreambleBytes + header_bytes, kPayloadAlignment).
uint64_t PayloadOffsetFor(uint64_t header_bytes);

// The 128 preamble bytes for `preamble` (computes the preamble digest).
std::string EncodePreamble(const Preamble& preamble);

// Decodes and checks the 128 bytes at the start of `file` (whose size is
// `file_bytes`): magic, version, preamble_bytes, preamble digest, reserved
// bytes, header_bytes bounds (<= kMaxHeaderBytes and inside the file),
// payload_offset == PayloadOffsetFor(header_bytes), chunk_bytes > 0, and
// file_bytes == payload_offset + payload_bytes (overflow-checked).
// Errors: DataLoss (naming the field/offset), FailedPrecondition (version).
absl::StatusOr<Preamble> DecodePreamble(absl::string_view bytes,
                                        uint64_t file_bytes,
                                        absl::string_view file);

// Checks a parsed header against its preamble: the eight text fields
// (identities, writer, backend, host) are UTF-8; payload_bytes, chunk_bytes
// equal; plane_count == 3, bytes_per_scalar == 4, payload_bytes ==
// 12 * parameter_count; ceil(payload/chunk) digests of 32 bytes each.
// Errors: DataLoss naming the field.
absl::Status ValidateHeader(const CheckpointHeader& header,
                            const Preamble& preamble, absl::string_view file);

// Provenance of a new envelope (not part of the identity).
struct EnvelopeProvenance {
  std::string writer;                // e.g. "train"
  std::string backend;               // "cuda", "reference", or empty
  uint64_t created_unix_nanos = 0;   // 0: now
  std::string host;                  // empty: gethostname()
  std::string parent_header_sha256;  // 32 bytes, or empty when fresh
};

// Builds the header for a payload of identity.payload_bytes bytes whose chunk
// digests are `chunk_digests`. InvalidArgument if payload_bytes is 0 or not a
// multiple of 12, chunk_bytes is 0, or the digest count is not
// ceil(payload_bytes / chunk_bytes).
absl::StatusOr<CheckpointHeader> MakeHeader(
    const CheckpointIdentity& identity, uint64_t update_count,
    const std::vector<Sha256Digest>& chunk_digests,
    const EnvelopeProvenance& provenance);

// Everything before the payload: preamble + serialized header + zero padding
// (payload_offset bytes). InvalidArgument if the header exceeds
// kMaxHeaderBytes.
absl::StatusOr<std::string> EncodeEnvelopePrefix(
    const CheckpointHeader& header);

}  // namespace coppelius

#endif  // COPPELIUS_CHECKPOINT_ENVELOPE_H_
