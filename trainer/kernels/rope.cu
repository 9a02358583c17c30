// File: trainer/kernels/rope.cu (see rope.h for the math).
#include "trainer/kernels/rope.h"

#include <cmath>
#include <cstdint>

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

// Grid (column blocks, T): thread per element of row t = blockIdx.y;
// `kInverse` selects the backward rotation. 32-bit index arithmetic.
template <bool kInverse>
__global__ void RopeKernel(const float* __restrict__ in,
                           const float* __restrict__ table, int T, int NH,
                           int HS, __nv_bfloat16* __restrict__ out) {
  const int C = NH * HS;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= 3 * C) return;
  const int t = blockIdx.y;
  const int64_t idx = static_cast<int64_t>(t) * 3 * C + col;
  float value = in[idx];
  if (col < 2 * C) {
    const int half = HS / 2;
    const int j = col % HS;
    const int i = j < half ? j : j - half;
    const float cs = table[t * half + i];
    const float sn = table[T * half + t * half + i];
    if (!kInverse) {
      if (j < half) {
        value = value * cs - in[idx + half] * sn;
      } else {
        value = value * cs + in[idx - half] * sn;
      }
    } else {
      if (j < half) {
        value = value * cs + in[idx + half] * sn;
      } else {
        value = value * cs - in[idx - half] * sn;
      }
    }
  }
  out[idx] = __float2bfloat16_rn(value);
}

template <bool kInverse>
cudaError_t LaunchRope(const float* in, const float* table, int T, int NH,
                       int HS, __nv_bfloat16* out, cudaStream_t stream) {
  const int threads = 256;
  const dim3 grid((3 * NH * HS + threads - 1) / threads, T);
  RopeKernel<kInverse><<<grid, threads, 0, stream>>>(in, table, T, NH, HS,
                                                     out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t RopeForward(const float* qkv, const float* table, int T, int NH,
                        int HS, __nv_bfloat16* out, cudaStream_t stream) {
  return LaunchRope<false>(qkv, table, T, NH, HS, out, stream);
}

cudaError_t RopeBackward(const float* dqkv, const float* table, int T, int NH,
                         int HS, __nv_bfloat16* out, cudaStream_t stream) {
  return LaunchRope<true>(dqkv, table, T, NH, HS, out, stream);
}

}  // namespace coppelius
