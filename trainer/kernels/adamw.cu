// File: trainer/kernels/adamw.cu (see adamw.h for the math).
#include "trainer/kernels/adamw.h"
#include "trainer/kernels/bf16.cuh"
#include "trainer/kernels/divide.h"
#include "trainer/kernels/launch.cuh"

#include <algorithm>
#include <cstdint>

namespace coppelius {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // elements per thread and pass
constexpr int kWideThreads = 1024;  // capped grids: a whole chunk per pass
static_assert(kWideThreads * kUnroll == kAdamWChunk,
              "a wide block's pass covers exactly one chunk");

// A thread's kUnroll elements of one pass over a range of `count` elements
// from plane offset `begin`: range elements first + e·stride (e = 0 ..
// kUnroll − 1) that are below `count`. With stride 1 and 16-byte aligned
// element offsets (Quad::Contiguous) the loads and stores are one 16-byte
// access per plane (8 bytes for the bf16 copy) instead of four.
struct Quad {
  int64_t begin;
  int count, first, stride;
  float p[kUnroll], m[kUnroll], v[kUnroll], g[kUnroll];

  // True where the 16-byte accesses apply: `aligned` (the planes' base
  // pointers, AdamWUpdateChunks) and all kUnroll elements in range at an
  // offset that is a multiple of 4.
  __device__ __forceinline__ bool Contiguous(bool aligned) const {
    return aligned && stride == 1 && first + kUnroll <= count &&
           (begin + first) % kUnroll == 0;
  }

  // Issues the loads (all of them before any arithmetic).
  __device__ __forceinline__ void Load(bool aligned, const float* pp,
                                       const float* pm, const float* pv,
                                       const float* pg) {
    if (Contiguous(aligned)) {
      const int64_t k = begin + first;
      Set(p, *reinterpret_cast<const float4*>(pp + k));
      Set(m, *reinterpret_cast<const float4*>(pm + k));
      Set(v, *reinterpret_cast<const float4*>(pv + k));
      Set(g, *reinterpret_cast<const float4*>(pg + k));
      return;
    }
    ForEachInRange([&](int e, int64_t k) {
      p[e] = pp[k];
      m[e] = pm[k];
      v[e] = pv[k];
      g[e] = pg[k];
    });
  }

  // adamw.h's rule on every element in range, then the stores of p, m, v
  // (and the bf16 copy of p when `decayed`).
  __device__ __forceinline__ void Update(const AdamWDeviceScalars& s,
                                         bool decayed, bool aligned,
                                         float* pp, float* pm, float* pv,
                                         __nv_bfloat16* p_bf16) {
    ForEachInRange([&](int e, int64_t) { Step(s, decayed, e); });
    if (Contiguous(aligned)) {
      const int64_t k = begin + first;
      const float4 pq = make_float4(p[0], p[1], p[2], p[3]);
      *reinterpret_cast<float4*>(pp + k) = pq;
      *reinterpret_cast<float4*>(pm + k) = make_float4(m[0], m[1], m[2], m[3]);
      *reinterpret_cast<float4*>(pv + k) = make_float4(v[0], v[1], v[2], v[3]);
      if (decayed) kernels::StoreBf16x4(p_bf16 + k, pq);
      return;
    }
    ForEachInRange([&](int e, int64_t k) {
      pp[k] = p[e];
      pm[k] = m[e];
      pv[k] = v[e];
      if (decayed) p_bf16[k] = __float2bfloat16_rn(p[e]);
    });
  }

 private:
  // f(e, plane offset) for each of the thread's elements in range.
  template <typename F>
  __device__ __forceinline__ void ForEachInRange(F&& f) const {
#pragma unroll
    for (int e = 0; e < kUnroll; ++e) {
      const int i = first + e * stride;
      if (i < count) f(e, begin + i);
    }
  }

  __device__ __forceinline__ static void Set(float (&x)[kUnroll],
                                             const float4& q) {
    x[0] = q.x;
    x[1] = q.y;
    x[2] = q.z;
    x[3] = q.w;
  }

  // One element: adamw.h's rule, single IEEE operations in its order (the
  // division by bias_correction2_sqrt as divide.h's equal one).
  __device__ __forceinline__ void Step(const AdamWDeviceScalars& s,
                                       bool decayed, int e) {
    float pi = p[e];
    if (decayed) pi = __fmul_rn(pi, s.decay_factor);
    const float gi = g[e];
    const float mi = __fadd_rn(__fmul_rn(s.beta1, m[e]),
                               __fmul_rn(s.one_minus_beta1, gi));
    const float gg = __fmul_rn(gi, gi);
    const float vi = __fadd_rn(__fmul_rn(s.beta2, v[e]),
                               __fmul_rn(s.one_minus_beta2, gg));
    const float denom = __fadd_rn(
        DivideByKnownDivisor(__fsqrt_rn(vi), s.bias_correction2_sqrt,
                             s.inv_bias_correction2_sqrt),
        s.epsilon);
    const float ratio = __fdiv_rn(mi, denom);
    p[e] = __fsub_rn(pi, __fmul_rn(s.step_size, ratio));
    m[e] = mi;
    v[e] = vi;
  }
};

// A thread's elements of pass `base` over a range of `threads` threads:
// with 16-byte accesses (`aligned` planes and a range offset that is a
// multiple of 4), kUnroll neighbours (4·t ..); otherwise one element
// `threads` apart (t, t + threads, …), so that a warp's accesses are
// coalesced either way.
__device__ __forceinline__ Quad PassQuad(int64_t begin, int count, int base,
                                         int threads, int t, bool aligned) {
  Quad q;
  q.begin = begin;
  q.count = count;
  if (aligned && begin % kUnroll == 0) {
    q.first = base + kUnroll * t;
    q.stride = 1;
  } else {
    q.first = base + t;
    q.stride = threads;
  }
  return q;
}

// One block of kThreads per chunk (the whole device): each pass
// kUnroll · kThreads elements, all loads issued before the arithmetic (more
// bytes in flight per thread, so fewer blocks reach full bandwidth).
__global__ void __launch_bounds__(kThreads)
    AdamWKernel(const AdamWChunk* __restrict__ chunks, int num_chunks,
                const AdamWDeviceScalars* __restrict__ table,
                const int64_t* __restrict__ step, int64_t fixed_step,
                bool aligned, float* __restrict__ p, float* __restrict__ m,
                float* __restrict__ v, const float* __restrict__ g,
                __nv_bfloat16* __restrict__ p_bf16) {
  GridDependencyWait();
  const AdamWDeviceScalars s = table[step != nullptr ? *step : fixed_step];
  for (int c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const AdamWChunk chunk = chunks[c];
    for (int base = 0; base < chunk.count; base += kThreads * kUnroll) {
      Quad q = PassQuad(chunk.begin, chunk.count, base, kThreads, threadIdx.x,
                        aligned);
      q.Load(aligned, p, m, v, g);
      q.Update(s, chunk.decayed != 0, aligned, p, m, v, p_bf16);
    }
  }
}

// The capped grid: blocks of kWideThreads, block b taking chunks b,
// b + gridDim.x, …, each in one pass (loads issued before the arithmetic).
// A block fills an SM's thread slots, so the update stays on at most
// gridDim.x SMs and leaves the others to the kernels it runs beside
// (docs/PERFORMANCE.md run 13). A kernel of its own rather than AdamWKernel
// with 1,024 threads: that template (its pass loop kept, 48 registers
// against 41) computed the same bits but made the step slower, 2.526
// against 2.498 ms (H200, 2026-11-30 16:34 UTC). The next chunk's loads
// issued before this chunk's arithmetic (54 registers instead of 41) made
// it faster alone (2,239 against 2,055 GB/s on 26 CTAs) but the step slower
// (2.226–2.227 against 2.223 ms, docs/PERFORMANCE.md run 25): fewer
// registers leave room for other kernels' CTAs on the update's SMs.
__global__ void __launch_bounds__(kWideThreads)
    AdamWWideKernel(const AdamWChunk* __restrict__ chunks, int num_chunks,
                    const AdamWDeviceScalars* __restrict__ table,
                    const int64_t* __restrict__ step, int64_t fixed_step,
                    bool aligned, float* __restrict__ p,
                    float* __restrict__ m, float* __restrict__ v,
                    const float* __restrict__ g,
                    __nv_bfloat16* __restrict__ p_bf16) {
  GridDependencyWait();
  const AdamWDeviceScalars s = table[step != nullptr ? *step : fixed_step];
  for (int c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const AdamWChunk chunk = chunks[c];
    Quad q = PassQuad(chunk.begin, chunk.count, 0, kWideThreads, threadIdx.x,
                      aligned);
    q.Load(aligned, p, m, v, g);
    q.Update(s, chunk.decayed != 0, aligned, p, m, v, p_bf16);
  }
}

// AdamWEmbeddingRows: row groups of kRowGroupThreads threads (a CTA of
// kWideThreads holds kWideThreads / kRowGroupThreads of them); group i of
// the grid's n takes rows i, i + n, …, skips a row whose mark (an input row
// or not) is not the one asked for (the whole group at once), and updates
// the others kUnroll · kRowGroupThreads elements at a time (all loads
// issued before the arithmetic; 16-byte accesses where the row's offset
// and the planes allow). Until 2026-12-01 the kernel walked the
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
                             int64_t fixed_step, bool aligned,
                             float* __restrict__ p, float* __restrict__ m,
                             float* __restrict__ v,
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
      Quad q = PassQuad(row0, C, j0, kRowGroupThreads, lane, aligned);
      q.Load(aligned, p, m, v, g);
      q.Update(s, /*decayed=*/true, aligned, p, m, v, p_bf16);
    }
  }
}

// True if the planes allow 16-byte accesses (8 for the bf16 copy) at
// element offsets that are multiples of 4.
bool PlanesAligned(const float* p, const float* m, const float* v,
                   const float* g, const __nv_bfloat16* p_bf16) {
  auto at = [](const void* x, uintptr_t n) {
    return (reinterpret_cast<uintptr_t>(x) % n) == 0;
  };
  return at(p, 16) && at(m, 16) && at(v, 16) && at(g, 16) && at(p_bf16, 8);
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
  const bool aligned = PlanesAligned(p, m, v, g, p_bf16);
  if (max_blocks > 0) {
    AdamWWideKernel<<<std::min(num_chunks, max_blocks), kWideThreads, 0,
                      stream>>>(chunks, num_chunks, scalars_table, step,
                                fixed_step, aligned, p, m, v, g, p_bf16);
  } else {
    AdamWKernel<<<num_chunks, kThreads, 0, stream>>>(
        chunks, num_chunks, scalars_table, step, fixed_step, aligned, p, m, v,
        g, p_bf16);
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
      inputs, T, V, C, touched, scalars_table, step, fixed_step,
      PlanesAligned(p, m, v, g, p_bf16), p, m, v, g, p_bf16);
  return cudaGetLastError();
}

cudaError_t CastToBf16(const float* in, int64_t n, __nv_bfloat16* out,
                       cudaStream_t stream) {
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  return LaunchKernel(CastKernel, blocks, threads, 0, stream, in, n, out);
}

}  // namespace coppelius
