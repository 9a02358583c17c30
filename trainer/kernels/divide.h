// File: trainer/kernels/divide.h
//
// Correctly rounded fp32 division by a divisor known in advance, in three
// fused operations instead of a division (host and device code).
//
// Given b and y = RN(1/b) (the reciprocal correctly rounded to nearest, as
// the host's IEEE division 1.0f / b gives it), for a dividend a:
//   q  = RN(a · y)            within one ulp of a / b
//   r  = fma(−q, b, a)        the remainder a − q·b, exact
//   q' = RN(fma(r, y, q))     = RN(a / b)
// This is Markstein's theorem (P. Markstein, "Computation of elementary
// functions on the IBM RISC System/6000 processor", IBM J. Res. Dev. 34(1),
// 1990; Handbook of Floating-Point Arithmetic, 2nd ed., 2018, §4.7 / §5.3):
// y within half an ulp of 1/b and q within one ulp of a/b make r exact
// and q + r·y round to a/b correctly, provided nothing overflows or
// underflows: a/b and q·b normal or zero and r not subnormal unless zero.
// In the AdamW update (adamw.h) a = √v is 0 or at least 3.7e−23 (the root
// of the smallest subnormal) and at most 1.9e19, and b = √(1 − β2ᵗ) lies
// in [0.2236, 1], so the conditions hold; divide_test.cc checks the result
// against the IEEE division bit for bit over every divisor the update can
// see and, for some of them, every significand of a binade.
//
// (Why: ptxas emits an fp32 division as a range check with a called slow
// path; the update is instruction-bound on the few SMs it is given beside
// the backward, docs/PERFORMANCE.md run 15.)
#ifndef COPPELIUS_TRAINER_KERNELS_DIVIDE_H_
#define COPPELIUS_TRAINER_KERNELS_DIVIDE_H_

#include <cmath>

#include "trainer/kernels/host_device.h"

namespace coppelius {

// RN(a / b), given y = RN(1 / b), under the conditions above.
COPPELIUS_HOST_DEVICE float DivideByKnownDivisor(float a, float b, float y) {
#if defined(__CUDA_ARCH__)
  const float q = __fmul_rn(a, y);
  const float r = __fmaf_rn(-q, b, a);
  return __fmaf_rn(r, y, q);
#else
  // q feeds only fma operands, so no contraction can change its rounding.
  const float q = a * y;
  const float r = std::fma(-q, b, a);
  return std::fma(r, y, q);
#endif
}

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_DIVIDE_H_
