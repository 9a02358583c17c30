#include "checkpoint/sha256.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/threads.h"

// Programmer invariants only (the pinned Abseil has no CHECK).
#define SHA256_CHECK(cond)                                              \
  do {                                                                  \
    if (!(cond)) {                                                      \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,       \
                   __LINE__, #cond);                                    \
      std::abort();                                                     \
    }                                                                   \
  } while (0)

namespace coppelius {
namespace {

// The SHA-256 implementation, fetched once (OpenSSL 3 would otherwise look
// it up on every EVP_DigestInit_ex through EVP_sha256()).
const EVP_MD* Sha256Md() {
  static const EVP_MD* md = [] {
    EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched != nullptr ? static_cast<const EVP_MD*>(fetched)
                              : EVP_sha256();
  }();
  return md;
}

}  // namespace

Sha256Digest Sha256(const void* data, size_t size) {
  Sha256Digest digest{};
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  SHA256_CHECK(ctx != nullptr);
  unsigned int length = 0;
  // OpenSSL's SHA-256 cannot fail on valid arguments; a failure is a bug
  // or a broken library, not bad input.
  SHA256_CHECK(EVP_DigestInit_ex(ctx, Sha256Md(), nullptr) == 1);
  if (size > 0) SHA256_CHECK(EVP_DigestUpdate(ctx, data, size) == 1);
  SHA256_CHECK(EVP_DigestFinal_ex(ctx, digest.data(), &length) == 1);
  SHA256_CHECK(length == kSha256Bytes);
  EVP_MD_CTX_free(ctx);
  return digest;
}

std::string BytesHex(absl::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string Sha256Hex(const Sha256Digest& digest) {
  return BytesHex(absl::string_view(
      reinterpret_cast<const char*>(digest.data()), digest.size()));
}

uint64_t NumChunks(uint64_t total_bytes, uint64_t chunk_bytes) {
  SHA256_CHECK(chunk_bytes > 0);  // Failed precondition of NumChunks()
  return total_bytes / chunk_bytes + (total_bytes % chunk_bytes != 0 ? 1 : 0);
}

std::vector<Sha256Digest> ChunkDigests(const void* data, uint64_t total_bytes,
                                       uint64_t chunk_bytes, int threads) {
  const uint64_t n = NumChunks(total_bytes, chunk_bytes);
  std::vector<Sha256Digest> digests(n);
  const unsigned char* bytes = static_cast<const unsigned char*>(data);
  ParallelFor(static_cast<int64_t>(n), threads, [&](int64_t i) {
    const uint64_t begin = i * chunk_bytes;
    const uint64_t size = std::min(chunk_bytes, total_bytes - begin);
    digests[i] = Sha256(bytes + begin, size);
  });
  return digests;
}

}  // namespace coppelius
