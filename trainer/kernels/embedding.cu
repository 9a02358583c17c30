// File: trainer/kernels/embedding.cu (see embedding.h for the math).
#include "trainer/kernels/embedding.h"

namespace coppelius {
namespace {

__global__ void EmbeddingForwardKernel(const uint32_t* __restrict__ tokens,
                                       const float* __restrict__ embedding,
                                       int T, int C, float* __restrict__ x) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(T) * C) return;
  const int t = static_cast<int>(i / C);
  const int c = static_cast<int>(i % C);
  x[i] = embedding[static_cast<int64_t>(tokens[t]) * C + c];
}

// One block per position t; threads stride over the C columns.
__global__ void EmbeddingBackwardKernel(const uint32_t* __restrict__ tokens,
                                        const float* __restrict__ dx, int T,
                                        int C, float* __restrict__ dembedding) {
  extern __shared__ uint32_t shared_tokens[];
  for (int i = threadIdx.x; i < T; i += blockDim.x) {
    shared_tokens[i] = tokens[i];
  }
  __syncthreads();
  const int t = blockIdx.x;
  const uint32_t v = shared_tokens[t];
  for (int i = 0; i < t; ++i) {
    if (shared_tokens[i] == v) return;  // an earlier block owns this token
  }
  float* row = dembedding + static_cast<int64_t>(v) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float total = row[c];
    for (int u = t; u < T; ++u) {
      if (shared_tokens[u] == v) total += dx[static_cast<int64_t>(u) * C + c];
    }
    row[c] = total;
  }
}

}  // namespace

cudaError_t EmbeddingForward(const uint32_t* tokens, const float* embedding,
                             int T, int C, float* x, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(T) * C;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  EmbeddingForwardKernel<<<blocks, threads, 0, stream>>>(tokens, embedding, T,
                                                         C, x);
  return cudaGetLastError();
}

cudaError_t EmbeddingBackward(const uint32_t* tokens, const float* dx, int T,
                              int C, float* dembedding, cudaStream_t stream) {
  const int threads = C >= 256 ? 256 : ((C + 31) / 32) * 32;
  const size_t shared = static_cast<size_t>(T) * sizeof(uint32_t);
  EmbeddingBackwardKernel<<<T, threads, shared, stream>>>(tokens, dx, T, C,
                                                          dembedding);
  return cudaGetLastError();
}

}  // namespace coppelius
