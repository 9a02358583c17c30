// File: trainer/kernels/bf16.cuh
//
// Rounding fp32 results to bf16 (round to nearest even, __floats2bfloat162_rn)
// and storing them, and a dot product of bf16 groups, for the kernels of
// this package.
#ifndef COPPELIUS_TRAINER_KERNELS_BF16_CUH_
#define COPPELIUS_TRAINER_KERNELS_BF16_CUH_

#include <cuda_bf16.h>

#include <cstdint>

namespace coppelius {
namespace kernels {

// dst[0..3] = bf16(v.x, v.y, v.z, v.w) as one 8-byte store (dst 8-byte
// aligned).
__device__ __forceinline__ void StoreBf16x4(__nv_bfloat16* dst, float4 v) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
  __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 packed;
  packed.x = *reinterpret_cast<uint32_t*>(&lo);
  packed.y = *reinterpret_cast<uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(dst) = packed;
}

// d + Σ_i a[i]·b[i] over the 8 bf16 values of a and b (16 bytes each) in
// fp32: one fma chain in element order. The attention backward's D is
// built from these (attention.cu's delta kernel and fused_matmul.cu's
// output dX epilogue), which must agree bit for bit.
__device__ __forceinline__ float DotBf16x8(const uint4& a, const uint4& b,
                                          float d) {
  const __nv_bfloat162* a2 = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&b);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 x = __bfloat1622float2(a2[e]);
    const float2 z = __bfloat1622float2(b2[e]);
    d = fmaf(x.x, z.x, d);
    d = fmaf(x.y, z.y, d);
  }
  return d;
}

}  // namespace kernels
}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_BF16_CUH_
