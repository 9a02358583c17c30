#include "trainer/initialization.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/threads.h"
#include "common/status_macros.h"
#include "trainer/model_config.h"

namespace coppelius {
namespace {

// Random123 philox.h constants.
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

constexpr double kTwoToMinus32 = 1.0 / 4294967296.0;
constexpr double kTwoPi = 6.283185307179586476925286766559;

}  // namespace

std::array<uint32_t, 4> Philox4x32_10(const std::array<uint32_t, 4>& counter,
                                      const std::array<uint32_t, 2>& key) {
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    const uint64_t p0 = uint64_t{kPhiloxM0} * c0;
    const uint64_t p1 = uint64_t{kPhiloxM1} * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32);
    const uint32_t lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32);
    const uint32_t lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return {c0, c1, c2, c3};
}

double InitialNormalDraw(uint64_t seed, uint64_t index) {
  const std::array<uint32_t, 4> x = Philox4x32_10(
      {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0, 0},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const double u1 = (static_cast<double>(x[0]) + 1.0) * kTwoToMinus32;
  const double u2 = static_cast<double>(x[1]) * kTwoToMinus32;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

double InitialStandardDeviation(const ModelConfig& config,
                                const TensorInfo& tensor) {
  if (!tensor.decayed) return 0.0;  // norm weights and biases: not drawn
  if (absl::EndsWith(tensor.name, ".output") ||
      absl::EndsWith(tensor.name, ".down")) {
    return config.init_std / std::sqrt(2.0 * config.L);
  }
  return config.init_std;
}

absl::Status InitializeImage(const ModelConfig& config, int num_threads,
                             float* pmv) {
  if (num_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("InitializeImage: num_threads = ", num_threads,
                     ", expected >= 1"));
  }
  RETURN_IF_ERROR(Annotate(ValidateModelShape(config), "InitializeImage"));
  const int64_t n = NumParameters(config);
  const std::vector<TensorInfo> layout = ParameterLayout(config);
  // Per-element standard deviation is piecewise constant; fill norm tensors
  // directly and draw the rest in parallel over index ranges.
  for (const TensorInfo& t : layout) {
    if (t.decayed) continue;
    const float value = absl::EndsWith(t.name, ".weight") ? 1.0f : 0.0f;
    std::fill(pmv + t.offset, pmv + t.offset + t.num_elements(), value);
  }
  auto work = [&](int thread) {
    for (const TensorInfo& t : layout) {
      if (!t.decayed) continue;
      const double std_dev = InitialStandardDeviation(config, t);
      const int64_t count = t.num_elements();
      const int64_t begin = t.offset + count * thread / num_threads;
      const int64_t end = t.offset + count * (thread + 1) / num_threads;
      for (int64_t i = begin; i < end; ++i) {
        pmv[i] = static_cast<float>(
            InitialNormalDraw(config.seed, static_cast<uint64_t>(i)) * std_dev);
      }
    }
  };
  // Part t of num_threads on whichever thread takes it (common/threads.h:
  // fewer threads if the system refuses some; every element drawn by index).
  ParallelFor(num_threads, num_threads,
              [&](int64_t part) { work(static_cast<int>(part)); });
  std::memset(pmv + n, 0, sizeof(float) * 2 * static_cast<size_t>(n));
  return absl::OkStatus();
}

}  // namespace coppelius
