// Random-mutation fuzzing of the token cache reader (bounded, deterministic
// seed; runs in CI). Every mutated or truncated file must either open with
// exactly (size - 16) / 4 tokens whose values equal the bytes on disk, or be
// refused with DataLoss; CheckIdRange must agree with an independent scan.
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tokencache/token_cache.h"

namespace coppelius {
namespace {

std::string TestDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  fwrite(bytes.data(), 1, bytes.size(), f);
  fclose(f);
}

uint32_t LoadLe32(const std::string& b, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(b[at])) |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 1])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 2])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 3])) << 24;
}

TEST(TokenCacheFuzz, MutatedFilesOpenConsistentlyOrAreRefused) {
  std::mt19937_64 rng(20260925);
  const uint32_t kVocab = 300;
  std::string valid(16, '\0');
  for (int i = 0; i < 200; ++i) {
    uint32_t id = static_cast<uint32_t>(rng() % kVocab);
    for (int k = 0; k < 4; ++k) valid.push_back(static_cast<char>(id >> (8 * k)));
  }
  const std::string path = TestDir() + "/fuzz.tok";
  int opened = 0, refused = 0, out_of_range = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes = valid;
    switch (rng() % 4) {
      case 0:  // flip bytes
        for (int k = 0, n = 1 + rng() % 8; k < n; ++k) {
          bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
        }
        break;
      case 1:  // truncate
        bytes.resize(rng() % (bytes.size() + 1));
        break;
      case 2:  // append garbage
        for (int k = 0, n = 1 + rng() % 7; k < n; ++k) {
          bytes.push_back(static_cast<char>(rng()));
        }
        break;
      default:  // large ids
        bytes[16 + 4 * (rng() % 200) + 3] = static_cast<char>(0x80 | rng());
        break;
    }
    WriteBytes(path, bytes);
    auto cache = TokenCache::Open(path);
    const bool well_formed = bytes.size() >= 16 && (bytes.size() - 16) % 4 == 0;
    ASSERT_EQ(cache.ok(), well_formed) << iter << " " << cache.status();
    if (!cache.ok()) {
      EXPECT_EQ(cache.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_NE(cache.status().message().find(path), std::string::npos);
      ++refused;
      continue;
    }
    ++opened;
    const uint64_t n = (bytes.size() - 16) / 4;
    ASSERT_EQ(cache->num_tokens(), n);
    int64_t first_bad = -1;
    for (uint64_t i = 0; i < n; ++i) {
      ASSERT_EQ(cache->tokens()[i], LoadLe32(bytes, 16 + 4 * i));
      if (first_bad < 0 && LoadLe32(bytes, 16 + 4 * i) >= kVocab) first_bad = i;
    }
    absl::Status range = cache->CheckIdRange(kVocab);
    EXPECT_EQ(range.ok(), first_bad < 0) << range;
    if (first_bad >= 0) {
      ++out_of_range;
      EXPECT_NE(range.message().find(absl::StrCat("offset ", 16 + 4 * first_bad)),
                std::string::npos)
          << range;
    }
  }
  EXPECT_GT(opened, 0);
  EXPECT_GT(refused, 0);
  EXPECT_GT(out_of_range, 0);
}

}  // namespace
}  // namespace coppelius
