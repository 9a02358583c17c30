// File: trainer/kernels/cross_entropy.cu (see cross_entropy.h for the math).
#include "trainer/kernels/cross_entropy.h"
#include "trainer/kernels/launch.cuh"
#include "trainer/kernels/reduce.cuh"

namespace coppelius {
namespace {

using kernels::BlockMax;
using kernels::BlockSum;

constexpr int kThreads = 512;

// One block per row. kPerThread > 0: the row (V ≤ kPerThread · kThreads)
// is read once into registers, element v = threadIdx.x + i · kThreads in
// x[i]; kPerThread = 0: any V, the row is read in each of the three passes.
// Both visit a thread's elements in the same order, so they give the same
// bits.
template <int kPerThread>
__global__ void __launch_bounds__(kThreads)
    CrossEntropyKernel(const float* __restrict__ logits,
                       const uint32_t* __restrict__ targets, int V,
                       float grad_scale, float* __restrict__ losses,
                       __nv_bfloat16* __restrict__ dlogits) {
  GridDependencyWait();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* l = logits + row * V;
  constexpr int kHeld = kPerThread > 0 ? kPerThread : 1;
  float x[kHeld];
  float m = -INFINITY;
  if constexpr (kPerThread > 0) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int v = threadIdx.x + i * kThreads;
      x[i] = v < V ? l[v] : -INFINITY;
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) m = fmaxf(m, x[i]);
  } else {
    for (int v = threadIdx.x; v < V; v += kThreads) m = fmaxf(m, l[v]);
  }
  m = BlockMax(m, scratch);
  float sum = 0.0f;
  if constexpr (kPerThread > 0) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      if (threadIdx.x + i * kThreads < V) sum += expf(x[i] - m);
    }
  } else {
    for (int v = threadIdx.x; v < V; v += kThreads) sum += expf(l[v] - m);
  }
  sum = BlockSum(sum, scratch);
  const float lse = m + logf(sum);
  const uint32_t target = targets[row];
  if (threadIdx.x == 0) losses[row] = lse - l[target];
  if (dlogits == nullptr) return;
  __nv_bfloat16* d = dlogits + row * V;
  auto grad = [&](int v, float logit) {
    const float p = expf(logit - lse);
    const float g = (p - (static_cast<uint32_t>(v) == target ? 1.0f : 0.0f)) *
                    grad_scale;
    d[v] = __float2bfloat16_rn(g);
  };
  if constexpr (kPerThread > 0) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int v = threadIdx.x + i * kThreads;
      if (v < V) grad(v, x[i]);
    }
  } else {
    for (int v = threadIdx.x; v < V; v += kThreads) grad(v, l[v]);
  }
}

template <int kPerThread>
cudaError_t Launch(const float* logits, const uint32_t* targets, int T, int V,
                   float grad_scale, float* losses, __nv_bfloat16* dlogits,
                   cudaStream_t stream) {
  return LaunchKernel(CrossEntropyKernel<kPerThread>, T, kThreads, 0, stream,
                      logits, targets, V, grad_scale, losses, dlogits);
}

}  // namespace

cudaError_t CrossEntropyForwardBackward(const float* logits,
                                        const uint32_t* targets, int T, int V,
                                        float grad_scale, float* losses,
                                        __nv_bfloat16* dlogits,
                                        cudaStream_t stream) {
  // Registers for rows up to 24 · 512 = 12,288 (the coppelius vocabulary).
  if (V <= kThreads) {
    return Launch<1>(logits, targets, T, V, grad_scale, losses, dlogits,
                     stream);
  }
  if (V <= 8 * kThreads) {
    return Launch<8>(logits, targets, T, V, grad_scale, losses, dlogits,
                     stream);
  }
  if (V <= 24 * kThreads) {
    return Launch<24>(logits, targets, T, V, grad_scale, losses, dlogits,
                      stream);
  }
  return Launch<0>(logits, targets, T, V, grad_scale, losses, dlogits, stream);
}

}  // namespace coppelius
