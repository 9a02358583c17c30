// File: trainer/kernels/swiglu.cu (see swiglu.h for the math).
#include "trainer/kernels/swiglu.h"

#include <cstdint>

namespace coppelius {
namespace {

__global__ void SwigluForwardKernel(const float* __restrict__ gu, int T, int H,
                                    __nv_bfloat16* __restrict__ a) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(T) * H) return;
  const int64_t t = idx / H;
  const int64_t j = idx % H;
  const float g = gu[t * 2 * H + j];
  const float u = gu[t * 2 * H + H + j];
  const float sig = 1.0f / (1.0f + expf(-g));
  a[idx] = __float2bfloat16_rn(g * sig * u);
}

__global__ void SwigluBackwardKernel(const float* __restrict__ gu,
                                     const float* __restrict__ da, int T,
                                     int H, __nv_bfloat16* __restrict__ dgu) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(T) * H) return;
  const int64_t t = idx / H;
  const int64_t j = idx % H;
  const float g = gu[t * 2 * H + j];
  const float u = gu[t * 2 * H + H + j];
  const float d = da[idx];
  const float sig = 1.0f / (1.0f + expf(-g));
  const float silu = g * sig;
  const float dg = d * u * (sig * (1.0f + g * (1.0f - sig)));
  const float du = d * silu;
  dgu[t * 2 * H + j] = __float2bfloat16_rn(dg);
  dgu[t * 2 * H + H + j] = __float2bfloat16_rn(du);
}

}  // namespace

cudaError_t SwigluForward(const float* gu, int T, int H, __nv_bfloat16* a,
                          cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(T) * H;
  const int threads = 256;
  SwigluForwardKernel<<<static_cast<unsigned>((n + threads - 1) / threads),
                        threads, 0, stream>>>(gu, T, H, a);
  return cudaGetLastError();
}

cudaError_t SwigluBackward(const float* gu, const float* da, int T, int H,
                           __nv_bfloat16* dgu, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(T) * H;
  const int threads = 256;
  SwigluBackwardKernel<<<static_cast<unsigned>((n + threads - 1) / threads),
                         threads, 0, stream>>>(gu, da, T, H, dgu);
  return cudaGetLastError();
}

}  // namespace coppelius
