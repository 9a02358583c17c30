// File: checkpoint/sha256.h
//
// SHA-256 (FIPS 180-4) through OpenSSL's EVP interface (SHA-NI where the CPU
// has it), and per-chunk digests of a large in-memory buffer computed on
// several threads. Used for the checkpoint envelope's header digest and
// payload chunk digests (SPEC §6).
#ifndef COPPELIUS_CHECKPOINT_SHA256_H_
#define COPPELIUS_CHECKPOINT_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace coppelius {

inline constexpr size_t kSha256Bytes = 32;

// A SHA-256 digest: 32 bytes, in the order FIPS 180-4 prints them.
using Sha256Digest = std::array<uint8_t, kSha256Bytes>;

// SHA-256 of `size` bytes at `data` (`data` may be null when size is 0).
Sha256Digest Sha256(const void* data, size_t size);
inline Sha256Digest Sha256(absl::string_view bytes) {
  return Sha256(bytes.data(), bytes.size());
}

// Lower-case hex of `digest` (64 characters).
std::string Sha256Hex(const Sha256Digest& digest);
// Lower-case hex of arbitrary bytes (for digests read from a file, which may
// have the wrong length).
std::string BytesHex(absl::string_view bytes);

// Number of chunks of `chunk_bytes` covering `total_bytes`:
// ceil(total_bytes / chunk_bytes). Precondition: chunk_bytes > 0.
uint64_t NumChunks(uint64_t total_bytes, uint64_t chunk_bytes);

// SHA-256 of each `chunk_bytes` chunk of the `total_bytes` at `data` (the
// last chunk may be shorter), computed on `threads` threads.
// Precondition: chunk_bytes > 0.
std::vector<Sha256Digest> ChunkDigests(const void* data, uint64_t total_bytes,
                                       uint64_t chunk_bytes, int threads);

}  // namespace coppelius

#endif  // COPPELIUS_CHECKPOINT_SHA256_H_
