// File: trainer/kernels/rope.cu (see rope.h for the math).
#include "trainer/kernels/rope.h"

#include <cmath>
#include <cstdint>

#include "trainer/kernels/bf16.cuh"
#include "trainer/kernels/launch.cuh"

namespace coppelius {

std::vector<float> RopeTable(int T, int HS, double base) {
  const int half = HS / 2;
  std::vector<float> table(2 * static_cast<size_t>(T) * half);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const double theta = std::pow(base, -2.0 * i / HS);
      const double a = t * theta;
      table[static_cast<size_t>(t) * half + i] = static_cast<float>(std::cos(a));
      table[static_cast<size_t>(T) * half + static_cast<size_t>(t) * half + i] =
          static_cast<float>(std::sin(a));
    }
  }
  return table;
}

namespace {

// Grid (item blocks, T): one thread per group of 4 — 4 rotation pairs
// (columns i..i+3 and i + HS/2..i + HS/2 + 3 of one q or k head; HS/2 a
// multiple of 4) or 4 v columns — of row t = blockIdx.y, with 16-byte
// loads. 32-bit index arithmetic.
__global__ void RopeForwardKernel(const float* __restrict__ in,
                           const float* __restrict__ table, int T, int NH,
                           int HS, __nv_bfloat16* __restrict__ out) {
  GridDependencyWait();
  const int C = NH * HS, half = HS / 2;
  const int qk_items = 2 * NH * (half / 4);
  const int item = blockIdx.x * blockDim.x + threadIdx.x;
  if (item >= qk_items + C / 4) return;
  const int t = blockIdx.y;
  const float* row = in + static_cast<int64_t>(t) * 3 * C;
  __nv_bfloat16* orow = out + static_cast<int64_t>(t) * 3 * C;
  if (item >= qk_items) {  // v: rounded only
    const int col = 2 * C + (item - qk_items) * 4;
    kernels::StoreBf16x4(orow + col, *reinterpret_cast<const float4*>(row + col));
    return;
  }
  // q heads 0..NH−1 then k heads: head · HS is the column of either.
  const int head = item / (half / 4);
  const int i = (item % (half / 4)) * 4;
  const int col = head * HS + i;
  const float4 a = *reinterpret_cast<const float4*>(row + col);
  const float4 b = *reinterpret_cast<const float4*>(row + col + half);
  const float4 cs = *reinterpret_cast<const float4*>(table + t * half + i);
  const float4 sn =
      *reinterpret_cast<const float4*>(table + T * half + t * half + i);
  const float4 lo =
      make_float4(a.x * cs.x - b.x * sn.x, a.y * cs.y - b.y * sn.y,
                  a.z * cs.z - b.z * sn.z, a.w * cs.w - b.w * sn.w);
  const float4 hi =
      make_float4(b.x * cs.x + a.x * sn.x, b.y * cs.y + a.y * sn.y,
                  b.z * cs.z + a.z * sn.z, b.w * cs.w + a.w * sn.w);
  kernels::StoreBf16x4(orow + col, lo);
  kernels::StoreBf16x4(orow + col + half, hi);
}

}  // namespace

cudaError_t RopeForward(const float* qkv, const float* table, int T, int NH,
                        int HS, __nv_bfloat16* out, cudaStream_t stream) {
  if (HS % 8 != 0) return cudaErrorInvalidValue;
  const int items = 2 * NH * (HS / 8) + NH * HS / 4;
  const int threads = 128;
  const dim3 grid((items + threads - 1) / threads, T);
  return LaunchKernel(RopeForwardKernel, grid, threads, 0, stream, qkv, table,
                      T, NH, HS, out);
}

}  // namespace coppelius
