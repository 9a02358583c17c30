#include "trainer/initialization.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/model_config.h"

namespace coppelius {
namespace {

using ::testing::ElementsAre;

// Random123's published known-answer vectors (kat_vectors, philox4x32 10),
// as typed into SPEC §4.
TEST(Philox4x32_10, KnownAnswerZero) {
  EXPECT_THAT(Philox4x32_10({0, 0, 0, 0}, {0, 0}),
              ElementsAre(0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u));
}

TEST(Philox4x32_10, KnownAnswerAllOnes) {
  EXPECT_THAT(Philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                            {0xffffffffu, 0xffffffffu}),
              ElementsAre(0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu));
}

TEST(Philox4x32_10, KnownAnswerPi) {
  EXPECT_THAT(Philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                            {0xa4093822u, 0x299f31d0u}),
              ElementsAre(0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u));
}

// The SPEC §4 formula written out again here, from the Philox words.
float DirectElement(uint64_t seed, uint64_t i, double std_dev) {
  const auto x = Philox4x32_10(
      {static_cast<uint32_t>(i & 0xffffffffu), static_cast<uint32_t>(i >> 32), 0, 0},
      {static_cast<uint32_t>(seed), 0});
  const double u1 = (double(x[0]) + 1.0) / 4294967296.0;
  const double u2 = double(x[1]) / 4294967296.0;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  return static_cast<float>(z * std_dev);
}

std::vector<float> Image(const ModelConfig& config, int threads) {
  std::vector<float> pmv(3 * NumParameters(config), -7.0f);
  const absl::Status status = InitializeImage(config, threads, pmv.data());
  EXPECT_TRUE(status.ok()) << status;
  return pmv;
}

TEST(InitializeImage, TinyIsBitwiseIdenticalForOneAndThreeThreads) {
  const ModelConfig config = ModelConfigByName("tiny").value();
  const std::vector<float> a = Image(config, 1);
  const std::vector<float> b = Image(config, 3);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(InitializeImage, CoppeliusElementsMatchDirectComputation) {
  const ModelConfig config = ModelConfigByName("coppelius").value();
  const std::vector<float> pmv = Image(config, 2);
  const int64_t n = NumParameters(config);
  const double small = 0.02 / std::sqrt(32.0);
  struct Probe {
    int64_t index;
    double std_dev;  // SPEC §4, by tensor
  };
  const Probe probes[] = {
      {0, 0.02},                               // embedding[0, 0]
      {6291455, 0.02},                         // embedding, last
      {6291456 + 1024 + 5, 0.02},              // blocks.0.attention.qkv
      {6291456 + 787456 + 77, small},          // blocks.0.attention.output
      {6291456 + 1050624 + 9, 0.02},           // blocks.0.mlp.gate
      {6291456 + 1771520 + 123, 0.02},         // blocks.0.mlp.up
      {6291456 + 2492416 + 720895, small},     // blocks.0.mlp.down, last
      {6291456 + 15 * 3213312 + 2492416, small},  // blocks.15.mlp.down
  };
  for (const Probe& p : probes) {
    EXPECT_EQ(pmv[p.index], DirectElement(20260925, p.index, p.std_dev))
        << "element " << p.index;
  }
  // Norms: weight 1, bias 0 (SPEC §4).
  EXPECT_EQ(pmv[6291456], 1.0f);               // blocks.0.attention_norm.weight
  EXPECT_EQ(pmv[6291456 + 512], 0.0f);         // blocks.0.attention_norm.bias
  EXPECT_EQ(pmv[6291456 + 1049600 + 511], 1.0f);  // mlp_norm.weight
  EXPECT_EQ(pmv[6291456 + 1050112], 0.0f);     // mlp_norm.bias
  EXPECT_EQ(pmv[57704448], 1.0f);              // final_norm.weight
  EXPECT_EQ(pmv[57705471], 0.0f);              // final_norm.bias
  // M and V are zero.
  for (int64_t i = n; i < 3 * n; i += 4099) ASSERT_EQ(pmv[i], 0.0f) << i;
  EXPECT_EQ(pmv[3 * n - 1], 0.0f);
  // Embedding statistics: mean 0, std 0.02 within ~5 standard errors
  // (6.3M samples: se(mean) = 0.02/2508, se(std) ~ 0.02/3547).
  double sum = 0, sum2 = 0;
  for (int64_t i = 0; i < 6291456; ++i) {
    sum += pmv[i];
    sum2 += double(pmv[i]) * pmv[i];
  }
  const double mean = sum / 6291456, sd = std::sqrt(sum2 / 6291456 - mean * mean);
  EXPECT_NEAR(mean, 0.0, 5 * 0.02 / 2508);
  EXPECT_NEAR(sd, 0.02, 5 * 0.02 / 3547);
}

TEST(InitializeImage, RejectsZeroThreads) {
  const ModelConfig config = ModelConfigByName("tiny").value();
  std::vector<float> pmv(3 * NumParameters(config));
  EXPECT_EQ(InitializeImage(config, 0, pmv.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace coppelius
