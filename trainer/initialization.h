// File: trainer/initialization.h
//
// The deterministic initial P/M/V image of SPEC §4 (`random-normal`):
//
//   Element i of the P plane (its global index, 0 <= i < N) draws from
//   Philox4x32-10 with key (k0, k1) = (seed mod 2^32, floor(seed / 2^32))
//   — (20260925, 0) for the run seed — and counter
//   (i mod 2^32, floor(i / 2^32), 0, 0), giving words x0, x1, x2, x3. In
//   double precision: u1 = (x0 + 1)·2^-32 (in (0, 1]), u2 = x1·2^-32,
//   z = sqrt(-2 ln u1)·cos(2π u2) (Box–Muller); the element is z times the
//   tensor's standard deviation, rounded to fp32 (round-to-nearest-even).
//   Standard deviations: config.init_std (0.02) for `embedding`, `qkv`,
//   `gate`, `up`; init_std / sqrt(2 L) for `output` and `down`. Norm weights
//   are 1 and norm biases 0 (not drawn). M and V are 0.
//
// Philox4x32-10: J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11; constants and round
// structure as in Random123's philox.h (and cuRAND's curand_philox4x32_x.h).
//
// The image is the same for every thread count (each element depends only on
// its index).
#ifndef COPPELIUS_TRAINER_INITIALIZATION_H_
#define COPPELIUS_TRAINER_INITIALIZATION_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "trainer/model_config.h"

namespace coppelius {

// One Philox4x32-10 block: 10 rounds of the Philox S-box on `counter` under
// `key`, the key bumped by the Weyl constants (0x9E3779B9, 0xBB67AE85)
// between rounds; multipliers 0xD2511F53 and 0xCD9E8D57.
std::array<uint32_t, 4> Philox4x32_10(const std::array<uint32_t, 4>& counter,
                                      const std::array<uint32_t, 2>& key);

// z for global element `index` under `seed` (the Box–Muller draw above,
// before scaling), in double precision.
double InitialNormalDraw(uint64_t seed, uint64_t index);

// The standard deviation of a random-normal tensor of `config` ("embedding",
// "...qkv", "...gate", "...up": init_std; "...output", "...down":
// init_std/sqrt(2L)); 0 for norm tensors, which are not drawn.
double InitialStandardDeviation(const ModelConfig& config,
                                const TensorInfo& tensor);

// Writes the initial image: P (NumParameters(config) fp32) to `pmv`, then M
// and V (zeros) after it; `pmv` holds 3·NumParameters(config) floats.
// `num_threads` >= 1 std::threads share the P plane; the result does not
// depend on it. Errors: InvalidArgument for num_threads < 1 or an invalid
// config.
absl::Status InitializeImage(const ModelConfig& config, int num_threads,
                             float* pmv);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_INITIALIZATION_H_
