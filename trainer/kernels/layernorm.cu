// File: trainer/kernels/layernorm.cu (see layernorm.h for the math).
#include "trainer/kernels/layernorm.h"

#include <cstdint>

#include "trainer/kernels/bf16.cuh"
#include "trainer/kernels/launch.cuh"
#include "trainer/kernels/reduce.cuh"

namespace coppelius {
namespace {

using kernels::StoreBf16x4;
using kernels::WarpSum;

constexpr int kForwardWarps = 8;   // rows per forward block
// Warps per backward block: one row each (kLayerNormBackwardRows rows per
// block), so T = 1024 gives 128 blocks, about one per SM. (16 rows over 4
// warps, 64 blocks, left half the H200 idle: 8.3 us per call, 2026-11-30.)
constexpr int kBackwardWarps = 8;

// A lane's share of a row: kVec float4 (C = 128 kVec) in registers, or, for
// kVec == 0, a strided loop over the row.
template <int kVec>
struct RowRegs {
  float v[kVec > 0 ? 4 * kVec : 1];
};

template <int kVec>
__device__ __forceinline__ void LoadRow(const float* __restrict__ row, int lane,
                                        RowRegs<kVec>* r) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const float4 q = reinterpret_cast<const float4*>(row)[lane + 32 * i];
    r->v[4 * i + 0] = q.x;
    r->v[4 * i + 1] = q.y;
    r->v[4 * i + 2] = q.z;
    r->v[4 * i + 3] = q.w;
  }
}

// Column of register slot j (kVec > 0).
__device__ __forceinline__ int SlotColumn(int lane, int j) {
  return 4 * (lane + 32 * (j / 4)) + (j % 4);
}

template <int kVec>
__global__ void LayerNormForwardKernel(const float* __restrict__ x,
                                       const float* __restrict__ weight,
                                       const float* __restrict__ bias, int T,
                                       int C, float eps,
                                       __nv_bfloat16* __restrict__ y_bf16,
                                       float* __restrict__ y_f32,
                                       float* __restrict__ mean_out,
                                       float* __restrict__ rstd_out) {
  GridDependencyWait();
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kForwardWarps + (threadIdx.x >> 5);
  if (row >= T) return;
  const int64_t base = static_cast<int64_t>(row) * C;
  const float* xr = x + base;
  float mean, rstd;
  if constexpr (kVec > 0) {
    RowRegs<kVec> r;
    LoadRow<kVec>(xr, lane, &r);
    // The weight and bias loads issued with the row's, ahead of the
    // reductions that the row's values wait for.
    float4 wv[kVec], bv[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      wv[i] = reinterpret_cast<const float4*>(weight)[lane + 32 * i];
      bv[i] = reinterpret_cast<const float4*>(bias)[lane + 32 * i];
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 4 * kVec; ++j) sum += r.v[j];
    mean = WarpSum(sum) / C;
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < 4 * kVec; ++j) {
      const float d = r.v[j] - mean;
      sq += d * d;
    }
    rstd = 1.0f / sqrtf(WarpSum(sq) / C + eps);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int c0 = 4 * (lane + 32 * i);
      const float4 w = wv[i];
      const float4 b = bv[i];
      float4 y;
      y.x = (r.v[4 * i + 0] - mean) * rstd * w.x + b.x;
      y.y = (r.v[4 * i + 1] - mean) * rstd * w.y + b.y;
      y.z = (r.v[4 * i + 2] - mean) * rstd * w.z + b.z;
      y.w = (r.v[4 * i + 3] - mean) * rstd * w.w + b.w;
      StoreBf16x4(y_bf16 + base + c0, y);
      if (y_f32 != nullptr) {
        *reinterpret_cast<float4*>(y_f32 + base + c0) = y;
      }
    }
  } else {
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += xr[c];
    mean = WarpSum(sum) / C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += 32) {
      const float d = xr[c] - mean;
      sq += d * d;
    }
    rstd = 1.0f / sqrtf(WarpSum(sq) / C + eps);
    for (int c = lane; c < C; c += 32) {
      const float y = (xr[c] - mean) * rstd * weight[c] + bias[c];
      y_bf16[base + c] = __float2bfloat16_rn(y);
      if (y_f32 != nullptr) y_f32[base + c] = y;
    }
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// Block b: rows [b R, b R + R); warp w takes rows b R + w, + kBackwardWarps,
// ... and accumulates dweight/dbias for its columns (registers for kVec > 0,
// shared memory otherwise) in row order; then the warps' sums are added in
// warp order into partials[b][2][C].
template <int kVec>
__global__ void LayerNormBackwardKernel(
    const float* __restrict__ dy, const float* __restrict__ x,
    const float* __restrict__ weight, const float* __restrict__ mean,
    const float* __restrict__ rstd, int T, int C, bool accumulate,
    float* __restrict__ dresid, __nv_bfloat16* __restrict__ dresid_bf16,
    float* __restrict__ partials) {
  GridDependencyWait();
  extern __shared__ float acc[];  // [kBackwardWarps][2][C]
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  float* my_dw = acc + static_cast<int64_t>(warp) * 2 * C;
  float* my_db = my_dw + C;
  const int first = blockIdx.x * kLayerNormBackwardRows;
  if constexpr (kVec > 0) {
    RowRegs<kVec> w, dw, db;
    LoadRow<kVec>(weight, lane, &w);
#pragma unroll
    for (int j = 0; j < 4 * kVec; ++j) {
      dw.v[j] = 0.0f;
      db.v[j] = 0.0f;
    }
    for (int r = warp; r < kLayerNormBackwardRows; r += kBackwardWarps) {
      const int row = first + r;
      if (row >= T) break;
      const int64_t base = static_cast<int64_t>(row) * C;
      const float m = mean[row], s = rstd[row];
      RowRegs<kVec> xh, d;
      LoadRow<kVec>(x + base, lane, &xh);
      LoadRow<kVec>(dy + base, lane, &d);
      float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
      for (int j = 0; j < 4 * kVec; ++j) {
        xh.v[j] = (xh.v[j] - m) * s;
        const float g = d.v[j] * w.v[j];
        sum_g += g;
        sum_gx += g * xh.v[j];
      }
      const float mean_g = WarpSum(sum_g) / C;
      const float mean_gx = WarpSum(sum_gx) / C;
      RowRegs<kVec> res;
      if (accumulate) {
        LoadRow<kVec>(dresid + base, lane, &res);
      } else {
#pragma unroll
        for (int j = 0; j < 4 * kVec; ++j) res.v[j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 4 * kVec; ++j) {
        const float g = d.v[j] * w.v[j];
        const float dxv = s * (g - mean_g - xh.v[j] * mean_gx);
        res.v[j] = accumulate ? res.v[j] + dxv : dxv;
        dw.v[j] += d.v[j] * xh.v[j];
        db.v[j] += d.v[j];
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const int c0 = 4 * (lane + 32 * i);
        float4 o;
        o.x = res.v[4 * i + 0];
        o.y = res.v[4 * i + 1];
        o.z = res.v[4 * i + 2];
        o.w = res.v[4 * i + 3];
        *reinterpret_cast<float4*>(dresid + base + c0) = o;
        StoreBf16x4(dresid_bf16 + base + c0, o);
      }
    }
#pragma unroll
    for (int j = 0; j < 4 * kVec; ++j) {
      const int c = SlotColumn(lane, j);
      my_dw[c] = dw.v[j];
      my_db[c] = db.v[j];
    }
  } else {
    for (int c = lane; c < C; c += 32) {
      my_dw[c] = 0.0f;
      my_db[c] = 0.0f;
    }
    for (int r = warp; r < kLayerNormBackwardRows; r += kBackwardWarps) {
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
        const float dxv = s * (g - mean_g - xhat * mean_gx);
        const float out = accumulate ? dresid[base + c] + dxv : dxv;
        dresid[base + c] = out;
        dresid_bf16[base + c] = __float2bfloat16_rn(out);
        my_dw[c] += d * xhat;
        my_db[c] += d;
      }
    }
  }
  __syncthreads();
  float* out = partials + static_cast<int64_t>(blockIdx.x) * 2 * C;
  for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) {
    float total = 0.0f;
    for (int w = 0; w < kBackwardWarps; ++w) {
      total += acc[static_cast<int64_t>(w) * 2 * C + i];
    }
    out[i] = total;
  }
}

// Thread per column of [2][C]: sums the blocks' partials in block order.
__global__ void LayerNormParamReduceKernel(const float* __restrict__ partials,
                                           int blocks, int C,
                                           float* __restrict__ dweight,
                                           float* __restrict__ dbias) {
  GridDependencyWait();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 2 * C) return;
  float total = 0.0f;
  // The loads of kBatch partials are issued together (one L2 round trip
  // per batch instead of one per few partials), then added in block order:
  // the sum is the same as one partial at a time.
  constexpr int kBatch = 32;
  for (int b0 = 0; b0 < blocks; b0 += kBatch) {
    float v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      v[k] = b0 + k < blocks
                 ? partials[static_cast<int64_t>(b0 + k) * 2 * C + i]
                 : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      if (b0 + k < blocks) total += v[k];
    }
  }
  if (i < C) {
    dweight[i] = total;
  } else {
    dbias[i - C] = total;
  }
}

template <int kVec>
cudaError_t LaunchForward(const float* x, const float* weight,
                          const float* bias, int T, int C, float eps,
                          __nv_bfloat16* y_bf16, float* y_f32, float* mean,
                          float* rstd, cudaStream_t stream) {
  const unsigned blocks = (T + kForwardWarps - 1) / kForwardWarps;
  return LaunchKernel(LayerNormForwardKernel<kVec>, blocks, kForwardWarps * 32,
                      0, stream, x, weight, bias, T, C, eps, y_bf16, y_f32,
                      mean, rstd);
}

template <int kVec>
cudaError_t LaunchBackward(const float* dy, const float* x,
                           const float* weight, const float* mean,
                           const float* rstd, int T, int C, bool accumulate,
                           float* dresid, __nv_bfloat16* dresid_bf16,
                           float* scratch, cudaStream_t stream) {
  const int blocks = (T + kLayerNormBackwardRows - 1) / kLayerNormBackwardRows;
  const size_t shared =
      static_cast<size_t>(kBackwardWarps) * 2 * C * sizeof(float);
  if (shared > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(
        LayerNormBackwardKernel<kVec>,
        cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    if (e != cudaSuccess) return e;
  }
  return LaunchKernel(LayerNormBackwardKernel<kVec>, blocks,
                      kBackwardWarps * 32, shared, stream, dy, x, weight, mean,
                      rstd, T, C, accumulate, dresid, dresid_bf16, scratch);
}

bool Aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace

cudaError_t LayerNormForward(const float* x, const float* weight,
                             const float* bias, int T, int C, float eps,
                             __nv_bfloat16* y_bf16, float* y_f32, float* mean,
                             float* rstd, cudaStream_t stream) {
  const bool vec = C % 128 == 0 && Aligned16(x) && Aligned16(weight) &&
                   Aligned16(bias) && (reinterpret_cast<uintptr_t>(y_bf16) & 7u) == 0 &&
                   (y_f32 == nullptr || Aligned16(y_f32));
  if (vec && C == 512) {
    return LaunchForward<4>(x, weight, bias, T, C, eps, y_bf16, y_f32, mean,
                            rstd, stream);
  }
  if (vec && C == 128) {
    return LaunchForward<1>(x, weight, bias, T, C, eps, y_bf16, y_f32, mean,
                            rstd, stream);
  }
  return LaunchForward<0>(x, weight, bias, T, C, eps, y_bf16, y_f32, mean,
                          rstd, stream);
}

cudaError_t LayerNormBackwardRows(const float* dy, const float* x,
                                  const float* weight, const float* mean,
                                  const float* rstd, int T, int C,
                                  bool accumulate, float* dresid,
                                  __nv_bfloat16* dresid_bf16, float* scratch,
                                  cudaStream_t stream) {
  const bool vec = C % 128 == 0 && Aligned16(dy) && Aligned16(x) &&
                   Aligned16(weight) && Aligned16(dresid) &&
                   (reinterpret_cast<uintptr_t>(dresid_bf16) & 7u) == 0;
  if (vec && C == 512) {
    return LaunchBackward<4>(dy, x, weight, mean, rstd, T, C, accumulate,
                             dresid, dresid_bf16, scratch, stream);
  }
  if (vec && C == 128) {
    return LaunchBackward<1>(dy, x, weight, mean, rstd, T, C, accumulate,
                             dresid, dresid_bf16, scratch, stream);
  }
  return LaunchBackward<0>(dy, x, weight, mean, rstd, T, C, accumulate, dresid,
                           dresid_bf16, scratch, stream);
}

cudaError_t LayerNormBackwardReduce(const float* scratch, int T, int C,
                                    float* dweight, float* dbias,
                                    cudaStream_t stream) {
  const int blocks = (T + kLayerNormBackwardRows - 1) / kLayerNormBackwardRows;
  // Small blocks: the 2·C columns spread over more SMs (16 at C = 512).
  const int threads = 64;
  return LaunchKernel(LayerNormParamReduceKernel,
                      (2 * C + threads - 1) / threads, threads, 0, stream,
                      scratch, blocks, C, dweight, dbias);
}

cudaError_t LayerNormBackward(const float* dy, const float* x,
                              const float* weight, const float* mean,
                              const float* rstd, int T, int C, bool accumulate,
                              float* dresid, __nv_bfloat16* dresid_bf16,
                              float* scratch, float* dweight, float* dbias,
                              cudaStream_t stream) {
  const cudaError_t e =
      LayerNormBackwardRows(dy, x, weight, mean, rstd, T, C, accumulate,
                            dresid, dresid_bf16, scratch, stream);
  if (e != cudaSuccess) return e;
  return LayerNormBackwardReduce(scratch, T, C, dweight, dbias, stream);
}

}  // namespace coppelius
