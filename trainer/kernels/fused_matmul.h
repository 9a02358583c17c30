// File: trainer/kernels/fused_matmul.h
//
// Block products with their elementwise neighbour in the epilogue, so that
// the neighbour's kernel (and the product's fp32 output, where nothing
// else reads it) leaves the step's chain. The two forward ones multiply
// activations h [T, C] bf16 (row-major) by a weight W [N, C] bf16
// (row-major, the SPEC's [out, in]: y = h · Wᵀ) with fp32 accumulation.
//
// QkvRopeMatmul (N = 3C, HS = 64): qkv = h · W_qkvᵀ, then RoPE (rope.h:
// rotate-half pairs (i, i + 32) of each q and k head, angles from
// `rope_table`, RopeTable's layout) in fp32, the whole [T, 3C] rounded to
// bf16 into `qkv16` (v unrotated): what RopeForward writes from the unfused
// product's fp32 output.
//
// GateUpSwigluMatmul (N = 2H, W = the adjacent [gate; up] rows): gu =
// h · Wᵀ in fp32 [T, 2H] (the SwiGLU backward reads it), and a = silu(g) · u
// rounded to bf16 [T, H] (swiglu.h's formula): what SwigluForward writes
// from gu.
//
// DownDxSwigluBackwardMatmul (backward): da = dy · W_down (dy [T, C] the
// gradient at the down product's output, bf16; W_down [C, H] bf16, the
// SPEC's [out, in], read N-major) in fp32, then SwiGLU's backward with g, u
// from the forward's gu [T, 2H] fp32 (swiglu.h): dgu [T, 2H] bf16 =
// (da·u·σ(g)·(1 + g·(1 − σ(g))), da·g·σ(g)): what SwigluBackward writes from
// the unfused product's fp32 da. The tile's g and u are asked into L2 while
// the products run.
//
// OutputDxDeltaMatmul (backward, HS = 64): dy = dresid · W_output
// (dresid [T, C] the gradient at the attention output product's output,
// bf16; W_output [C, C] bf16, [out, in], read N-major) rounded to bf16
// into dy [T, C] (what the cuBLASLt product writes), and the attention
// backward's D[h][t] = Σ_d dy[t, h·64 + d] · y[t, h·64 + d] into delta
// [NH, T] (attention.h's AttentionDelta), from the rounded dy and the
// stored y in AttentionBackwardDelta's order: the same bits, so that kernel
// leaves the chain.
//
// Kernel (Hopper, sm_90a): a CTA computes a tile of BM = 64 · WG rows × BN
// columns. One producer thread loads K slices of 64 columns of both
// operands with the Tensor Memory Accelerator (cp.async.bulk.tensor,
// 128-byte swizzle) into a ring of `stages` shared-memory buffers — the
// activations K-major; W K-major for the forward products (its [out, in]
// rows), N-major for the dX products (boxes of 64 K-rows × 64 columns of
// W_down / W_output) — signalled by mbarriers (a "full" barrier per buffer
// counting the transaction bytes, an "empty" one each consumer warpgroup
// arrives at); WG consumer warpgroups each multiply their 64 rows with
// wgmma.mma_async m64nBNk16 from shared-memory descriptors (PTX ISA,
// "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"; the first
// slice with scale-d 0, so that no other instruction writes the
// accumulators and ptxas does not serialize the wgmma: the build fails on
// that warning), one wgmma group in flight behind the current one. The
// epilogue works on the fp32 accumulators in registers: a thread holds
// columns 8j + 2·(lane % 4) + {0, 1} of rows 16·warp + lane / 4 (+ 8), so
// columns c and c + 32 of a 64-column head and the tile's gate column c
// and its up column c + BN/2 are in the same thread; it stages the results
// in shared memory and stores them 16 bytes per thread. Accumulation is
// k-ascending, 16 at a time, one accumulator per element, no split of K:
// the same order for every tile configuration.
//
// Tile configurations (kFusedConfigs; the same results for all; the
// kernel's measured times are in docs/PERFORMANCE.md run 11):
//   config  WG  BN  stages  shared memory  CTAs per SM
//     0      2  128    5       161 KB           1
//     1      1  128    4        97 KB           2
//     2      2   64    4        97 KB           2
//     3      1   64    4        65 KB           3
//     4      1  176    3        91 KB           2   gate|up only
//     5      2  176    4       153 KB           1   gate|up only
// (BN = 176 tiles H = 1408 in 16 column tiles of 88 gate + 88 up columns.
// Clusters of 2 CTAs sharing the W tile through TMA multicast were
// measured twice as slow and removed: branch exp/wgmma-clusters.)
//
// Rows beyond T are read as zeros (the TMA's out-of-bounds fill) and not
// stored. Requirements (else cudaErrorInvalidValue; the *Supports
// functions make the shape checks alone): 0 ≤ config < kFusedConfigs;
// 1 ≤ T ≤ 65,535 · 64; C a positive multiple of 64;
//   qkv:       HS = 64, C = NH · HS, BN a multiple of 64 dividing 3C;
//   gate|up:   H a positive multiple of BN/2;
//   down dX:   BN a multiple of 64 dividing H;
//   output dX: HS = 64, C = NH · HS, BN a multiple of 64 dividing C;
// every matrix 16-byte aligned (rows of C, H or 3C elements then are too),
// rope_table 8-byte and delta 4-byte aligned, none null. Any failure to
// encode a tensor map is also cudaErrorInvalidValue; the encoder comes from
// the driver through cudaGetDriverEntryPointByVersion (cudaErrorNotSupported
// if it is missing). Outputs must not alias inputs.
#ifndef COPPELIUS_TRAINER_KERNELS_FUSED_MATMUL_H_
#define COPPELIUS_TRAINER_KERNELS_FUSED_MATMUL_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace coppelius {

inline constexpr int kFusedConfigs = 6;

// The column-tile width BN of a configuration; 0 if there is none.
int FusedConfigColumns(int config);

// Whether the function of the same name accepts these shapes and this
// configuration (its checks other than the pointers').
bool QkvRopeMatmulSupports(int T, int C, int NH, int HS, int config);
bool GateUpSwigluMatmulSupports(int T, int C, int H, int config);
bool DownDxSwigluBackwardMatmulSupports(int T, int C, int H, int config);
bool OutputDxDeltaMatmulSupports(int T, int C, int NH, int HS, int config);

cudaError_t QkvRopeMatmul(const __nv_bfloat16* h, const __nv_bfloat16* w_qkv,
                          const float* rope_table, int T, int C, int NH,
                          int HS, __nv_bfloat16* qkv16, int config,
                          cudaStream_t stream);

cudaError_t DownDxSwigluBackwardMatmul(const __nv_bfloat16* dy,
                                       const __nv_bfloat16* w_down,
                                       const float* gu, int T, int C, int H,
                                       __nv_bfloat16* dgu, int config,
                                       cudaStream_t stream);

cudaError_t OutputDxDeltaMatmul(const __nv_bfloat16* dresid,
                                const __nv_bfloat16* w_output,
                                const __nv_bfloat16* y, int T, int C, int NH,
                                int HS, __nv_bfloat16* dy, float* delta,
                                int config, cudaStream_t stream);

cudaError_t GateUpSwigluMatmul(const __nv_bfloat16* h,
                               const __nv_bfloat16* w_gate_up, int T, int C,
                               int H, float* gu, __nv_bfloat16* a, int config,
                               cudaStream_t stream);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_FUSED_MATMUL_H_
