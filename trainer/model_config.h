// File: trainer/model_config.h
//
// The model configurations the trainer knows (`coppelius`, the production
// model of SPEC §4, and `tiny`, a small model of the same architecture for
// tests), the layout of the P plane (SPEC §4's parameter table; M and V
// mirror it) and the five identity strings a checkpoint of the config
// carries (SPEC §6).
//
// Vocabulary: V vocabulary size, T context (tokens per step), C width,
// L layers, NH heads, HS head size (NH * HS == C), `hidden` the SwiGLU MLP's
// hidden width. Every matrix is row-major `[out, in]` (PyTorch `Linear`:
// y = x · Wᵀ); every scalar is IEEE binary32.
#ifndef COPPELIUS_TRAINER_MODEL_CONFIG_H_
#define COPPELIUS_TRAINER_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coppelius {

// The five identities of SPEC §6, exactly as the envelope carries them.
struct ConfigIdentities {
  // e.g. "coppelius-raw-pmv-f32-v1|parameter-order:p-then-m-then-v|payload=692465664"
  std::string state;
  // Objective, half format and AdamW hyperparameters (same for every config).
  std::string learner;
  // e.g. "coppelius-token-stream|vocabulary=12288|context=1024|header=16|token=4"
  std::string data;
  // e.g. "coppelius-initialization:random-normal|seed=20260925"
  std::string initialization;
  // Ours, beyond the seed: names the architecture (width, layers, heads, head
  // size, MLP, norm and its epsilon, RoPE base, tying, vocabulary, context).
  std::string model;
};

struct ModelConfig {
  std::string name;  // "coppelius" or "tiny"
  int V = 0;         // vocabulary size, e.g. 12288
  int T = 0;         // context in tokens, e.g. 1024
  int C = 0;         // width, e.g. 512
  int L = 0;         // layers, e.g. 16
  int NH = 0;        // attention heads, e.g. 8
  int HS = 0;        // head size, e.g. 64 (NH * HS == C; even, for RoPE)
  int hidden = 0;    // SwiGLU hidden width, e.g. 1408
  // LayerNorm ε, as a ratio so it can be named exactly: 1/100000 = 1e-5.
  int64_t layer_norm_eps_numerator = 1;
  int64_t layer_norm_eps_denominator = 100000;
  float layer_norm_eps = 1e-5f;
  double rope_base = 10000.0;      // RoPE base (SPEC §4)
  int64_t run_steps = 0;           // AdamW updates per invocation
  int64_t checkpoint_interval = 0; // steps between publications
  uint64_t seed = 0;               // initialization seed (Philox key k0)
  // Standard deviation of the random-normal initialization of `embedding`,
  // `qkv`, `gate`, `up` (SPEC §4: 0.02); `output` and `down` use
  // init_std / sqrt(2 L) (GPT-2's residual scaling; 0.02/√32 for coppelius).
  double init_std = 0.02;
  ConfigIdentities identities;
};

// Returns the named config: "coppelius" (SPEC §4: V=12288, T=1024, C=512,
// L=16, NH=8, HS=64, hidden=1408, 57,705,472 parameters, 10,000 steps,
// publication every 1,000) or "tiny" (V=512, T=64, C=64, L=2, NH=4, HS=16,
// hidden=176, 133,760 parameters, 8 steps, publication every 2). The
// identities are filled in.
// Errors: InvalidArgument for any other name (the message lists the names).
absl::StatusOr<ModelConfig> ModelConfigByName(absl::string_view name);

// The names ModelConfigByName knows: "coppelius", "tiny".
std::vector<std::string> ModelConfigNames();

// Checks the shape invariants the computation needs (all sizes positive,
// NH * HS == C, HS even, T a multiple of 4 so the prediction rows exist,
// ε > 0). Errors: InvalidArgument naming the field.
absl::Status ValidateModelShape(const ModelConfig& config);

// ValidateModelShape plus the run fields (run_steps > 0, checkpoint_interval
// a positive divisor of run_steps). Errors: InvalidArgument naming the field.
absl::Status ValidateModelConfig(const ModelConfig& config);

// One tensor of the P plane.
struct TensorInfo {
  std::string name;            // SPEC name, e.g. "blocks.3.mlp.gate"
  std::vector<int64_t> shape;  // e.g. {1408, 512}; [out, in] for matrices
  int64_t offset = 0;          // first element in the plane
  bool decayed = false;        // 2-D: AdamW weight decay applies
  int64_t num_elements() const;
};

// The tensors of the P plane in order (SPEC §4): embedding [V, C]; per layer
// l: blocks.l.attention_norm.{weight,bias} [C], blocks.l.attention.qkv
// [3C, C] (rows q, k, v), blocks.l.attention.output [C, C],
// blocks.l.mlp_norm.{weight,bias} [C], blocks.l.mlp.gate [hidden, C],
// blocks.l.mlp.up [hidden, C], blocks.l.mlp.down [C, hidden]; final_norm.
// {weight,bias} [C]. Contiguous, no padding.
std::vector<TensorInfo> ParameterLayout(const ModelConfig& config);

// Elements of one plane: V C + L (4C + 4C² + 3 C hidden) + 2C.
int64_t NumParameters(const ModelConfig& config);

// Element offsets of each tensor (the same numbers as ParameterLayout, as
// named fields for compute code).
struct BlockOffsets {
  int64_t attention_norm_weight, attention_norm_bias, qkv, output;
  int64_t mlp_norm_weight, mlp_norm_bias, gate, up, down;
};
struct ParameterOffsets {
  int64_t embedding = 0;
  std::vector<BlockOffsets> blocks;  // L entries
  int64_t final_norm_weight = 0, final_norm_bias = 0;
  int64_t num_parameters = 0;
};
ParameterOffsets ComputeParameterOffsets(const ModelConfig& config);

// The five identities of `config` (what ModelConfigByName stores), built
// with checkpoint/identity.h (the seed's coppeliusIdentityPart "|name=decimal").
ConfigIdentities MakeIdentities(const ModelConfig& config);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_MODEL_CONFIG_H_
