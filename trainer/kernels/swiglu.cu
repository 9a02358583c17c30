// File: trainer/kernels/swiglu.cu (see swiglu.h for the math).
#include "trainer/kernels/swiglu.h"

#include <cstdint>

#include "trainer/kernels/bf16.cuh"
#include "trainer/kernels/launch.cuh"
#include "trainer/kernels/swiglu.cuh"

namespace coppelius {
namespace {

// One thread per kVec adjacent columns of row t = blockIdx.y (kVec = 4:
// 16-byte loads, H % 4 == 0; else 1).
template <int kVec>
struct Vec;
template <>
struct Vec<4> {
  using F = float4;
  static __device__ __forceinline__ float Get(const F& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
  }
};
template <>
struct Vec<1> {
  using F = float;
  static __device__ __forceinline__ float Get(const F& v, int) { return v; }
};

template <int kVec>
__device__ __forceinline__ void StoreBf16(__nv_bfloat16* dst,
                                          const float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    kernels::StoreBf16x4(dst, make_float4(v[0], v[1], v[2], v[3]));
  } else {
    dst[0] = __float2bfloat16_rn(v[0]);
  }
}

template <int kVec>
__global__ void SwigluForwardKernel(const float* __restrict__ gu, int T,
                                    int H, __nv_bfloat16* __restrict__ a) {
  GridDependencyWait();
  using V = Vec<kVec>;
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) * kVec;
  if (j >= H) return;
  const int64_t t = blockIdx.y;
  const auto g4 = *reinterpret_cast<const typename V::F*>(gu + t * 2 * H + j);
  const auto u4 =
      *reinterpret_cast<const typename V::F*>(gu + t * 2 * H + H + j);
  float out[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    out[i] = kernels::SwigluValue(V::Get(g4, i), V::Get(u4, i));
  }
  StoreBf16<kVec>(a + t * H + j, out);
}

template <int kVec>
__global__ void SwigluBackwardKernel(const float* __restrict__ gu,
                                     const float* __restrict__ da, int T,
                                     int H, __nv_bfloat16* __restrict__ dgu) {
  GridDependencyWait();
  using V = Vec<kVec>;
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) * kVec;
  if (j >= H) return;
  const int64_t t = blockIdx.y;
  const auto g4 = *reinterpret_cast<const typename V::F*>(gu + t * 2 * H + j);
  const auto u4 =
      *reinterpret_cast<const typename V::F*>(gu + t * 2 * H + H + j);
  const auto d4 = *reinterpret_cast<const typename V::F*>(da + t * H + j);
  float dg[kVec], du[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    kernels::SwigluGradients(V::Get(g4, i), V::Get(u4, i), V::Get(d4, i),
                             &dg[i], &du[i]);
  }
  StoreBf16<kVec>(dgu + t * 2 * H + j, dg);
  StoreBf16<kVec>(dgu + t * 2 * H + H + j, du);
}

}  // namespace

cudaError_t SwigluForward(const float* gu, int T, int H, __nv_bfloat16* a,
                          cudaStream_t stream) {
  const int threads = 128;
  if (H % 4 == 0) {
    const dim3 grid((H / 4 + threads - 1) / threads, T);
    return LaunchKernel(SwigluForwardKernel<4>, grid, threads, 0, stream, gu, T,
                        H, a);
  } else {
    const dim3 grid((H + threads - 1) / threads, T);
    return LaunchKernel(SwigluForwardKernel<1>, grid, threads, 0, stream, gu, T,
                        H, a);
  }
}

cudaError_t SwigluBackward(const float* gu, const float* da, int T, int H,
                           __nv_bfloat16* dgu, cudaStream_t stream) {
  const int threads = 128;
  if (H % 4 == 0) {
    const dim3 grid((H / 4 + threads - 1) / threads, T);
    return LaunchKernel(SwigluBackwardKernel<4>, grid, threads, 0, stream, gu,
                        da, T, H, dgu);
  } else {
    const dim3 grid((H + threads - 1) / threads, T);
    return LaunchKernel(SwigluBackwardKernel<1>, grid, threads, 0, stream, gu,
                        da, T, H, dgu);
  }
}

}  // namespace coppelius
