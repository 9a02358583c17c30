// File: trainer/kernels/embedding.h
//
// Token embedding (tied with the output projection, SPEC §4).
//
// Forward:  x[t, c] = embedding[tokens[t], c]          x [T, C] fp32
// Backward: dembedding[v, c] += Σ_{t : tokens[t] = v} dx[t, c]
//
// Shapes: T rows (context), C width, V vocabulary; embedding [V, C] fp32
// row-major; tokens [T] u32, already checked to be < V (see step.h).
// The backward ADDS to dembedding, which already holds the tied logits
// product's contribution (dlogitsᵀ · xf). It is deterministic without
// atomics: one block per position t; the block whose t is the first
// occurrence of its token adds that token's rows in increasing t, in the
// reference backend's fp32 order: ((dE[v] + dx[t1]) + dx[t2]) + ..., t1 < t2.
#ifndef COPPELIUS_TRAINER_KERNELS_EMBEDDING_H_
#define COPPELIUS_TRAINER_KERNELS_EMBEDDING_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace coppelius {

// T, C ≥ 1, else cudaErrorInvalidValue; otherwise the launch's error.
cudaError_t EmbeddingForward(const uint32_t* tokens, const float* embedding,
                             int T, int C, float* x, cudaStream_t stream);

cudaError_t EmbeddingBackward(const uint32_t* tokens, const float* dx, int T,
                              int C, float* dembedding, cudaStream_t stream);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_EMBEDDING_H_
