// File: trainer/adamw.h
//
// AdamW of SPEC §4 on flat fp32 planes: lr = 3/10000 (constant),
// β1 = 9/10, β2 = 95/100, weight decay λ = 1/10 (decoupled, 2-D tensors
// only), ε = 1/100000000, bias correction with the 1-based update count t
// counted over the checkpoint's whole life. This is torch.optim.AdamW
// (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019;
// PyTorch docs' algorithm box) with the 2-D tensors in a group of
// weight_decay 0.1 and the rest 0.
//
// Exact fp32 operation order (the CUDA kernel mirrors it bitwise; every
// operation below is one IEEE binary32 operation rounded to nearest-even,
// no fused multiply-add — use __fmul_rn/__fadd_rn/__fdiv_rn/__fsqrt_rn on
// the device):
//
//   Per update (host, double, then rounded once to fp32), AdamWStepScalars:
//     decay_factor   = fp32(1 − lr·λ)                (1 for non-decayed)
//     beta1          = fp32(β1),      one_minus_beta1 = fp32(1 − β1)
//     beta2          = fp32(β2),      one_minus_beta2 = fp32(1 − β2)
//     step_size      = fp32(lr / (1 − β1^t))
//     bias_correction2_sqrt = fp32(sqrt(1 − β2^t))
//     epsilon        = fp32(ε)
//   Per element, with p, m, v, g fp32:
//     if decayed: p = p * decay_factor
//     m = (beta1 * m) + (one_minus_beta1 * g)
//     v = (beta2 * v) + (one_minus_beta2 * (g * g))
//     denom = (sqrt(v) / bias_correction2_sqrt) + epsilon
//     p = p − (step_size * (m / denom))
//
// Errors are InvalidArgument (t = 0, a null plane, num_threads < 1).
#ifndef COPPELIUS_TRAINER_ADAMW_H_
#define COPPELIUS_TRAINER_ADAMW_H_

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/model_config.h"

namespace coppelius {

// SPEC §4's hyperparameters, as the exact ratios of the learner identity.
struct AdamWHyperparameters {
  double lr = 3.0 / 10000.0;
  double beta1 = 9.0 / 10.0;
  double beta2 = 95.0 / 100.0;
  double weight_decay = 1.0 / 10.0;
  double epsilon = 1.0 / 100000000.0;
};

// The fp32 scalars of update number `t` (see the header comment).
struct AdamWStepScalars {
  float decay_factor;
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float step_size;
  float bias_correction2_sqrt;
  float epsilon;
};

// Precondition: t >= 1 (CHECKed: a programmer error).
AdamWStepScalars ComputeAdamWStepScalars(const AdamWHyperparameters& h,
                                         uint64_t t);

// Updates `n` elements of one tensor in place: p, m, v (fp32 P, first
// moment, second moment) from the gradient g (fp32), in the exact order of
// the header comment; `decayed` applies the decoupled weight decay.
void AdamWUpdateRange(const AdamWStepScalars& s, bool decayed, int64_t n,
                      float* p, float* m, float* v, const float* g);

// One AdamW update number `t` of the whole P/M/V image `pmv`
// (3·NumParameters(config) fp32, planes P, M, V) from `gradients`
// (NumParameters(config) fp32, the P plane's layout), decaying exactly the
// 2-D tensors of ParameterLayout(config). Elementwise, so the result does
// not depend on `num_threads`.
absl::Status AdamWUpdate(const ModelConfig& config,
                         const AdamWHyperparameters& h, uint64_t t,
                         const float* gradients, int num_threads, float* pmv);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_ADAMW_H_
