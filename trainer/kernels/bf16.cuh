// File: trainer/kernels/bf16.cuh
//
// Rounding fp32 results to bf16 (round to nearest even, __floats2bfloat162_rn)
// and storing them, for the kernels of this package.
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

}  // namespace kernels
}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_BF16_CUH_
