// File: trainer/kernels/attention.h
//
// Fused causal softmax attention (flash-attention style: Dao et al., 2022,
// "FlashAttention", and Dao, 2023, "FlashAttention-2"), forward and backward,
// on tensor cores (bf16 operands, fp32 accumulation: mma.sync m16n8k16, or
// at HS = 64 Hopper's warpgroup products, wgmma m64n64k16, with the same
// fragment layouts and results). No [T, T] matrix is ever stored: scores
// and probabilities live in registers, one 64 × 64 tile at a time.
//
// Math, per head h (NH heads, HS head size, T rows; q, k, v are [T, HS] bf16
// slices of the rotated qkv [T, 3C], column h·HS of each part):
//   S = scale · q · kᵀ                       scale = 1/sqrt(HS), fp32
//   lse2[t] = log2 Σ_{j ≤ t} exp(S[t, j])    (base-2 log-sum-exp, fp32)
//   y = (Σ_j bf16(P̃[t, j]) · v[j]) / l[t]   → bf16 into y [T, C]
// where P̃ = 2^(S·log2 e − m) with m a running row maximum and l = Σ P̃ in
// fp32: FlashAttention-2's online softmax (Dao, 2023, Algorithm 1), one pass
// over the keys, every exponential one FFMA and one ex2.approx (relative
// error about 2⁻²², far below bf16's 2⁻⁹; values under 2⁻¹²⁶ become 0).
// Backward, given dy [T, HS] (slice of the bf16 dY [T, C]):
//   D[t] = Σ_d dy[t, d] · y[t, d]            fp32, over the stored bf16 y
//          (= Σ_j P·dP in exact arithmetic: FlashAttention-2's form)
//   P[t, j] = 2^(S[t, j] · log2 e − lse2[t]) for j ≤ t, 0 above (fp32)
//   dP = dy · vᵀ                             fp32
//   dS = bf16(scale · P ⊙ (dP − D))
//   dq = dS · k;  dk = dSᵀ · q;  dv = bf16(P)ᵀ · dy   fp32
//   then the inverse RoPE of dq and dk (rope.h), all three rounded to bf16
//   (they feed only the qkv dX / dW products)
//
// The numerics are FlashAttention-2's (and so PyTorch's flash SDPA's), not
// those of the unfused formulation of the CPU reference backend
// (trainer/reference_backend.h), which rounds the normalized P to bf16 and
// sums D = Σ P·dP: here the forward rounds the unnormalized P̃ (the same
// relative rounding, at other points) and D comes from the rounded y. Every
// product operand is bf16 with fp32 accumulation; kernels_test checks all
// outputs against the unfused formulation in double within the bf16
// tolerance. The scale of dS is applied as the reference does, before the
// bf16 rounding; when it is a power of two (HS = 16, 64) it commutes with
// the rounding and is applied once, to the fp32 dq/dk sums, instead.
// (Until 2026-11-30 the kernels kept the reference's numerics, at the cost
// of a statistics pass in the forward and a D pass over the keys in the
// backward: docs/PERFORMANCE.md run 7.)
//
// Parallelism (deterministic: no float atomics; every sum in a fixed
// order). A warpgroup is 4 warps × 16 rows of a 64-row tile. The key range
// of a query tile is split into chunks of at most `split` key tiles (and
// the query range of a key tile likewise; AttentionSplits, one split per
// kernel, 16 by default: at T = 1024 one chunk per tile), one CTA per
// (tile, chunk, head). Chunk results combine in chunk order, in the CTA
// that arrives last at an integer counter (fp32 partials in scratch). On
// the tensor memory accelerator a CTA may hold 2 or 4 warpgroups
// (AttentionSplits::forward_warpgroups, query_warpgroups,
// keys_warpgroups; by default 4 for the forward, 1 for the backward's):
// they take the chunk's tiles in turn and merge their partial results in
// shared memory, in warpgroup order, so the longest rows (16 key tiles)
// take 4 tile steps in a row instead of 16.
//   forward:   one kernel: per chunk the running maximum, sum and
//              unnormalized y; the CTA that arrives last rescales the
//              chunks to their common maximum, adds them in chunk order and
//              writes y and lse2;
//   backward:  (1) "delta": D of every row (elementwise over y and dy);
//              (2) "query": dS, dq;
//              (3) "keys": per (key tile, query chunk), keys as rows: dv, dk.
//              (2) and (3) depend only on (1): they may run concurrently.
// Loads: at HS = 64 (the dk/dv kernel with splits of at most 16), each
// CTA's tiles arrive by the tensor memory accelerator (one thread issues
// 64 × 64 boxes of qkv and dy; a ring of shared-memory slots per kernel:
// attention.cu TmaTiles); otherwise every thread loads 16-byte pieces into
// registers and stores them, the next tile's loads in flight during the
// current one.
// Products: in the TMA kernels of one warpgroup for dq and dk/dv, and of 2
// or 4 for the forward, a tile's row products (S, and dP in the
// backward) go into the same wgmma group as the previous tile's
// accumulation (P̃·v; dv and dk; dq), so a warpgroup waits for its products
// once a tile, not twice (AttentionSplits::pipelined_backward,
// pipelined_forward; the same products in the same order).
//
// Layouts: qkv [T, 3C] bf16 row-major (q heads at columns 0..C−1, then k,
// then v); y and dy [T, C] bf16; stats [NH, T] fp32 (lse2);
// dqkv [T, 3C] bf16 (the gradients of the qkv product's output: unrotated
// q, k and v); rope table [2, T, HS/2] fp32 (rope.h); scratch: AttentionScratchBytes, zero-filled
// once before the first use (the kernels leave their counters at zero; the
// rest is overwritten before it is read). One scratch serves every layer,
// but calls sharing it must not overlap, except the backward's query and
// keys kernels with each other, and it is valid only for the (T, NH, HS)
// and AttentionSplits it was sized and zeroed for: the regions' offsets
// depend on them, so a call with another shape or splits would find
// non-zero counters and combine wrongly. Scratch grows as
// ⌈T / (64 · s)⌉ · T · C · 16 bytes, s the smallest split (8.4 MB at
// T = 1024, C = 512 and s = 16; 25 MB at s = 6).
// Requirements: HS ∈ {16, 32, 64} and T, NH > 0 (else every function returns
// cudaErrorInvalidValue); qkv, y and dy 16-byte aligned, dqkv, stats, rope
// and scratch 8-byte aligned (cudaMalloc gives 256); outputs not aliasing
// inputs; the RoPE table built for the same T and HS.
#ifndef COPPELIUS_TRAINER_KERNELS_ATTENTION_H_
#define COPPELIUS_TRAINER_KERNELS_ATTENTION_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "trainer/kernels/attention_items.h"

namespace coppelius {

// Key (or query) tiles per chunk of each kernel's items (attention_items.h);
// each ≥ 1, else every function returns cudaErrorInvalidValue (and
// AttentionScratchBytes 0, AttentionDelta nullptr). Fewer tiles per chunk
// give more CTAs, each with fewer tile steps, and more partials to combine.
struct AttentionSplits {
  int forward = kAttentionSplit;
  int query = kAttentionSplit;  // the backward's dq kernel
  int keys = kAttentionSplit;   // the backward's dk/dv kernel
  // Warpgroups per forward CTA: 1, 2 or 4 (else every function returns
  // cudaErrorInvalidValue). With w > 1 the CTA's warpgroups take the
  // chunk's key tiles in turn (warpgroup g the tiles g, g + w, …), each
  // with its own running maximum, sum and output, and the first merges
  // them in shared memory before the chunks combine: 1/w of the tile steps
  // in a row. Only the kernels on the tensor memory accelerator (HS = 64)
  // have this form; elsewhere it is ignored. Each w computes other bits
  // (other combination points), the same in every run.
  int forward_warpgroups = kAttentionForwardWarpgroups;
  // The same for the backward's dq kernel (1, 2 or 4; the dq partials
  // added in warpgroup order) and its dk/dv kernel (1 or 2; at 4
  // warpgroups, 128 registers a thread, ptxas serializes its products).
  // With keys > 16 the dk/dv kernel runs without the TMA and the field is
  // ignored there.
  int query_warpgroups = 1;
  int keys_warpgroups = 1;
  // The one-warpgroup dq and dk/dv kernels on the tensor memory
  // accelerator (HS = 64) issue the row products of the next tile (S and
  // dP) behind this tile's accumulation, waiting for their products once a
  // tile instead of twice. The same products in the same order: the same
  // bits either way.
  bool pipelined_backward = true;
  // The same for the forward kernel of several warpgroups (each
  // warpgroup's next scores issued behind its P̃·v; the same bits).
  bool pipelined_forward = true;
};

// True if the fused kernels support head size HS (16, 32 or 64).
bool AttentionSupportsHeadSize(int HS);

// Bytes of scratch the kernels need at this size and these splits.
size_t AttentionScratchBytes(int T, int NH, int HS,
                             const AttentionSplits& splits = {});

// Writes y [T, C] and stats [NH, T] (one kernel on `stream`). Every
// function returns cudaErrorInvalidValue for an unsupported HS, else the
// launch status.
cudaError_t AttentionForward(const __nv_bfloat16* qkv, int T, int NH, int HS,
                             __nv_bfloat16* y, float* stats, void* scratch,
                             cudaStream_t stream,
                             const AttentionSplits& splits = {});

// Backward step (1): D of every row into scratch, from the forward's
// output y [T, C] and its gradient dy [T, C].
cudaError_t AttentionBackwardDelta(const __nv_bfloat16* y,
                                   const __nv_bfloat16* dy, int T, int NH,
                                   int HS, void* scratch, cudaStream_t stream,
                                   const AttentionSplits& splits = {});

// Where step (1) writes D: [NH, T] fp32 inside `scratch` (sized by
// AttentionScratchBytes for the same T, NH, HS). A product that computes D
// itself in step (1)'s order (fused_matmul.h's OutputDxDeltaMatmul) writes
// it here instead, and step (1) is left out.
float* AttentionDelta(void* scratch, int T, int NH, int HS,
                      const AttentionSplits& splits = {});

// Backward step (2), after (1): the dq columns of dqkv. `rope_table` is
// rope.h's RopeTable(T, HS, base) on the device.
cudaError_t AttentionBackwardQuery(const __nv_bfloat16* qkv,
                                   const __nv_bfloat16* dy, const float* stats,
                                   const float* rope_table, int T, int NH,
                                   int HS, void* scratch, __nv_bfloat16* dqkv,
                                   cudaStream_t stream,
                                   const AttentionSplits& splits = {});

// Backward step (3), after (1): the dk and dv columns of dqkv.
cudaError_t AttentionBackwardKeys(const __nv_bfloat16* qkv,
                                  const __nv_bfloat16* dy, const float* stats,
                                  const float* rope_table, int T, int NH,
                                  int HS, void* scratch, __nv_bfloat16* dqkv,
                                  cudaStream_t stream,
                                  const AttentionSplits& splits = {});

// (1), (2), (3) in order on one stream: the whole dqkv [T, 3C].
cudaError_t AttentionBackward(const __nv_bfloat16* qkv,
                              const __nv_bfloat16* y,
                              const __nv_bfloat16* dy, const float* stats,
                              const float* rope_table, int T, int NH, int HS,
                              void* scratch, __nv_bfloat16* dqkv,
                              cudaStream_t stream,
                              const AttentionSplits& splits = {});

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_ATTENTION_H_
