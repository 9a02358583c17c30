#include "trainer/model_config.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// SPEC §4's parameter table, typed in: name suffix, shape, offset relative to
// the block's base 6,291,456 + l·3,213,312.
struct SpecRow {
  const char* suffix;
  std::vector<int64_t> shape;
  int64_t relative_offset;
};
const SpecRow kSpecBlockRows[] = {
    {"attention_norm.weight", {512}, 0},
    {"attention_norm.bias", {512}, 512},
    {"attention.qkv", {1536, 512}, 1024},
    {"attention.output", {512, 512}, 787456},
    {"mlp_norm.weight", {512}, 1049600},
    {"mlp_norm.bias", {512}, 1050112},
    {"mlp.gate", {1408, 512}, 1050624},
    {"mlp.up", {1408, 512}, 1771520},
    {"mlp.down", {512, 1408}, 2492416},
};

TEST(ModelConfigByName, CoppeliusMatchesSpecConstants) {
  auto config = ModelConfigByName("coppelius");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->V, 12288);
  EXPECT_EQ(config->T, 1024);
  EXPECT_EQ(config->C, 512);
  EXPECT_EQ(config->L, 16);
  EXPECT_EQ(config->NH, 8);
  EXPECT_EQ(config->HS, 64);
  EXPECT_EQ(config->hidden, 1408);
  EXPECT_EQ(config->layer_norm_eps, 1e-5f);
  EXPECT_EQ(config->rope_base, 10000.0);
  EXPECT_EQ(config->run_steps, 10000);
  EXPECT_EQ(config->checkpoint_interval, 1000);
  EXPECT_EQ(config->seed, 20260925u);
  EXPECT_EQ(NumParameters(*config), 57705472);
  EXPECT_TRUE(ValidateModelConfig(*config).ok());
}

TEST(ParameterLayout, CoppeliusEqualsSpecTable) {
  const ModelConfig config = ModelConfigByName("coppelius").value();
  const std::vector<TensorInfo> layout = ParameterLayout(config);
  ASSERT_EQ(layout.size(), 1u + 16u * 9u + 2u);
  EXPECT_EQ(layout[0].name, "embedding");
  EXPECT_THAT(layout[0].shape, ElementsAre(12288, 512));
  EXPECT_EQ(layout[0].offset, 0);
  EXPECT_TRUE(layout[0].decayed);
  for (int l = 0; l < 16; ++l) {
    for (int r = 0; r < 9; ++r) {
      const TensorInfo& t = layout[1 + l * 9 + r];
      const SpecRow& row = kSpecBlockRows[r];
      EXPECT_EQ(t.name, absl::StrCat("blocks.", l, ".", row.suffix));
      EXPECT_EQ(t.shape, row.shape) << t.name;
      EXPECT_EQ(t.offset, 6291456 + l * int64_t{3213312} + row.relative_offset)
          << t.name;
      EXPECT_EQ(t.decayed, row.shape.size() == 2) << t.name;
    }
  }
  const TensorInfo& fw = layout[layout.size() - 2];
  const TensorInfo& fb = layout[layout.size() - 1];
  EXPECT_EQ(fw.name, "final_norm.weight");
  EXPECT_EQ(fw.offset, 57704448);
  EXPECT_FALSE(fw.decayed);
  EXPECT_EQ(fb.name, "final_norm.bias");
  EXPECT_EQ(fb.offset, 57704960);
  EXPECT_EQ(fb.offset + fb.num_elements(), 57705472);
}

TEST(ParameterLayout, ContiguousAndAgreesWithOffsetsForEveryConfig) {
  for (const char* name : {"coppelius", "tiny"}) {
    const ModelConfig config = ModelConfigByName(name).value();
    const std::vector<TensorInfo> layout = ParameterLayout(config);
    int64_t next = 0;
    for (const TensorInfo& t : layout) {
      EXPECT_EQ(t.offset, next) << name << " " << t.name;
      next += t.num_elements();
    }
    EXPECT_EQ(next, NumParameters(config)) << name;
    const ParameterOffsets o = ComputeParameterOffsets(config);
    EXPECT_EQ(o.num_parameters, next);
    ASSERT_EQ(o.blocks.size(), static_cast<size_t>(config.L));
    for (int l = 0; l < config.L; ++l) {
      const BlockOffsets& b = o.blocks[l];
      const int64_t want[9] = {b.attention_norm_weight, b.attention_norm_bias,
                               b.qkv, b.output, b.mlp_norm_weight,
                               b.mlp_norm_bias, b.gate, b.up, b.down};
      for (int r = 0; r < 9; ++r) {
        EXPECT_EQ(layout[1 + l * 9 + r].offset, want[r]) << name;
      }
    }
    EXPECT_EQ(o.final_norm_weight, layout[layout.size() - 2].offset);
    EXPECT_EQ(o.final_norm_bias, layout[layout.size() - 1].offset);
  }
}

TEST(ModelConfigByName, CoppeliusIdentitiesEqualSpecStrings) {
  const ModelConfig config = ModelConfigByName("coppelius").value();
  EXPECT_EQ(config.identities.state,
            "coppelius-raw-pmv-f32-v1|parameter-order:p-then-m-then-v|"
            "payload=692465664");
  EXPECT_EQ(config.identities.learner,
            "coppelius-objective:next-token-cross-entropy-mean|halves=bf16|"
            "coppelius-learner:adamw-decoupled-decay-2d|lr=3|/=10000|beta1=9|"
            "/=10|beta2=95|/=100|decay=1|/=10|epsilon=1|/=100000000");
  EXPECT_EQ(config.identities.data,
            "coppelius-token-stream|vocabulary=12288|context=1024|header=16|"
            "token=4");
  EXPECT_EQ(config.identities.initialization,
            "coppelius-initialization:random-normal|seed=20260925");
  for (const char* part : {"|width=512", "|layers=16", "|heads=8",
                           "|head-size=64", "swiglu", "|hidden=1408",
                           "layernorm", "|base=10000", "tied"}) {
    EXPECT_THAT(config.identities.model, HasSubstr(part));
  }
}

TEST(ModelConfigByName, TinyHasItsOwnIdentities) {
  const ModelConfig tiny = ModelConfigByName("tiny").value();
  const ModelConfig big = ModelConfigByName("coppelius").value();
  EXPECT_TRUE(ValidateModelConfig(tiny).ok());
  // V C + L (4C + 4C² + 3 C hidden) + 2C, by hand: 32768 + 2·50432 + 128.
  EXPECT_EQ(NumParameters(tiny), 133760);
  EXPECT_EQ(tiny.identities.learner, big.identities.learner);
  EXPECT_EQ(tiny.identities.initialization, big.identities.initialization);
  EXPECT_EQ(tiny.identities.data,
            "coppelius-token-stream|vocabulary=512|context=64|header=16|"
            "token=4");
  EXPECT_EQ(tiny.identities.state,
            "coppelius-raw-pmv-f32-v1|parameter-order:p-then-m-then-v|"
            "payload=1605120");
  EXPECT_NE(tiny.identities.model, big.identities.model);
  EXPECT_EQ(tiny.run_steps, 8);
  EXPECT_EQ(tiny.checkpoint_interval, 2);
}

TEST(ModelConfigByName, UnknownNameIsInvalidArgument) {
  auto config = ModelConfigByName("gpt2");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("gpt2"));
}

TEST(ValidateModelConfig, RejectsHeadsNotDividingWidth) {
  ModelConfig config = ModelConfigByName("tiny").value();
  config.HS = 18;
  const absl::Status status = ValidateModelConfig(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("NH * HS"));
}

TEST(ValidateModelConfig, RunFieldsAreCheckedOnlyThere) {
  ModelConfig config = ModelConfigByName("tiny").value();
  config.checkpoint_interval = 3;  // does not divide 8
  EXPECT_TRUE(ValidateModelShape(config).ok());
  const absl::Status status = ValidateModelConfig(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("checkpoint_interval"));
}

}  // namespace
}  // namespace coppelius
