// File: trainer/kernels/cross_entropy.cu (see cross_entropy.h for the math).
#include "trainer/kernels/cross_entropy.h"

#include <cstdint>

#include "trainer/kernels/launch.cuh"
#include "trainer/kernels/reduce.cuh"

namespace coppelius {
namespace {

using kernels::BlockMax;
using kernels::BlockSum;

constexpr int kThreads = 512;
constexpr int kSumUnroll = 8;

// One block per row. The max (exact, any order) and the elementwise
// gradient pass read the row 16 bytes per thread when kVec4 (V a multiple
// of 4: rows 16-byte aligned); the sum of exponentials keeps one order —
// thread i adds elements i, i + 512, i + 1024, … in turn, then BlockSum —
// with its loads issued kSumUnroll at a time, so the loss and gradient
// bits do not depend on kVec4.
template <bool kVec4>
__global__ void __launch_bounds__(kThreads)
    CrossEntropyKernel(const float* __restrict__ logits,
                       const uint32_t* __restrict__ targets, int V,
                       float grad_scale, float* __restrict__ losses,
                       __nv_bfloat16* __restrict__ dlogits) {
  GridDependencyWait();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* l = logits + row * V;
  float m = -INFINITY;
  if (kVec4) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
    for (int v = threadIdx.x; v < V / 4; v += kThreads) {
      const float4 x = l4[v];
      m = fmaxf(fmaxf(m, fmaxf(x.x, x.y)), fmaxf(x.z, x.w));
    }
  } else {
    for (int v = threadIdx.x; v < V; v += kThreads) m = fmaxf(m, l[v]);
  }
  m = BlockMax(m, scratch);
  float sum = 0.0f;
  int v = threadIdx.x;
  for (; v + (kSumUnroll - 1) * kThreads < V; v += kSumUnroll * kThreads) {
    float x[kSumUnroll];
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u) x[u] = l[v + u * kThreads];
#pragma unroll
    for (int u = 0; u < kSumUnroll; ++u) sum += expf(x[u] - m);
  }
  for (; v < V; v += kThreads) sum += expf(l[v] - m);
  sum = BlockSum(sum, scratch);
  const float lse = m + logf(sum);
  const uint32_t target = targets[row];
  if (threadIdx.x == 0) losses[row] = lse - l[target];
  if (dlogits == nullptr) return;
  __nv_bfloat16* d = dlogits + row * V;
  auto grad = [&](int i, float x) {
    const float p = expf(x - lse);
    return __float2bfloat16_rn(
        (p - (static_cast<uint32_t>(i) == target ? 1.0f : 0.0f)) * grad_scale);
  };
  if (kVec4) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
    for (int i = threadIdx.x; i < V / 4; i += kThreads) {
      const float4 x = l4[i];
      __nv_bfloat162 lo, hi;
      lo.x = grad(4 * i, x.x);
      lo.y = grad(4 * i + 1, x.y);
      hi.x = grad(4 * i + 2, x.z);
      hi.y = grad(4 * i + 3, x.w);
      uint2 packed;
      packed.x = *reinterpret_cast<const uint32_t*>(&lo);
      packed.y = *reinterpret_cast<const uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(d + 4 * i) = packed;
    }
  } else {
    for (int i = threadIdx.x; i < V; i += kThreads) d[i] = grad(i, l[i]);
  }
}

// One block per row, the row held in registers: thread i loads elements
// i + 512·j (j < kPerThread = V / 512, all loads issued at once, so the row
// is read from memory once instead of three times), then the max, the sum
// of exponentials in the streaming kernel's order (j ascending: elements i,
// i + 512, … as its kSumUnroll loop adds them) and the gradient from the
// registers: the same bits as CrossEntropyKernel.
template <int kPerThread>
__global__ void __launch_bounds__(kThreads)
    CrossEntropyRowInRegistersKernel(const float* __restrict__ logits,
                                     const uint32_t* __restrict__ targets,
                                     float grad_scale,
                                     float* __restrict__ losses,
                                     __nv_bfloat16* __restrict__ dlogits) {
  GridDependencyWait();
  __shared__ float scratch[32];
  constexpr int V = kPerThread * kThreads;
  const int64_t row = blockIdx.x;
  const float* l = logits + row * V;
  float x[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) x[j] = l[threadIdx.x + j * kThreads];
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) m = fmaxf(m, x[j]);
  m = BlockMax(m, scratch);
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) sum += expf(x[j] - m);
  sum = BlockSum(sum, scratch);
  const float lse = m + logf(sum);
  const uint32_t target = targets[row];
  if (threadIdx.x == 0) losses[row] = lse - l[target];
  if (dlogits == nullptr) return;
  __nv_bfloat16* d = dlogits + row * V;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    const float p = expf(x[j] - lse);
    d[i] = __float2bfloat16_rn(
        (p - (static_cast<uint32_t>(i) == target ? 1.0f : 0.0f)) * grad_scale);
  }
}

}  // namespace

cudaError_t CrossEntropyForwardBackward(const float* logits,
                                        const uint32_t* targets, int T, int V,
                                        float grad_scale, float* losses,
                                        __nv_bfloat16* dlogits,
                                        cudaStream_t stream) {
  const bool vec4 = V % 4 == 0 &&
                    (reinterpret_cast<uintptr_t>(logits) & 15u) == 0 &&
                    (dlogits == nullptr ||
                     (reinterpret_cast<uintptr_t>(dlogits) & 7u) == 0);
  if (vec4 && V == 24 * kThreads) {
    return LaunchKernel(CrossEntropyRowInRegistersKernel<24>, T, kThreads, 0,
                        stream, logits, targets, grad_scale, losses, dlogits);
  }
  if (vec4 && V == 8 * kThreads) {
    return LaunchKernel(CrossEntropyRowInRegistersKernel<8>, T, kThreads, 0,
                        stream, logits, targets, grad_scale, losses, dlogits);
  }
  if (vec4) {
    return LaunchKernel(CrossEntropyKernel<true>, T, kThreads, 0, stream,
                        logits, targets, V, grad_scale, losses, dlogits);
  }
  return LaunchKernel(CrossEntropyKernel<false>, T, kThreads, 0, stream,
                      logits, targets, V, grad_scale, losses, dlogits);
}

}  // namespace coppelius
