// File: trainer/kernels/attention.h
//
// Causal softmax attention, first version: the products run as cuBLASLt
// strided-batched bf16 products (matmul.h, one batch entry per head; the
// backend owns the plans) around these two fp32 softmax kernels.
//
// Per head h (NH heads, HS head size, T rows; q, k, v [T, HS] bf16 slices of
// the rotated qkv [T, 3C], column h·HS of each part):
//   S = scale · q · kᵀ              [T, T] fp32, scale = 1/sqrt(HS) (product)
//   P[t, j] = exp(S[t,j] − max) / Σ_{j' ≤ t} exp(S[t,j'] − max) for j ≤ t,
//             0 for j > t                                  (this file)
//   y = P · v                       [T, HS] fp32 → bf16 into y [T, C]
// Backward, given dy [T, HS] (slice of the bf16 dY [T, C]):
//   dP = dy · vᵀ;  dv = Pᵀ · dy                             (products)
//   dS[t,j] = P[t,j] · (dP[t,j] − Σ_j' P[t,j'] dP[t,j'])    (this file)
//   dq = scale · dS · k;  dk = scale · dSᵀ · q              (products)
//
// Layout: scores / probabilities [NH, T, T] row-major fp32 (head-major);
// the forward kernel works in place (S in, P out) and also writes P rounded
// to bf16 (the operand of P · v and Pᵀ · dy). The backward kernel reads P
// and dP fp32 and writes dS rounded to bf16. Only the causal part (j ≤ t) is
// read or written: above the diagonal the fp32 buffer keeps S, and the bf16
// outputs must hold zeros there — the CALLER zeroes those buffers once (the
// kernels never write there), so the full products need no mask.
// Reductions: one warp per row, fixed butterfly order (deterministic).
#ifndef COPPELIUS_TRAINER_KERNELS_ATTENTION_H_
#define COPPELIUS_TRAINER_KERNELS_ATTENTION_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace coppelius {

// rows = NH · T (every head's rows, head-major), each of length T.
cudaError_t CausalSoftmaxForward(float* scores_to_probs, int NH, int T,
                                 __nv_bfloat16* probs_bf16,
                                 cudaStream_t stream);

cudaError_t CausalSoftmaxBackward(const float* probs, const float* dprobs,
                                  int NH, int T, __nv_bfloat16* dscores_bf16,
                                  cudaStream_t stream);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_ATTENTION_H_
