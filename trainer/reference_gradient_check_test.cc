// Central finite differences (double precision) against the reference
// backward, tiny config, bf16 off: ComputeLossAndGradientsDouble evaluates
// the whole model in double, so for a step h the central difference
// (f(θ + h) − f(θ − h)) / 2h has truncation error O(h²·f''') and roundoff
// O(1e-16·|f| / h). With h = 1e-5 both are below 1e-9; the tolerance is
// |fd − analytic| <= 1e-8 + 1e-6·|fd| (observed: max 3e-10) for every sampled element.
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "trainer/model_config.h"
#include "trainer/reference_backend.h"

namespace coppelius {
namespace {

double MeanLoss(const ModelConfig& config, const std::vector<double>& p,
                const std::vector<uint32_t>& ids) {
  std::vector<double> losses(config.T);
  const absl::Status status = ComputeLossAndGradientsDouble(
      config, 2, p.data(), ids.data(), ids.data() + 1, losses.data(), nullptr);
  EXPECT_TRUE(status.ok()) << status;
  double sum = 0;
  for (double l : losses) sum += l;
  return sum / config.T;
}

TEST(ReferenceGradient, MatchesCentralFiniteDifferencesForEveryTensorKind) {
  const ModelConfig config = ModelConfigByName("tiny").value();
  std::mt19937_64 rng(20260925);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::vector<TensorInfo> layout = ParameterLayout(config);
  std::vector<double> p(NumParameters(config));
  for (const TensorInfo& t : layout) {
    const bool weight = absl::EndsWith(t.name, ".weight");
    for (int64_t i = t.offset; i < t.offset + t.num_elements(); ++i) {
      p[i] = t.decayed ? 0.15 * normal(rng)
                       : (weight ? 1.0 : 0.0) + 0.2 * normal(rng);
    }
  }
  // Few distinct ids, so embedding rows get input, target and tied-logit
  // contributions together.
  std::vector<uint32_t> ids(config.T + 1);
  for (uint32_t& id : ids) id = static_cast<uint32_t>(rng() % 40);

  std::vector<double> grads(p.size()), losses(config.T);
  ASSERT_TRUE(ComputeLossAndGradientsDouble(config, 2, p.data(), ids.data(),
                                            ids.data() + 1, losses.data(),
                                            grads.data())
                  .ok());
  const double h = 1e-5;
  int checked = 0;
  double max_abs_error = 0, max_scaled_error = 0;
  for (const TensorInfo& t : layout) {
    // Sample 6 elements of every tensor (all kinds, both layers), plus an
    // embedding row used as input (ids[0]) and one never seen (row 500,
    // reached only through the tied logits).
    std::vector<int64_t> elements;
    for (int k = 0; k < 6; ++k) elements.push_back(rng() % t.num_elements());
    if (t.name == "embedding") {
      elements.push_back(int64_t{ids[0]} * config.C + 3);
      elements.push_back(int64_t{500} * config.C + 17);
    }
    for (int64_t e : elements) {
      const int64_t i = t.offset + e;
      const double saved = p[i];
      p[i] = saved + h;
      const double up = MeanLoss(config, p, ids);
      p[i] = saved - h;
      const double down = MeanLoss(config, p, ids);
      p[i] = saved;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(grads[i], fd, 1e-8 + 1e-6 * std::fabs(fd))
          << t.name << " element " << e;
      max_abs_error = std::max(max_abs_error, std::fabs(grads[i] - fd));
      max_scaled_error = std::max(
          max_scaled_error, std::fabs(grads[i] - fd) / (1e-8 + 1e-6 * std::fabs(fd)));
      ++checked;
    }
  }
  std::cout << checked << " elements; max |analytic - fd| = " << max_abs_error
            << "; max error / tolerance = " << max_scaled_error << "\n";
  EXPECT_EQ(checked, 6 * static_cast<int>(layout.size()) + 2);
}

}  // namespace
}  // namespace coppelius
