// File: trainer/kernels/embedding.cu (see embedding.h for the math).
#include "trainer/kernels/embedding.h"
#include "trainer/kernels/launch.cuh"

namespace coppelius {
namespace {

// One CTA per position t copies row tokens[t] of the table into row t of
// x, 16 bytes per thread and step where C % 4 == 0 and both pointers are
// 16-byte aligned (kVec), else 4. (Until 2026-12-01 a thread per element,
// each dividing its 64-bit index by C: 4.1 µs at the coppelius size on the
// H200, docs/PERFORMANCE.md run 22.)
constexpr int kForwardThreads = 128;

template <bool kVec>
__global__ void __launch_bounds__(kForwardThreads)
    EmbeddingForwardKernel(const uint32_t* __restrict__ tokens,
                           const float* __restrict__ embedding, int C,
                           float* __restrict__ x) {
  GridDependencyWait();
  const int64_t t = blockIdx.x;
  const float* src = embedding + static_cast<int64_t>(tokens[t]) * C;
  float* dst = x + t * C;
  if constexpr (kVec) {
    const float4* src4 = reinterpret_cast<const float4*>(src);
    float4* dst4 = reinterpret_cast<float4*>(dst);
    for (int j = threadIdx.x; j < C / 4; j += kForwardThreads) {
      dst4[j] = src4[j];
    }
  } else {
    for (int c = threadIdx.x; c < C; c += kForwardThreads) dst[c] = src[c];
  }
}

constexpr int kBackwardThreads = 256;

// One block per position t. The block finds, in parallel, whether an earlier
// position holds the same id (then another block owns it) and the ordered
// list of later positions that do (ballot + prefix counts, chunk by chunk);
// then each thread adds those rows to its columns in increasing t.
// Shared memory: tokens [T] and the list [T].
__global__ void __launch_bounds__(kBackwardThreads)
    EmbeddingBackwardKernel(const uint32_t* __restrict__ tokens,
                            const float* __restrict__ dx, int T, int C,
                            float* __restrict__ dembedding) {
  GridDependencyWait();
  extern __shared__ uint32_t shared[];
  uint32_t* shared_tokens = shared;
  uint32_t* list = shared + T;
  __shared__ int warp_counts[kBackwardThreads / 32];
  __shared__ int total;
  __shared__ int earlier;
  for (int i = threadIdx.x; i < T; i += blockDim.x) {
    shared_tokens[i] = tokens[i];
  }
  if (threadIdx.x == 0) {
    total = 0;
    earlier = 0;
  }
  __syncthreads();
  const int t = blockIdx.x;
  const uint32_t v = shared_tokens[t];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int base = 0; base < T; base += kBackwardThreads) {
    const int u = base + threadIdx.x;
    const bool match = u < T && shared_tokens[u] == v;
    if (match && u < t) earlier = 1;
    const unsigned ballot = __ballot_sync(0xffffffffu, match && u >= t);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    if (match && u >= t) {
      int offset = total;
      for (int w = 0; w < warp; ++w) offset += warp_counts[w];
      offset += __popc(ballot & ((1u << lane) - 1u));
      list[offset] = static_cast<uint32_t>(u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 0; w < kBackwardThreads / 32; ++w) total += warp_counts[w];
    }
    __syncthreads();
  }
  if (earlier) return;  // uniform across the block
  const int count = total;
  float* row = dembedding + static_cast<int64_t>(v) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = row[c];
    for (int i = 0; i < count; ++i) {
      acc += dx[static_cast<int64_t>(list[i]) * C + c];
    }
    row[c] = acc;
  }
}

}  // namespace

cudaError_t EmbeddingForward(const uint32_t* tokens, const float* embedding,
                             int T, int C, float* x, cudaStream_t stream) {
  if (T < 1 || C < 1) return cudaErrorInvalidValue;
  const bool vec = C % 4 == 0 &&
                   (reinterpret_cast<uintptr_t>(embedding) & 15u) == 0 &&
                   (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
  return vec ? LaunchKernel(EmbeddingForwardKernel<true>, T, kForwardThreads,
                            0, stream, tokens, embedding, C, x)
             : LaunchKernel(EmbeddingForwardKernel<false>, T, kForwardThreads,
                            0, stream, tokens, embedding, C, x);
}

cudaError_t EmbeddingBackward(const uint32_t* tokens, const float* dx, int T,
                              int C, float* dembedding, cudaStream_t stream) {
  const size_t shared = 2 * static_cast<size_t>(T) * sizeof(uint32_t);
  if (shared > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(
        EmbeddingBackwardKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(shared));
    if (e != cudaSuccess) return e;
  }
  return LaunchKernel(EmbeddingBackwardKernel, T, kBackwardThreads, shared,
                      stream, tokens, dx, T, C, dembedding);
}

}  // namespace coppelius
