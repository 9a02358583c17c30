// File: trainer/kernels/cross_entropy.cu (see cross_entropy.h for the math).
#include "trainer/kernels/cross_entropy.h"
#include "trainer/kernels/launch.cuh"
#include "trainer/kernels/reduce.cuh"

namespace coppelius {
namespace {

using kernels::BlockMax;
using kernels::BlockSum;

constexpr int kThreads = 512;

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
  for (int v = threadIdx.x; v < V; v += kThreads) m = fmaxf(m, l[v]);
  m = BlockMax(m, scratch);
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += kThreads) sum += expf(l[v] - m);
  sum = BlockSum(sum, scratch);
  const float lse = m + logf(sum);
  const uint32_t target = targets[row];
  if (threadIdx.x == 0) losses[row] = lse - l[target];
  if (dlogits == nullptr) return;
  __nv_bfloat16* d = dlogits + row * V;
  for (int v = threadIdx.x; v < V; v += kThreads) {
    const float p = expf(l[v] - lse);
    const float g = (p - (static_cast<uint32_t>(v) == target ? 1.0f : 0.0f)) *
                    grad_scale;
    d[v] = __float2bfloat16_rn(g);
  }
}

}  // namespace

cudaError_t CrossEntropyForwardBackward(const float* logits,
                                        const uint32_t* targets, int T, int V,
                                        float grad_scale, float* losses,
                                        __nv_bfloat16* dlogits,
                                        cudaStream_t stream) {
  return LaunchKernel(CrossEntropyKernel, T, kThreads, 0, stream, logits,
                      targets, V, grad_scale, losses, dlogits);
}

}  // namespace coppelius
