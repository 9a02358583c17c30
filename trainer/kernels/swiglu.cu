// File: trainer/kernels/swiglu.cu (see swiglu.h for the math).
#include "trainer/kernels/swiglu.h"

#include <cstdint>

namespace coppelius {
namespace {

__global__ void SwigluForwardKernel(const float* __restrict__ gu, int T, int H,
                                    __nv_bfloat16* __restrict__ a) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;  // grid (., T)
  if (j >= H) return;
  const int64_t t = blockIdx.y;
  const int64_t idx = t * H + j;
  const float g = gu[t * 2 * H + j];
  const float u = gu[t * 2 * H + H + j];
  const float sig = 1.0f / (1.0f + expf(-g));
  a[idx] = __float2bfloat16_rn(g * sig * u);
}

__global__ void SwigluBackwardKernel(const float* __restrict__ gu,
                                     const float* __restrict__ da, int T,
                                     int H, __nv_bfloat16* __restrict__ dgu) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;  // grid (., T)
  if (j >= H) return;
  const int64_t t = blockIdx.y;
  const int64_t idx = t * H + j;
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
  const int threads = 256;
  const dim3 grid((H + threads - 1) / threads, T);
  SwigluForwardKernel<<<grid, threads, 0, stream>>>(gu, T, H, a);
  return cudaGetLastError();
}

cudaError_t SwigluBackward(const float* gu, const float* da, int T, int H,
                           __nv_bfloat16* dgu, cudaStream_t stream) {
  const int threads = 256;
  const dim3 grid((H + threads - 1) / threads, T);
  SwigluBackwardKernel<<<grid, threads, 0, stream>>>(gu, da, T, H, dgu);
  return cudaGetLastError();
}

}  // namespace coppelius
