#include "trainer/adamw.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/model_config.h"

namespace coppelius {
namespace {

// torch.optim.AdamW's documented algorithm (PyTorch docs, "AdamW"), in
// double, for one element, with γ = 3e-4, β = (0.9, 0.95), λ (0.1 or 0),
// ε = 1e-8, no amsgrad, maximize = False:
//   θ ← θ − γλθ
//   m ← β1 m + (1 − β1) g
//   v ← β2 v + (1 − β2) g²
//   m̂ = m / (1 − β1^t);  v̂ = v / (1 − β2^t)
//   θ ← θ − γ m̂ / (√v̂ + ε)
struct TorchAdamWDouble {
  double theta, m = 0, v = 0;
  // Σ of |terms| of m (the scale of its rounding error under cancellation).
  double m_magnitude = 0;
  void Step(double g, int64_t t, double lambda) {
    const double gamma = 3e-4, b1 = 0.9, b2 = 0.95, eps = 1e-8;
    theta -= gamma * lambda * theta;
    m = b1 * m + (1 - b1) * g;
    m_magnitude = b1 * m_magnitude + (1 - b1) * std::fabs(g);
    v = b2 * v + (1 - b2) * g * g;
    const double m_hat = m / (1 - std::pow(b1, double(t)));
    const double v_hat = v / (1 - std::pow(b2, double(t)));
    theta -= gamma * m_hat / (std::sqrt(v_hat) + eps);
  }
};

// Runs `steps` updates starting at update number t0 + 1 on `n` elements
// with random gradients of widely varying scale; compares the fp32 kernel
// with the double transcription.
void CompareWithTorchRule(bool decayed, int64_t t0, int steps) {
  const int n = 4096;
  std::mt19937_64 rng(1234 + t0 + decayed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
  std::vector<TorchAdamWDouble> ref(n);
  for (int i = 0; i < n; ++i) {
    p[i] = static_cast<float>(0.05 * normal(rng));
    ref[i].theta = p[i];
  }
  const AdamWHyperparameters h;
  for (int s = 0; s < steps; ++s) {
    const uint64_t t = t0 + s + 1;
    for (int i = 0; i < n; ++i) {
      // Scales 1e-6 .. 1e2, some exact zeros.
      const double scale = std::pow(10.0, -6 + (i % 9));
      g[i] = (i % 97 == 0) ? 0.0f : static_cast<float>(scale * normal(rng));
      ref[i].Step(g[i], t, decayed ? 0.1 : 0.0);
    }
    AdamWUpdateRange(ComputeAdamWStepScalars(h, t), decayed, n, p.data(),
                     m.data(), v.data(), g.data());
  }
  // Tolerances: the fp32 path rounds 3 operations per step into m and v
  // (unit roundoff 2^-24 ≈ 6e-8 each), so m is within 1e-6 of the magnitude
  // of its terms (it may cancel) and v (all terms positive) within 1e-6
  // relative. Each step's Adam term is lr·m̂/(√v̂+ε) with |m̂|/√v̂ ≲ 1/√(1−β2)
  // ≈ 4.5; it is accurate to ~1e-5 relative, so θ agrees within a few ulp
  // of θ per step plus 1e-5·lr·4.5 per step.
  for (int i = 0; i < n; ++i) {
    ASSERT_NEAR(m[i], ref[i].m, 1e-6 * ref[i].m_magnitude + 1e-30) << i;
    ASSERT_NEAR(v[i], ref[i].v, 1e-6 * std::fabs(ref[i].v) + 1e-30) << i;
    const double ulp = std::ldexp(1.0, std::ilogb(ref[i].theta) - 23);
    ASSERT_NEAR(p[i], ref[i].theta, steps * (2 * ulp + 1e-5 * 3e-4 * 4.5))
        << i << " decayed=" << decayed << " t0=" << t0;
  }
}

TEST(AdamWUpdateRange, MatchesTorchRuleFromFresh) {
  CompareWithTorchRule(/*decayed=*/true, /*t0=*/0, /*steps=*/25);
  CompareWithTorchRule(/*decayed=*/false, /*t0=*/0, /*steps=*/25);
}

TEST(AdamWUpdateRange, MatchesTorchRuleWhenContinuingFromInBandCount) {
  CompareWithTorchRule(/*decayed=*/true, /*t0=*/9999, /*steps=*/10);
}

TEST(AdamWUpdateRange, FirstStepMovesEachElementByAboutLearningRate) {
  // At t = 1, m̂ = g and v̂ = g², so the step is lr·g/(|g| + ε) ≈ lr·sign(g)
  // (Kingma & Ba, Adam, §2.1: the effective step is bounded by lr).
  float p = 0.5f, m = 0, v = 0, g = -2.0f;
  AdamWUpdateRange(ComputeAdamWStepScalars(AdamWHyperparameters(), 1),
                   /*decayed=*/false, 1, &p, &m, &v, &g);
  EXPECT_NEAR(p, 0.5 + 3e-4, 1e-7);
  EXPECT_NEAR(m, -0.2, 1e-7);
  EXPECT_NEAR(v, 0.05 * 4.0, 1e-7);
}

TEST(AdamWUpdate, DecaysExactlyTheTwoDimensionalTensors) {
  // Zero gradient: m, v stay 0 and the Adam term is 0 / (0 + ε) = 0, so only
  // the decoupled decay p·(1 − lr·λ) acts.
  const ModelConfig config = ModelConfigByName("tiny").value();
  const int64_t n = NumParameters(config);
  std::vector<float> pmv(3 * n, 0.0f), grads(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) pmv[i] = 1.0f;
  ASSERT_TRUE(AdamWUpdate(config, AdamWHyperparameters(), 1, grads.data(), 3,
                          pmv.data())
                  .ok());
  const float decayed = static_cast<float>(1.0 - 3e-4 * 0.1);
  for (const TensorInfo& t : ParameterLayout(config)) {
    const float want = t.shape.size() == 2 ? decayed : 1.0f;
    for (int64_t i = t.offset; i < t.offset + t.num_elements(); ++i) {
      ASSERT_EQ(pmv[i], want) << t.name;
    }
  }
}

TEST(AdamWUpdate, RejectsUpdateNumberZero) {
  const ModelConfig config = ModelConfigByName("tiny").value();
  const int64_t n = NumParameters(config);
  std::vector<float> pmv(3 * n, 0.0f), grads(n, 0.0f);
  EXPECT_EQ(AdamWUpdate(config, AdamWHyperparameters(), 0, grads.data(), 1,
                        pmv.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace coppelius
