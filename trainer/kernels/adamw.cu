// File: trainer/kernels/adamw.cu (see adamw.h for the math).
#include "trainer/kernels/adamw.h"
#include "trainer/kernels/launch.cuh"

#include <algorithm>

namespace coppelius {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 2;

// One element's update (adamw.h): *p, *m, *v in, updated values out; every
// operation an explicitly rounded single IEEE operation (no contraction).
__device__ __forceinline__ void AdamWElement(const AdamWDeviceScalars& s,
                                             bool decayed, float g, float* p,
                                             float* m, float* v) {
  float pi = *p;
  if (decayed) pi = __fmul_rn(pi, s.decay_factor);
  const float mi =
      __fadd_rn(__fmul_rn(s.beta1, *m), __fmul_rn(s.one_minus_beta1, g));
  const float gg = __fmul_rn(g, g);
  const float vi =
      __fadd_rn(__fmul_rn(s.beta2, *v), __fmul_rn(s.one_minus_beta2, gg));
  const float denom = __fadd_rn(
      __fdiv_rn(__fsqrt_rn(vi), s.bias_correction2_sqrt), s.epsilon);
  const float ratio = __fdiv_rn(mi, denom);
  *p = __fsub_rn(pi, __fmul_rn(s.step_size, ratio));
  *m = mi;
  *v = vi;
}

__global__ void __launch_bounds__(kThreads)
    AdamWKernel(const AdamWChunk* __restrict__ chunks, int num_chunks,
                const AdamWDeviceScalars* __restrict__ table,
                const int64_t* __restrict__ step, int64_t fixed_step,
                float* __restrict__ p, float* __restrict__ m,
                float* __restrict__ v, const float* __restrict__ g,
                __nv_bfloat16* __restrict__ p_bf16) {
  GridDependencyWait();
  const AdamWDeviceScalars s = table[step != nullptr ? *step : fixed_step];
  // Chunks c = blockIdx.x, + gridDim.x, …; within a chunk kUnroll groups
  // of 4 consecutive elements per thread at a time (16-byte loads when the
  // chunk is 4-aligned, as every chunk of the coppelius plane is), all
  // loads issued before the arithmetic.
  for (int c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const AdamWChunk chunk = chunks[c];
    if (((chunk.begin | chunk.count) & 3) == 0) {
      const int groups = chunk.count / 4;
      for (int base = 0; base < groups; base += kThreads * kUnroll) {
        float4 pv[kUnroll], mv[kUnroll], vv[kUnroll], gv[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int j = base + u * kThreads + threadIdx.x;
          if (j < groups) {
            const int64_t k = chunk.begin + 4 * static_cast<int64_t>(j);
            pv[u] = *reinterpret_cast<const float4*>(p + k);
            mv[u] = *reinterpret_cast<const float4*>(m + k);
            vv[u] = *reinterpret_cast<const float4*>(v + k);
            gv[u] = *reinterpret_cast<const float4*>(g + k);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int j = base + u * kThreads + threadIdx.x;
          if (j >= groups) continue;
          const int64_t k = chunk.begin + 4 * static_cast<int64_t>(j);
          float* pe = &pv[u].x;
          float* me = &mv[u].x;
          float* ve = &vv[u].x;
          const float* ge = &gv[u].x;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            AdamWElement(s, chunk.decayed != 0, ge[e], &pe[e], &me[e], &ve[e]);
          }
          *reinterpret_cast<float4*>(p + k) = pv[u];
          *reinterpret_cast<float4*>(m + k) = mv[u];
          *reinterpret_cast<float4*>(v + k) = vv[u];
          if (chunk.decayed) {
            __nv_bfloat162 lo = __floats2bfloat162_rn(pv[u].x, pv[u].y);
            __nv_bfloat162 hi = __floats2bfloat162_rn(pv[u].z, pv[u].w);
            uint2 packed;
            packed.x = *reinterpret_cast<uint32_t*>(&lo);
            packed.y = *reinterpret_cast<uint32_t*>(&hi);
            *reinterpret_cast<uint2*>(p_bf16 + k) = packed;
          }
        }
      }
      continue;
    }
    for (int base = 0; base < chunk.count; base += kThreads * kUnroll) {
      float pv[kUnroll], mv[kUnroll], vv[kUnroll], gv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * kThreads + threadIdx.x;
        if (i < chunk.count) {
          const int64_t k = chunk.begin + i;
          pv[u] = p[k];
          mv[u] = m[k];
          vv[u] = v[k];
          gv[u] = g[k];
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * kThreads + threadIdx.x;
        if (i >= chunk.count) continue;
        const int64_t k = chunk.begin + i;
        AdamWElement(s, chunk.decayed != 0, gv[u], &pv[u], &mv[u], &vv[u]);
        p[k] = pv[u];
        m[k] = mv[u];
        v[k] = vv[u];
        if (chunk.decayed) p_bf16[k] = __float2bfloat16_rn(pv[u]);
      }
    }
  }
}

__global__ void CastKernel(const float* __restrict__ in, int64_t n,
                           __nv_bfloat16* __restrict__ out) {
  GridDependencyWait();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

}  // namespace

cudaError_t AdamWUpdateChunks(const AdamWChunk* chunks, int num_chunks,
                              const AdamWDeviceScalars* scalars_table,
                              const int64_t* step, int64_t fixed_step,
                              float* p, float* m, float* v, const float* g,
                              __nv_bfloat16* p_bf16, cudaStream_t stream,
                              int max_blocks) {
  // An ordinary launch, not a programmatic one (launch.cuh): the update runs
  // on its own low-priority stream beside the backward, and its CTAs (one
  // per chunk, hundreds) launched early would sit on SMs waiting while the
  // backward's kernels need them.
  const int blocks = max_blocks > 0 ? std::min(num_chunks, max_blocks)
                                    : num_chunks;
  if (blocks <= 0) return cudaSuccess;
  AdamWKernel<<<blocks, kThreads, 0, stream>>>(chunks, num_chunks,
                                               scalars_table, step, fixed_step,
                                               p, m, v, g, p_bf16);
  return cudaGetLastError();
}

namespace {
int g_adamw_overlap_blocks = 0;
}  // namespace

int AdamWOverlapBlocks() { return g_adamw_overlap_blocks; }
void SetAdamWOverlapBlocks(int max_blocks) {
  g_adamw_overlap_blocks = max_blocks;
}

cudaError_t CastToBf16(const float* in, int64_t n, __nv_bfloat16* out,
                       cudaStream_t stream) {
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  return LaunchKernel(CastKernel, blocks, threads, 0, stream, in, n, out);
}

}  // namespace coppelius
