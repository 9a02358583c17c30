// File: trainer/kernels/layernorm.h
//
// LayerNorm over the last dimension, fp32 statistics (SPEC §4):
//
//   mean[t] = Σ_c x[t,c] / C
//   rstd[t] = 1 / sqrt(Σ_c (x[t,c] − mean[t])² / C + eps)
//   xhat    = (x − mean) · rstd
//   y[t,c]  = xhat[t,c] · weight[c] + bias[c]
//
// Shapes: x, y, dy, dx [T, C] row-major fp32; weight, bias [C]; mean, rstd
// [T]. Forward writes y rounded to bf16 (it only feeds matrix products) and,
// if `y_f32` is not null, also in fp32.
//
// Backward, with g = dy · weight:
//   dx[t,c]   = rstd · (g − mean_c(g) − xhat · mean_c(g · xhat))
//   dweight[c] = Σ_t dy · xhat,   dbias[c] = Σ_t dy
// dx is ADDED to the residual gradient `dresid` (or stored, when
// `accumulate` is false), and the result is also written rounded to bf16
// (`dresid_bf16`, the operand of the next product backward). dweight/dbias
// use fixed-order partials: block b sums rows [b·R, b·R + R) (R =
// kLayerNormBackwardRows) in row order into partials[b][2][C]; a second
// kernel sums the blocks in order. No atomics. One warp per row; for
// C = 128·k (k ≤ 8, e.g. C = 512) a lane keeps its 4k elements of the row in
// registers (16-byte loads), otherwise it loops over the row.
#ifndef COPPELIUS_TRAINER_KERNELS_LAYERNORM_H_
#define COPPELIUS_TRAINER_KERNELS_LAYERNORM_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace coppelius {

constexpr int kLayerNormBackwardRows = 8;

// Floats of scratch LayerNormBackward needs for `T` rows of width `C`.
inline size_t LayerNormBackwardScratchFloats(int T, int C) {
  return static_cast<size_t>((T + kLayerNormBackwardRows - 1) /
                             kLayerNormBackwardRows) *
         2 * C;
}

cudaError_t LayerNormForward(const float* x, const float* weight,
                             const float* bias, int T, int C, float eps,
                             __nv_bfloat16* y_bf16, float* y_f32, float* mean,
                             float* rstd, cudaStream_t stream);

// The two halves of LayerNormBackward, for callers that run the (off the
// critical path) parameter reduction on another stream: Rows writes dresid,
// dresid_bf16 and the partials in `scratch`; Reduce sums the partials into
// dweight/dbias. Reduce must run after Rows and before the next Rows that
// reuses `scratch`.
cudaError_t LayerNormBackwardRows(const float* dy, const float* x,
                                  const float* weight, const float* mean,
                                  const float* rstd, int T, int C,
                                  bool accumulate, float* dresid,
                                  __nv_bfloat16* dresid_bf16, float* scratch,
                                  cudaStream_t stream);
cudaError_t LayerNormBackwardReduce(const float* scratch, int T, int C,
                                    float* dweight, float* dbias,
                                    cudaStream_t stream);

// Writes dweight[C] and dbias[C] (overwritten, not accumulated).
cudaError_t LayerNormBackward(const float* dy, const float* x,
                              const float* weight, const float* mean,
                              const float* rstd, int T, int C, bool accumulate,
                              float* dresid, __nv_bfloat16* dresid_bf16,
                              float* scratch, float* dweight, float* dbias,
                              cudaStream_t stream);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_LAYERNORM_H_
