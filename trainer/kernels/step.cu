// File: trainer/kernels/step.cu (see step.h).
#include "trainer/kernels/step.h"

#include "trainer/kernels/launch.cuh"

namespace coppelius {
namespace {

__global__ void StageKernel(const uint32_t* __restrict__ ids,
                            uint64_t num_tokens, const int64_t* step,
                            int64_t fixed_index, int T, int V,
                            uint32_t* __restrict__ inputs,
                            uint32_t* __restrict__ targets, int* invalid_flag) {
  GridDependencyWait();
  const int64_t index = step != nullptr ? *step : fixed_index;
  const uint64_t first = static_cast<uint64_t>(index) * T;
  const bool in_range = first + T < num_tokens;
  for (int t = threadIdx.x; t <= T; t += blockDim.x) {
    uint32_t id = in_range ? ids[first + t] : 0u;
    if (id >= static_cast<uint32_t>(V)) {
      *invalid_flag = 1;
      id = 0;
    }
    if (t < T) inputs[t] = id;
    if (t > 0) targets[t - 1] = id;
  }
  if (!in_range && threadIdx.x == 0) *invalid_flag = 2;
}

__global__ void CopyToRingKernel(const float* __restrict__ src, int n,
                                 const int64_t* step, int slots,
                                 float* __restrict__ ring) {
  GridDependencyWait();
  const int64_t slot = *step % slots;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n;
       j += gridDim.x * blockDim.x) {
    ring[slot * n + j] = src[j];
  }
}

__global__ void TimestampKernel(const int64_t* step, int slots, int which,
                                uint64_t* ring) {
  GridDependencyWait();
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  ring[(*step % slots) * 2 + which] = now;
}

__global__ void AdvanceKernel(int64_t* step) {
  GridDependencyWait();
  *step += 1;
}

}  // namespace

cudaError_t StageContext(const uint32_t* ids, uint64_t num_tokens,
                         const int64_t* step, int64_t fixed_index, int T,
                         int V, uint32_t* inputs, uint32_t* targets,
                         int* invalid_flag, cudaStream_t stream) {
  return LaunchKernel(StageKernel, 1, 1024, 0, stream, ids, num_tokens, step,
                      fixed_index, T, V, inputs, targets, invalid_flag);
}

cudaError_t CopyToRing(const float* src, int n, const int64_t* step, int slots,
                       float* ring, cudaStream_t stream) {
  return LaunchKernel(CopyToRingKernel, 4, 256, 0, stream, src, n, step, slots,
                      ring);
}

cudaError_t Timestamp(const int64_t* step, int slots, int which,
                      uint64_t* ring, cudaStream_t stream) {
  return LaunchKernel(TimestampKernel, 1, 1, 0, stream, step, slots, which,
                      ring);
}

cudaError_t AdvanceStep(int64_t* step, cudaStream_t stream) {
  return LaunchKernel(AdvanceKernel, 1, 1, 0, stream, step);
}

}  // namespace coppelius
