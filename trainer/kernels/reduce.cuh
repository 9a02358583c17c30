// File: trainer/kernels/reduce.cuh
//
// Deterministic warp and block reductions for the kernels of this package:
// butterfly (xor-shuffle) sums within a warp, then the warp results summed
// by one warp in a fixed order. No atomics: the same inputs and launch shape
// give the same bits every time.
#ifndef COPPELIUS_TRAINER_KERNELS_REDUCE_CUH_
#define COPPELIUS_TRAINER_KERNELS_REDUCE_CUH_

#include <cuda_runtime.h>

namespace coppelius {
namespace kernels {

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `scratch` holds 32 floats of shared memory; the
// call synchronizes the block (twice), so it may be called repeatedly.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : 0.0f;
  return WarpSum(r);
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : -INFINITY;
  return WarpMax(r);
}

}  // namespace kernels
}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_REDUCE_CUH_
