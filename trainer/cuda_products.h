// File: trainer/cuda_products.h
//
// The matrix products of one CudaBackend step (trainer/cuda_backend.cc) as
// cuBLASLt shapes (trainer/kernels/matmul.h), so that the backend and its
// benchmark (trainer/kernels/step_bench.cc) plan the very same products,
// with the same pinned heuristic candidates.
//
// Row-major, bf16 operands, fp32 result unless noted; T rows (the
// context), C width, H SwiGLU hidden width, V vocabulary. A linear layer
// y = x · Wᵀ with W [out, in] (the P plane's layout) takes three products:
//   forward  D[T, out]  = x[T, in] · W[out, in]ᵀ   (+ C = the residual,
//                                                    beta 1, where it has one)
//   dX       D[T, in]   = dY[T, out] · W[out, in]
//   dW       D[out, in] = dY[T, out]ᵀ · x[T, in]
// for qkv (out 3C, in C), the attention output (C, C, with the residual),
// gate|up (2H, C), down (C, H, with the residual) and the tied logits
// (V, C): 15 products, about 6 · T · (matrix parameters) FLOP.
#ifndef COPPELIUS_TRAINER_CUDA_PRODUCTS_H_
#define COPPELIUS_TRAINER_CUDA_PRODUCTS_H_

#include <cstddef>
#include <vector>

#include "trainer/kernels/matmul.h"
#include "trainer/model_config.h"

namespace coppelius {

enum CudaProduct : int {
  kQkvForward,
  kOutputForward,
  kGateUpForward,
  kDownForward,
  kLogitsForward,
  kLogitsDx,
  kLogitsDw,
  kDownDx,
  kDownDw,
  kGateUpDx,
  kGateUpDw,
  kOutputDx,  // bf16 result (d_bf16): it only feeds the attention backward
  kOutputDw,
  kQkvDx,
  kQkvDw,
  kNumCudaProducts
};

// The workspace each product's plan is made for and run with (the backend
// has one for the main stream and one for the side stream).
inline constexpr size_t kCudaProductWorkspaceBytes = size_t{32} << 20;

// The shapes, indexed by CudaProduct. Some use a heuristic candidate other
// than the first (MatmulShape::algo_index), measured faster by step_bench
// on the H200 (2026-11-30, cuBLAS 13): logits forward #3 and logits dW #2
// (docs/PERFORMANCE.md run 5) and, at the coppelius shapes only, qkv
// forward #6 and gate|up forward #4 (run 7, timed inside a CUDA graph);
// and, at the coppelius shapes, the output, gate|up and down forward
// products name a cuBLASLt configuration outright (MatmulShape::
// algo_config, found by matmul_search; run 28).
std::vector<MatmulShape> CudaProductShapes(const ModelConfig& config);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_CUDA_PRODUCTS_H_
