// File: trainer/kernels/attention.cu (see attention.h for the math).
#include "trainer/kernels/attention.h"

#include <cstdint>

#include "trainer/kernels/reduce.cuh"

namespace coppelius {
namespace {

using kernels::WarpMax;
using kernels::WarpSum;

constexpr int kRowsPerBlock = 8;  // one warp per row

__global__ void CausalSoftmaxForwardKernel(float* __restrict__ s, int NH,
                                           int T,
                                           __nv_bfloat16* __restrict__ p16) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock +
                      (threadIdx.x >> 5);
  if (row >= static_cast<int64_t>(NH) * T) return;
  const int t = static_cast<int>(row % T);  // position: columns 0..t valid
  float* r = s + row * T;
  __nv_bfloat16* r16 = p16 + row * T;
  float m = -INFINITY;
  for (int j = lane; j <= t; j += 32) m = fmaxf(m, r[j]);
  m = WarpMax(m);
  float sum = 0.0f;
  for (int j = lane; j <= t; j += 32) sum += expf(r[j] - m);
  sum = WarpSum(sum);
  const float inv = 1.0f / sum;
  for (int j = lane; j <= t; j += 32) {
    const float p = expf(r[j] - m) * inv;
    r[j] = p;
    r16[j] = __float2bfloat16_rn(p);
  }
}

__global__ void CausalSoftmaxBackwardKernel(const float* __restrict__ p,
                                            const float* __restrict__ dp,
                                            int NH, int T,
                                            __nv_bfloat16* __restrict__ ds) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock +
                      (threadIdx.x >> 5);
  if (row >= static_cast<int64_t>(NH) * T) return;
  const int t = static_cast<int>(row % T);
  const float* pr = p + row * T;
  const float* dpr = dp + row * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32) dot += pr[j] * dpr[j];
  dot = WarpSum(dot);
  __nv_bfloat16* out = ds + row * T;
  for (int j = lane; j <= t; j += 32) {
    out[j] = __float2bfloat16_rn(pr[j] * (dpr[j] - dot));
  }
}

}  // namespace

cudaError_t CausalSoftmaxForward(float* scores_to_probs, int NH, int T,
                                 __nv_bfloat16* probs_bf16,
                                 cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(NH) * T;
  const unsigned blocks =
      static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  CausalSoftmaxForwardKernel<<<blocks, kRowsPerBlock * 32, 0, stream>>>(
      scores_to_probs, NH, T, probs_bf16);
  return cudaGetLastError();
}

cudaError_t CausalSoftmaxBackward(const float* probs, const float* dprobs,
                                  int NH, int T, __nv_bfloat16* dscores_bf16,
                                  cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(NH) * T;
  const unsigned blocks =
      static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  CausalSoftmaxBackwardKernel<<<blocks, kRowsPerBlock * 32, 0, stream>>>(
      probs, dprobs, NH, T, dscores_bf16);
  return cudaGetLastError();
}

}  // namespace coppelius
