// File: trainer/kernels/swiglu.h
//
// SwiGLU activation of the MLP (SPEC §4): down(silu(gate(h)) ⊙ up(h)).
// The gate and up products run as ONE product against the adjacent
// [gate; up] rows of the P plane, giving gu [T, 2·H] fp32 (H = hidden):
// columns [0, H) gate, [H, 2H) up.
//
//   forward:  a = silu(g) · u,  silu(g) = g · σ(g), σ(g) = 1 / (1 + exp(−g))
//             a [T, H] written rounded to bf16 (operand of the down product)
//   backward: given da [T, H] fp32 (= dY_down · W_down),
//             dg = da · u · σ(g) · (1 + g · (1 − σ(g)))
//             du = da · silu(g)
//             written rounded to bf16 as dgu [T, 2H] (same column layout),
//             the operand of the dX and dW products of gate/up.
#ifndef COPPELIUS_TRAINER_KERNELS_SWIGLU_H_
#define COPPELIUS_TRAINER_KERNELS_SWIGLU_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace coppelius {

cudaError_t SwigluForward(const float* gu, int T, int H, __nv_bfloat16* a,
                          cudaStream_t stream);

cudaError_t SwigluBackward(const float* gu, const float* da, int T, int H,
                           __nv_bfloat16* dgu, cudaStream_t stream);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_SWIGLU_H_
