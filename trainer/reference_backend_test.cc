#include "trainer/reference_backend.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/adamw.h"
#include "trainer/initialization.h"
#include "trainer/model_config.h"
#include "trainer/reference_test_util.h"

namespace coppelius {
namespace {

using ::testing::HasSubstr;

ModelConfig Tiny() { return ModelConfigByName("tiny").value(); }

// Parameters with larger matrices than the initialization (so attention is
// far from uniform) and non-trivial norms.
std::vector<float> RandomParams(const ModelConfig& config, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> p(NumParameters(config));
  for (const TensorInfo& t : ParameterLayout(config)) {
    const bool weight = t.name.size() > 7 &&
                        t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
    for (int64_t i = t.offset; i < t.offset + t.num_elements(); ++i) {
      if (t.decayed) {
        p[i] = static_cast<float>(0.15 * normal(rng));
      } else {
        p[i] = static_cast<float>((weight ? 1.0 : 0.0) + 0.2 * normal(rng));
      }
    }
  }
  return p;
}

std::vector<uint32_t> RandomTokens(const ModelConfig& config, int64_t n,
                                   uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> ids(n);
  for (uint32_t& id : ids) id = static_cast<uint32_t>(rng() % config.V);
  return ids;
}

TEST(RoundToBfloat16, RoundsToNearestEven) {
  EXPECT_EQ(RoundToBfloat16(1.0f), 1.0f);
  // bf16 has 8 significant bits: the ulp at 1 is 2^-7.
  EXPECT_EQ(RoundToBfloat16(1.0f + 0x1p-8f), 1.0f);              // tie → even
  EXPECT_EQ(RoundToBfloat16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);  // tie → even
  EXPECT_EQ(RoundToBfloat16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(RoundToBfloat16(-3.140625f), -3.140625f);  // representable
  // Above the midpoint of bf16 max (2 − 2^-7)·2^127 and 2^128: rounds to inf.
  EXPECT_EQ(RoundToBfloat16(3.4e38f), INFINITY);
  EXPECT_TRUE(std::isnan(RoundToBfloat16(NAN)));
}

TEST(ComputeLossAndGradientsDouble, MatchesNaiveIndependentForward) {
  const ModelConfig config = Tiny();
  const std::vector<float> pf = RandomParams(config, 7);
  const std::vector<double> p(pf.begin(), pf.end());
  const std::vector<uint32_t> ids = RandomTokens(config, config.T + 1, 8);
  std::vector<double> losses(config.T);
  ASSERT_TRUE(ComputeLossAndGradientsDouble(config, 2, p.data(), ids.data(),
                                            ids.data() + 1, losses.data(),
                                            nullptr)
                  .ok());
  const std::vector<double> want = testing_internal::NaiveForwardRowLosses(
      config, p, ids.data(), ids.data() + 1);
  for (int t = 0; t < config.T; ++t) {
    EXPECT_NEAR(losses[t], want[t], 1e-10 * std::fabs(want[t])) << "row " << t;
  }
}

TEST(ComputeLossAndGradients, Fp32PathAgreesWithDoublePath) {
  // With fp32 operands, every fp32 rounding is of a double-accumulated value:
  // losses agree with the all-double model to ~1e-5 relative, gradients to
  // ~1e-3 of the largest gradient of their tensor.
  const ModelConfig config = Tiny();
  const std::vector<float> pf = RandomParams(config, 11);
  const std::vector<double> pd(pf.begin(), pf.end());
  const std::vector<uint32_t> ids = RandomTokens(config, config.T + 1, 12);
  const int64_t n = NumParameters(config);
  std::vector<float> lf(config.T), gf(n);
  std::vector<double> ld(config.T), gd(n);
  ReferenceOptions options;
  options.bf16_matmul_operands = false;
  options.num_threads = 2;
  ASSERT_TRUE(ComputeLossAndGradients(config, options, pf.data(), ids.data(),
                                      ids.data() + 1, lf.data(), gf.data())
                  .ok());
  ASSERT_TRUE(ComputeLossAndGradientsDouble(config, 2, pd.data(), ids.data(),
                                            ids.data() + 1, ld.data(),
                                            gd.data())
                  .ok());
  for (int t = 0; t < config.T; ++t) {
    EXPECT_NEAR(lf[t], ld[t], 1e-5 * std::fabs(ld[t]) + 1e-6) << t;
  }
  for (const TensorInfo& t : ParameterLayout(config)) {
    double max_abs = 0, max_err = 0;
    for (int64_t i = t.offset; i < t.offset + t.num_elements(); ++i) {
      max_abs = std::max(max_abs, std::fabs(gd[i]));
      max_err = std::max(max_err, std::fabs(double(gf[i]) - gd[i]));
    }
    EXPECT_LE(max_err, 1e-3 * max_abs) << t.name;
  }
}

TEST(ComputeLossAndGradients, Bf16OperandsChangeResultsOnlySlightly) {
  const ModelConfig config = Tiny();
  const std::vector<float> p = RandomParams(config, 21);
  const std::vector<uint32_t> ids = RandomTokens(config, config.T + 1, 22);
  std::vector<float> l32(config.T), l16(config.T);
  ReferenceOptions fp32;
  fp32.bf16_matmul_operands = false;
  ASSERT_TRUE(ComputeLossAndGradients(config, fp32, p.data(), ids.data(),
                                      ids.data() + 1, l32.data(), nullptr)
                  .ok());
  ASSERT_TRUE(ComputeLossAndGradients(config, ReferenceOptions(), p.data(),
                                      ids.data(), ids.data() + 1, l16.data(),
                                      nullptr)
                  .ok());
  double max_rel = 0;
  for (int t = 0; t < config.T; ++t) {
    max_rel = std::max(max_rel, double(std::fabs(l16[t] - l32[t]) / std::fabs(l32[t])));
  }
  // bf16 has a relative precision of 2^-9 ≈ 2e-3 per operand.
  EXPECT_GT(max_rel, 0.0);
  EXPECT_LT(max_rel, 5e-2);
}

TEST(ComputeLossAndGradients, IdenticalForOneAndThreeThreads) {
  const ModelConfig config = Tiny();
  const std::vector<float> p = RandomParams(config, 31);
  const std::vector<uint32_t> ids = RandomTokens(config, config.T + 1, 32);
  const int64_t n = NumParameters(config);
  std::vector<float> l1(config.T), l3(config.T), g1(n), g3(n);
  ReferenceOptions one, three;
  one.num_threads = 1;
  three.num_threads = 3;
  ASSERT_TRUE(ComputeLossAndGradients(config, one, p.data(), ids.data(),
                                      ids.data() + 1, l1.data(), g1.data())
                  .ok());
  ASSERT_TRUE(ComputeLossAndGradients(config, three, p.data(), ids.data(),
                                      ids.data() + 1, l3.data(), g3.data())
                  .ok());
  EXPECT_EQ(std::memcmp(l1.data(), l3.data(), l1.size() * 4), 0);
  EXPECT_EQ(std::memcmp(g1.data(), g3.data(), g1.size() * 4), 0);
}

TEST(ComputeLossAndGradients, InitialLossIsNearLogV) {
  // At initialization the logits are small (std ≈ 0.02·√C), so each row's
  // cross-entropy is ln V plus a small positive term.
  const ModelConfig config = Tiny();
  std::vector<float> pmv(3 * NumParameters(config));
  ASSERT_TRUE(InitializeImage(config, 2, pmv.data()).ok());
  const std::vector<uint32_t> ids = RandomTokens(config, config.T + 1, 41);
  std::vector<float> losses(config.T);
  ASSERT_TRUE(ComputeLossAndGradients(config, ReferenceOptions(), pmv.data(),
                                      ids.data(), ids.data() + 1,
                                      losses.data(), nullptr)
                  .ok());
  double mean = 0;
  for (float l : losses) mean += l / config.T;
  EXPECT_NEAR(mean, std::log(512.0), 0.3);
}

TEST(ComputeLossAndGradients, RejectsOutOfRangeId) {
  const ModelConfig config = Tiny();
  const std::vector<float> p = RandomParams(config, 1);
  std::vector<uint32_t> ids = RandomTokens(config, config.T + 1, 2);
  ids[5] = 512;
  std::vector<float> losses(config.T);
  const absl::Status status = ComputeLossAndGradients(
      config, ReferenceOptions(), p.data(), ids.data(), ids.data() + 1,
      losses.data(), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("input id 512 at row 5"));
}

TEST(ReferenceBackend, StepsFollowTheProtocol) {
  const ModelConfig config = Tiny();
  const int64_t n = NumParameters(config);
  const int64_t T = config.T;
  std::vector<float> pmv(3 * n);
  ASSERT_TRUE(InitializeImage(config, 2, pmv.data()).ok());
  const uint64_t first_context = 5, update_count = 41;
  const int steps = 3;
  const std::vector<uint32_t> stream =
      RandomTokens(config, T * (first_context + steps) + 1, 51);
  const uint32_t* tokens = stream.data() + T * first_context;
  const uint64_t num_tokens = T * steps + 1;

  std::unique_ptr<Backend> backend =
      CreateReferenceBackend(config, ReferenceOptions());
  EXPECT_EQ(backend->name(), "reference");
  ASSERT_TRUE(backend->Load(pmv.data(), update_count).ok());
  ASSERT_TRUE(backend->SetTokens(tokens, num_tokens, first_context).ok());
  std::vector<float> record(3 * config.V);
  ASSERT_TRUE(backend->ForwardRecord(first_context, record.data()).ok());

  // The same computation, by hand from the lower-level API and AdamW.
  std::vector<float> want_pmv = pmv, grads(n), logits(T * config.V);
  std::vector<float> want_losses(T);
  ASSERT_TRUE(ComputeLossAndGradients(config, ReferenceOptions(),
                                      want_pmv.data(), tokens, tokens + 1,
                                      nullptr, nullptr, logits.data())
                  .ok());
  for (int r = 0; r < 3; ++r) {
    const int64_t row = r == 0 ? T / 4 - 1 : (r == 1 ? T / 2 - 1 : T - 1);
    ASSERT_EQ(std::memcmp(record.data() + r * config.V,
                          logits.data() + row * config.V, config.V * 4),
              0)
        << "forward record row " << row;
  }
  for (int s = 0; s < steps; ++s) {
    ASSERT_TRUE(backend->EnqueueStep(s).ok());
    const uint32_t* in = tokens + T * s;
    ASSERT_TRUE(ComputeLossAndGradients(config, ReferenceOptions(),
                                        want_pmv.data(), in, in + 1,
                                        want_losses.data(), grads.data())
                    .ok());
    ASSERT_TRUE(AdamWUpdate(config, AdamWHyperparameters(),
                            update_count + s + 1, grads.data(), 1,
                            want_pmv.data())
                    .ok());
    std::vector<float> losses(T);
    ASSERT_TRUE(backend->PollStep(s, losses.data()).ok());
    EXPECT_EQ(losses, want_losses) << "step " << s;
  }
  std::vector<float> got(3 * n);
  ASSERT_TRUE(backend->Snapshot(got.data()).ok());
  EXPECT_EQ(std::memcmp(got.data(), want_pmv.data(), got.size() * 4), 0);

  // Final: rows T/4-1, T/2-1, T-1 of a forward of the final parameters.
  std::vector<float> final_logits(3 * config.V);
  ASSERT_TRUE(backend->Final(first_context + steps - 1, final_logits.data()).ok());
  const uint32_t* last = tokens + T * (steps - 1);
  ASSERT_TRUE(ComputeLossAndGradients(config, ReferenceOptions(),
                                      want_pmv.data(), last, last + 1, nullptr,
                                      nullptr, logits.data())
                  .ok());
  const int64_t rows[3] = {T / 4 - 1, T / 2 - 1, T - 1};
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(std::memcmp(final_logits.data() + r * config.V,
                          logits.data() + rows[r] * config.V, config.V * 4),
              0)
        << "final row " << rows[r];
  }

  auto telemetry = backend->Telemetry();
  ASSERT_TRUE(telemetry.ok());
  EXPECT_EQ(telemetry->last_row_losses, want_losses);
  ASSERT_EQ(telemetry->embedding_gradient_head.size(), 1024u);
  EXPECT_EQ(telemetry->embedding_gradient_head[100], grads[100]);
  EXPECT_EQ(telemetry->embedding_parameter_head[7], want_pmv[7]);
  EXPECT_EQ(telemetry->embedding_first_moment_head[7], want_pmv[n + 7]);
  EXPECT_EQ(telemetry->first_nonfinite_step, -1);
  EXPECT_EQ(telemetry->nonfinite_steps, 0);
}

TEST(ReferenceBackend, RefusesOutOfOrderStepsAndBadTokens) {
  const ModelConfig config = Tiny();
  std::vector<float> pmv(3 * NumParameters(config));
  ASSERT_TRUE(InitializeImage(config, 1, pmv.data()).ok());
  std::unique_ptr<Backend> backend =
      CreateReferenceBackend(config, ReferenceOptions());
  EXPECT_EQ(backend->EnqueueStep(0).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(backend->Load(pmv.data(), 0).ok());
  std::vector<uint32_t> tokens = RandomTokens(config, 2 * config.T + 1, 3);
  tokens[70] = 9999;
  const absl::Status bad = backend->SetTokens(tokens.data(), tokens.size(), 2);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("198"));  // 64·2 + 70
  EXPECT_TRUE(backend->Telemetry()->invalid_token_seen);
  tokens[70] = 1;
  ASSERT_TRUE(backend->SetTokens(tokens.data(), tokens.size(), 2).ok());
  EXPECT_EQ(backend->EnqueueStep(1).code(),
            absl::StatusCode::kFailedPrecondition);
  float losses[64];
  EXPECT_EQ(backend->PollStep(0, losses).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace coppelius
