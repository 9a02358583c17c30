// File: checkpoint/identity.h
//
// Builders for the checkpoint identity strings of SPEC §6 from numbers.
// Identity parts are "|name=decimal", exactly as the seed's
// coppeliusIdentityPart (seed/000_ba74cbc5eacbc407.txt): a '|', the name,
// '=', and the value in decimal without leading zeros or sign.
//
// For the Coppelius run (SPEC §6):
//   StateIdentity(692465664) ==
//     "coppelius-raw-pmv-f32-v1|parameter-order:p-then-m-then-v|payload=692465664"
//   DataIdentity(12288, 1024, 16, 4) ==
//     "coppelius-token-stream|vocabulary=12288|context=1024|header=16|token=4"
//   InitializationIdentity(20260925) ==
//     "coppelius-initialization:random-normal|seed=20260925"
//   LearnerIdentity(CoppeliusLearnerFractions()) == "coppelius-objective:..."
#ifndef COPPELIUS_CHECKPOINT_IDENTITY_H_
#define COPPELIUS_CHECKPOINT_IDENTITY_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "checkpoint/envelope.h"

namespace coppelius {

// "|" + name + "=" + decimal(value).
std::string IdentityPart(absl::string_view name, uint64_t value);

// "coppelius-raw-pmv-f32-v1|parameter-order:p-then-m-then-v|payload=N".
std::string StateIdentity(uint64_t payload_bytes);

// AdamW hyperparameters as exact fractions (numerator / denominator), plus
// the objective, half-precision format and learner names.
struct LearnerFractions {
  std::string objective = "coppelius-objective:next-token-cross-entropy-mean";
  std::string halves = "bf16";
  std::string learner = "coppelius-learner:adamw-decoupled-decay-2d";
  uint64_t lr_numerator = 3, lr_denominator = 10000;
  uint64_t beta1_numerator = 9, beta1_denominator = 10;
  uint64_t beta2_numerator = 95, beta2_denominator = 100;
  uint64_t decay_numerator = 1, decay_denominator = 10;
  uint64_t epsilon_numerator = 1, epsilon_denominator = 100000000;
};

// The Coppelius learner (SPEC §4): the defaults above.
inline LearnerFractions CoppeliusLearnerFractions() { return {}; }

// objective + "|halves=" + halves + "|" + learner + "|lr=a|/=b|beta1=..|/=..
// |beta2=..|/=..|decay=..|/=..|epsilon=..|/=..".
std::string LearnerIdentity(const LearnerFractions& learner);

// "coppelius-token-stream|vocabulary=V|context=T|header=H|token=B".
std::string DataIdentity(uint64_t vocabulary, uint64_t context,
                         uint64_t header_bytes, uint64_t token_bytes);

// "coppelius-initialization:random-normal|seed=S".
std::string InitializationIdentity(uint64_t seed);

// The architecture (ours, beyond the seed).
struct ModelShape {
  uint64_t vocabulary = 12288;
  uint64_t context = 1024;
  uint64_t width = 512;
  uint64_t layers = 16;
  uint64_t heads = 8;
  uint64_t head_size = 64;
  uint64_t mlp_hidden = 1408;
  // LayerNorm epsilon as a fraction: 1/100000.
  uint64_t norm_epsilon_numerator = 1, norm_epsilon_denominator = 100000;
  uint64_t rope_base = 10000;
};

// "coppelius-model:decoder-pre-norm|vocabulary=V|context=T|width=C|layers=L
// |heads=NH|head-size=HS|mlp:swiglu|hidden=H|norm:layernorm-weight-bias
// |epsilon=a|/=b|positions:rope-rotate-half|base=B|attention:causal-softmax
// |output:tied-embedding" (one line, no spaces). The same string as
// trainer/model_config.cc's MakeIdentities writes for a config.
std::string ModelIdentity(const ModelShape& shape);

// The full identity of the Coppelius run (SPEC §6): the strings above for
// the Coppelius numbers, payload 692,465,664, chunk 4 MiB, 10,000 steps.
CheckpointIdentity CoppeliusIdentity();

}  // namespace coppelius

#endif  // COPPELIUS_CHECKPOINT_IDENTITY_H_
