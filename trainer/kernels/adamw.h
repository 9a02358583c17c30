// File: trainer/kernels/adamw.h
//
// AdamW update on flat planes (SPEC §4), mirroring trainer/adamw.h's exact
// fp32 operation order bitwise (single IEEE operations, round to nearest,
// no FMA: __fmul_rn / __fadd_rn / __fsqrt_rn / __fdiv_rn, and for the
// division by bias_correction2_sqrt divide.h's three fused operations, which
// give the same correctly rounded quotient):
//
//   if decayed: p = p * decay_factor
//   m = (beta1 * m) + (one_minus_beta1 * g)
//   v = (beta2 * v) + (one_minus_beta2 * (g * g))
//   denom = (sqrt(v) / bias_correction2_sqrt) + epsilon
//   p = p − (step_size * (m / denom))
//
// The per-update scalars are computed on the host by trainer/adamw.h's
// ComputeAdamWStepScalars for every update of the run and uploaded as a table
// indexed by the step; the kernel reads entry `*step` (a device counter, so
// one captured graph serves every step) or `fixed_step` when `step` is null.
//
// Planes: P, M, V, G fp32 [num_parameters] (the P plane's layout); work is a
// list of chunks {begin, count ≤ kAdamWChunk, decayed} covering the plane
// tensor by tensor (decay mask per tensor: the 2-D tensors). For decayed
// chunks the updated p is also written rounded to bf16 into `p_bf16` (same
// index): the operand copy of the weight matrices. Grid: one block of 256
// threads per chunk (max_blocks = 0: the whole device, for updates nothing
// else runs beside), or max_blocks blocks of 1,024 threads (each a whole
// chunk per pass, taking chunks b, b + max_blocks, …): an update beside
// other kernels then holds at most max_blocks SMs. Where the planes are
// 16-byte aligned (p_bf16 8-byte) and a chunk (or embedding row) starts at
// a multiple of 4 elements, a thread reads and writes 4 neighbouring
// elements with one 16-byte access per plane; elsewhere element by element.
// The bits do not depend on the grid or on the accesses.
#ifndef COPPELIUS_TRAINER_KERNELS_ADAMW_H_
#define COPPELIUS_TRAINER_KERNELS_ADAMW_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace coppelius {

constexpr int kAdamWChunk = 4096;

// trainer/adamw.h's AdamWStepScalars (the same fields in the same order),
// then RN(1 / bias_correction2_sqrt) for divide.h: set it with
// SetAdamWDivisorReciprocal.
struct AdamWDeviceScalars {
  float decay_factor;
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float step_size;
  float bias_correction2_sqrt;
  float epsilon;
  float inv_bias_correction2_sqrt;
};

// Sets s->inv_bias_correction2_sqrt = RN(1 / s->bias_correction2_sqrt) (the
// host's IEEE fp32 division).
inline void SetAdamWDivisorReciprocal(AdamWDeviceScalars* s) {
  s->inv_bias_correction2_sqrt = 1.0f / s->bias_correction2_sqrt;
}

struct AdamWChunk {
  int64_t begin;
  int32_t count;
  int32_t decayed;
};

// Updates chunks [0, num_chunks) on `stream` (nothing when num_chunks ≤ 0)
// with the grid `max_blocks` selects (above); returns the launch's error.
cudaError_t AdamWUpdateChunks(const AdamWChunk* chunks, int num_chunks,
                              const AdamWDeviceScalars* scalars_table,
                              const int64_t* step, int64_t fixed_step,
                              float* p, float* m, float* v, const float* g,
                              __nv_bfloat16* p_bf16, cudaStream_t stream,
                              int max_blocks = 0);

// The update of the tied embedding [V, C] (decayed, at the plane's
// offsets p, m, v, g, p_bf16 point to) split by rows: `touched` = false
// updates the rows no input token of the context names (no id among
// inputs[0 .. T) equals the row), whose gradient is final once the logits
// dW product has written it (SPEC §4's tying: only the input rows receive
// the embedding backward's scatter); `touched` = true updates the others,
// after that scatter. The two calls together give the bits
// AdamWUpdateChunks gives for the whole table. Grid: `blocks` CTAs of
// 1,024 threads, each CTA eight groups of 128 threads, group i of the
// grid's n = 8 · blocks taking rows i, i + n, … (a whole row each, 4
// elements per thread in flight; at most ⌈V / 8⌉ CTAs are launched, one
// group per row); each CTA first marks the input rows in a shared-memory
// bitmap (4 · ⌈V / 32⌉ bytes; an id ≥ V names no row and is ignored).
// Requirements: V, C, T ≥ 1, blocks ≥ 1 and V ≤ 393,216 (the bitmap within
// 48 KB), else cudaErrorInvalidValue; otherwise the launch's error.
cudaError_t AdamWEmbeddingRows(const uint32_t* inputs, int T, int V, int C,
                               bool touched,
                               const AdamWDeviceScalars* scalars_table,
                               const int64_t* step, int64_t fixed_step,
                               float* p, float* m, float* v, const float* g,
                               __nv_bfloat16* p_bf16, int blocks,
                               cudaStream_t stream);

// out[i] = bf16(in[i]) for i < n.
cudaError_t CastToBf16(const float* in, int64_t n, __nv_bfloat16* out,
                       cudaStream_t stream);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_ADAMW_H_
