// File: trainer/kernels/rope.h
//
// Rotary position embedding, rotate-half pairing (SPEC §4), applied to the q
// and k parts of qkv. For head h, position (row) t and i < HS/2, with
// θ_i = base^(−2i/HS) and angle a = t · θ_i (table: cos/sin [T, HS/2] fp32,
// computed in double on the host by RopeTable and rounded):
//
//   q'[i]        = q[i] · cos a − q[i + HS/2] · sin a
//   q'[i + HS/2] = q[i + HS/2] · cos a + q[i] · sin a        (same for k)
//
// Backward is the inverse (transposed) rotation, applied by the attention
// backward kernels as they write dq and dk (attention.h):
//   dq[i]        =  dq'[i] · cos a + dq'[i + HS/2] · sin a
//   dq[i + HS/2] = −dq'[i] · sin a + dq'[i + HS/2] · cos a
//
// Layout: qkv [T, 3C] fp32 row-major, columns q (heads 0..NH−1, HS each),
// then k, then v (the qkv product's output). RopeForward reads fp32 and
// writes the whole [T, 3C] rounded to bf16 (v copied unrotated): the result
// only feeds the attention kernels.
// Requirements: HS a multiple of 8 (16-byte groups of 4 pairs), else
// cudaErrorInvalidValue; rows 16-byte aligned (C a multiple of 4).
#ifndef COPPELIUS_TRAINER_KERNELS_ROPE_H_
#define COPPELIUS_TRAINER_KERNELS_ROPE_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <vector>

namespace coppelius {

// Host: the [T, HS/2] cos table followed by the [T, HS/2] sin table.
std::vector<float> RopeTable(int T, int HS, double base);

// `table` is RopeTable's output on the device.
cudaError_t RopeForward(const float* qkv, const float* table, int T, int NH,
                        int HS, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_ROPE_H_
