// File: checkpoint/reader.h
//
// Opens and validates a checkpoint envelope (layout: checkpoint/envelope.h,
// docs/FORMATS.md). A 0-byte file is a fresh-start input (IsFresh()); a
// missing path is NotFound (never a silent fresh start).
//
// Open() validates everything except the payload bytes: magic, version,
// preamble digest, header length (bounded by kMaxHeaderBytes and the file
// size, before any allocation), header digest, header fields against the
// preamble, zero padding, and file size == payload_offset + payload_bytes
// (truncation and appended bytes are DataLoss). The payload is mmapped
// read-only; VerifyPayload() checks every chunk's SHA-256, VerifyChunk(i)
// one chunk, and ReadPayload() copies and verifies each chunk as it goes.
//
// Errors: NotFound (missing path), InvalidArgument (not a regular file, bad
// arguments), DataLoss (corrupt/truncated: names the file, the offset or
// field, and the expectation; digest mismatches give chunk index, file
// offset, expected and actual hex), FailedPrecondition (unsupported version,
// identity mismatch naming the field and both values, or a payload call on a
// fresh input).
//
// Typical use (the run loop):
//   ASSIGN_OR_RETURN(CheckpointReader in, CheckpointReader::Open(path));
//   if (in.IsFresh()) { ...initialize... } else {
//     RETURN_IF_ERROR(in.CheckIdentity(run_identity));
//     RETURN_IF_ERROR(in.ReadPayload(pmv.data(), pmv.size() * 4, 2));
//     c0 = in.update_count();
//   }
//
// Const methods may be called from several threads at once.
//
// The file must not be truncated by another process while mapped (the
// publisher only ever renames new files over a path, never rewrites one);
// if it is (`cp` over it), a process that called ReportShrunkMappings
// (common/file_io.h) ends with one DataLoss line naming the file, exit 1.
#ifndef COPPELIUS_CHECKPOINT_READER_H_
#define COPPELIUS_CHECKPOINT_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/checkpoint_header.pb.h"
#include "checkpoint/envelope.h"
#include "checkpoint/sha256.h"

namespace coppelius {

class CheckpointReader {
 public:
  // Opens and validates `path` as described above.
  static absl::StatusOr<CheckpointReader> Open(const std::string& path);

  CheckpointReader(CheckpointReader&& other) noexcept;
  CheckpointReader& operator=(CheckpointReader&& other) noexcept;
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;
  ~CheckpointReader();

  // True for a 0-byte input: start fresh. Then header() is empty and the
  // payload calls return FailedPrecondition.
  bool IsFresh() const { return fresh_; }

  const std::string& path() const { return path_; }
  // File size in bytes and modification time (st_mtim, ns since the epoch).
  uint64_t file_bytes() const { return file_bytes_; }
  uint64_t file_mtime_ns() const { return file_mtime_ns_; }

  // The validated header and its fields.
  const CheckpointHeader& header() const { return header_; }
  CheckpointIdentity identity() const { return IdentityOfHeader(header_); }
  uint64_t update_count() const { return header_.update_count(); }
  // SHA-256 of the serialized header (all zero when fresh).
  const Sha256Digest& header_sha256() const { return preamble_.header_sha256; }
  const Preamble& preamble() const { return preamble_; }
  uint64_t payload_offset() const { return preamble_.payload_offset; }
  uint64_t payload_bytes() const { return preamble_.payload_bytes; }
  uint64_t chunk_bytes() const { return preamble_.chunk_bytes; }
  uint64_t num_chunks() const;

  // The mmapped payload (payload_bytes() bytes, read-only, 4096-aligned in
  // the file), not yet verified unless VerifyPayload() returned OK; null
  // when fresh. Valid while this reader lives.
  const void* payload() const { return payload_; }

  // FailedPrecondition (naming each differing field and both values) unless
  // this checkpoint's identity equals `expected`.
  absl::Status CheckIdentity(const CheckpointIdentity& expected) const;

  // Checks the SHA-256 of every chunk on `threads` threads. DataLoss names
  // the first bad chunk: index, file offset, expected and actual hex, and
  // how many chunks differ.
  absl::Status VerifyPayload(int threads = 2) const;
  // Checks chunk `index` (< num_chunks(), else InvalidArgument).
  absl::Status VerifyChunk(uint64_t index) const;

  // Copies the payload into `dst` (`dst_bytes` must equal payload_bytes(),
  // else InvalidArgument) verifying each chunk as copied (digest of the
  // copy), on `threads` threads. On DataLoss `dst` holds unverified bytes.
  absl::Status ReadPayload(void* dst, size_t dst_bytes, int threads = 2) const;

 private:
  CheckpointReader() = default;
  absl::Status FreshError() const;
  absl::Status ChunkError(uint64_t index, const Sha256Digest& actual,
                          uint64_t bad_chunks) const;

  std::string path_;
  bool fresh_ = false;
  uint64_t file_bytes_ = 0;
  uint64_t file_mtime_ns_ = 0;
  Preamble preamble_;
  CheckpointHeader header_;
  void* map_ = nullptr;  // whole file, PROT_READ, MAP_SHARED
  size_t map_bytes_ = 0;
  const unsigned char* payload_ = nullptr;
};

}  // namespace coppelius

#endif  // COPPELIUS_CHECKPOINT_READER_H_
