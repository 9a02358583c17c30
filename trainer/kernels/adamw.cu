// File: trainer/kernels/adamw.cu (see adamw.h for the math).
#include "trainer/kernels/adamw.h"
#include "trainer/kernels/divide.h"
#include "trainer/kernels/launch.cuh"

#include <algorithm>

namespace coppelius {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr int kWideThreads = 1024;  // capped grids: a whole chunk per pass
static_assert(kWideThreads * kUnroll == kAdamWChunk,
              "a wide block's pass covers exactly one chunk");

// One element: adamw.h's rule, single IEEE operations in its order (the
// division by bias_correction2_sqrt as divide.h's equal one). Stores
// p, m, v (and the bf16 copy of p for decayed tensors).
__device__ __forceinline__ void UpdateElement(const AdamWDeviceScalars& s,
                                              bool decayed, int64_t k,
                                              float pi, float mi0, float vi0,
                                              float gi, float* p, float* m,
                                              float* v,
                                              __nv_bfloat16* p_bf16) {
  if (decayed) pi = __fmul_rn(pi, s.decay_factor);
  const float mi = __fadd_rn(__fmul_rn(s.beta1, mi0),
                             __fmul_rn(s.one_minus_beta1, gi));
  const float gg = __fmul_rn(gi, gi);
  const float vi = __fadd_rn(__fmul_rn(s.beta2, vi0),
                             __fmul_rn(s.one_minus_beta2, gg));
  const float denom =
      __fadd_rn(DivideByKnownDivisor(__fsqrt_rn(vi), s.bias_correction2_sqrt,
                                     s.inv_bias_correction2_sqrt),
                s.epsilon);
  const float ratio = __fdiv_rn(mi, denom);
  pi = __fsub_rn(pi, __fmul_rn(s.step_size, ratio));
  p[k] = pi;
  m[k] = mi;
  v[k] = vi;
  if (decayed) p_bf16[k] = __float2bfloat16_rn(pi);
}

// Element k's p, m, v and g (the loads a pass issues before its
// arithmetic).
__device__ __forceinline__ void LoadElement(int64_t k, const float* p,
                                            const float* m, const float* v,
                                            const float* g, float* pk,
                                            float* mk, float* vk, float* gk) {
  *pk = p[k];
  *mk = m[k];
  *vk = v[k];
  *gk = g[k];
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
  // Chunks c = blockIdx.x, + gridDim.x, …; within a chunk kUnroll elements
  // per thread at a time, all loads issued before the arithmetic (more
  // bytes in flight per thread, so fewer blocks reach full bandwidth).
  for (int c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const AdamWChunk chunk = chunks[c];
    for (int base = 0; base < chunk.count; base += kThreads * kUnroll) {
      float pv[kUnroll], mv[kUnroll], vv[kUnroll], gv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * kThreads + threadIdx.x;
        if (i < chunk.count) {
          LoadElement(chunk.begin + i, p, m, v, g, &pv[u], &mv[u], &vv[u],
                      &gv[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * kThreads + threadIdx.x;
        if (i >= chunk.count) continue;
        UpdateElement(s, chunk.decayed != 0, chunk.begin + i, pv[u], mv[u],
                      vv[u], gv[u], p, m, v, p_bf16);
      }
    }
  }
}

// The capped grid: blocks of kWideThreads, block b taking chunks b,
// b + gridDim.x, …, each in one pass (kUnroll elements per thread, loads
// issued before the arithmetic). A block fills an SM's thread slots, so the
// update stays on at most gridDim.x SMs and leaves the others to the
// kernels it runs beside (docs/PERFORMANCE.md run 13). A kernel of its own
// rather than AdamWKernel with 1,024 threads: that template (its pass loop
// kept, 48 registers against 41) computed the same bits but made the step
// slower, 2.526 against 2.498 ms (H200, 2026-11-30 16:34 UTC).
__global__ void __launch_bounds__(kWideThreads)
    AdamWWideKernel(const AdamWChunk* __restrict__ chunks, int num_chunks,
                    const AdamWDeviceScalars* __restrict__ table,
                    const int64_t* __restrict__ step, int64_t fixed_step,
                    float* __restrict__ p, float* __restrict__ m,
                    float* __restrict__ v, const float* __restrict__ g,
                    __nv_bfloat16* __restrict__ p_bf16) {
  GridDependencyWait();
  const AdamWDeviceScalars s = table[step != nullptr ? *step : fixed_step];
  for (int c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const AdamWChunk chunk = chunks[c];
    float pv[kUnroll], mv[kUnroll], vv[kUnroll], gv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = u * kWideThreads + threadIdx.x;
      if (i < chunk.count) {
        LoadElement(chunk.begin + i, p, m, v, g, &pv[u], &mv[u], &vv[u],
                    &gv[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = u * kWideThreads + threadIdx.x;
      if (i >= chunk.count) continue;
      UpdateElement(s, chunk.decayed != 0, chunk.begin + i, pv[u], mv[u],
                    vv[u], gv[u], p, m, v, p_bf16);
    }
  }
}

// AdamWEmbeddingRows: row groups of kRowGroupThreads threads (a CTA of
// kWideThreads holds kWideThreads / kRowGroupThreads of them); group i of
// the grid's n takes rows i, i + n, …, skips a row whose mark (an input row
// or not) is not the one asked for (the whole group at once), and updates
// the others kUnroll · kRowGroupThreads elements at a time (all loads
// issued before the arithmetic). Until 2026-12-01 the kernel walked the
// whole table element by element, dividing each element's 64-bit index by
// C to find its row (a 64-bit division per element); by rows, the early
// pass (56 CTAs beside the backward) took 65 µs instead of 77 and the step
// 2.232–2.234 against 2.235–2.236 ms, and 2.224–2.225 with that pass on 40
// CTAs (CudaStepTuning::embedding_early_ctas), the same bits (H200,
// docs/PERFORMANCE.md run 22).
constexpr int kRowGroupThreads = 128;
static_assert(kWideThreads % kRowGroupThreads == 0, "whole groups per CTA");

__global__ void __launch_bounds__(kWideThreads)
    AdamWEmbeddingRowsKernel(const uint32_t* __restrict__ inputs, int T,
                             int V, int C, bool touched,
                             const AdamWDeviceScalars* __restrict__ table,
                             const int64_t* __restrict__ step,
                             int64_t fixed_step, float* __restrict__ p,
                             float* __restrict__ m, float* __restrict__ v,
                             const float* __restrict__ g,
                             __nv_bfloat16* __restrict__ p_bf16) {
  GridDependencyWait();
  extern __shared__ uint32_t marks[];  // [⌈V / 32⌉] bits: input rows
  const int words = (V + 31) / 32;
  for (int i = threadIdx.x; i < words; i += blockDim.x) marks[i] = 0;
  __syncthreads();
  for (int t = threadIdx.x; t < T; t += blockDim.x) {
    const uint32_t id = inputs[t];
    // (An id ≥ V names no row: StageContext never stages one.)
    if (id < static_cast<uint32_t>(V)) {
      atomicOr(&marks[id / 32], 1u << (id % 32));  // integer OR: any order
    }
  }
  __syncthreads();
  const AdamWDeviceScalars s = table[step != nullptr ? *step : fixed_step];
  constexpr int kGroupsPerCta = kWideThreads / kRowGroupThreads;
  const int lane = threadIdx.x % kRowGroupThreads;
  const int groups = gridDim.x * kGroupsPerCta;
  for (int row = blockIdx.x * kGroupsPerCta + threadIdx.x / kRowGroupThreads;
       row < V; row += groups) {
    if (((marks[row / 32] >> (row % 32)) & 1u) !=
        static_cast<uint32_t>(touched)) {
      continue;
    }
    const int64_t row0 = static_cast<int64_t>(row) * C;
    for (int j0 = 0; j0 < C; j0 += kUnroll * kRowGroupThreads) {
      float pv[kUnroll], mv[kUnroll], vv[kUnroll], gv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = j0 + u * kRowGroupThreads + lane;
        if (j < C) {
          LoadElement(row0 + j, p, m, v, g, &pv[u], &mv[u], &vv[u], &gv[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = j0 + u * kRowGroupThreads + lane;
        if (j >= C) continue;
        UpdateElement(s, true, row0 + j, pv[u], mv[u], vv[u], gv[u], p, m, v,
                      p_bf16);
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
  // on its own stream beside the backward, and its CTAs launched early
  // would sit on SMs waiting while the backward's kernels need them.
  if (num_chunks <= 0) return cudaSuccess;
  if (max_blocks > 0) {
    AdamWWideKernel<<<std::min(num_chunks, max_blocks), kWideThreads, 0,
                      stream>>>(chunks, num_chunks, scalars_table, step,
                                fixed_step, p, m, v, g, p_bf16);
  } else {
    AdamWKernel<<<num_chunks, kThreads, 0, stream>>>(
        chunks, num_chunks, scalars_table, step, fixed_step, p, m, v, g,
        p_bf16);
  }
  return cudaGetLastError();
}

cudaError_t AdamWEmbeddingRows(const uint32_t* inputs, int T, int V, int C,
                               bool touched,
                               const AdamWDeviceScalars* scalars_table,
                               const int64_t* step, int64_t fixed_step,
                               float* p, float* m, float* v, const float* g,
                               __nv_bfloat16* p_bf16, int blocks,
                               cudaStream_t stream) {
  if (V < 1 || C < 1 || T < 1 || blocks < 1) return cudaErrorInvalidValue;
  // No more CTAs than it takes to give every row a group (beyond that they
  // would only build the bitmap; and the grid's group count stays in int).
  constexpr int kGroupsPerCta = kWideThreads / kRowGroupThreads;
  blocks = std::min(blocks, (V + kGroupsPerCta - 1) / kGroupsPerCta);
  const size_t shared = static_cast<size_t>((V + 31) / 32) * sizeof(uint32_t);
  if (shared > 48 * 1024) return cudaErrorInvalidValue;  // V ≤ 393,216
  // An ordinary launch, as AdamWUpdateChunks' (see there).
  AdamWEmbeddingRowsKernel<<<blocks, kWideThreads, shared, stream>>>(
      inputs, T, V, C, touched, scalars_table, step, fixed_step, p, m, v, g,
      p_bf16);
  return cudaGetLastError();
}

cudaError_t CastToBf16(const float* in, int64_t n, __nv_bfloat16* out,
                       cudaStream_t stream) {
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  return LaunchKernel(CastKernel, blocks, threads, 0, stream, in, n, out);
}

}  // namespace coppelius
