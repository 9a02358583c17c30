// Mutation fuzzing of checkpoint envelopes (deterministic seed, a few
// seconds). Every byte of a valid envelope is covered by a check, so every
// raw mutation must be refused (by Open or VerifyPayload), never crash, and
// never allocate more than the file holds. A second phase re-seals mutated
// preambles and headers with valid digests to reach the deeper checks; there
// only "no crash, and an accepted file verifies" is asserted.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/envelope.h"
#include "checkpoint/publisher.h"
#include "checkpoint/reader.h"
#include "checkpoint/test_util.h"
#include "common/file_io.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

using ::coppelius::checkpoint_testing::NewTempDir;
using ::coppelius::checkpoint_testing::TestIdentity;
using ::coppelius::checkpoint_testing::TestPayload;
using ::coppelius::checkpoint_testing::WriteBytes;

// Open + VerifyPayload + ReadPayload; OK only if all pass.
absl::Status ReadFully(const std::string& path) {
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(path);
  if (!r.ok()) return r.status();
  if (r->IsFresh()) return absl::FailedPreconditionError("fresh");
  absl::Status s = r->VerifyPayload(2);
  if (!s.ok()) return s;
  std::vector<char> dst(r->payload_bytes());
  return r->ReadPayload(dst.data(), dst.size(), 1);
}

std::vector<std::string> BaseEnvelopes(const std::string& dir) {
  std::vector<std::string> out;
  int n = 0;
  for (uint64_t parameters : {1, 40, 700}) {
    for (uint64_t chunk : {1, 7, 256, 4096}) {
      if (parameters * 12 / chunk > 2000) continue;
      const std::string path = absl::StrCat(dir, "/base", n++, ".ckpt");
      const std::vector<float> payload = TestPayload(parameters, n);
      PublishOptions options;
      options.writer = "fuzz";
      EXPECT_TRUE(PublishCheckpoint(path, TestIdentity(parameters * 12, chunk),
                                    n, payload.data(), parameters * 12,
                                    options)
                      .ok());
      out.push_back(*ReadFile(path));
    }
  }
  return out;
}

std::string Mutate(const std::string& in, std::mt19937_64& rng) {
  std::string s = in;
  auto pos = [&](size_t n) { return n == 0 ? 0 : rng() % n; };
  auto random_bytes = [&](size_t n) {
    std::string b(n, '\0');
    for (char& c : b) c = static_cast<char>(rng());
    return b;
  };
  // Bias offsets towards the preamble and header, where the parsing is.
  auto offset = [&]() -> size_t {
    switch (rng() % 3) {
      case 0: return pos(std::min<size_t>(s.size(), 128));
      case 1: return pos(std::min<size_t>(s.size(), 4096));
      default: return pos(s.size());
    }
  };
  const int rounds = 1 + rng() % 3;
  for (int round = 0; round < rounds && !s.empty(); ++round) {
    switch (rng() % 9) {
      case 0: s[offset()] ^= static_cast<char>(1u << (rng() % 8)); break;
      case 1: s[offset()] = static_cast<char>(rng()); break;
      case 2: s.resize(pos(s.size())); break;
      case 3: s += random_bytes(1 + rng() % 5000); break;
      case 4: s.insert(offset(), random_bytes(1 + rng() % 64)); break;
      case 5: {
        const size_t at = offset();
        s.erase(at, 1 + rng() % 64);
        break;
      }
      case 6: {
        const size_t at = offset();
        const std::string b = random_bytes(1 + rng() % 32);
        s.replace(at, std::min(b.size(), s.size() - at), b);
        break;
      }
      case 7: {  // an interesting u64 at an 8-aligned preamble offset
        const uint64_t values[] = {0, 1, 128, 4096, ~uint64_t{0},
                                   uint64_t{1} << 63, s.size(), kMaxHeaderBytes,
                                   kMaxHeaderBytes + 1};
        const uint64_t v = values[rng() % 9];
        const size_t at = 8 * (rng() % 16);
        if (at + 8 <= s.size()) std::memcpy(&s[at], &v, 8);
        break;
      }
      case 8: {  // copy a range from elsewhere in the file
        const size_t from = pos(s.size()), to = pos(s.size());
        const size_t n = std::min<size_t>({1 + rng() % 256, s.size() - from,
                                           s.size() - to});
        std::memmove(&s[to], &s[from], n);
        break;
      }
    }
  }
  return s;
}

TEST(EnvelopeFuzz, EveryRawMutationIsRefusedWithoutCrashing) {
  const std::string dir = NewTempDir();
  const std::vector<std::string> bases = BaseEnvelopes(dir);
  ASSERT_FALSE(bases.empty());
  for (size_t i = 0; i < bases.size(); ++i) {
    const std::string p = absl::StrCat(dir, "/check.ckpt");
    WriteBytes(p, bases[i]);
    ASSERT_TRUE(ReadFully(p).ok()) << i;
  }
  std::mt19937_64 rng(20260925);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(4);
  int iterations = 0, skipped = 0;
  while (iterations < 200 || std::chrono::steady_clock::now() < deadline) {
    const std::string& base = bases[rng() % bases.size()];
    const std::string mutated = Mutate(base, rng);
    if (mutated == base) {
      ++skipped;
      continue;
    }
    const std::string p = absl::StrCat(dir, "/m.ckpt");
    WriteBytes(p, mutated);
    const absl::Status s = ReadFully(p);
    ASSERT_FALSE(s.ok()) << "iteration " << iterations
                         << ": a mutated file was accepted";
    // A 0-byte result is a fresh input, the one legal reading of it.
    if (!mutated.empty()) {
      ASSERT_TRUE(s.code() == absl::StatusCode::kDataLoss ||
                  s.code() == absl::StatusCode::kFailedPrecondition)
          << s;
      ASSERT_NE(s.message().find(p), absl::string_view::npos) << s;
    }
    ++iterations;
    if (iterations >= 200000) break;
  }
  RecordProperty("iterations", iterations);
  std::printf("raw mutations refused: %d (identical skipped: %d)\n",
              iterations, skipped);
  EXPECT_GT(iterations, 200);
}

TEST(EnvelopeFuzz, ResealedMutationsNeverCrash) {
  const std::string dir = NewTempDir();
  const std::vector<std::string> bases = BaseEnvelopes(dir);
  std::mt19937_64 rng(7);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int iterations = 0, accepted = 0;
  while (iterations < 200 || std::chrono::steady_clock::now() < deadline) {
    const std::string& base = bases[rng() % bases.size()];
    absl::StatusOr<Preamble> p = DecodePreamble(base, base.size(), "base");
    ASSERT_TRUE(p.ok());
    std::string header = base.substr(128, p->header_bytes);
    std::string payload = base.substr(p->payload_offset);
    // Mutate the header bytes and/or the preamble numbers, then re-seal.
    if (rng() % 2) header = Mutate(header, rng);
    Preamble q = *p;
    q.header_bytes = header.size();
    q.payload_offset = PayloadOffsetFor(header.size());
    if (rng() % 3 == 0) q.payload_bytes += static_cast<int64_t>(rng() % 9) - 4;
    if (rng() % 3 == 0) q.chunk_bytes = rng() % 5000;
    q.header_sha256 = Sha256(header);
    if (header.empty() || header.size() > kMaxHeaderBytes) continue;
    std::string file = EncodePreamble(q) + header;
    file.resize(q.payload_offset, '\0');
    file += payload;
    const std::string path = absl::StrCat(dir, "/r.ckpt");
    WriteBytes(path, file);
    absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(path);
    if (r.ok()) {
      // Opened: self-consistent sizes; the payload verifies unless a chunk
      // digest in the header was changed, which VerifyPayload reports.
      ASSERT_EQ(r->payload_bytes(), payload.size());
      ASSERT_EQ(r->payload_offset() + r->payload_bytes(), file.size());
      const absl::Status v = r->VerifyPayload(2);
      if (v.ok()) {
        ++accepted;
      } else {
        ASSERT_EQ(v.code(), absl::StatusCode::kDataLoss) << v;
        ASSERT_NE(v.message().find("payload chunk"), absl::string_view::npos);
      }
    }
    ++iterations;
  }
  std::printf("resealed mutations: %d, accepted as consistent: %d\n",
              iterations, accepted);
}

}  // namespace
}  // namespace coppelius
