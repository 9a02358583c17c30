// File: trainer/kernels/cross_entropy.h
//
// Fused softmax cross-entropy over fp32 logits (SPEC §4), all fp32:
//
//   lse[t]     = max_v l[t,v] + log Σ_v exp(l[t,v] − max)
//   loss[t]    = lse[t] − l[t, target[t]]
//   dlogits[t,v] = (exp(l[t,v] − lse[t]) − [v = target[t]]) · grad_scale
//
// grad_scale = 1/T (the gradient of the mean loss). Shapes: logits [T, V]
// row-major fp32, targets [T] u32 (< V), losses [T] fp32. dlogits [T, V] is
// written rounded to bf16 (it only feeds the tied dX/dW products); pass
// nullptr for a forward-only pass. One block per row; the probabilities are
// computed in the single pass that writes dlogits (never stored in fp32).
// V = 4,096 and 12,288 (the coppelius vocabulary) with 16-byte-aligned
// logits: the row is read once into registers; other shapes stream it three
// times (max, sum, gradient). Every path sums in the same order: the same
// bits.
// Block reductions in a fixed order (deterministic). Non-finite logits give
// non-finite losses (recorded by the caller, never a reason to stop).
#ifndef COPPELIUS_TRAINER_KERNELS_CROSS_ENTROPY_H_
#define COPPELIUS_TRAINER_KERNELS_CROSS_ENTROPY_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace coppelius {

cudaError_t CrossEntropyForwardBackward(const float* logits,
                                        const uint32_t* targets, int T, int V,
                                        float grad_scale, float* losses,
                                        __nv_bfloat16* dlogits,
                                        cudaStream_t stream);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_CROSS_ENTROPY_H_
