// File: trainer/kernels/divide_test.cc
//
// DivideByKnownDivisor (divide.h) against the host's IEEE fp32 division,
// bit for bit, for every divisor b = fp32(√(1 − β2ᵗ)) the AdamW update can
// see (trainer/adamw.h ComputeAdamWStepScalars; b reaches 1 for large t, so
// the distinct values are few): random dividends over the whole range the
// update produces (0 and 2⁻⁷⁵ .. 2⁶⁴, past both ends of √v's range), every
// significand of one binade for the first divisors and some later ones, and
// the range's ends.
#include "trainer/kernels/divide.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/adamw.h"

namespace coppelius {
namespace {

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

// The distinct divisors √(1 − β2ᵗ) of updates t = 1, 2, … up to the first
// that rounds to 1, and 1 itself, in update order.
std::vector<float> UpdateDivisors() {
  const AdamWHyperparameters h;
  std::vector<float> divisors;
  std::set<uint32_t> seen;
  for (uint64_t t = 1;; ++t) {
    const float b = ComputeAdamWStepScalars(h, t).bias_correction2_sqrt;
    if (seen.insert(Bits(b)).second) divisors.push_back(b);
    if (b == 1.0f) break;
    if (t > 100000) {
      ADD_FAILURE() << "divisor never reached 1";
      break;
    }
  }
  return divisors;
}

// Expects DivideByKnownDivisor(a, b, 1/b) == a / b bit for bit.
::testing::AssertionResult SameAsDivision(float a, float b) {
  const float y = 1.0f / b;
  const float got = DivideByKnownDivisor(a, b, y);
  const float want = a / b;
  if (Bits(got) == Bits(want)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << std::hexfloat << a << " / " << b << ": got " << got << ", want "
         << want;
}

TEST(DivideTest, DivisorsOfTheUpdate) {
  const std::vector<float> divisors = UpdateDivisors();
  // β2 = 0.95: 0.95ᵗ drops below half an ulp of 1 after a few hundred
  // updates.
  EXPECT_GT(divisors.size(), 100u);
  EXPECT_LT(divisors.size(), 1000u);
  EXPECT_FLOAT_EQ(divisors.front(), std::sqrt(0.05f));
  EXPECT_EQ(divisors.back(), 1.0f);
}

TEST(DivideTest, RandomDividendsForEveryDivisor) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> significand(0, (1u << 23) - 1);
  std::uniform_int_distribution<int> exponent(-75, 63);
  for (float b : UpdateDivisors()) {
    ASSERT_TRUE(SameAsDivision(0.0f, b));
    for (int i = 0; i < 100000; ++i) {
      const float a = std::ldexp(
          1.0f + static_cast<float>(significand(rng)) * 0x1p-23f, exponent(rng));
      ASSERT_TRUE(SameAsDivision(a, b));
    }
  }
}

TEST(DivideTest, EverySignificandOfABinade) {
  const std::vector<float> divisors = UpdateDivisors();
  std::vector<float> some = {divisors[0], divisors[1], divisors[2],
                             divisors[9], divisors[divisors.size() / 2],
                             divisors[divisors.size() - 2]};
  for (float b : some) {
    for (uint32_t m = 0; m < (1u << 23); ++m) {
      const float a = 1.0f + static_cast<float>(m) * 0x1p-23f;
      ASSERT_TRUE(SameAsDivision(a, b));
    }
  }
}

TEST(DivideTest, EndsOfTheRootRange) {
  // √v for the smallest subnormal v and the largest finite v, and their
  // neighbours.
  const float lo = std::sqrt(std::numeric_limits<float>::denorm_min());
  const float hi = std::sqrt(std::numeric_limits<float>::max());
  for (float b : UpdateDivisors()) {
    for (float a : {lo, std::nextafter(lo, 1.0f), hi,
                    std::nextafter(hi, 0.0f)}) {
      ASSERT_TRUE(SameAsDivision(a, b));
    }
  }
}

}  // namespace
}  // namespace coppelius
