#include "trainer/model_config.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "checkpoint/identity.h"
#include "common/status_macros.h"

namespace coppelius {
namespace {

// SPEC §1 / §6 constants that enter the identities.
constexpr uint64_t kDataHeaderBytes = 16;
constexpr uint64_t kDataTokenBytes = 4;
constexpr uint64_t kImagePlanes = 3;
constexpr uint64_t kImageScalarBytes = 4;

int64_t BlockElements(const ModelConfig& c) {
  const int64_t C = c.C, H = c.hidden;
  return 4 * C + 4 * C * C + 3 * C * H;
}

}  // namespace

int64_t TensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<std::string> ModelConfigNames() { return {"coppelius", "tiny"}; }

absl::StatusOr<ModelConfig> ModelConfigByName(absl::string_view name) {
  ModelConfig c;
  if (name == "coppelius") {
    c.name = "coppelius";
    c.V = 12288;
    c.T = 1024;
    c.C = 512;
    c.L = 16;
    c.NH = 8;
    c.HS = 64;
    c.hidden = 1408;
    c.run_steps = 10000;
    c.checkpoint_interval = 1000;
  } else if (name == "tiny") {
    c.name = "tiny";
    c.V = 512;
    c.T = 64;
    c.C = 64;
    c.L = 2;
    c.NH = 4;
    c.HS = 16;
    c.hidden = 176;
    c.run_steps = 8;
    c.checkpoint_interval = 2;
  } else {
    return UsageError(
        absl::StrCat("unknown model config \"", name, "\" (known: ",
                     absl::StrJoin(ModelConfigNames(), ", "), ")"));
  }
  c.layer_norm_eps_numerator = 1;
  c.layer_norm_eps_denominator = 100000;
  c.layer_norm_eps = 1e-5f;
  c.rope_base = 10000.0;
  c.seed = 20260925;
  c.init_std = 0.02;
  c.identities = MakeIdentities(c);
  return c;
}

namespace {

absl::Status BadField(const ModelConfig& c, absl::string_view field,
                      int64_t value, absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat("model config \"", c.name,
                                                 "\": ", field, " = ", value,
                                                 ", expected ", want));
}

}  // namespace

absl::Status ValidateModelShape(const ModelConfig& c) {
  if (c.V <= 0) return BadField(c, "V", c.V, "> 0");
  if (c.T < 4 || c.T % 4 != 0) {
    return BadField(c, "T", c.T, "a positive multiple of 4");
  }
  if (c.C <= 0) return BadField(c, "C", c.C, "> 0");
  if (c.L <= 0) return BadField(c, "L", c.L, "> 0");
  if (c.NH <= 0) return BadField(c, "NH", c.NH, "> 0");
  if (c.HS <= 0 || c.HS % 2 != 0) {
    return BadField(c, "HS", c.HS, "positive and even");
  }
  if (int64_t{c.NH} * c.HS != c.C) {
    return BadField(c, "NH * HS", int64_t{c.NH} * c.HS,
                    absl::StrCat("C = ", c.C));
  }
  if (c.hidden <= 0) return BadField(c, "hidden", c.hidden, "> 0");
  if (!(c.layer_norm_eps > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config \"", c.name, "\": layer_norm_eps must be > 0"));
  }
  return absl::OkStatus();
}

absl::Status ValidateModelConfig(const ModelConfig& c) {
  const absl::Status shape = ValidateModelShape(c);
  if (!shape.ok()) return shape;
  if (c.run_steps <= 0) return BadField(c, "run_steps", c.run_steps, "> 0");
  if (c.checkpoint_interval <= 0 || c.run_steps % c.checkpoint_interval != 0) {
    return BadField(c, "checkpoint_interval", c.checkpoint_interval,
                    "a positive divisor of run_steps");
  }
  return absl::OkStatus();
}

std::vector<TensorInfo> ParameterLayout(const ModelConfig& c) {
  std::vector<TensorInfo> out;
  int64_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    TensorInfo t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.offset = offset;
    t.decayed = t.shape.size() == 2;
    offset += t.num_elements();
    out.push_back(std::move(t));
  };
  const int64_t V = c.V, C = c.C, H = c.hidden;
  add("embedding", {V, C});
  for (int l = 0; l < c.L; ++l) {
    const std::string p = absl::StrCat("blocks.", l, ".");
    add(p + "attention_norm.weight", {C});
    add(p + "attention_norm.bias", {C});
    add(p + "attention.qkv", {3 * C, C});
    add(p + "attention.output", {C, C});
    add(p + "mlp_norm.weight", {C});
    add(p + "mlp_norm.bias", {C});
    add(p + "mlp.gate", {H, C});
    add(p + "mlp.up", {H, C});
    add(p + "mlp.down", {C, H});
  }
  add("final_norm.weight", {C});
  add("final_norm.bias", {C});
  return out;
}

int64_t NumParameters(const ModelConfig& c) {
  return int64_t{c.V} * c.C + int64_t{c.L} * BlockElements(c) + 2 * int64_t{c.C};
}

ParameterOffsets ComputeParameterOffsets(const ModelConfig& c) {
  ParameterOffsets o;
  const int64_t C = c.C, H = c.hidden;
  o.embedding = 0;
  int64_t base = int64_t{c.V} * C;
  for (int l = 0; l < c.L; ++l) {
    BlockOffsets b;
    b.attention_norm_weight = base;
    b.attention_norm_bias = b.attention_norm_weight + C;
    b.qkv = b.attention_norm_bias + C;
    b.output = b.qkv + 3 * C * C;
    b.mlp_norm_weight = b.output + C * C;
    b.mlp_norm_bias = b.mlp_norm_weight + C;
    b.gate = b.mlp_norm_bias + C;
    b.up = b.gate + H * C;
    b.down = b.up + H * C;
    o.blocks.push_back(b);
    base = b.down + C * H;
  }
  o.final_norm_weight = base;
  o.final_norm_bias = base + C;
  o.num_parameters = base + 2 * C;
  return o;
}

ConfigIdentities MakeIdentities(const ModelConfig& c) {
  ConfigIdentities id;
  const uint64_t payload_bytes =
      kImagePlanes * kImageScalarBytes * static_cast<uint64_t>(NumParameters(c));
  id.state = StateIdentity(payload_bytes);
  // The AdamW hyperparameters of SPEC §4 (the same for every config).
  id.learner = LearnerIdentity(CoppeliusLearnerFractions());
  id.data = DataIdentity(static_cast<uint64_t>(c.V), static_cast<uint64_t>(c.T),
                         kDataHeaderBytes, kDataTokenBytes);
  id.initialization = InitializationIdentity(c.seed);
  ModelShape shape;
  shape.vocabulary = static_cast<uint64_t>(c.V);
  shape.context = static_cast<uint64_t>(c.T);
  shape.width = static_cast<uint64_t>(c.C);
  shape.layers = static_cast<uint64_t>(c.L);
  shape.heads = static_cast<uint64_t>(c.NH);
  shape.head_size = static_cast<uint64_t>(c.HS);
  shape.mlp_hidden = static_cast<uint64_t>(c.hidden);
  shape.norm_epsilon_numerator =
      static_cast<uint64_t>(c.layer_norm_eps_numerator);
  shape.norm_epsilon_denominator =
      static_cast<uint64_t>(c.layer_norm_eps_denominator);
  shape.rope_base = static_cast<uint64_t>(c.rope_base);
  id.model = ModelIdentity(shape);
  return id;
}

}  // namespace coppelius
