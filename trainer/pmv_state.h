// File: trainer/pmv_state.h
//
// What a P/M/V image holds that no healthy run writes: non-finite values
// in any plane (in P a diverged run's state: every forward from it gives
// non-finite losses; in M or V the next update makes those parameters
// non-finite, or for an infinite V stops their gradient steps) and
// negative AdamW second moments (V = beta2 V + (1 - beta2) g^2, Loshchilov
// & Hutter 2019, Algorithm 2, is never below 0: a forged file, or one
// damaged before its digests were computed). `inspect verify` fails such
// a checkpoint; `train` warns before a run from it, and runs.
#ifndef COPPELIUS_TRAINER_PMV_STATE_H_
#define COPPELIUS_TRAINER_PMV_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainer/model_config.h"

namespace coppelius {

// `pmv`: the payload image, three planes (P, M, V) of `num_parameters`
// fp32 values each, in ParameterLayout order (SPEC §4), that `path` holds
// from byte `payload_offset` on. One line per plane holding non-finite
// values and one for negative second moments, each naming the file offset
// of the first such value, its parameter index and, where `num_parameters`
// is `config`'s, its tensor, e.g. "ckpt: offset 1608964 (plane V, parameter
// 133697, tensor final_norm.bias): 1 of 133760 AdamW second moments are
// negative, expected >= 0 ..."; empty for a state a healthy run writes.
// Reads every value once (0.7 GB for Coppelius: well under a second).
std::vector<std::string> PmvStateProblems(absl::string_view path,
                                          uint64_t payload_offset,
                                          const float* pmv,
                                          uint64_t num_parameters,
                                          const ModelConfig& config);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_PMV_STATE_H_
