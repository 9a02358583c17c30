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

// Thread per element of [T, 3C]; `inverse` selects the backward rotation.
template <bool kInverse>
__global__ void RopeKernel(const float* __restrict__ in,
                           const float* __restrict__ table, int T, int NH,
                           int HS, __nv_bfloat16* __restrict__ out) {
  const int C = NH * HS;
  const int64_t n = static_cast<int64_t>(T) * 3 * C;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const int t = static_cast<int>(idx / (3 * C));
  const int col = static_cast<int>(idx % (3 * C));
  float value = in[idx];
  if (col < 2 * C) {
    const int half = HS / 2;
    const int j = col % HS;
    const int i = j < half ? j : j - half;
    const float cs = table[static_cast<int64_t>(t) * half + i];
    const float sn = table[static_cast<int64_t>(T) * half +
                           static_cast<int64_t>(t) * half + i];
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
  const int64_t n = static_cast<int64_t>(T) * 3 * NH * HS;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  RopeKernel<kInverse><<<blocks, threads, 0, stream>>>(in, table, T, NH, HS,
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
