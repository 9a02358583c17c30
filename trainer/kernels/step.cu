// File: trainer/kernels/step.cu (see step.h).
#include "trainer/kernels/step.h"

#include <algorithm>

#include "trainer/kernels/launch.cuh"

namespace coppelius {
namespace {

__device__ __forceinline__ uint64_t GlobalTimer() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

__global__ void StageKernel(const uint32_t* __restrict__ ids,
                            uint64_t num_tokens, const int64_t* step,
                            int64_t fixed_index, int T, int V,
                            uint32_t* __restrict__ inputs,
                            uint32_t* __restrict__ targets, int* invalid_flag,
                            uint64_t* start_ring, int slots) {
  GridDependencyWait();
  const int64_t index = step != nullptr ? *step : fixed_index;
  if (start_ring != nullptr && threadIdx.x == 0) {
    start_ring[(index % slots) * 2] = GlobalTimer();
  }
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

__global__ void TimestampKernel(const int64_t* step, int slots, int which,
                                uint64_t* ring) {
  GridDependencyWait();
  ring[(*step % slots) * 2 + which] = GlobalTimer();
}

// One CTA: every thread reads the step before thread 0 advances it.
__global__ void FinishStepKernel(const float* __restrict__ losses, int n,
                                 int64_t* step, int slots,
                                 float* __restrict__ loss_ring,
                                 uint64_t* time_ring) {
  GridDependencyWait();
  const int64_t s = *step;
  const int64_t slot = s % slots;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    loss_ring[slot * n + j] = losses[j];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    time_ring[slot * 2 + 1] = GlobalTimer();
    *step = s + 1;
  }
}

// Element i of `height` rows of `width` elements of `element_size` bytes,
// rows `pitch` bytes apart, ← value (grid-stride).
__global__ void MemsetKernel(unsigned char* dst, size_t pitch, unsigned value,
                             unsigned element_size, size_t width,
                             size_t height) {
  const size_t n = width * height;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned char* p = dst + (i / width) * pitch + (i % width) * element_size;
    if (element_size == 1) {
      *p = static_cast<unsigned char>(value);
    } else if (element_size == 2) {
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(value);
    } else {
      *reinterpret_cast<uint32_t*>(p) = value;
    }
  }
}

}  // namespace

cudaError_t StageContext(const uint32_t* ids, uint64_t num_tokens,
                         const int64_t* step, int64_t fixed_index, int T,
                         int V, uint32_t* inputs, uint32_t* targets,
                         int* invalid_flag, cudaStream_t stream,
                         uint64_t* start_ring, int slots) {
  if (start_ring != nullptr && slots < 1) return cudaErrorInvalidValue;
  return LaunchKernel(StageKernel, 1, 1024, 0, stream, ids, num_tokens, step,
                      fixed_index, T, V, inputs, targets, invalid_flag,
                      start_ring, slots);
}

cudaError_t Timestamp(const int64_t* step, int slots, int which,
                      uint64_t* ring, cudaStream_t stream) {
  return LaunchKernel(TimestampKernel, 1, 1, 0, stream, step, slots, which,
                      ring);
}

cudaError_t FinishStep(const float* losses, int n, int64_t* step, int slots,
                       float* loss_ring, uint64_t* time_ring,
                       cudaStream_t stream) {
  if (n < 0 || slots < 1) return cudaErrorInvalidValue;
  return LaunchKernel(FinishStepKernel, 1, 1024, 0, stream, losses, n, step,
                      slots, loss_ring, time_ring);
}

cudaError_t AddMemsetKernelNode(cudaGraph_t graph,
                                const cudaMemsetParams& memset,
                                cudaGraphNode_t* node) {
  unsigned char* dst = static_cast<unsigned char*>(memset.dst);
  size_t pitch = memset.pitch;
  unsigned value = memset.value;
  unsigned element_size = memset.elementSize;
  size_t width = memset.width;
  size_t height = memset.height;
  if (element_size != 1 && element_size != 2 && element_size != 4) {
    return cudaErrorInvalidValue;
  }
  const size_t n = width * height;
  const unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>(
      std::min<size_t>(std::max<size_t>((n + threads - 1) / threads, 1), 1024));
  void* args[] = {&dst, &pitch, &value, &element_size, &width, &height};
  cudaKernelNodeParams params = {};
  params.func = reinterpret_cast<void*>(MemsetKernel);
  params.gridDim = dim3(blocks);
  params.blockDim = dim3(threads);
  params.sharedMemBytes = 0;
  params.kernelParams = args;
  params.extra = nullptr;
  return cudaGraphAddKernelNode(node, graph, nullptr, 0, &params);
}

}  // namespace coppelius
