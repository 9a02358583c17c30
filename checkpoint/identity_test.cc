#include "checkpoint/identity.h"

#include "gtest/gtest.h"

namespace coppelius {
namespace {

// The literal strings of SPEC §6 (typed from the SPEC, the known answer).
constexpr char kState[] =
    "coppelius-raw-pmv-f32-v1|parameter-order:p-then-m-then-v|"
    "payload=692465664";
constexpr char kLearner[] =
    "coppelius-objective:next-token-cross-entropy-mean|halves=bf16|"
    "coppelius-learner:adamw-decoupled-decay-2d|lr=3|/=10000|beta1=9|/=10|"
    "beta2=95|/=100|decay=1|/=10|epsilon=1|/=100000000";
constexpr char kData[] =
    "coppelius-token-stream|vocabulary=12288|context=1024|header=16|token=4";
constexpr char kInitialization[] =
    "coppelius-initialization:random-normal|seed=20260925";

TEST(IdentityPart, SeedFormat) {
  EXPECT_EQ(IdentityPart("payload", 692465664), "|payload=692465664");
  EXPECT_EQ(IdentityPart("/", 10), "|/=10");
  EXPECT_EQ(IdentityPart("x", 0), "|x=0");
  EXPECT_EQ(IdentityPart("max", 18446744073709551615ull),
            "|max=18446744073709551615");
}

TEST(Identity, CoppeliusStringsMatchSpec) {
  EXPECT_EQ(StateIdentity(692465664), kState);
  EXPECT_EQ(LearnerIdentity(CoppeliusLearnerFractions()), kLearner);
  EXPECT_EQ(DataIdentity(12288, 1024, 16, 4), kData);
  EXPECT_EQ(InitializationIdentity(20260925), kInitialization);
}

TEST(Identity, CoppeliusIdentityMatchesSpec) {
  const CheckpointIdentity id = CoppeliusIdentity();
  EXPECT_EQ(id.state, kState);
  EXPECT_EQ(id.learner, kLearner);
  EXPECT_EQ(id.data, kData);
  EXPECT_EQ(id.initialization, kInitialization);
  EXPECT_EQ(id.payload_bytes, 692465664u);
  EXPECT_EQ(id.chunk_bytes, 4194304u);
  EXPECT_EQ(id.run_steps, 10000u);
  // The model identity the run writes (trainer/model_config.cc), typed out.
  EXPECT_EQ(id.model,
            "coppelius-model:decoder-pre-norm|vocabulary=12288|context=1024|"
            "width=512|layers=16|heads=8|head-size=64|mlp:swiglu|hidden=1408|"
            "norm:layernorm-weight-bias|epsilon=1|/=100000|"
            "positions:rope-rotate-half|base=10000|attention:causal-softmax|"
            "output:tied-embedding");
}

TEST(Identity, NumbersChangeTheStrings) {
  LearnerFractions l = CoppeliusLearnerFractions();
  l.lr_numerator = 6;
  EXPECT_NE(LearnerIdentity(l), kLearner);
  ModelShape s;
  s.layers = 2;
  EXPECT_NE(ModelIdentity(s), ModelIdentity(ModelShape()));
}

}  // namespace
}  // namespace coppelius
