#include "checkpoint/sha256.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

// FIPS 180-4 / NIST CSRC example vectors and well-known digests.
constexpr char kEmpty[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr char kA[] =
    "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb";
constexpr char kAbc[] =
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
constexpr char kTwoBlock[] =
    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
constexpr char kMillionA[] =
    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";

TEST(Sha256, PublishedVectors) {
  EXPECT_EQ(Sha256Hex(Sha256("")), kEmpty);
  EXPECT_EQ(Sha256Hex(Sha256(nullptr, 0)), kEmpty);
  EXPECT_EQ(Sha256Hex(Sha256("a")), kA);
  EXPECT_EQ(Sha256Hex(Sha256("abc")), kAbc);
  EXPECT_EQ(Sha256Hex(Sha256(
                "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            kTwoBlock);
  EXPECT_EQ(Sha256Hex(Sha256(std::string(1000000, 'a'))), kMillionA);
}

TEST(Sha256, BytesHex) {
  EXPECT_EQ(BytesHex(std::string("\x00\x0f\xa5\xff", 4)), "000fa5ff");
  EXPECT_EQ(BytesHex(""), "");
}

TEST(NumChunks, Rounding) {
  EXPECT_EQ(NumChunks(0, 4), 0u);
  EXPECT_EQ(NumChunks(1, 4), 1u);
  EXPECT_EQ(NumChunks(4, 4), 1u);
  EXPECT_EQ(NumChunks(5, 4), 2u);
  // SPEC: 692,465,664 bytes in 4 MiB chunks = 165 full + one of 405,504.
  EXPECT_EQ(NumChunks(692465664, 4194304), 166u);
}

TEST(ChunkDigests, KnownChunksAndShortTail) {
  // "abc" "abc" "a": chunk digests are the published ones.
  const std::string data = "abcabca";
  for (int threads : {1, 2, 3, 8}) {
    std::vector<Sha256Digest> d = ChunkDigests(data.data(), data.size(), 3,
                                               threads);
    ASSERT_EQ(d.size(), 3u);
    EXPECT_EQ(Sha256Hex(d[0]), kAbc) << threads;
    EXPECT_EQ(Sha256Hex(d[1]), kAbc) << threads;
    EXPECT_EQ(Sha256Hex(d[2]), kA) << threads;
  }
}

TEST(ChunkDigests, MillionAInOneChunkAnyThreads) {
  const std::string data(1000000, 'a');
  for (int threads : {0, 1, 2}) {
    std::vector<Sha256Digest> d =
        ChunkDigests(data.data(), data.size(), 1 << 20, threads);
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(Sha256Hex(d[0]), kMillionA);
  }
}

TEST(ChunkDigests, EmptyInputHasNoChunks) {
  EXPECT_TRUE(ChunkDigests(nullptr, 0, 16, 2).empty());
}

}  // namespace
}  // namespace coppelius
