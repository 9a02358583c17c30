// File: trainer/kernels/layernorm.cu (see layernorm.h for the math).
#include "trainer/kernels/layernorm.h"

#include "trainer/kernels/reduce.cuh"

namespace coppelius {
namespace {

using kernels::WarpSum;

constexpr int kWarps = 8;  // rows per forward block; warps per backward block

// One warp per row.
__global__ void LayerNormForwardKernel(const float* __restrict__ x,
                                       const float* __restrict__ weight,
                                       const float* __restrict__ bias, int T,
                                       int C, float eps,
                                       __nv_bfloat16* __restrict__ y_bf16,
                                       float* __restrict__ y_f32,
                                       float* __restrict__ mean_out,
                                       float* __restrict__ rstd_out) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= T) return;
  const float* xr = x + static_cast<int64_t>(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += xr[c];
  const float mean = WarpSum(sum) / C;
  float sq = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = xr[c] - mean;
    sq += d * d;
  }
  const float var = WarpSum(sq) / C;
  const float rstd = 1.0f / sqrtf(var + eps);
  for (int c = lane; c < C; c += 32) {
    const float y = (xr[c] - mean) * rstd * weight[c] + bias[c];
    y_bf16[static_cast<int64_t>(row) * C + c] = __float2bfloat16_rn(y);
    if (y_f32 != nullptr) y_f32[static_cast<int64_t>(row) * C + c] = y;
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// Block b: rows [b R, b R + R), warp w takes rows b R + w, + kWarps, ...
// Shared: per-warp dweight/dbias accumulators [kWarps][2][C].
__global__ void LayerNormBackwardKernel(
    const float* __restrict__ dy, const float* __restrict__ x,
    const float* __restrict__ weight, const float* __restrict__ mean,
    const float* __restrict__ rstd, int T, int C, bool accumulate,
    float* __restrict__ dresid, __nv_bfloat16* __restrict__ dresid_bf16,
    float* __restrict__ partials) {
  extern __shared__ float acc[];  // [kWarps][2][C]
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  float* my_dw = acc + static_cast<int64_t>(warp) * 2 * C;
  float* my_db = my_dw + C;
  for (int c = lane; c < C; c += 32) {
    my_dw[c] = 0.0f;
    my_db[c] = 0.0f;
  }
  const int first = blockIdx.x * kLayerNormBackwardRows;
  for (int r = warp; r < kLayerNormBackwardRows; r += kWarps) {
    const int row = first + r;
    if (row >= T) break;
    const int64_t base = static_cast<int64_t>(row) * C;
    const float m = mean[row], s = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int c = lane; c < C; c += 32) {
      const float xhat = (x[base + c] - m) * s;
      const float g = dy[base + c] * weight[c];
      sum_g += g;
      sum_gx += g * xhat;
    }
    const float mean_g = WarpSum(sum_g) / C;
    const float mean_gx = WarpSum(sum_gx) / C;
    for (int c = lane; c < C; c += 32) {
      const float xhat = (x[base + c] - m) * s;
      const float d = dy[base + c];
      const float g = d * weight[c];
      const float dx = s * (g - mean_g - xhat * mean_gx);
      const float out = accumulate ? dresid[base + c] + dx : dx;
      dresid[base + c] = out;
      dresid_bf16[base + c] = __float2bfloat16_rn(out);
      my_dw[c] += d * xhat;
      my_db[c] += d;
    }
  }
  __syncthreads();
  float* out = partials + static_cast<int64_t>(blockIdx.x) * 2 * C;
  for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += acc[static_cast<int64_t>(w) * 2 * C + i];
    out[i] = total;
  }
}

// Thread per column of [2][C]: sums the blocks' partials in block order.
__global__ void LayerNormParamReduceKernel(const float* __restrict__ partials,
                                           int blocks, int C,
                                           float* __restrict__ dweight,
                                           float* __restrict__ dbias) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 2 * C) return;
  float total = 0.0f;
  for (int b = 0; b < blocks; ++b) {
    total += partials[static_cast<int64_t>(b) * 2 * C + i];
  }
  if (i < C) {
    dweight[i] = total;
  } else {
    dbias[i - C] = total;
  }
}

}  // namespace

cudaError_t LayerNormForward(const float* x, const float* weight,
                             const float* bias, int T, int C, float eps,
                             __nv_bfloat16* y_bf16, float* y_f32, float* mean,
                             float* rstd, cudaStream_t stream) {
  const unsigned blocks = (T + kWarps - 1) / kWarps;
  LayerNormForwardKernel<<<blocks, kWarps * 32, 0, stream>>>(
      x, weight, bias, T, C, eps, y_bf16, y_f32, mean, rstd);
  return cudaGetLastError();
}

cudaError_t LayerNormBackward(const float* dy, const float* x,
                              const float* weight, const float* mean,
                              const float* rstd, int T, int C, bool accumulate,
                              float* dresid, __nv_bfloat16* dresid_bf16,
                              float* scratch, float* dweight, float* dbias,
                              cudaStream_t stream) {
  const int blocks = (T + kLayerNormBackwardRows - 1) / kLayerNormBackwardRows;
  const size_t shared = static_cast<size_t>(kWarps) * 2 * C * sizeof(float);
  if (shared > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(
        LayerNormBackwardKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(shared));
    if (e != cudaSuccess) return e;
  }
  LayerNormBackwardKernel<<<blocks, kWarps * 32, shared, stream>>>(
      dy, x, weight, mean, rstd, T, C, accumulate, dresid, dresid_bf16,
      scratch);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const int threads = 256;
  LayerNormParamReduceKernel<<<(2 * C + threads - 1) / threads, threads, 0,
                               stream>>>(scratch, blocks, C, dweight, dbias);
  return cudaGetLastError();
}

}  // namespace coppelius
