// Tests of PmvStateProblems (trainer/pmv_state.h) on hand-made images of
// config tiny: offsets and tensors are computed here from the layout's
// definition (ParameterLayout), the planes' order P, M, V (SPEC §4).
#include "trainer/pmv_state.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/model_config.h"

namespace coppelius {
namespace {

TEST(PmvStateProblems, FiniteStateWithNonNegativeSecondMomentsHasNone) {
  const ModelConfig config = *ModelConfigByName("tiny");
  const uint64_t n = NumParameters(config);
  // P and M of both signs, V >= 0 (+0 and -0 included: -0 is not below 0).
  std::vector<float> pmv(3 * n, -0.25f);
  for (uint64_t i = 2 * n; i < 3 * n; ++i) pmv[i] = i % 2 ? 0.0f : 3e-8f;
  pmv[2 * n + 5] = -0.0f;
  EXPECT_TRUE(PmvStateProblems("x.ckpt", 64, pmv.data(), n, config).empty());
}

TEST(PmvStateProblems, OneLinePerPlaneNamingTheFirstValue) {
  const ModelConfig config = *ModelConfigByName("tiny");
  const uint64_t n = NumParameters(config);
  const std::vector<TensorInfo> layout = ParameterLayout(config);
  const TensorInfo& last = layout.back();
  std::vector<float> pmv(3 * n, 1.0f);
  pmv[7] = NAN;  // P, tensor layout[0] (the embedding, at offset 0)
  pmv[9] = INFINITY;
  pmv[2 * n + last.offset] = -1e-30f;  // V, the last tensor's first value
  pmv[2 * n + last.offset + 1] = -2.0f;
  const std::vector<std::string> problems =
      PmvStateProblems("x.ckpt", 100, pmv.data(), n, config);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0],
            "x.ckpt: offset " + std::to_string(100 + 4 * 7) +
                " (plane P, parameter 7, tensor " + layout[0].name +
                "): 2 of " + std::to_string(n) +
                " parameters are not finite: a diverged run's state (its "
                "forward gives non-finite losses)");
  EXPECT_EQ(problems[1],
            "x.ckpt: offset " +
                std::to_string(100 + 4 * (2 * n + last.offset)) +
                " (plane V, parameter " + std::to_string(last.offset) +
                ", tensor " + last.name + "): 2 of " + std::to_string(n) +
                " AdamW second moments are negative, expected >= 0 (V = "
                "beta2 V + (1 - beta2) g^2 never is): not a state AdamW "
                "writes");
  // A non-finite M value; negative M values are no problem (a first
  // moment has the gradient's sign).
  std::vector<float> m(3 * n, -1.0f);
  for (uint64_t i = 2 * n; i < 3 * n; ++i) m[i] = 1.0f;
  m[n + 3] = -INFINITY;
  const std::vector<std::string> m_problems =
      PmvStateProblems("x.ckpt", 0, m.data(), n, config);
  ASSERT_EQ(m_problems.size(), 1u);
  EXPECT_NE(m_problems[0].find("(plane M, parameter 3, tensor " +
                               layout[0].name + "): 1 of"),
            std::string::npos)
      << m_problems[0];
}

// An image of another parameter count than the config's names no tensor.
TEST(PmvStateProblems, NoTensorWhereTheLayoutDoesNotFit) {
  const ModelConfig config = *ModelConfigByName("tiny");
  std::vector<float> pmv(3 * 10, 0.0f);
  pmv[2 * 10 + 4] = NAN;
  const std::vector<std::string> problems =
      PmvStateProblems("y", 8, pmv.data(), 10, config);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0],
            "y: offset 104 (plane V, parameter 4): 1 of 10 AdamW second "
            "moments are not finite: not a state a healthy run writes (the "
            "next update makes those parameters non-finite or stops them)");
}

}  // namespace
}  // namespace coppelius
