#include "checkpoint/identity.h"

#include "absl/strings/str_cat.h"

namespace coppelius {

std::string IdentityPart(absl::string_view name, uint64_t value) {
  return absl::StrCat("|", name, "=", value);
}

std::string StateIdentity(uint64_t payload_bytes) {
  return absl::StrCat("coppelius-raw-pmv-f32-v1",
                      "|parameter-order:p-then-m-then-v",
                      IdentityPart("payload", payload_bytes));
}

std::string LearnerIdentity(const LearnerFractions& l) {
  return absl::StrCat(
      l.objective, "|halves=", l.halves, "|", l.learner,
      IdentityPart("lr", l.lr_numerator), IdentityPart("/", l.lr_denominator),
      IdentityPart("beta1", l.beta1_numerator),
      IdentityPart("/", l.beta1_denominator),
      IdentityPart("beta2", l.beta2_numerator),
      IdentityPart("/", l.beta2_denominator),
      IdentityPart("decay", l.decay_numerator),
      IdentityPart("/", l.decay_denominator),
      IdentityPart("epsilon", l.epsilon_numerator),
      IdentityPart("/", l.epsilon_denominator));
}

std::string DataIdentity(uint64_t vocabulary, uint64_t context,
                         uint64_t header_bytes, uint64_t token_bytes) {
  return absl::StrCat("coppelius-token-stream",
                      IdentityPart("vocabulary", vocabulary),
                      IdentityPart("context", context),
                      IdentityPart("header", header_bytes),
                      IdentityPart("token", token_bytes));
}

std::string InitializationIdentity(uint64_t seed) {
  return absl::StrCat("coppelius-initialization:random-normal",
                      IdentityPart("seed", seed));
}

std::string ModelIdentity(const ModelShape& s) {
  return absl::StrCat(
      "coppelius-model:decoder-pre-norm", IdentityPart("vocabulary", s.vocabulary),
      IdentityPart("context", s.context), IdentityPart("width", s.width),
      IdentityPart("layers", s.layers), IdentityPart("heads", s.heads),
      IdentityPart("head-size", s.head_size), "|mlp:swiglu",
      IdentityPart("hidden", s.mlp_hidden), "|norm:layernorm-weight-bias",
      IdentityPart("epsilon", s.norm_epsilon_numerator),
      IdentityPart("/", s.norm_epsilon_denominator),
      "|positions:rope-rotate-half", IdentityPart("base", s.rope_base),
      "|attention:causal-softmax|output:tied-embedding");
}

CheckpointIdentity CoppeliusIdentity() {
  CheckpointIdentity id;
  id.payload_bytes = 692465664;
  id.chunk_bytes = kCoppeliusChunkBytes;
  id.run_steps = 10000;
  id.state = StateIdentity(id.payload_bytes);
  id.learner = LearnerIdentity(CoppeliusLearnerFractions());
  id.data = DataIdentity(12288, 1024, 16, 4);
  id.initialization = InitializationIdentity(20260925);
  id.model = ModelIdentity(ModelShape());
  return id;
}

}  // namespace coppelius
