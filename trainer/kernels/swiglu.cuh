// File: trainer/kernels/swiglu.cuh
//
// SwiGLU's elementwise math (swiglu.h) as device functions, shared by
// swiglu.cu and the fused products' epilogues (fused_matmul.cu), which
// must compute the same bits:
//   σ(g) = 1 / (1 + exp(−g)),  a = g·σ(g)·u
//   da → dg = da·u·σ(g)·(1 + g·(1 − σ(g))),  du = da·g·σ(g)
// fp32 throughout, expf (not the fast-math intrinsic).
#ifndef COPPELIUS_TRAINER_KERNELS_SWIGLU_CUH_
#define COPPELIUS_TRAINER_KERNELS_SWIGLU_CUH_

namespace coppelius {
namespace kernels {

__device__ __forceinline__ float SwigluValue(float g, float u) {
  const float sig = 1.0f / (1.0f + expf(-g));
  return g * sig * u;
}

__device__ __forceinline__ void SwigluGradients(float g, float u, float da,
                                                float* dg, float* du) {
  const float sig = 1.0f / (1.0f + expf(-g));
  const float silu = g * sig;
  *dg = da * u * (sig * (1.0f + g * (1.0f - sig)));
  *du = da * silu;
}

}  // namespace kernels
}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_SWIGLU_CUH_
