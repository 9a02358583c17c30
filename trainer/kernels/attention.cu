// File: trainer/kernels/attention.cu (see attention.h for the math).
//
// Tiles: kTile = 64 positions. A warpgroup has 4 warps; its warp w owns the
// 16 rows r0 = 16·w .. r0 + 15 of the CTA's tile (a CTA is one warpgroup,
// or 2 or 4 of them holding the same rows: ForEachGroupTile; there w is
// the warp's index within its warpgroup). Tensor-core fragments follow the
// PTX ISA's mma.m16n8k16 (.bf16, .f32 accumulators) layout: with
// g = lane / 4 and c = lane % 4,
//   A (16 × 16, row): a0 = (g, 2c..2c+1), a1 = (g+8, 2c..), a2 = (g, 2c+8..),
//                     a3 = (g+8, 2c+8..), two bf16 per 32-bit register;
//   B (16 × 8, col):  b0 = (k 2c..2c+1, n g), b1 = (k 2c+8.., n g);
//   C (16 × 8):       c0,c1 = (g, 2c..2c+1), c2,c3 = (g+8, 2c..2c+1).
// A C fragment pair (n-tiles 2i, 2i+1) is, element for element, the A
// fragment of the next product (FlashAttention-2's register reuse).
//
// Shared memory: tiles [64][HS + 8], position-major (rows = queries or
// keys). Products contracting over the head dimension read them as B
// fragments with ldmatrix; products contracting over positions (P·v, dS·k,
// Pᵀ·dy, dSᵀ·q) read the same tiles with ldmatrix.trans. The 8 bf16 of
// padding put the 8 rows an ldmatrix reads in distinct banks. The next
// tile is prefetched into registers while the current one is used; at
// HS = 64 (the dk/dv kernel with chunks of at most kTmaKeysLongSplit = 16
// tiles) the kernels load their tiles with the tensor memory accelerator
// instead (TmaTiles), and may run 2 or 4 warpgroups per CTA
// (ForEachGroupTile).
//
// HS = 64 (the coppelius head size) runs the same kernels on Hopper's
// warpgroup products instead (wgmma.cuh; UseWgmma): a warpgroup's
// m64nNk16 accumulators and register A operands have,
// warp by warp, exactly the mma.m16n8k16 fragment layouts above, so the
// softmax and epilogue code is shared. Tiles are then [64][64] in the
// 128-byte-swizzle layout (16-byte chunk j of row r at chunk j ^ (r % 8);
// 1024-byte aligned) that wgmma reads as B: K-major for the products
// contracting over the head dimension (S = q·kᵀ, dP = dy·vᵀ, Sᵀ = k·qᵀ,
// dPᵀ = v·dyᵀ), N-major for those contracting over positions (P·v, dS·k,
// Pᵀ·dy, dSᵀ·q). A is the CTA's own rows of q, dy, k or v in a tile of the
// same layout (K-major, from shared memory: RowOperand) or P and dS, fresh
// from the softmax, in registers. (A from registers kept across the
// key-tile loop — q's fragments, as the mma.sync path keeps them — gave
// wrong products from the second iteration on in kernels built with CUDA
// 13.0's ptxas, 2026-11-30; dumping the registers made them right. Cause
// not isolated; shared-memory A is what FlashAttention-3 uses there too.)
#include "trainer/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "trainer/kernels/attention_items.h"
#include "trainer/kernels/bf16.cuh"
#include "trainer/kernels/launch.cuh"
#include "trainer/kernels/tma.cuh"
#include "trainer/kernels/wgmma.cuh"

namespace coppelius {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kTile = kAttentionTile;  // positions per tile (rows or keys)
constexpr int kThreads = 128;  // 4 warps × 16 rows
constexpr int kPad = 8;        // bf16 of padding per shared-memory row

using kernels::BarrierArriveExpectBytes;
using kernels::BarrierInit;
using kernels::BarrierWait;
using kernels::Descriptor;
using kernels::DescriptorNMajor;
using kernels::FenceProxyAsync;
using kernels::MakeMap;
using kernels::PrefetchTensorMap;
using kernels::SharedAddress;
using kernels::TmaLoad;
using kernels::Wgmma;
using kernels::WgmmaFirst64;
using kernels::WgmmaCommit;
using kernels::WgmmaFence;
using kernels::WgmmaRegA;
using kernels::WgmmaWait;

// Warpgroup products (wgmma) for this head size, else mma.sync.
template <int kHS>
constexpr bool UseWgmma() {
  return kHS == 64;
}

// Row stride of a shared-memory tile, in bf16.
template <int kHS>
constexpr int TileLd() {
  return UseWgmma<kHS>() ? kHS : kHS + kPad;
}

// Elements (bf16) of a shared-memory tile of 64 positions.
template <int kHS>
constexpr int TileElems() {
  return kTile * TileLd<kHS>();
}

// Alignment of a shared-memory tile in bytes: the 128-byte swizzle repeats
// every 1024 bytes, and wgmma's descriptors assume a tile starts a repeat.
template <int kHS>
constexpr int TileAlign() {
  return UseWgmma<kHS>() ? 1024 : 16;
}

// Elements of a tile that only the wgmma path keeps (its own rows as the A
// operand, RowOperand); a token size otherwise.
template <int kHS>
constexpr int OwnTileElems() {
  return UseWgmma<kHS>() ? TileElems<kHS>() : 8;
}

// Offset in bf16 of (row, 16-byte chunk) in a tile: padded rows, or for
// wgmma the 128-byte swizzle.
template <int kHS>
__device__ __forceinline__ int TileOffset(int row, int chunk) {
  if constexpr (UseWgmma<kHS>()) {
    return row * kHS + ((chunk ^ (row & 7)) << 3);
  } else {
    return row * (kHS + kPad) + chunk * 8;
  }
}

// The reference rounds dS = scale · P⊙(dP − D) to bf16. When scale =
// 1/sqrt(HS) is a power of two (HS = 16, 64) scaling commutes with the
// rounding, so the kernels round P⊙(dP − D) and scale the fp32 dq/dk sums
// once in their epilogue; otherwise (HS = 32) they scale every element
// before rounding, as the reference does.
template <int kHS>
constexpr bool ScaleInEpilogue() {
  return kHS == 16 || kHS == 64;
}

__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4],
                                    uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ldmatrix: four 8 × 8 bf16 matrices from shared memory, one row address
// per lane (lanes 8i..8i+7 give the rows of matrix i, 16 bytes each); lane
// (g, c) receives row g, columns 2c..2c+1 of each (".trans": row 2c..2c+1,
// column g, i.e. of the transposed matrix).
__device__ __forceinline__ void LdMatrix(uint32_t (&r)[4], const bf16* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(a));
}
__device__ __forceinline__ void LdMatrixTrans(uint32_t (&r)[4],
                                              const bf16* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, "
      "[%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(a));
}

// Two fp32 → one register of two bf16 (round to nearest even); `lo` is the
// element of the smaller column.
__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 2^x by the SFU (ex2.approx.ftz: relative error about 2⁻²², results
// below 2⁻¹²⁶ flushed to 0, 2^−∞ = 0); one instruction instead of
// exp2f's range handling.
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float QuadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float QuadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// One 64-position × HS tile of a row-major bf16 matrix, held in registers
// (16-byte chunks, kChunks per thread) between its global load and its
// shared-memory store. Rows at or beyond T read as zeros.
template <int kHS>
struct TileRegs {
  static constexpr int kRowChunks = kHS / 8;
  static constexpr int kChunks = kTile * kRowChunks / kThreads;
  static_assert(kChunks >= 1, "head size too small");
  uint4 v[kChunks];

  __device__ __forceinline__ void Load(const bf16* src, int ld, int row0,
                                       int T) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int row = row0 + idx / kRowChunks;
      const int col = (idx % kRowChunks) * 8;
      v[i] = row < T ? *reinterpret_cast<const uint4*>(
                           src + static_cast<int64_t>(row) * ld + col)
                     : make_uint4(0, 0, 0, 0);
    }
  }
  // Into a tile (TileOffset's layout); for wgmma, fenced for the async
  // proxy (a barrier must still follow before the products read it).
  __device__ __forceinline__ void Store(bf16* dst) const {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      *reinterpret_cast<uint4*>(
          dst + TileOffset<kHS>(idx / kRowChunks, idx % kRowChunks)) = v[i];
    }
    if constexpr (UseWgmma<kHS>()) FenceProxyAsync();
  }
};

// A fragments of the 16 rows row0.. of a tile: a[ks] covers head
// dimensions 16·ks .. 16·ks + 15 (matrices: rows 0–7 / 8–15 × columns
// 0–7 / 8–15 of the k-step, in the order a0..a3).
template <int kHS>
__device__ __forceinline__ void LoadA(const bf16* tile, int row0,
                                      uint32_t (&a)[kHS / 16][4]) {
  const int lane = threadIdx.x & 31;
  const int row = row0 + (lane & 15);
#pragma unroll
  for (int ks = 0; ks < kHS / 16; ++ks) {
    LdMatrix(a[ks], tile + TileOffset<kHS>(row, 2 * ks + (lane >> 4)));
  }
}

// The A operand of the products over the head dimension: 64 rows of q, dy,
// k or v, the CTA's own. mma.sync: fragments in registers (LoadA);
// wgmma: the swizzled tile itself, which stays in shared memory.
template <int kHS>
struct RowOperand {
  uint32_t frag[kHS / 16][4];
  const bf16* tile;

  // From `t`, rows row0.. of this warp (a barrier must separate the tile's
  // stores from this call).
  __device__ __forceinline__ void Load(const bf16* t, int row0) {
    if constexpr (UseWgmma<kHS>()) {
      tile = t;
    } else {
      LoadA<kHS>(t, row0, frag);
    }
  }
};

// Orders later reads of the accumulators after the wgmma wait before it.
template <int kN>
__device__ __forceinline__ void PinFragments(float (&d)[kN][4]) {
#pragma unroll
  for (int n = 0; n < kN; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[n][e])::"memory");
  }
}

// Waits for the warpgroup's products issued so far.
__device__ __forceinline__ void WgmmaSync() {
  WgmmaCommit();
  WgmmaWait<0>();
}

// wgmma form of RowProducts (issue only: the caller fences before and
// calls WgmmaSync, then PinFragments, before reading s): s = A · Bᵀ for the
// kN = 8 n-tiles (the whole 64-row tile) from row 8·n0 of the swizzled
// tile b, K-major over the head dimension; the first k-step writes the
// accumulators without reading them (WgmmaFirst64, scale-d 0).
template <int kHS, int kN>
__device__ __forceinline__ void IssueRowProducts(const RowOperand<kHS>& a,
                                                 const bf16* b, int n0,
                                                 float (&s)[kN][4]) {
  const uint32_t a_base = SharedAddress(a.tile);
  const uint32_t b_base = SharedAddress(b) + n0 * 8 * kHS * 2;
  float(&d)[kN * 4] = reinterpret_cast<float(&)[kN * 4]>(s);
  static_assert(kN == 8, "64 × 64 tiles");
  WgmmaFirst64(d, Descriptor(a_base), Descriptor(b_base));
#pragma unroll
  for (int ks = 1; ks < kHS / 16; ++ks) {
    Wgmma<kN * 8, 0>(d, Descriptor(a_base + 32 * ks),
                     Descriptor(b_base + 32 * ks), 1);
  }
}

// wgmma form of AccumulateT (issue only, as above): acc += A · B over kK
// k-steps of 16 positions from row k0 of the swizzled tile, N-major.
template <int kHS, int kK>
__device__ __forceinline__ void IssueAccumulateT(const uint32_t (&a)[kK][4],
                                                 const bf16* tile, int k0,
                                                 float (&acc)[kHS / 8][4]) {
  const uint32_t base = SharedAddress(tile) + k0 * kHS * 2;
#pragma unroll
  for (int kk = 0; kk < kK; ++kk) {
    WgmmaRegA<kHS, 1>(acc, a[kk], DescriptorNMajor(base + kk * 16 * kHS * 2,
                                                   8192),
                      1);
  }
}

// s[n] = A · Bᵀ for the kN n-tiles n0 .. n0 + kN − 1 (8 rows of the tile
// `b` each), contracting over the head dimension; fp32, in a fixed order.
// One ldmatrix gives b0, b1 of two n-tiles (matrices: n-tile n columns 0–7,
// 8–15 of the k-step, then n-tile n + 1).
template <int kHS, int kN>
__device__ __forceinline__ void RowProducts(const RowOperand<kHS>& a,
                                            const bf16* b, int n0,
                                            float (&s)[kN][4]) {
  static_assert(kN % 2 == 0, "n-tiles come in pairs");
  if constexpr (UseWgmma<kHS>()) {
    WgmmaFence();
    IssueRowProducts<kHS, kN>(a, b, n0, s);
    WgmmaSync();
    PinFragments(s);
  } else {
    constexpr int kLd = kHS + kPad;
    const int lane = threadIdx.x & 31;
    const bf16* p = b + (n0 * 8 + (lane & 7) + (lane >> 4) * 8) * kLd +
                    ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int n = 0; n < kN; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int n = 0; n < kN; n += 2) {
#pragma unroll
      for (int ks = 0; ks < kHS / 16; ++ks) {
        uint32_t r[4];
        LdMatrix(r, p + n * 8 * kLd + ks * 16);
        Mma(s[n], a.frag[ks], r[0], r[1]);
        Mma(s[n + 1], a.frag[ks], r[2], r[3]);
      }
    }
  }
}

// acc[dn] += A · B over kK k-steps of 16 positions starting at k0, with
// B[k][d] = tile[k0 + k][d] (a position-major tile read transposed: one
// ldmatrix.trans gives b0, b1 of two dimension n-tiles).
template <int kHS, int kK>
__device__ __forceinline__ void AccumulateT(const uint32_t (&a)[kK][4],
                                            const bf16* tile, int k0,
                                            float (&acc)[kHS / 8][4]) {
  if constexpr (UseWgmma<kHS>()) {
    WgmmaFence();
    IssueAccumulateT<kHS, kK>(a, tile, k0, acc);
    WgmmaSync();
    PinFragments(acc);
  } else {
    constexpr int kLd = kHS + kPad;
    const int lane = threadIdx.x & 31;
    const bf16* p = tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd +
                    (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
#pragma unroll
      for (int dn = 0; dn < kHS / 8; dn += 2) {
        uint32_t r[4];
        LdMatrixTrans(r, p + kk * 16 * kLd + dn * 8);
        Mma(acc[dn], a[kk], r[0], r[1]);
        Mma(acc[dn + 1], a[kk], r[2], r[3]);
      }
    }
  }
}

// C fragments (n-tiles 2i, 2i+1) → bf16 A fragment i.
template <int kN>
__device__ __forceinline__ void PackA(const float (&v)[kN][4],
                                      uint32_t (&a)[kN / 2][4]) {
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    a[i][0] = Pack(v[2 * i][0], v[2 * i][1]);
    a[i][1] = Pack(v[2 * i][2], v[2 * i][3]);
    a[i][2] = Pack(v[2 * i + 1][0], v[2 * i + 1][1]);
    a[i][3] = Pack(v[2 * i + 1][2], v[2 * i + 1][3]);
  }
}

// Above-diagonal entries of a diagonal tile (keys j0 + 8n + 2c (+1)
// against query rows t0 (c0, c1) and t0 + 8 (c2, c3)) ← `value`.
__device__ __forceinline__ void MaskAbove(float (&s)[8][4], int j0, int t0,
                                          float value) {
  const int jc = j0 + (threadIdx.x & 3) * 2;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (jc + n * 8 + (e & 1) > t0 + (e >> 1) * 8) s[n][e] = value;
    }
  }
}

// s ← P = 2^(s · scale2 − lse2) (one FFMA and one ex2 per element; rows t0
// in c0, c1 and t0 + 8 in c2, c3); 0 above the diagonal of a diagonal tile.
__device__ __forceinline__ void Probabilities(float (&s)[8][4], float scale2,
                                              float lse0, float lse1,
                                              bool diagonal, int j0, int t0) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    s[n][0] = Exp2(fmaf(s[n][0], scale2, -lse0));
    s[n][1] = Exp2(fmaf(s[n][1], scale2, -lse0));
    s[n][2] = Exp2(fmaf(s[n][2], scale2, -lse1));
    s[n][3] = Exp2(fmaf(s[n][3], scale2, -lse1));
  }
  if (diagonal) MaskAbove(s, j0, t0, 0.0f);
}

// ------------------------------------------------------------------------
// Work decomposition: attention_items.h. A tile's chunks combine in chunk
// order (fixed, whatever order the CTAs finish in): the last CTA to arrive
// (integer counter) adds the partials.

struct Params {
  const bf16* qkv;     // [T, 3C] rotated q, k and v (bf16)
  const bf16* dy;    // [T, C]
  bf16* y;           // [T, C]
  float* stats;      // [NH, T] lse2
  const float* rope;  // RoPE table: cos [T, HS/2] then sin [T, HS/2]
  bf16* dqkv;         // [T, 3C]
  int T, NH, num_tiles;
  int split;     // tiles per chunk of this launch (attention_items.h)
  int warpgroups;  // per CTA of the forward's TMA kernel (1, 2 or 4)
  int query_warpgroups;  // per CTA of the dq TMA kernel (1, 2 or 4)
  int keys_warpgroups;  // per CTA of the dk/dv TMA kernel (1 or 2)
  bool pipelined_backward;  // AttentionSplits::pipelined_backward
  bool pipelined_forward;  // AttentionSplits::pipelined_forward
  float scale;   // 1/sqrt(HS)
  float scale2;  // scale · log2(e): scores in base-2 exponent units
  // Scratch (AttentionScratchBytes): counters [3][NH][num_tiles] (zero
  // between launches), partial row maxima and sums [chunk][NH][T], D [NH][T],
  // partial products [chunk][T][C].
  int* counters;
  float* part_m;
  float* part_l;
  float* delta;  // [NH, T]: D of every row (backward kernel 1)
  float* part_o;
  float* part_dq;
  float* part_dk;
  float* part_dv;
};

// True in every thread of the CTA that arrives last of `n` at `counter`
// (which it resets). Each thread's earlier global writes are visible to
// that CTA. One thread fences, as CUTLASS's split-K semaphore does: the
// barrier orders the CTA's writes before thread 0's release fence and
// count (fences are cumulative), and the last CTA's thread 0 fences after
// reading the count (acquire) before the barrier that releases its other
// threads to read the partials. (Until 2026-11-30 every thread fenced:
// ncu counted 0.33 cycles of membar stall per issued instruction in the
// forward kernel.)
// kBarrier > 0: the calling threads are the CTA's first 128 (warpgroup 0,
// whose thread 0 does LastArrival's atomic) and synchronize on that named
// barrier instead of the CTA's.
template <int kBarrier = 0>
__device__ __forceinline__ void GroupSync() {
  if constexpr (kBarrier == 0) {
    __syncthreads();
  } else {
    asm volatile("bar.sync %0, %1;" ::"n"(kBarrier), "n"(kThreads)
                 : "memory");
  }
}

template <int kBarrier = 0>
__device__ __forceinline__ bool LastArrival(int* counter, int n) {
  __shared__ int s_last;
  GroupSync<kBarrier>();
  if (threadIdx.x == 0) {
    __threadfence();
    const int prev = atomicAdd(counter, 1);
    const bool last = prev == n - 1;
    if (last) {
      *counter = 0;
      __threadfence();
    }
    s_last = last;
  }
  GroupSync<kBarrier>();
  return s_last != 0;
}

// Thread-local partials of rows (t0, t1) × columns (h·HS + 8·dn + 2c, +1),
// kept in part [chunk][T][C] (fp32).
template <int kHS>
__device__ __forceinline__ void WritePartial(const float (&acc)[kHS / 8][4],
                                             float* part, int chunk, int T,
                                             int C, int col0, int t0) {
  const int t1 = t0 + 8;
  float* plane = part + static_cast<int64_t>(chunk) * T * C;
#pragma unroll
  for (int dn = 0; dn < kHS / 8; ++dn) {
    const int col = col0 + dn * 8;
    if (t0 < T) {
      *reinterpret_cast<float2*>(plane + static_cast<int64_t>(t0) * C + col) =
          make_float2(acc[dn][0], acc[dn][1]);
    }
    if (t1 < T) {
      *reinterpret_cast<float2*>(plane + static_cast<int64_t>(t1) * C + col) =
          make_float2(acc[dn][2], acc[dn][3]);
    }
  }
}

// v ← chunk c's partial of this thread's elements (rows t0, t0 + 8 ×
// columns col0 + 8·dn, +1): its own chunk's from acc (the same bits it
// wrote), another's from part [chunk][T][C], read past L1; rows beyond T
// (never stored) keep acc's values. The 2·HS/8 loads are issued together.
template <int kHS>
__device__ __forceinline__ void ChunkPartial(const float (&acc)[kHS / 8][4],
                                             const float* part, int c,
                                             int chunk, int T, int C,
                                             int col0, int t0,
                                             float (&v)[kHS / 8][4]) {
  const int t1 = t0 + 8;
  const float* plane = part + static_cast<int64_t>(c) * T * C;
#pragma unroll
  for (int dn = 0; dn < kHS / 8; ++dn) {
    const int col = col0 + dn * 8;
    float2 a = make_float2(acc[dn][0], acc[dn][1]);
    float2 b = make_float2(acc[dn][2], acc[dn][3]);
    if (c != chunk) {
      if (t0 < T) {
        a = __ldcg(reinterpret_cast<const float2*>(
            plane + static_cast<int64_t>(t0) * C + col));
      }
      if (t1 < T) {
        b = __ldcg(reinterpret_cast<const float2*>(
            plane + static_cast<int64_t>(t1) * C + col));
      }
    }
    v[dn][0] = a.x;
    v[dn][1] = a.y;
    v[dn][2] = b.x;
    v[dn][3] = b.y;
  }
}

// acc ← Σ over chunks 0..n−1 in chunk order. Chunks outer, columns inner: a
// chunk's loads are issued together, so the sum waits n − 1 L2 round
// trips, not 2·HS/8 · (n − 1) (each element's sum is in chunk order either
// way: the same bits).
template <int kHS>
__device__ __forceinline__ void SumPartials(float (&acc)[kHS / 8][4],
                                            const float* part, int chunk,
                                            int n, int T, int C, int col0,
                                            int t0) {
  float sum[kHS / 8][4] = {};
  for (int c = 0; c < n; ++c) {
    float v[kHS / 8][4];
    ChunkPartial<kHS>(acc, part, c, chunk, T, C, col0, t0, v);
#pragma unroll
    for (int dn = 0; dn < kHS / 8; ++dn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[dn][e] += v[dn][e];
    }
  }
#pragma unroll
  for (int dn = 0; dn < kHS / 8; ++dn) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[dn][e] = sum[dn][e];
  }
}

// Writes this chunk's partial; true (acc = Σ of all n chunks) in the CTA
// that arrives last.
template <int kHS, int kBarrier = 0>
__device__ __forceinline__ bool CombineChunks(float (&acc)[kHS / 8][4],
                                              float* part, int chunk, int n,
                                              int* counter, int T, int C,
                                              int col0, int t0) {
  WritePartial<kHS>(acc, part, chunk, T, C, col0, t0);
  if (!LastArrival<kBarrier>(counter, n)) return false;
  SumPartials<kHS>(acc, part, chunk, n, T, C, col0, t0);
  return true;
}

// The loop of the query-side kernels over the chunk's key tiles
// [kt0, kt1]: the k and v tiles of kt0 are already loading into nk, nv
// (issued by the caller ahead of its prologue); each iteration stores the
// pair into s_k, s_v, prefetches the next pair into registers and calls
// body(kt) on the stored tiles.
template <int kHS, typename Body>
__device__ __forceinline__ void ForEachKeyTile(const bf16* k, const bf16* v,
                                               int ld, int T, int kt0, int kt1,
                                               TileRegs<kHS>& nk,
                                               TileRegs<kHS>& nv, bf16* s_k,
                                               bf16* s_v, Body&& body) {
  for (int kt = kt0; kt <= kt1; ++kt) {
    __syncthreads();
    nk.Store(s_k);
    nv.Store(s_v);
    __syncthreads();
    if (kt < kt1) {
      nk.Load(k, ld, (kt + 1) * kTile, T);
      nv.Load(v, ld, (kt + 1) * kTile, T);
    }
    body(kt);
  }
}

// ForwardTile's online softmax over the scores s of one key tile: the
// running maxima, sums and o rescaled, P̃ packed as bf16 A fragments pa.
template <int kHS>
__device__ __forceinline__ void ForwardSoftmax(float (&s)[8][4],
                                               bool diagonal, int j0, int t0,
                                               float scale2, float& m0,
                                               float& m1, float& l0,
                                               float& l1,
                                               float (&o)[kHS / 8][4],
                                               uint32_t (&pa)[4][4]) {
  if (diagonal) MaskAbove(s, j0, t0, -INFINITY);
  float x0 = m0, x1 = m1;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    x0 = fmaxf(x0, fmaxf(s[n][0], s[n][1]));
    x1 = fmaxf(x1, fmaxf(s[n][2], s[n][3]));
  }
  x0 = QuadMax(x0);
  x1 = QuadMax(x1);
  const float a0 = Exp2((m0 - x0) * scale2);
  const float a1 = Exp2((m1 - x1) * scale2);
  m0 = x0;
  m1 = x1;
  const float b0 = m0 * scale2, b1 = m1 * scale2;
  float r0 = 0.0f, r1 = 0.0f;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    s[n][0] = Exp2(fmaf(s[n][0], scale2, -b0));
    s[n][1] = Exp2(fmaf(s[n][1], scale2, -b0));
    s[n][2] = Exp2(fmaf(s[n][2], scale2, -b1));
    s[n][3] = Exp2(fmaf(s[n][3], scale2, -b1));
    r0 += s[n][0] + s[n][1];
    r1 += s[n][2] + s[n][3];
  }
  l0 = fmaf(l0, a0, r0);
  l1 = fmaf(l1, a1, r1);
#pragma unroll
  for (int dn = 0; dn < kHS / 8; ++dn) {
    o[dn][0] *= a0;
    o[dn][1] *= a0;
    o[dn][2] *= a1;
    o[dn][3] *= a1;
  }
  PackA<8>(s, pa);
}

// The forward's step over one key tile, staged in s_k and s_v (j0 its
// first key; `diagonal`: the query tile's own, masked above the diagonal):
// FlashAttention-2's online softmax (Algorithm 1) on the raw scores, the
// rows' running maximum m and sum l, o rescaled and P̃·v added.
template <int kHS>
__device__ __forceinline__ void ForwardTile(const RowOperand<kHS>& qa,
                                            const bf16* s_k, const bf16* s_v,
                                            bool diagonal, int j0, int t0,
                                            float scale2, float& m0,
                                            float& m1, float& l0, float& l1,
                                            float (&o)[kHS / 8][4]) {
  float s[8][4];
  RowProducts<kHS, 8>(qa, s_k, 0, s);
  uint32_t pa[4][4];
  ForwardSoftmax<kHS>(s, diagonal, j0, t0, scale2, m0, m1, l0, l1, o, pa);
  AccumulateT<kHS, 4>(pa, s_v, 0, o);
}

// The forward's end for query tile qt, chunk `chunk` of n_chunks, rows t0
// and t0 + 8 of this thread: the row sums across the quad; with several
// chunks the partials written and, in the CTA that arrives last, combined
// in chunk order; then lse2 and y.
template <int kHS, int kBarrier = 0>
__device__ __forceinline__ void ForwardFinish(const Params& p, int h, int qt,
                                              int chunk, int n_chunks, int t0,
                                              float m0, float m1, float l0,
                                              float l1,
                                              float (&o)[kHS / 8][4]) {
  const int T = p.T, C = p.NH * kHS;
  const int c = threadIdx.x & 3, t1 = t0 + 8;
  l0 = QuadSum(l0);
  l1 = QuadSum(l1);
  m0 *= p.scale2;  // from here on in base-2 exponent units
  m1 *= p.scale2;
  const int col0 = h * kHS + c * 2;
  if (n_chunks > 1) {
    const int64_t stride = static_cast<int64_t>(p.NH) * T;
    const int64_t row = static_cast<int64_t>(h) * T;
    if (c == 0) {
      if (t0 < T) {
        p.part_m[chunk * stride + row + t0] = m0;
        p.part_l[chunk * stride + row + t0] = l0;
      }
      if (t1 < T) {
        p.part_m[chunk * stride + row + t1] = m1;
        p.part_l[chunk * stride + row + t1] = l1;
      }
    }
    WritePartial<kHS>(o, p.part_o, chunk, T, C, col0, t0);
    if (!LastArrival<kBarrier>(p.counters + h * p.num_tiles + qt, n_chunks)) {
      return;
    }
    // This CTA's own chunk from registers (the same bits it wrote), the
    // others past L1; rows beyond T are never stored, so not read.
    auto chunk_m = [&](int ch, int t, float own) {
      return ch == chunk || t >= T ? own
                                   : __ldcg(p.part_m + ch * stride + row + t);
    };
    auto chunk_l = [&](int ch, int t, float own) {
      return ch == chunk || t >= T ? own
                                   : __ldcg(p.part_l + ch * stride + row + t);
    };
    // Two or three chunks (every tile at the default split): all their
    // loads issued at once, one L2 round trip; the same operations in the
    // same order as the loop below. (Two copies on purpose: sharing their
    // arithmetic through one helper compiled to another schedule of the
    // whole kernel than the one measured, docs/PERFORMANCE.md run 16.)
    auto combine = [&](auto n_const) {
      constexpr int kN = decltype(n_const)::value;
      float cm[kN][2], cl[kN][2], part[kN][kHS / 8][4];
#pragma unroll
      for (int ch = 0; ch < kN; ++ch) {
        cm[ch][0] = chunk_m(ch, t0, m0);
        cm[ch][1] = chunk_m(ch, t1, m1);
        cl[ch][0] = chunk_l(ch, t0, l0);
        cl[ch][1] = chunk_l(ch, t1, l1);
        ChunkPartial<kHS>(o, p.part_o, ch, chunk, T, C, col0, t0, part[ch]);
      }
      float big0 = -INFINITY, big1 = -INFINITY;
#pragma unroll
      for (int ch = 0; ch < kN; ++ch) {
        big0 = fmaxf(big0, cm[ch][0]);
        big1 = fmaxf(big1, cm[ch][1]);
      }
      float sum0 = 0.0f, sum1 = 0.0f;
      float acc[kHS / 8][4] = {};
#pragma unroll
      for (int ch = 0; ch < kN; ++ch) {
        const float f0 = Exp2(cm[ch][0] - big0);
        const float f1 = Exp2(cm[ch][1] - big1);
        sum0 = fmaf(cl[ch][0], f0, sum0);
        sum1 = fmaf(cl[ch][1], f1, sum1);
#pragma unroll
        for (int dn = 0; dn < kHS / 8; ++dn) {
          acc[dn][0] = fmaf(part[ch][dn][0], f0, acc[dn][0]);
          acc[dn][1] = fmaf(part[ch][dn][1], f0, acc[dn][1]);
          acc[dn][2] = fmaf(part[ch][dn][2], f1, acc[dn][2]);
          acc[dn][3] = fmaf(part[ch][dn][3], f1, acc[dn][3]);
        }
      }
#pragma unroll
      for (int dn = 0; dn < kHS / 8; ++dn) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[dn][e] = acc[dn][e];
      }
      m0 = big0;
      m1 = big1;
      l0 = sum0;
      l1 = sum1;
    };
    if (n_chunks == 2) {
      combine(std::integral_constant<int, 2>());
    } else if (n_chunks == 3) {
      combine(std::integral_constant<int, 3>());
    } else {
      float big0 = -INFINITY, big1 = -INFINITY;
      // Unrolled so that the chunks' loads issue together (a dynamic loop
      // waits one L2 round trip per chunk); the maximum is exact in any order.
#pragma unroll 4
      for (int ch = 0; ch < n_chunks; ++ch) {
        big0 = fmaxf(big0, chunk_m(ch, t0, m0));
        big1 = fmaxf(big1, chunk_m(ch, t1, m1));
      }
      float sum0 = 0.0f, sum1 = 0.0f;
      float acc[kHS / 8][4] = {};
      for (int ch = 0; ch < n_chunks; ++ch) {
        const float f0 = Exp2(chunk_m(ch, t0, m0) - big0);
        const float f1 = Exp2(chunk_m(ch, t1, m1) - big1);
        sum0 = fmaf(chunk_l(ch, t0, l0), f0, sum0);
        sum1 = fmaf(chunk_l(ch, t1, l1), f1, sum1);
        float part[kHS / 8][4];
        ChunkPartial<kHS>(o, p.part_o, ch, chunk, T, C, col0, t0, part);
#pragma unroll
        for (int dn = 0; dn < kHS / 8; ++dn) {
          acc[dn][0] = fmaf(part[dn][0], f0, acc[dn][0]);
          acc[dn][1] = fmaf(part[dn][1], f0, acc[dn][1]);
          acc[dn][2] = fmaf(part[dn][2], f1, acc[dn][2]);
          acc[dn][3] = fmaf(part[dn][3], f1, acc[dn][3]);
        }
      }
#pragma unroll
      for (int dn = 0; dn < kHS / 8; ++dn) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[dn][e] = acc[dn][e];
      }
      m0 = big0;
      m1 = big1;
      l0 = sum0;
      l1 = sum1;
    }
  }
  if (c == 0) {
    if (t0 < T) p.stats[h * T + t0] = m0 + log2f(l0);
    if (t1 < T) p.stats[h * T + t1] = m1 + log2f(l1);
  }
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
#pragma unroll
  for (int dn = 0; dn < kHS / 8; ++dn) {
    const int col = col0 + dn * 8;
    if (t0 < T) {
      *reinterpret_cast<__nv_bfloat162*>(p.y + static_cast<int64_t>(t0) * C +
                                         col) =
          __floats2bfloat162_rn(o[dn][0] * inv0, o[dn][1] * inv0);
    }
    if (t1 < T) {
      *reinterpret_cast<__nv_bfloat162*>(p.y + static_cast<int64_t>(t1) * C +
                                         col) =
          __floats2bfloat162_rn(o[dn][2] * inv1, o[dn][3] * inv1);
    }
  }
}

// Forward: per query-side item, one pass over the chunk's keys with the
// online softmax of FlashAttention-2 (Dao, 2023, Algorithm 1): per key tile,
// the running row maximum m (raw scores; scale2 > 0 keeps the order), the
// rescale α = 2^((m_old − m)·scale2) of the running sum l and the unnormalized
// output o, then P̃ = 2^(S·scale2 − m·scale2) (one FFMA and one ex2 per
// element), l += Σ P̃ (fp32), o += bf16(P̃) · v. A one-chunk tile writes
// y = bf16(o / l) and lse2 = m·scale2 + log2 l; otherwise each chunk writes
// (m·scale2, l, o) and the CTA that arrives last combines them in chunk
// order: M = max m_c, L = Σ l_c·2^(m_c − M), y = bf16(Σ o_c·2^(m_c − M) / L),
// lse2 = M + log2 L.
template <int kHS>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(const Params p) {
  GridDependencyWait();
  __shared__ __align__(TileAlign<kHS>()) bf16 s_k[TileElems<kHS>()];
  __shared__ __align__(TileAlign<kHS>()) bf16 s_v[TileElems<kHS>()];
  __shared__ __align__(TileAlign<kHS>()) bf16 s_q[OwnTileElems<kHS>()];
  const int h = blockIdx.y, T = p.T, C = p.NH * kHS, ld = 3 * C;
  int qt, chunk, kt0, kt1;
  QueryItem(blockIdx.x, p.num_tiles, p.split, &qt, &chunk, &kt0, &kt1);
  const int n_chunks = QueryTileChunks(qt, p.split);
  const int g = (threadIdx.x & 31) >> 2;
  const int t0 = qt * kTile + (threadIdx.x >> 5) * 16 + g;
  const bf16* q = p.qkv + h * kHS;
  const bf16* k = q + C;
  const bf16* v = q + 2 * C;
  // q's tile: kept for wgmma, else staged in s_k for the fragments.
  bf16* const q_tile = UseWgmma<kHS>() ? s_q : s_k;
  RowOperand<kHS> qa;
  TileRegs<kHS> nk, nv;
  {
    TileRegs<kHS> tq;
    tq.Load(q, ld, qt * kTile, T);
    nk.Load(k, ld, kt0 * kTile, T);
    nv.Load(v, ld, kt0 * kTile, T);
    tq.Store(q_tile);
    __syncthreads();
    qa.Load(q_tile, (threadIdx.x >> 5) * 16);
  }
  // Every row has a key at or before it in the chunk's first tile, so the
  // maxima are finite from the first tile on (2^−∞ = 0 rescales the empty
  // sums). Rows beyond T read q = 0: finite scores, never stored.
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  float o[kHS / 8][4] = {};
  ForEachKeyTile<kHS>(k, v, ld, T, kt0, kt1, nk, nv, s_k, s_v, [&](int kt) {
    ForwardTile<kHS>(qa, s_k, s_v, kt == qt, kt * kTile, t0, p.scale2, m0, m1,
                     l0, l1, o);
  });
  ForwardFinish<kHS>(p, h, qt, chunk, n_chunks, t0, m0, m1, l0, l1, o);
}

// The RoPE table entries of this thread's rows t0 and t0 + 8 (rows beyond T
// read nothing): cos and sin of pair i = 8·dn + 2c (+1), dn < HS/16. Loaded
// before a tile's chunks are combined, so that the combining CTA does not
// wait for them after its partial sums.
template <int kHS>
struct RopeRows {
  float2 cs[2][kHS / 16], sn[2][kHS / 16];

  __device__ __forceinline__ void Load(const float* rope, int T, int t0) {
    constexpr int kHalf = kHS / 2;
    const int c2 = (threadIdx.x & 3) * 2;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int t = t0 + 8 * r;
#pragma unroll
      for (int dn = 0; dn < kHS / 16; ++dn) {
        const int i = dn * 8 + c2;
        cs[r][dn] = t < T ? *reinterpret_cast<const float2*>(rope + t * kHalf + i)
                          : make_float2(0.0f, 0.0f);
        sn[r][dn] = t < T ? *reinterpret_cast<const float2*>(
                                rope + T * kHalf + t * kHalf + i)
                          : make_float2(0.0f, 0.0f);
      }
    }
  }
};

// The gradient of one head's rotated q (or k) for rows t0 and t0 + 8 of
// this thread, g = scale · acc, through the inverse RoPE (rope.h; the pair
// partner of column i < HS/2 is i + HS/2, held by the same thread in
// n-tile dn + HS/16; `rr` holds the table entries) and rounded to bf16
// into dst (row stride ld):
//   out[i] = g[i]·cos + g[i + HS/2]·sin,  out[i + HS/2] = g[i + HS/2]·cos − g[i]·sin.
template <int kHS>
__device__ __forceinline__ void WriteInverseRope(
    const float (&acc)[kHS / 8][4], float scale, const RopeRows<kHS>& rr,
    int T, bf16* dst, int ld, int col_head, int t0) {
  constexpr int kHalf = kHS / 2;
  const int c2 = (threadIdx.x & 3) * 2;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = t0 + 8 * r;
    if (t >= T) continue;
    bf16* out = dst + static_cast<int64_t>(t) * ld + col_head;
#pragma unroll
    for (int dn = 0; dn < kHS / 16; ++dn) {
      const int i = dn * 8 + c2;
      const float a0 = scale * acc[dn][2 * r], a1 = scale * acc[dn][2 * r + 1];
      const float b0 = scale * acc[dn + kHS / 16][2 * r];
      const float b1 = scale * acc[dn + kHS / 16][2 * r + 1];
      const float2 c = rr.cs[r][dn];
      const float2 s = rr.sn[r][dn];
      *reinterpret_cast<__nv_bfloat162*>(out + i) =
          __floats2bfloat162_rn(a0 * c.x + b0 * s.x, a1 * c.y + b1 * s.y);
      *reinterpret_cast<__nv_bfloat162*>(out + i + kHalf) =
          __floats2bfloat162_rn(b0 * c.x - a0 * s.x, b1 * c.y - a1 * s.y);
    }
  }
}

// Backward: the query-side state of one item (q and dy fragments, the
// forward's statistics of rows t0, t1) and the per-tile P and dP.
template <int kHS>
struct QuerySide {
  RowOperand<kHS> qa, da;
  float lse0, lse1;
  int t0, qt;

  // Rows t0, t0 + 8 of query tile `tile` and their lse2 (rows beyond T:
  // lse2 = +∞ gives P = 0).
  __device__ __forceinline__ void InitRows(const Params& p, int h, int tile,
                                           int lt = threadIdx.x) {
    const int T = p.T;
    qt = tile;
    t0 = qt * kTile + (lt >> 5) * 16 + ((lt & 31) >> 2);
    const int t1 = t0 + 8;
    lse0 = t0 < T ? p.stats[h * T + t0] : INFINITY;
    lse1 = t1 < T ? p.stats[h * T + t1] : INFINITY;
  }
  __device__ __forceinline__ void Init(const Params& p, int h, int tile,
                                       bf16* tile_a, bf16* tile_b) {
    const int C = p.NH * kHS, T = p.T;
    TileRegs<kHS> tq, td;
    tq.Load(p.qkv + h * kHS, 3 * C, tile * kTile, T);
    td.Load(p.dy + h * kHS, C, tile * kTile, T);
    InitRows(p, h, tile);
    tq.Store(tile_a);
    td.Store(tile_b);
    __syncthreads();
    qa.Load(tile_a, (threadIdx.x >> 5) * 16);
    da.Load(tile_b, (threadIdx.x >> 5) * 16);
  }
  // s ← P (fp32, 0 above the diagonal), dp ← dy · vᵀ for key tile kt.
  __device__ __forceinline__ void Probs(const bf16* s_k, const bf16* s_v,
                                        float scale2, int kt,
                                        float (&s)[8][4],
                                        float (&dp)[8][4]) const {
    if constexpr (UseWgmma<kHS>()) {  // both products in one batch
      WgmmaFence();
      IssueRowProducts<kHS, 8>(qa, s_k, 0, s);
      IssueRowProducts<kHS, 8>(da, s_v, 0, dp);
      WgmmaSync();
      PinFragments(s);
      PinFragments(dp);
    } else {
      RowProducts<kHS, 8>(qa, s_k, 0, s);
      RowProducts<kHS, 8>(da, s_v, 0, dp);
    }
    Probabilities(s, scale2, lse0, lse1, kt == qt, kt * kTile, t0);
  }
};

// ------------------------------------------------------------------------
// The kernels on the tensor memory accelerator (HS = 64; the dk/dv kernel
// with chunks of at most kTmaKeysLongSplit tiles; Launch picks them when it
// can). One thread
// issues the CTA's loads — 64 × 64 bf16 boxes of the qkv tensor [T, 3C]
// and of dy [T, C], written by the TMA in the 128-byte-swizzle layout the
// products read; rows beyond T arrive as zeros (the maps' bounds), as
// TileRegs gives them — and the threads wait on mbarriers. Nothing is
// staged through registers. Dynamic shared memory (TmaTiles): 1024 bytes
// of alignment slack, kOwn tiles of the CTA's own rows (one mbarrier for
// them), then kStages slots of the loop's pair of tiles (k and v, or q and
// dy; one mbarrier each). The prologue fills min(n, kStages) slots; the
// loop waits for slot i % kStages and, when a later tile i + kStages
// remains, refills the slot after a barrier (every warpgroup product
// reading it has been waited for by then). With n ≤ kStages, no barrier in
// the loop. With one warpgroup per CTA, the same products, softmax and
// combines as the kernels that stage through registers, so the same bits
// (the kernels of several warpgroups merge at other points: other bits).
constexpr int kTmaTileBytes = kTile * 64 * 2;
// The dk/dv kernel holds the lse2 and D of its chunk's query rows in shared
// memory, sized for chunks of at most kTmaKeysShortSplit tiles (the
// default until 2026-12-01) or kTmaKeysLongSplit; longer chunks run the
// register-staged kernel.
constexpr int kTmaKeysShortSplit = 6;
constexpr int kTmaKeysLongSplit = 16;

template <int kOwn, int kStages>
struct TmaTiles {
  static constexpr int kBytes =
      1024 + (kOwn + 2 * kStages) * kTmaTileBytes + 8 * (1 + kStages);
  unsigned char* base;

  __device__ __forceinline__ explicit TmaTiles(unsigned char* shared)
      : base(reinterpret_cast<unsigned char*>(
            (reinterpret_cast<uintptr_t>(shared) + 1023) &
            ~static_cast<uintptr_t>(1023))) {}
  __device__ __forceinline__ bf16* Tile(int i) const {
    return reinterpret_cast<bf16*>(base + i * kTmaTileBytes);
  }
  __device__ __forceinline__ bf16* Own(int i) const { return Tile(i); }
  __device__ __forceinline__ bf16* First(int slot) const {
    return Tile(kOwn + slot);
  }
  __device__ __forceinline__ bf16* Second(int slot) const {
    return Tile(kOwn + kStages + slot);
  }
  __device__ __forceinline__ uint32_t Bar(int i) const {  // 0: own tiles
    return SharedAddress(base + (kOwn + 2 * kStages) * kTmaTileBytes) + 8 * i;
  }
};

// Where a tile comes from: a map and the column of the head's slice.
struct TmaSource {
  const CUtensorMap* map;
  int col;
};

// Thread 0 of the CTA: barriers initialized; the own tiles (rows own_row0..
// of own[i]) and the first min(n, kStages) pairs (rows (tile0 + i)·64.. of
// first and second) issued. The caller's other threads wait at the barrier
// ending this call.
template <int kOwn, int kStages>
__device__ __forceinline__ void TmaPrologue(const TmaTiles<kOwn, kStages>& t,
                                            const TmaSource (&own)[kOwn],
                                            int own_row0, TmaSource first,
                                            TmaSource second, int tile0,
                                            int n) {
  if (threadIdx.x == 0) {
    for (int i = 0; i <= kStages; ++i) BarrierInit(t.Bar(i), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    BarrierArriveExpectBytes(t.Bar(0), kOwn * kTmaTileBytes);
#pragma unroll
    for (int i = 0; i < kOwn; ++i) {
      TmaLoad(SharedAddress(t.Own(i)), own[i].map, own[i].col, own_row0,
              t.Bar(0));
    }
    for (int i = 0; i < n && i < kStages; ++i) {
      BarrierArriveExpectBytes(t.Bar(1 + i), 2 * kTmaTileBytes);
      TmaLoad(SharedAddress(t.First(i)), first.map, first.col,
              (tile0 + i) * kTile, t.Bar(1 + i));
      TmaLoad(SharedAddress(t.Second(i)), second.map, second.col,
              (tile0 + i) * kTile, t.Bar(1 + i));
    }
  }
  __syncthreads();
}

// Thread-level: slot `slot`'s pair refilled with rows row0.. of first and
// second (its barrier armed for both tiles' bytes).
template <int kOwn, int kStages>
__device__ __forceinline__ void RefillSlot(const TmaTiles<kOwn, kStages>& t,
                                           int slot, TmaSource first,
                                           TmaSource second, int row0) {
  BarrierArriveExpectBytes(t.Bar(1 + slot), 2 * kTmaTileBytes);
  TmaLoad(SharedAddress(t.First(slot)), first.map, first.col, row0,
          t.Bar(1 + slot));
  TmaLoad(SharedAddress(t.Second(slot)), second.map, second.col, row0,
          t.Bar(1 + slot));
}

// The loop over tiles tile0 .. tile0 + n − 1: body(i, first, second) on
// each pair as it arrives (slot i % kStages, phase i / kStages).
template <int kOwn, int kStages, typename Body>
__device__ __forceinline__ void ForEachTmaPair(
    const TmaTiles<kOwn, kStages>& t, TmaSource first, TmaSource second,
    int tile0, int n, Body&& body) {
  for (int i = 0; i < n; ++i) {
    const int slot = i % kStages;
    BarrierWait(t.Bar(1 + slot), (i / kStages) & 1);
    body(i, t.First(slot), t.Second(slot));
    if (i + kStages < n) {
      __syncthreads();
      if (threadIdx.x == 0) {
        RefillSlot(t, slot, first, second, (tile0 + i + kStages) * kTile);
      }
    }
  }
}

// Several warpgroups per CTA (the *GroupsKernel kernels): warpgroup w of
// kGroups takes tiles w, w + kGroups, … of the chunk's n, tile i in slot
// i % kSlots (kSlots a multiple of kGroups, so a slot serves one
// warpgroup). After its loop each warpgroup w > 0 leaves its partial state
// in shared memory (in tiles of its own slots, which it has finished
// reading) and arrives at kGroupMergeBarrier; warpgroup 0 waits there,
// merges the states in warpgroup order and finishes the item alone, on its
// own named barrier (the others have exited). Thread i of every warpgroup
// holds the same rows and columns, so the merge is element by element.
constexpr int kGroupMergeBarrier = 1;   // warpgroups 1.. arrive, 0 waits
constexpr int kGroupFinishBarrier = 2;  // warpgroup 0's own barrier
constexpr int kGroupRefillBarrier = 3;  // 3 + w: warpgroup w's refills

// A CTA of kGroups (2 or 4) warpgroups: its threads, and its shared memory:
// kOwn tiles of its own rows and kSlots slots (a multiple of kGroups).
template <int kGroups, int kOwn, int kSlots>
struct GroupTiles {
  static_assert(kGroups == 2 || kGroups == 4, "2 or 4 warpgroups");
  static_assert(kSlots % kGroups == 0, "a slot serves one warpgroup");
  static constexpr int kThreadsPerCta = kGroups * kThreads;
  using Tiles = TmaTiles<kOwn, kSlots>;
};

// Named barrier kId over one warpgroup's 128 threads.
template <int kId>
__device__ __forceinline__ void WarpgroupBarrier() {
  asm volatile("bar.sync %0, %1;" ::"n"(kId), "n"(kThreads) : "memory");
}

// Warpgroup wg's named refill barrier (constant ids).
__device__ __forceinline__ void GroupRefillBarrier(int wg) {
  switch (wg) {
    case 0: WarpgroupBarrier<kGroupRefillBarrier>(); break;
    case 1: WarpgroupBarrier<kGroupRefillBarrier + 1>(); break;
    case 2: WarpgroupBarrier<kGroupRefillBarrier + 2>(); break;
    default: WarpgroupBarrier<kGroupRefillBarrier + 3>(); break;
  }
}

// The loop of warpgroup wg (thread lt of it) of kGroups over its tiles of
// the chunk's n (tile0 its first): body(i, first, second) on tile i's pair
// as it arrives (slot i % kStages, phase i / kStages); then, when tile
// i + kStages remains, thread 0 of the warpgroup refills the slot with it,
// once the warpgroup's four warps are past their products (a named
// barrier of its own).
template <int kGroups, int kOwn, int kStages, typename Body>
__device__ __forceinline__ void ForEachGroupTile(
    const TmaTiles<kOwn, kStages>& t, TmaSource first, TmaSource second,
    int tile0, int n, int wg, int lt, Body&& body) {
  static_assert(kStages % kGroups == 0, "a slot serves one warpgroup");
  static_assert(kGroups <= 4, "refill barriers for 4 warpgroups");
  for (int i = wg; i < n; i += kGroups) {
    const int slot = i % kStages;
    BarrierWait(t.Bar(1 + slot), (i / kStages) & 1);
    body(i, t.First(slot), t.Second(slot));
    if (i + kStages >= n) continue;
    GroupRefillBarrier(wg);
    if (lt == 0) {
      RefillSlot(t, slot, first, second, (tile0 + i + kStages) * kTile);
    }
  }
}

// ForEachGroupTile with the row products of a warpgroup's next tile (tile
// i + kGroups) issued right behind tile i's accumulation, in one wgmma
// group, so that the warpgroup waits for its products once a tile
// instead of twice. Also the loop of the one-warpgroup kernels (kGroups =
// 1, wg = 0: its named barrier then spans the CTA). issue(i, first,
// second) issues tile i's row products (no fence or commit); consume(i,
// first, second) runs once they have completed: it pins and reads their
// accumulators, computes, fences and issues the accumulation (no commit).
// Every group is waited for within its step, so no product is in flight
// across the loop's back edge, and the last step is peeled off so that
// every step of the loop issues the next row products: a branch around
// them, or accumulators live across the back edge, make ptxas define
// accumulator registers with ordinary moves inside the group, and then it
// serializes the products (C7515). Slot i % kStages is refilled with tile
// i + kStages once step i's group has completed, so the next tile's slot
// must be another: kStages ≥ 2·kGroups. n ≥ 1 (a warpgroup with no tile,
// wg ≥ n, does nothing). The same products in the same order as
// ForEachTmaPair's and ForEachGroupTile's callers: the same bits.
template <int kGroups, int kOwn, int kStages, typename Issue,
          typename Consume>
__device__ __forceinline__ void ForEachGroupTilePipelined(
    const TmaTiles<kOwn, kStages>& t, TmaSource first, TmaSource second,
    int tile0, int n, int wg, int lt, Issue&& issue, Consume&& consume) {
  static_assert(kStages % kGroups == 0, "a slot serves one warpgroup");
  static_assert(kStages >= 2 * kGroups, "the next tile in another slot");
  static_assert(kGroups <= 4, "refill barriers for 4 warpgroups");
  if (wg >= n) return;
  BarrierWait(t.Bar(1 + wg % kStages), (wg / kStages) & 1);
  WgmmaFence();
  issue(wg, t.First(wg % kStages), t.Second(wg % kStages));
  WgmmaCommit();
  WgmmaWait<0>();
  int i = wg;
  for (; i + kGroups < n; i += kGroups) {
    const int slot = i % kStages, next = (i + kGroups) % kStages;
    consume(i, t.First(slot), t.Second(slot));
    BarrierWait(t.Bar(1 + next), ((i + kGroups) / kStages) & 1);
    WgmmaFence();
    issue(i + kGroups, t.First(next), t.Second(next));
    WgmmaCommit();
    WgmmaWait<0>();
    if (i + kStages < n) {
      GroupRefillBarrier(wg);
      if (lt == 0) {
        RefillSlot(t, slot, first, second, (tile0 + i + kStages) * kTile);
      }
    }
  }
  consume(i, t.First(i % kStages), t.Second(i % kStages));
  WgmmaCommit();
  WgmmaWait<0>();
}

// The merge barrier of a CTA of kAll threads: warpgroups 1.. arrive (their
// shared-memory stores before it), warpgroup 0 waits.
template <int kAll>
__device__ __forceinline__ void GroupStateArrive() {
  asm volatile("bar.arrive %0, %1;" ::"n"(kGroupMergeBarrier), "n"(kAll)
               : "memory");
}
template <int kAll>
__device__ __forceinline__ void GroupStateWait() {
  asm volatile("bar.sync %0, %1;" ::"n"(kGroupMergeBarrier), "n"(kAll)
               : "memory");
}

// The backward kernels' TMA sources for head h (HS = 64, C = NH · 64):
// its q, k and v columns of qkv [T, 3C] and its columns of dy [T, C]; thread
// 0 of the CTA prefetches both maps' descriptors.
struct BackwardSources {
  TmaSource q, k, v, dy;
};
__device__ __forceinline__ BackwardSources BackwardTmaSources(
    const CUtensorMap& qkv_map, const CUtensorMap& dy_map, int h, int C) {
  if (threadIdx.x == 0) {
    PrefetchTensorMap(&qkv_map);
    PrefetchTensorMap(&dy_map);
  }
  return {{&qkv_map, h * 64},
          {&qkv_map, C + h * 64},
          {&qkv_map, 2 * C + h * 64},
          {&dy_map, h * 64}};
}

// Slots per kernel of one warpgroup, measured on the H200
// (docs/PERFORMANCE.md run 16; the step's ms with forward / dq / dk-dv
// slots 3 / 4 / 3: 2.455; 3/4/4 2.457, 2/4/4 2.460, 4/4/4 2.463, 3/5/5
// 2.484, 3/3/4 2.480, 6/3/3 2.46; at run 20's splits of 16, dq / dk-dv
// 6/4, 4/5, 8/3 were slower than 4/3 too): the forward at 58 KB of shared
// memory (3 CTAs per SM), dq at 81 KB (2 per SM), dk/dv at 66 KB plus
// the rows' lse2 and D (8 KB at splits up to 16; 2 per SM by its
// registers).
constexpr int kTmaForwardStages = 3;
constexpr int kTmaQueryStages = 4;
constexpr int kTmaKeyStages = 3;
using ForwardTma = TmaTiles<1, kTmaForwardStages>;
using QueryTma = TmaTiles<2, kTmaQueryStages>;
using KeyTma = TmaTiles<2, kTmaKeyStages>;

// The forward (ForwardKernel's work) on the TMA: own tile q; pairs k, v.
__global__ void __launch_bounds__(kThreads)
    ForwardTmaKernel(const __grid_constant__ CUtensorMap qkv_map,
                     const Params p) {
  constexpr int kHS = 64;
  GridDependencyWait();
  extern __shared__ unsigned char forward_shared[];
  const ForwardTma t(forward_shared);
  const int h = blockIdx.y, C = p.NH * kHS;
  int qt, chunk, kt0, kt1;
  QueryItem(blockIdx.x, p.num_tiles, p.split, &qt, &chunk, &kt0, &kt1);
  const int n = kt1 - kt0 + 1;
  const int n_chunks = QueryTileChunks(qt, p.split);
  const int t0 =
      qt * kTile + (threadIdx.x >> 5) * 16 + ((threadIdx.x & 31) >> 2);
  if (threadIdx.x == 0) PrefetchTensorMap(&qkv_map);
  const TmaSource own[1] = {{&qkv_map, h * kHS}};
  const TmaSource ks{&qkv_map, C + h * kHS}, vs{&qkv_map, 2 * C + h * kHS};
  TmaPrologue(t, own, qt * kTile, ks, vs, kt0, n);
  RowOperand<kHS> qa;
  BarrierWait(t.Bar(0), 0);
  qa.Load(t.Own(0), (threadIdx.x >> 5) * 16);
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  float o[kHS / 8][4] = {};
  ForEachTmaPair(t, ks, vs, kt0, n,
                 [&](int i, const bf16* s_k, const bf16* s_v) {
                   const int kt = kt0 + i;
                   ForwardTile<kHS>(qa, s_k, s_v, kt == qt, kt * kTile, t0,
                                    p.scale2, m0, m1, l0, l1, o);
                 });
  ForwardFinish<kHS>(p, h, qt, chunk, n_chunks, t0, m0, m1, l0, l1, o);
}

// The forward on the TMA with kGroups = 2 or 4 warpgroups per CTA
// (AttentionSplits::forward_warpgroups; ForEachGroupTile): warpgroup w
// takes the chunk's key tiles w, w + kGroups, … with its own running m, l
// and o (the same ForwardTile). Then warpgroups 1.. leave their state in
// three of their own tiles (the k and v tiles of slot w and the k tile of
// slot w + kGroups) and warpgroup 0 merges them as the chunk combine does:
// M = max_w m_w, l = Σ_w l_w·α_w and o = Σ_w o_w·α_w in warpgroup order,
// α_w = 2^((m_w − M)·scale2) (a warpgroup without tiles has m = −∞, α = 0;
// warpgroup 0 always has the chunk's first tile, where every row has a key
// at or before it, so its m and M are finite), and finishes the chunk. One
// CTA per SM: with 4 warpgroups 512 threads at 128 registers, which spills
// 364 bytes a thread in the merge and finish only (no local memory in the
// loop, nvdisasm; run 20's timings include it); with 2, 256 threads at
// 163 registers.
template <int kGroups>
using ForwardGroups = GroupTiles<kGroups, 1, kGroups == 2 ? 6 : 8>;

template <int kGroups, bool kPipelined>
__global__ void __launch_bounds__(ForwardGroups<kGroups>::kThreadsPerCta, 1)
    ForwardTmaGroupsKernel(const __grid_constant__ CUtensorMap qkv_map,
                           const Params p) {
  constexpr int kHS = 64;
  constexpr int kValues = 4 + kHS / 2;  // m0, m1, l0, l1, o
  constexpr int kAll = ForwardGroups<kGroups>::kThreadsPerCta;
  GridDependencyWait();
  extern __shared__ unsigned char forward_shared[];
  const typename ForwardGroups<kGroups>::Tiles t(forward_shared);
  const int h = blockIdx.y, C = p.NH * kHS;
  int qt, chunk, kt0, kt1;
  QueryItem(blockIdx.x, p.num_tiles, p.split, &qt, &chunk, &kt0, &kt1);
  const int n = kt1 - kt0 + 1;
  const int n_chunks = QueryTileChunks(qt, p.split);
  const int wg = threadIdx.x / kThreads, lt = threadIdx.x % kThreads;
  const int t0 = qt * kTile + (lt >> 5) * 16 + ((lt & 31) >> 2);
  if (threadIdx.x == 0) PrefetchTensorMap(&qkv_map);
  const TmaSource own[1] = {{&qkv_map, h * kHS}};
  const TmaSource ks{&qkv_map, C + h * kHS}, vs{&qkv_map, 2 * C + h * kHS};
  TmaPrologue(t, own, qt * kTile, ks, vs, kt0, n);
  RowOperand<kHS> qa;
  BarrierWait(t.Bar(0), 0);
  qa.Load(t.Own(0), (lt >> 5) * 16);
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  float o[kHS / 8][4] = {};
  if constexpr (kPipelined) {
    float s[8][4];
    uint32_t pa[4][4];
    ForEachGroupTilePipelined<kGroups>(
        t, ks, vs, kt0, n, wg, lt,
        [&](int, const bf16* s_k, const bf16*) {
          IssueRowProducts<kHS, 8>(qa, s_k, 0, s);
        },
        [&](int i, const bf16*, const bf16* s_v) {
          PinFragments(s);
          PinFragments(o);
          const int kt = kt0 + i;
          ForwardSoftmax<kHS>(s, kt == qt, kt * kTile, t0, p.scale2, m0, m1,
                              l0, l1, o, pa);
          WgmmaFence();
          IssueAccumulateT<kHS, 4>(pa, s_v, 0, o);
        });
    PinFragments(o);
  } else {
    ForEachGroupTile<kGroups>(
        t, ks, vs, kt0, n, wg, lt,
        [&](int i, const bf16* s_k, const bf16* s_v) {
          const int kt = kt0 + i;
          ForwardTile<kHS>(qa, s_k, s_v, kt == qt, kt * kTile, t0, p.scale2,
                           m0, m1, l0, l1, o);
        });
  }
  // Value v of warpgroup w's thread lt: word (v % 16)·128 + lt of its
  // (v / 16)-th tile (16 values × 128 threads × 4 bytes = one 8 KB tile).
  static_assert(kValues <= 48, "three tiles per warpgroup");
  auto word = [&](int w, int v) {
    bf16* const tile = v < 16   ? t.First(w)
                       : v < 32 ? t.Second(w)
                                : t.First(w + kGroups);
    return reinterpret_cast<float*>(tile) + (v % 16) * kThreads + lt;
  };
  if (wg > 0) {
    *word(wg, 0) = m0;
    *word(wg, 1) = m1;
    *word(wg, 2) = l0;
    *word(wg, 3) = l1;
#pragma unroll
    for (int dn = 0; dn < kHS / 8; ++dn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) *word(wg, 4 + 4 * dn + e) = o[dn][e];
    }
    GroupStateArrive<kAll>();
    return;
  }
  GroupStateWait<kAll>();
  float x0 = m0, x1 = m1;
#pragma unroll
  for (int w = 1; w < kGroups; ++w) {
    x0 = fmaxf(x0, *word(w, 0));
    x1 = fmaxf(x1, *word(w, 1));
  }
  {
    const float a0 = Exp2((m0 - x0) * p.scale2);
    const float a1 = Exp2((m1 - x1) * p.scale2);
    l0 *= a0;
    l1 *= a1;
#pragma unroll
    for (int dn = 0; dn < kHS / 8; ++dn) {
      o[dn][0] *= a0;
      o[dn][1] *= a0;
      o[dn][2] *= a1;
      o[dn][3] *= a1;
    }
  }
#pragma unroll
  for (int w = 1; w < kGroups; ++w) {
    const float b0 = Exp2((*word(w, 0) - x0) * p.scale2);
    const float b1 = Exp2((*word(w, 1) - x1) * p.scale2);
    l0 = fmaf(*word(w, 2), b0, l0);
    l1 = fmaf(*word(w, 3), b1, l1);
#pragma unroll
    for (int dn = 0; dn < kHS / 8; ++dn) {
      o[dn][0] = fmaf(*word(w, 4 + 4 * dn), b0, o[dn][0]);
      o[dn][1] = fmaf(*word(w, 5 + 4 * dn), b0, o[dn][1]);
      o[dn][2] = fmaf(*word(w, 6 + 4 * dn), b1, o[dn][2]);
      o[dn][3] = fmaf(*word(w, 7 + 4 * dn), b1, o[dn][3]);
    }
  }
  ForwardFinish<kHS, kGroupFinishBarrier>(p, h, qt, chunk, n_chunks, t0, x0,
                                            x1, l0, l1, o);
}

// Backward, kernel 1: D[h][t] = Σ_d dy[t, h·HS + d] · y[t, h·HS + d]
// (fp32), which equals Σ_j P[t, j]·dP[t, j] (dP = dy·vᵀ, y = P·v): the
// FlashAttention-2 form, over the stored bf16 y. One thread per 8 columns
// (a 16-byte load of each), HS/8 neighbouring lanes per (row, head) summed
// by a fixed shuffle tree; rows beyond T are never read (RowDelta gives 0).
template <int kHS>
__global__ void __launch_bounds__(kThreads)
    BackwardDeltaKernel(const Params p) {
  GridDependencyWait();
  constexpr int kGroup = kHS / 8;
  const int C = p.NH * kHS;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t n = static_cast<int64_t>(p.T) * C / 8;
  float d = 0.0f;
  if (i < n) {
    d = kernels::DotBf16x8(*reinterpret_cast<const uint4*>(p.dy + i * 8),
                           *reinterpret_cast<const uint4*>(p.y + i * 8), d);
  }
#pragma unroll
  for (int off = 1; off < kGroup; off <<= 1) {
    d += __shfl_xor_sync(0xffffffffu, d, off);
  }
  if (i < n && i % kGroup == 0) {
    const int64_t col = (i * 8) % C;
    const int64_t t = (i * 8) / C;
    p.delta[(col / kHS) * p.T + t] = d;
  }
}

// D of row t (0 beyond T).
__device__ __forceinline__ float RowDelta(const Params& p, int h, int t) {
  return t < p.T ? p.delta[h * p.T + t] : 0.0f;
}

// dS = P ⊙ (dP − D) (rows' D in d0, d1; times the scale unless
// ScaleInEpilogue), overwriting s, as bf16 A fragments dsa.
template <int kHS>
__device__ __forceinline__ void DsFromProbs(float (&s)[8][4],
                                            const float (&dp)[8][4], float d0,
                                            float d1, const Params& p,
                                            uint32_t (&dsa)[4][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    s[n][0] *= dp[n][0] - d0;
    s[n][1] *= dp[n][1] - d0;
    s[n][2] *= dp[n][2] - d1;
    s[n][3] *= dp[n][3] - d1;
    if constexpr (!ScaleInEpilogue<kHS>()) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] *= p.scale;
    }
  }
  PackA<8>(s, dsa);
}

// The dq kernel's step over key tile kt (k and v staged in s_k, s_v):
// dS = P ⊙ (dP − D) (rows' D in d0, d1), dq += bf16(dS) · k.
template <int kHS>
__device__ __forceinline__ void QueryTileStep(const QuerySide<kHS>& qs,
                                              const bf16* s_k,
                                              const bf16* s_v, int kt,
                                              float d0, float d1,
                                              const Params& p,
                                              float (&dq)[kHS / 8][4]) {
  float s[8][4], dp[8][4];
  qs.Probs(s_k, s_v, p.scale2, kt, s, dp);
  uint32_t dsa[4][4];
  DsFromProbs<kHS>(s, dp, d0, d1, p, dsa);
  AccumulateT<kHS, 4>(dsa, s_k, 0, dq);
}

// The dq kernel's end: the chunks combined in the CTA that arrives last,
// which writes Σ (scaled, ScaleInEpilogue) through the inverse RoPE.
template <int kHS, int kBarrier = 0>
__device__ __forceinline__ void QueryFinish(const Params& p, int h,
                                            int chunk,
                                            const QuerySide<kHS>& qs,
                                            float (&dq)[kHS / 8][4]) {
  const int T = p.T, C = p.NH * kHS, qt = qs.qt;
  const int n_chunks = QueryTileChunks(qt, p.split);
  const int col0 = h * kHS + (threadIdx.x & 3) * 2;
  RopeRows<kHS> rr;
  rr.Load(p.rope, T, qs.t0);
  if (n_chunks > 1 &&
      !CombineChunks<kHS, kBarrier>(dq, p.part_dq, chunk, n_chunks,
                          p.counters + (p.NH + h) * p.num_tiles + qt, T, C,
                          col0, qs.t0)) {
    return;
  }
  WriteInverseRope<kHS>(dq, ScaleInEpilogue<kHS>() ? p.scale : 1.0f, rr, T,
                        p.dqkv, 3 * C, h * kHS, qs.t0);
}

// Backward, kernel 2: per query-side item, dS over the chunk's keys and the
// partial dq = dS · k; the tile's last chunk writes Σ (times the scale when
// it was not applied to dS, ScaleInEpilogue) into dqkv.
template <int kHS>
__global__ void __launch_bounds__(kThreads, UseWgmma<kHS>() ? 3 : 1)
    BackwardQueryKernel(const Params p) {
  GridDependencyWait();
  __shared__ __align__(TileAlign<kHS>()) bf16 s_k[TileElems<kHS>()];
  __shared__ __align__(TileAlign<kHS>()) bf16 s_v[TileElems<kHS>()];
  __shared__ __align__(TileAlign<kHS>()) bf16 s_q[OwnTileElems<kHS>()];
  __shared__ __align__(TileAlign<kHS>()) bf16 s_dy[OwnTileElems<kHS>()];
  const int h = blockIdx.y, T = p.T, C = p.NH * kHS, ld = 3 * C;
  int qt, chunk, kt0, kt1;
  QueryItem(blockIdx.x, p.num_tiles, p.split, &qt, &chunk, &kt0, &kt1);
  const bf16* k = p.qkv + C + h * kHS;
  const bf16* v = k + C;
  TileRegs<kHS> nk, nv;
  nk.Load(k, ld, kt0 * kTile, T);
  nv.Load(v, ld, kt0 * kTile, T);
  const int row_t0 =
      qt * kTile + (threadIdx.x >> 5) * 16 + ((threadIdx.x & 31) >> 2);
  const float d0 = RowDelta(p, h, row_t0), d1 = RowDelta(p, h, row_t0 + 8);
  QuerySide<kHS> qs;
  // q's and dy's tiles: kept for wgmma, else staged in s_k and s_v.
  if constexpr (UseWgmma<kHS>()) {
    qs.Init(p, h, qt, s_q, s_dy);
  } else {
    qs.Init(p, h, qt, s_k, s_v);
  }
  float dq[kHS / 8][4] = {};
  ForEachKeyTile<kHS>(k, v, ld, T, kt0, kt1, nk, nv, s_k, s_v, [&](int kt) {
    QueryTileStep<kHS>(qs, s_k, s_v, kt, d0, d1, p, dq);
  });
  QueryFinish<kHS>(p, h, chunk, qs, dq);
}

// The dk/dv step's elementwise part for the kN n-tiles of part `half` of
// query tile qt: st (Sᵀ) ← P, dpt (dPᵀ) ← dS = P ⊙ (dP − D) (times the
// scale unless ScaleInEpilogue), packed into bf16 A fragments pa, dsa.
// Columns (queries) beyond T have lse2 = +∞, so P = 0 there.
template <int kHS, int kN>
__device__ __forceinline__ void KeyProbsAndDs(
    float (&st)[kN][4], float (&dpt)[kN][4], const float* s_lse,
    const float* s_d, int half, int qt, int kt, int j0, int j1,
    const Params& p, uint32_t (&pa)[kN / 2][4], uint32_t (&dsa)[kN / 2][4]) {
  const int c = threadIdx.x & 3;
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    const int il = (half * kN + n) * 8 + c * 2;
    const float2 lse = *reinterpret_cast<const float2*>(s_lse + il);
    const float2 d = *reinterpret_cast<const float2*>(s_d + il);
    float pr[4];
    pr[0] = Exp2(fmaf(st[n][0], p.scale2, -lse.x));
    pr[1] = Exp2(fmaf(st[n][1], p.scale2, -lse.y));
    pr[2] = Exp2(fmaf(st[n][2], p.scale2, -lse.x));
    pr[3] = Exp2(fmaf(st[n][3], p.scale2, -lse.y));
    if (qt == kt) {  // diagonal tile: keys after the query → 0
      const int i = qt * kTile + il;
      if (j0 > i) pr[0] = 0.0f;
      if (j0 > i + 1) pr[1] = 0.0f;
      if (j1 > i) pr[2] = 0.0f;
      if (j1 > i + 1) pr[3] = 0.0f;
    }
    st[n][0] = pr[0];
    st[n][1] = pr[1];
    st[n][2] = pr[2];
    st[n][3] = pr[3];
    dpt[n][0] = pr[0] * (dpt[n][0] - d.x);
    dpt[n][1] = pr[1] * (dpt[n][1] - d.y);
    dpt[n][2] = pr[2] * (dpt[n][2] - d.x);
    dpt[n][3] = pr[3] * (dpt[n][3] - d.y);
    if constexpr (!ScaleInEpilogue<kHS>()) {
#pragma unroll
      for (int e = 0; e < 4; ++e) dpt[n][e] *= p.scale;
    }
  }
  PackA<kN>(st, pa);
  PackA<kN>(dpt, dsa);
}

// The dk/dv kernel's step over query tile qt (q and dy staged in s_q,
// s_o; the rows' lse2 and D in s_lse, s_d): P and dS of the key rows j0,
// j1 of this thread against the tile's queries, dv += bf16(P)ᵀ · dy,
// dk += bf16(dS)ᵀ · q.
template <int kHS>
__device__ __forceinline__ void KeyTileStep(
    const RowOperand<kHS>& ka, const RowOperand<kHS>& va, const bf16* s_q,
    const bf16* s_o, const float* s_lse, const float* s_d, int qt, int kt,
    int j0, int j1, const Params& p, float (&dk)[kHS / 8][4],
    float (&dv)[kHS / 8][4]) {
  // The query tile in kHalves parts of kN n-tiles: mma.sync in two
  // halves (registers), wgmma whole (64 × 64 products; the same k order).
  constexpr int kHalves = UseWgmma<kHS>() ? 1 : 2;
  constexpr int kN = 8 / kHalves;
#pragma unroll
  for (int half = 0; half < kHalves; ++half) {
    float st[kN][4], dpt[kN][4];
    if constexpr (UseWgmma<kHS>()) {  // both products in one batch
      WgmmaFence();
      IssueRowProducts<kHS, kN>(ka, s_q, half * kN, st);
      IssueRowProducts<kHS, kN>(va, s_o, half * kN, dpt);
      WgmmaSync();
      PinFragments(st);
      PinFragments(dpt);
    } else {
      RowProducts<kHS, kN>(ka, s_q, half * kN, st);
      RowProducts<kHS, kN>(va, s_o, half * kN, dpt);
    }
    uint32_t pa[kN / 2][4], dsa[kN / 2][4];
    KeyProbsAndDs<kHS, kN>(st, dpt, s_lse, s_d, half, qt, kt, j0, j1, p, pa,
                           dsa);
    if constexpr (UseWgmma<kHS>()) {  // both products in one batch
      WgmmaFence();
      IssueAccumulateT<kHS, kN / 2>(pa, s_o, half * kN * 8, dv);
      IssueAccumulateT<kHS, kN / 2>(dsa, s_q, half * kN * 8, dk);
      WgmmaSync();
      PinFragments(dv);
      PinFragments(dk);
    } else {
      AccumulateT<kHS, kN / 2>(pa, s_o, half * kN * 8, dv);
      AccumulateT<kHS, kN / 2>(dsa, s_q, half * kN * 8, dk);
    }
  }
}

// The dk/dv kernel's end: the chunks combined in the CTA that arrives
// last, which writes Σ dk (scaled, ScaleInEpilogue) through the inverse
// RoPE and Σ dv.
template <int kHS, int kBarrier = 0>
__device__ __forceinline__ void KeyFinish(const Params& p, int h, int kt,
                                          int chunk, int j0,
                                          float (&dk)[kHS / 8][4],
                                          float (&dv)[kHS / 8][4]) {
  const int T = p.T, C = p.NH * kHS, c = threadIdx.x & 3, j1 = j0 + 8;
  const int n_chunks = KeyTileChunks(kt, p.num_tiles, p.split);
  const int col0 = h * kHS + c * 2;
  RopeRows<kHS> rr;
  rr.Load(p.rope, T, j0);
  if (n_chunks > 1) {
    WritePartial<kHS>(dk, p.part_dk, chunk, T, C, col0, j0);
    WritePartial<kHS>(dv, p.part_dv, chunk, T, C, col0, j0);
    if (!LastArrival<kBarrier>(p.counters + (2 * p.NH + h) * p.num_tiles + kt,
                               n_chunks)) {
      return;
    }
    SumPartials<kHS>(dk, p.part_dk, chunk, n_chunks, T, C, col0, j0);
    SumPartials<kHS>(dv, p.part_dv, chunk, n_chunks, T, C, col0, j0);
  }
  WriteInverseRope<kHS>(dk, ScaleInEpilogue<kHS>() ? p.scale : 1.0f, rr, T,
                        p.dqkv, 3 * C, C + h * kHS, j0);
#pragma unroll
  for (int dn = 0; dn < kHS / 8; ++dn) {
    const int col = 2 * C + col0 + dn * 8;
    if (j0 < T) {
      *reinterpret_cast<__nv_bfloat162*>(
          p.dqkv + static_cast<int64_t>(j0) * 3 * C + col) =
          __floats2bfloat162_rn(dv[dn][0], dv[dn][1]);
    }
    if (j1 < T) {
      *reinterpret_cast<__nv_bfloat162*>(
          p.dqkv + static_cast<int64_t>(j1) * 3 * C + col) =
          __floats2bfloat162_rn(dv[dn][2], dv[dn][3]);
    }
  }
}

// Backward, kernel 3: per key-side item, over the chunk's query tiles:
// dv partial = bf16(P)ᵀ · dy, dk partial = dSᵀ · q (keys as rows: each warp
// owns 16 keys); the key tile's last chunk writes Σ dk (times the scale
// when it was not applied to dS) and Σ dv.
template <int kHS>
__global__ void __launch_bounds__(kThreads)
    BackwardKeyKernel(const Params p) {
  GridDependencyWait();
  __shared__ __align__(TileAlign<kHS>()) bf16 s_q[TileElems<kHS>()];
  __shared__ __align__(TileAlign<kHS>()) bf16 s_o[TileElems<kHS>()];
  __shared__ __align__(TileAlign<kHS>()) bf16 s_kown[OwnTileElems<kHS>()];
  __shared__ __align__(TileAlign<kHS>()) bf16 s_vown[OwnTileElems<kHS>()];
  __shared__ __align__(8) float s_lse[kTile];
  __shared__ __align__(8) float s_d[kTile];
  const int h = blockIdx.y, T = p.T, C = p.NH * kHS, ld = 3 * C;
  int kt, chunk, qt0, qt1;
  KeyItem(blockIdx.x, p.num_tiles, p.split, &kt, &chunk, &qt0, &qt1);
  const int r0 = (threadIdx.x >> 5) * 16;
  const int g = (threadIdx.x & 31) >> 2;
  const int j0 = kt * kTile + r0 + g, j1 = j0 + 8;
  const bf16* q = p.qkv + h * kHS;
  const bf16* k = q + C;
  const bf16* v = q + 2 * C;
  const bf16* o = p.dy + h * kHS;

  // Per query tile, the lse2 and D of its 64 rows (threads 0..63 load
  // them with the tile prefetch).
  auto row_stats = [&](int tile, float* lse, float* d) {
    const int i = tile * kTile + threadIdx.x;
    *lse = i < T ? p.stats[h * T + i] : INFINITY;
    *d = RowDelta(p, h, i);
  };
  // The key tile's k and v: kept for wgmma, else staged in s_q and s_o.
  bf16* const k_tile = UseWgmma<kHS>() ? s_kown : s_q;
  bf16* const v_tile = UseWgmma<kHS>() ? s_vown : s_o;
  RowOperand<kHS> ka, va;
  TileRegs<kHS> nq, no;
  float next_lse = 0.0f, next_d = 0.0f;
  {
    TileRegs<kHS> tk, tv;
    tk.Load(k, ld, kt * kTile, T);
    tv.Load(v, ld, kt * kTile, T);
    nq.Load(q, ld, qt0 * kTile, T);
    no.Load(o, C, qt0 * kTile, T);
    if (threadIdx.x < kTile) row_stats(qt0, &next_lse, &next_d);
    tk.Store(k_tile);
    tv.Store(v_tile);
    __syncthreads();
    ka.Load(k_tile, r0);
    va.Load(v_tile, r0);
  }
  float dk[kHS / 8][4] = {}, dv[kHS / 8][4] = {};
  for (int qt = qt0; qt <= qt1; ++qt) {
    __syncthreads();
    nq.Store(s_q);
    no.Store(s_o);
    if (threadIdx.x < kTile) {
      s_lse[threadIdx.x] = next_lse;
      s_d[threadIdx.x] = next_d;
    }
    __syncthreads();
    if (qt < qt1) {
      nq.Load(q, ld, (qt + 1) * kTile, T);
      no.Load(o, C, (qt + 1) * kTile, T);
      if (threadIdx.x < kTile) row_stats(qt + 1, &next_lse, &next_d);
    }
    KeyTileStep<kHS>(ka, va, s_q, s_o, s_lse, s_d, qt, kt, j0, j1, p, dk,
                     dv);
  }
  KeyFinish<kHS>(p, h, kt, chunk, j0, dk, dv);
}

// The dq kernel (BackwardQueryKernel's work) on the TMA: own tiles q, dy;
// pairs k, v. kPipelined: ForEachGroupTilePipelined (the same bits).
template <bool kPipelined>
__global__ void __launch_bounds__(kThreads, 3)
    BackwardQueryTmaKernel(const __grid_constant__ CUtensorMap qkv_map,
                           const __grid_constant__ CUtensorMap dy_map,
                           const Params p) {
  constexpr int kHS = 64;
  GridDependencyWait();
  extern __shared__ unsigned char query_shared[];
  const QueryTma t(query_shared);
  const int h = blockIdx.y, C = p.NH * kHS;
  int qt, chunk, kt0, kt1;
  QueryItem(blockIdx.x, p.num_tiles, p.split, &qt, &chunk, &kt0, &kt1);
  const BackwardSources src = BackwardTmaSources(qkv_map, dy_map, h, C);
  const TmaSource own[2] = {src.q, src.dy};
  const TmaSource ks = src.k, vs = src.v;
  TmaPrologue(t, own, qt * kTile, ks, vs, kt0, kt1 - kt0 + 1);
  QuerySide<kHS> qs;
  qs.InitRows(p, h, qt);
  const float d0 = RowDelta(p, h, qs.t0), d1 = RowDelta(p, h, qs.t0 + 8);
  BarrierWait(t.Bar(0), 0);
  qs.qa.Load(t.Own(0), (threadIdx.x >> 5) * 16);
  qs.da.Load(t.Own(1), (threadIdx.x >> 5) * 16);
  float dq[kHS / 8][4] = {};
  if constexpr (kPipelined) {
    float s[8][4], dp[8][4];
    uint32_t dsa[4][4];
    ForEachGroupTilePipelined<1>(
        t, ks, vs, kt0, kt1 - kt0 + 1, 0, threadIdx.x,
        [&](int, const bf16* s_k, const bf16* s_v) {
          IssueRowProducts<kHS, 8>(qs.qa, s_k, 0, s);
          IssueRowProducts<kHS, 8>(qs.da, s_v, 0, dp);
        },
        [&](int i, const bf16* s_k, const bf16*) {
          PinFragments(s);
          PinFragments(dp);
          const int kt = kt0 + i;
          Probabilities(s, p.scale2, qs.lse0, qs.lse1, kt == qs.qt,
                        kt * kTile, qs.t0);
          DsFromProbs<kHS>(s, dp, d0, d1, p, dsa);
          WgmmaFence();
          IssueAccumulateT<kHS, 4>(dsa, s_k, 0, dq);
        });
    PinFragments(dq);
  } else {
    ForEachTmaPair(t, ks, vs, kt0, kt1 - kt0 + 1,
                   [&](int i, const bf16* s_k, const bf16* s_v) {
                     QueryTileStep<kHS>(qs, s_k, s_v, kt0 + i, d0, d1, p, dq);
                   });
  }
  QueryFinish<kHS>(p, h, chunk, qs, dq);
}

// The dq kernel on the TMA with kGroups = 2 or 4 warpgroups per CTA
// (AttentionSplits::query_warpgroups), as ForwardTmaGroupsKernel splits
// the forward's: warpgroup w takes the chunk's key tiles w, w + kGroups, …
// (slot i % kSlots, refilled by its warpgroup), then warpgroups 1.. leave
// their dq in two of their own tiles (the k and v tiles of slot w) and
// warpgroup 0 adds them in warpgroup order and finishes the chunk alone.
// One CTA per SM (8 slots, 148 KB); with 4 warpgroups at 128 registers
// the kernel spills 152 bytes a thread.
template <int kGroups>
using QueryGroups = GroupTiles<kGroups, 2, 8>;

template <int kGroups>
__global__ void __launch_bounds__(QueryGroups<kGroups>::kThreadsPerCta, 1)
    BackwardQueryTmaGroupsKernel(const __grid_constant__ CUtensorMap qkv_map,
                                 const __grid_constant__ CUtensorMap dy_map,
                                 const Params p) {
  constexpr int kHS = 64;
  constexpr int kAll = QueryGroups<kGroups>::kThreadsPerCta;
  GridDependencyWait();
  extern __shared__ unsigned char query_shared[];
  const typename QueryGroups<kGroups>::Tiles t(query_shared);
  const int h = blockIdx.y, C = p.NH * kHS;
  int qt, chunk, kt0, kt1;
  QueryItem(blockIdx.x, p.num_tiles, p.split, &qt, &chunk, &kt0, &kt1);
  const int n = kt1 - kt0 + 1;
  const int wg = threadIdx.x / kThreads, lt = threadIdx.x % kThreads;
  const BackwardSources src = BackwardTmaSources(qkv_map, dy_map, h, C);
  const TmaSource own[2] = {src.q, src.dy};
  const TmaSource ks = src.k, vs = src.v;
  TmaPrologue(t, own, qt * kTile, ks, vs, kt0, n);
  QuerySide<kHS> qs;
  qs.InitRows(p, h, qt, lt);
  const float d0 = RowDelta(p, h, qs.t0), d1 = RowDelta(p, h, qs.t0 + 8);
  BarrierWait(t.Bar(0), 0);
  qs.qa.Load(t.Own(0), (lt >> 5) * 16);
  qs.da.Load(t.Own(1), (lt >> 5) * 16);
  float dq[kHS / 8][4] = {};
  ForEachGroupTile<kGroups>(t, ks, vs, kt0, n, wg, lt,
                            [&](int i, const bf16* s_k, const bf16* s_v) {
                              QueryTileStep<kHS>(qs, s_k, s_v, kt0 + i, d0, d1,
                                                 p, dq);
                            });
  // Value v of warpgroup w's thread lt: word (v % 16)·128 + lt of the k
  // (v < 16) or v tile of slot w.
  auto word = [&](int w, int v) {
    bf16* const tile = v < 16 ? t.First(w) : t.Second(w);
    return reinterpret_cast<float*>(tile) + (v % 16) * kThreads + lt;
  };
  if (wg > 0) {
#pragma unroll
    for (int dn = 0; dn < kHS / 8; ++dn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) *word(wg, 4 * dn + e) = dq[dn][e];
    }
    GroupStateArrive<kAll>();
    return;
  }
  GroupStateWait<kAll>();
#pragma unroll
  for (int w = 1; w < kGroups; ++w) {
#pragma unroll
    for (int dn = 0; dn < kHS / 8; ++dn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[dn][e] += *word(w, 4 * dn + e);
    }
  }
  QueryFinish<kHS, kGroupFinishBarrier>(p, h, chunk, qs, dq);
}

// The lse2 and D of the n query tiles' rows from tile qt0 into s_lse and
// s_d (kMaxTiles · 64 each) by the CTA's kAll threads, while its tiles
// arrive: rows beyond T get lse2 = +∞ (P = 0) and D = 0; the loads are
// issued together, then stored; a CTA barrier ends it.
template <int kMaxTiles, int kAll>
__device__ __forceinline__ void KeyRowStats(const Params& p, int h, int qt0,
                                            int n, float* s_lse, float* s_d) {
  const int T = p.T;
  constexpr int kRowsPerThread = kMaxTiles * kTile / kAll;
  static_assert(kRowsPerThread * kAll == kMaxTiles * kTile,
                "the chunk's rows split evenly over the threads");
  float lse[kRowsPerThread], d[kRowsPerThread];
#pragma unroll
  for (int j = 0; j < kRowsPerThread; ++j) {
    const int r = threadIdx.x + j * kAll;
    const int i = qt0 * kTile + r;
    lse[j] = r < n * kTile && i < T ? p.stats[h * T + i] : INFINITY;
    d[j] = r < n * kTile ? RowDelta(p, h, i) : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kRowsPerThread; ++j) {
    s_lse[threadIdx.x + j * kAll] = lse[j];
    s_d[threadIdx.x + j * kAll] = d[j];
  }
  __syncthreads();
}

// The dk/dv kernel (BackwardKeyKernel's work) on the TMA: own tiles k, v;
// pairs q, dy; the lse2 and D of every query row of the chunk loaded into
// shared memory by the threads while the first tiles arrive.
// kMaxTiles: the most query tiles of a chunk (the split), which the rows'
// lse2 and D in shared memory are sized for. kPipelined:
// ForEachGroupTilePipelined (the same bits).
template <int kMaxTiles, bool kPipelined>
__global__ void __launch_bounds__(kThreads)
    BackwardKeyTmaKernel(const __grid_constant__ CUtensorMap qkv_map,
                         const __grid_constant__ CUtensorMap dy_map,
                         const Params p) {
  constexpr int kHS = 64;
  GridDependencyWait();
  extern __shared__ unsigned char key_shared[];
  __shared__ __align__(16) float s_lse[kMaxTiles * kTile];
  __shared__ __align__(16) float s_d[kMaxTiles * kTile];
  const KeyTma t(key_shared);
  const int h = blockIdx.y, C = p.NH * kHS;
  int kt, chunk, qt0, qt1;
  KeyItem(blockIdx.x, p.num_tiles, p.split, &kt, &chunk, &qt0, &qt1);
  const int n = qt1 - qt0 + 1;
  const int r0 = (threadIdx.x >> 5) * 16;
  const int j0 = kt * kTile + r0 + ((threadIdx.x & 31) >> 2), j1 = j0 + 8;
  const BackwardSources src = BackwardTmaSources(qkv_map, dy_map, h, C);
  const TmaSource own[2] = {src.k, src.v};
  const TmaSource qs = src.q, ds = src.dy;
  TmaPrologue(t, own, kt * kTile, qs, ds, qt0, n);
  KeyRowStats<kMaxTiles, kThreads>(p, h, qt0, n, s_lse, s_d);
  RowOperand<kHS> ka, va;
  BarrierWait(t.Bar(0), 0);
  ka.Load(t.Own(0), r0);
  va.Load(t.Own(1), r0);
  float dk[kHS / 8][4] = {}, dv[kHS / 8][4] = {};
  if constexpr (kPipelined) {
    float st[8][4], dpt[8][4];
    uint32_t pa[4][4], dsa[4][4];
    ForEachGroupTilePipelined<1>(
        t, qs, ds, qt0, n, 0, threadIdx.x,
        [&](int, const bf16* s_q, const bf16* s_o) {
          IssueRowProducts<kHS, 8>(ka, s_q, 0, st);
          IssueRowProducts<kHS, 8>(va, s_o, 0, dpt);
        },
        [&](int i, const bf16* s_q, const bf16* s_o) {
          PinFragments(st);
          PinFragments(dpt);
          KeyProbsAndDs<kHS, 8>(st, dpt, s_lse + i * kTile, s_d + i * kTile,
                                0, qt0 + i, kt, j0, j1, p, pa, dsa);
          WgmmaFence();
          IssueAccumulateT<kHS, 4>(pa, s_o, 0, dv);
          IssueAccumulateT<kHS, 4>(dsa, s_q, 0, dk);
        });
    PinFragments(dv);
    PinFragments(dk);
  } else {
    ForEachTmaPair(t, qs, ds, qt0, n,
                   [&](int i, const bf16* s_q, const bf16* s_o) {
                     KeyTileStep<kHS>(ka, va, s_q, s_o, s_lse + i * kTile,
                                      s_d + i * kTile, qt0 + i, kt, j0, j1, p,
                                      dk, dv);
                   });
  }
  KeyFinish<kHS>(p, h, kt, chunk, j0, dk, dv);
}

// The dk/dv kernel on the TMA with kGroups = 2 warpgroups per CTA (4 would
// leave 128 registers a thread: ptxas serializes the products)
// (AttentionSplits::keys_warpgroups; chunks of at most kTmaKeysLongSplit
// query tiles), as the dq kernel's groups: warpgroup w takes the chunk's
// query tiles w, w + kGroups, … (slot i % kSlots, refilled by its
// warpgroup), then warpgroups 1.. leave their dk and dv in four of their
// own tiles (the q and dy tiles of slots w and w + kGroups) and warpgroup
// 0 adds them in warpgroup order and finishes the chunk alone.
template <int kGroups>
using KeyGroups = GroupTiles<kGroups, 2, 8>;

template <int kGroups>
__global__ void __launch_bounds__(KeyGroups<kGroups>::kThreadsPerCta, 1)
    BackwardKeyTmaGroupsKernel(const __grid_constant__ CUtensorMap qkv_map,
                               const __grid_constant__ CUtensorMap dy_map,
                               const Params p) {
  constexpr int kHS = 64;
  static_assert(kGroups == 2, "2 warpgroups");
  constexpr int kMaxTiles = kTmaKeysLongSplit;
  constexpr int kAll = KeyGroups<kGroups>::kThreadsPerCta;
  GridDependencyWait();
  extern __shared__ unsigned char key_shared[];
  __shared__ __align__(16) float s_lse[kMaxTiles * kTile];
  __shared__ __align__(16) float s_d[kMaxTiles * kTile];
  const typename KeyGroups<kGroups>::Tiles t(key_shared);
  const int h = blockIdx.y, C = p.NH * kHS;
  int kt, chunk, qt0, qt1;
  KeyItem(blockIdx.x, p.num_tiles, p.split, &kt, &chunk, &qt0, &qt1);
  const int n = qt1 - qt0 + 1;
  const int wg = threadIdx.x / kThreads, lt = threadIdx.x % kThreads;
  const int r0 = (lt >> 5) * 16;
  const int j0 = kt * kTile + r0 + ((lt & 31) >> 2), j1 = j0 + 8;
  const BackwardSources src = BackwardTmaSources(qkv_map, dy_map, h, C);
  const TmaSource own[2] = {src.k, src.v};
  const TmaSource qs = src.q, ds = src.dy;
  TmaPrologue(t, own, kt * kTile, qs, ds, qt0, n);
  KeyRowStats<kMaxTiles, kAll>(p, h, qt0, n, s_lse, s_d);
  RowOperand<kHS> ka, va;
  BarrierWait(t.Bar(0), 0);
  ka.Load(t.Own(0), r0);
  va.Load(t.Own(1), r0);
  float dk[kHS / 8][4] = {}, dv[kHS / 8][4] = {};
  ForEachGroupTile<kGroups>(t, qs, ds, qt0, n, wg, lt,
                            [&](int i, const bf16* s_q, const bf16* s_o) {
                              KeyTileStep<kHS>(ka, va, s_q, s_o,
                                               s_lse + i * kTile,
                                               s_d + i * kTile, qt0 + i, kt,
                                               j0, j1, p, dk, dv);
                            });
  // Value v (dk: 0..31, dv: 32..63) of warpgroup w's thread lt: word
  // (v % 16)·128 + lt of its (v / 16)-th tile.
  auto word = [&](int w, int v) {
    const int slot = v < 32 ? w : w + kGroups;
    bf16* const tile = (v / 16) % 2 == 0 ? t.First(slot) : t.Second(slot);
    return reinterpret_cast<float*>(tile) + (v % 16) * kThreads + lt;
  };
  if (wg > 0) {
#pragma unroll
    for (int dn = 0; dn < kHS / 8; ++dn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        *word(wg, 4 * dn + e) = dk[dn][e];
        *word(wg, 32 + 4 * dn + e) = dv[dn][e];
      }
    }
    GroupStateArrive<kAll>();
    return;
  }
  GroupStateWait<kAll>();
#pragma unroll
  for (int w = 1; w < kGroups; ++w) {
#pragma unroll
    for (int dn = 0; dn < kHS / 8; ++dn) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        dk[dn][e] += *word(w, 4 * dn + e);
        dv[dn][e] += *word(w, 32 + 4 * dn + e);
      }
    }
  }
  KeyFinish<kHS, kGroupFinishBarrier>(p, h, kt, chunk, j0, dk, dv);
}

// Scratch layout, in 4-byte words, each region aligned to 64 words.
struct ScratchLayout {
  size_t counters, part_m, part_l, delta, part_o, part_dq, part_dk, part_dv;
  size_t words;
};

// Room for the partials of every kernel at its split in `splits`.
ScratchLayout Layout(int T, int NH, int HS, const AttentionSplits& splits) {
  const int min_split =
      std::min(splits.forward, std::min(splits.query, splits.keys));
  const size_t tiles = static_cast<size_t>(AttentionTiles(T));
  const size_t chunks = static_cast<size_t>(
      AttentionChunks(static_cast<int>(tiles), min_split));
  const size_t rows = chunks * NH * T;
  const size_t plane = chunks * T * static_cast<size_t>(NH) * HS;
  auto up = [](size_t w) { return (w + 63) / 64 * 64; };
  ScratchLayout l;
  size_t at = 0;
  l.counters = at;
  at += up(3 * NH * tiles);
  l.part_m = at;
  at += up(rows);
  l.part_l = at;
  at += up(rows);
  l.delta = at;
  at += up(static_cast<size_t>(NH) * T);
  l.part_o = at;
  at += up(plane);
  l.part_dq = at;
  at += up(plane);
  l.part_dk = at;
  at += up(plane);
  l.part_dv = at;
  at += up(plane);
  l.words = at;
  return l;
}

Params MakeParams(const bf16* qkv, const bf16* dy, bf16* y, float* stats,
                  const float* rope, bf16* dqkv, int T, int NH, int HS,
                  void* scratch, const AttentionSplits& splits, int split) {
  const ScratchLayout l = Layout(T, NH, HS, splits);
  float* w = static_cast<float*>(scratch);
  Params p;
  p.qkv = qkv;
  p.dy = dy;
  p.y = y;
  p.stats = stats;
  p.rope = rope;
  p.dqkv = dqkv;
  p.T = T;
  p.NH = NH;
  p.num_tiles = AttentionTiles(T);
  p.split = split;
  p.warpgroups = splits.forward_warpgroups;
  p.query_warpgroups = splits.query_warpgroups;
  p.keys_warpgroups = splits.keys_warpgroups;
  p.pipelined_backward = splits.pipelined_backward;
  p.pipelined_forward = splits.pipelined_forward;
  p.scale = 1.0f / sqrtf(static_cast<float>(HS));
  p.scale2 = p.scale * 1.4426950408889634f;  // log2(e)
  p.counters = reinterpret_cast<int*>(w + l.counters);
  p.part_m = w + l.part_m;
  p.part_l = w + l.part_l;
  p.delta = w + l.delta;
  p.part_o = w + l.part_o;
  p.part_dq = w + l.part_dq;
  p.part_dk = w + l.part_dk;
  p.part_dv = w + l.part_dv;
  return p;
}

enum Which { kForward, kDelta, kQuery, kKeys };

// The tensor maps of the TMA kernels (HS = 64): qkv [T, 3C] and, when
// dy_map is not null, dy [T, C], in 64 × 64 boxes (rows beyond T read as
// zeros). cudaErrorNotSupported when the driver has no tensor-map encoder:
// the caller then launches the register-staged kernel.
cudaError_t MakeAttentionMaps(const Params& p, CUtensorMap* qkv_map,
                              CUtensorMap* dy_map) {
  const int C = p.NH * 64;
  const cudaError_t e = MakeMap(p.qkv, p.T, 3 * C, kTile, qkv_map);
  if (e != cudaSuccess || dy_map == nullptr) return e;
  return MakeMap(p.dy, p.T, C, kTile, dy_map);
}

// A kernel with `bytes` of dynamic shared memory (raising its limit).
template <typename... Params, typename... Args>
cudaError_t LaunchDynamic(void (*kernel)(Params...), int bytes, dim3 grid,
                          int threads, cudaStream_t stream, Args&&... args) {
  const cudaError_t a = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (a != cudaSuccess) return a;
  return LaunchKernel(kernel, grid, threads, bytes, stream,
                      std::forward<Args>(args)...);
}

// A kernel of several warpgroups per CTA (ForEachGroupTile), with its
// traits' shared memory (Traits::Tiles::kBytes) and threads.
template <typename Traits, typename... Params, typename... Args>
cudaError_t LaunchGroups(void (*kernel)(Params...), dim3 grid,
                         cudaStream_t stream, Args&&... args) {
  return LaunchDynamic(kernel, Traits::Tiles::kBytes, grid,
                       Traits::kThreadsPerCta, stream,
                       std::forward<Args>(args)...);
}

// launch(std::true_type) or launch(std::false_type): a kernel template's
// pipelined or plain instance picked at run time.
template <typename Launch>
cudaError_t WithPipelined(bool pipelined, Launch&& launch) {
  return pipelined ? launch(std::true_type{}) : launch(std::false_type{});
}

template <int kHS>
cudaError_t LaunchHS(Which which, const Params& p, cudaStream_t stream) {
  const dim3 grid(NumAttentionItems(p.num_tiles, p.split), p.NH);
  switch (which) {
    case kForward:
      if constexpr (kHS == 64) {
        CUtensorMap qkv_map;
        const cudaError_t e = MakeAttentionMaps(p, &qkv_map, nullptr);
        if (e == cudaSuccess) {
          switch (p.warpgroups) {
            case 2:
              return WithPipelined(p.pipelined_forward, [&](auto on) {
                return LaunchGroups<ForwardGroups<2>>(
                    ForwardTmaGroupsKernel<2, decltype(on)::value>, grid,
                    stream, qkv_map, p);
              });
            case 4:
              return WithPipelined(p.pipelined_forward, [&](auto on) {
                return LaunchGroups<ForwardGroups<4>>(
                    ForwardTmaGroupsKernel<4, decltype(on)::value>, grid,
                    stream, qkv_map, p);
              });
            default:
              return LaunchDynamic(ForwardTmaKernel, ForwardTma::kBytes, grid,
                                   kThreads, stream, qkv_map, p);
          }
        }
        if (e != cudaErrorNotSupported) return e;
      }
      return LaunchKernel(ForwardKernel<kHS>, grid, kThreads, 0, stream, p);
    case kDelta: {
      const int64_t threads = static_cast<int64_t>(p.T) * p.NH * kHS / 8;
      return LaunchKernel(BackwardDeltaKernel<kHS>,
                          dim3(static_cast<unsigned>((threads + kThreads - 1) /
                                                     kThreads)),
                          kThreads, 0, stream, p);
    }
    case kQuery:
    case kKeys:
      if constexpr (kHS == 64) {
        CUtensorMap qkv_map, dy_map;
        const cudaError_t e =
            which == kQuery || p.split <= kTmaKeysLongSplit
                ? MakeAttentionMaps(p, &qkv_map, &dy_map)
                : cudaErrorNotSupported;
        if (e == cudaSuccess) {
          if (which == kQuery) {
            switch (p.query_warpgroups) {
              case 2:
                return LaunchGroups<QueryGroups<2>>(
                    BackwardQueryTmaGroupsKernel<2>, grid, stream, qkv_map,
                    dy_map, p);
              case 4:
                return LaunchGroups<QueryGroups<4>>(
                    BackwardQueryTmaGroupsKernel<4>, grid, stream, qkv_map,
                    dy_map, p);
              default:
                return WithPipelined(p.pipelined_backward, [&](auto on) {
                  return LaunchDynamic(
                      BackwardQueryTmaKernel<decltype(on)::value>,
                      QueryTma::kBytes, grid, kThreads, stream, qkv_map,
                      dy_map, p);
                });
            }
          }
          if (p.keys_warpgroups == 2) {
            return LaunchGroups<KeyGroups<2>>(BackwardKeyTmaGroupsKernel<2>,
                                              grid, stream, qkv_map, dy_map,
                                              p);
          }
          return WithPipelined(p.pipelined_backward, [&](auto on) {
            constexpr bool kOn = decltype(on)::value;
            return p.split <= kTmaKeysShortSplit
                       ? LaunchDynamic(
                             BackwardKeyTmaKernel<kTmaKeysShortSplit, kOn>,
                             KeyTma::kBytes, grid, kThreads, stream, qkv_map,
                             dy_map, p)
                       : LaunchDynamic(
                             BackwardKeyTmaKernel<kTmaKeysLongSplit, kOn>,
                             KeyTma::kBytes, grid, kThreads, stream, qkv_map,
                             dy_map, p);
          });
        }
        if (e != cudaErrorNotSupported) return e;
      }
      return which == kQuery ? LaunchKernel(BackwardQueryKernel<kHS>, grid,
                                            kThreads, 0, stream, p)
                             : LaunchKernel(BackwardKeyKernel<kHS>, grid,
                                            kThreads, 0, stream, p);
  }
  return cudaErrorInvalidValue;
}

cudaError_t Launch(Which which, int HS, const Params& p,
                   cudaStream_t stream) {
  if (p.T <= 0 || p.NH <= 0 || p.split < 1) return cudaErrorInvalidValue;
  switch (HS) {
    case 16: return LaunchHS<16>(which, p, stream);
    case 32: return LaunchHS<32>(which, p, stream);
    case 64: return LaunchHS<64>(which, p, stream);
    default: return cudaErrorInvalidValue;
  }
}

// The backward's kernels read the forward's y and statistics (never
// written here: Params holds one non-const pointer for both directions).
cudaError_t LaunchBackward(Which which, const bf16* qkv, const bf16* y,
                           const bf16* dy, const float* stats,
                           const float* rope_table, int T, int NH, int HS,
                           void* scratch, const AttentionSplits& splits,
                           int split, bf16* dqkv, cudaStream_t stream) {
  return Launch(which, HS,
                MakeParams(qkv, dy, const_cast<bf16*>(y),
                           const_cast<float*>(stats), rope_table, dqkv, T, NH,
                           HS, scratch, splits, split),
                stream);
}

bool SplitsValid(const AttentionSplits& splits) {
  return splits.forward >= 1 && splits.query >= 1 && splits.keys >= 1 &&
         (splits.forward_warpgroups == 1 || splits.forward_warpgroups == 2 ||
          splits.forward_warpgroups == 4) &&
         (splits.query_warpgroups == 1 || splits.query_warpgroups == 2 ||
          splits.query_warpgroups == 4) &&
         (splits.keys_warpgroups == 1 || splits.keys_warpgroups == 2);
}

}  // namespace

bool AttentionSupportsHeadSize(int HS) {
  return HS == 16 || HS == 32 || HS == 64;
}

size_t AttentionScratchBytes(int T, int NH, int HS,
                             const AttentionSplits& splits) {
  if (!SplitsValid(splits)) return 0;
  return Layout(T, NH, HS, splits).words * 4;
}

cudaError_t AttentionForward(const bf16* qkv, int T, int NH, int HS, bf16* y,
                             float* stats, void* scratch,
                             cudaStream_t stream,
                             const AttentionSplits& splits) {
  if (!SplitsValid(splits)) return cudaErrorInvalidValue;
  return Launch(kForward, HS,
                MakeParams(qkv, nullptr, y, stats, nullptr, nullptr, T, NH, HS,
                           scratch, splits, splits.forward),
                stream);
}

float* AttentionDelta(void* scratch, int T, int NH, int HS,
                      const AttentionSplits& splits) {
  if (!SplitsValid(splits)) return nullptr;
  return static_cast<float*>(scratch) + Layout(T, NH, HS, splits).delta;
}

cudaError_t AttentionBackwardDelta(const bf16* y, const bf16* dy, int T,
                                   int NH, int HS, void* scratch,
                                   cudaStream_t stream,
                                   const AttentionSplits& splits) {
  if (!SplitsValid(splits)) return cudaErrorInvalidValue;
  return LaunchBackward(kDelta, nullptr, y, dy, nullptr, nullptr, T, NH, HS,
                        scratch, splits, 1, nullptr, stream);
}

cudaError_t AttentionBackwardQuery(const bf16* qkv, const bf16* dy,
                                   const float* stats, const float* rope_table,
                                   int T, int NH, int HS, void* scratch,
                                   bf16* dqkv, cudaStream_t stream,
                                   const AttentionSplits& splits) {
  if (!SplitsValid(splits)) return cudaErrorInvalidValue;
  return LaunchBackward(kQuery, qkv, nullptr, dy, stats, rope_table, T, NH, HS,
                        scratch, splits, splits.query, dqkv, stream);
}

cudaError_t AttentionBackwardKeys(const bf16* qkv, const bf16* dy,
                                  const float* stats, const float* rope_table,
                                  int T, int NH, int HS, void* scratch,
                                  bf16* dqkv, cudaStream_t stream,
                                  const AttentionSplits& splits) {
  if (!SplitsValid(splits)) return cudaErrorInvalidValue;
  return LaunchBackward(kKeys, qkv, nullptr, dy, stats, rope_table, T, NH, HS,
                        scratch, splits, splits.keys, dqkv, stream);
}

cudaError_t AttentionBackward(const bf16* qkv, const bf16* y, const bf16* dy,
                              const float* stats, const float* rope_table,
                              int T, int NH, int HS, void* scratch, bf16* dqkv,
                              cudaStream_t stream,
                              const AttentionSplits& splits) {
  cudaError_t e =
      AttentionBackwardDelta(y, dy, T, NH, HS, scratch, stream, splits);
  if (e != cudaSuccess) return e;
  e = AttentionBackwardQuery(qkv, dy, stats, rope_table, T, NH, HS, scratch,
                             dqkv, stream, splits);
  if (e != cudaSuccess) return e;
  return AttentionBackwardKeys(qkv, dy, stats, rope_table, T, NH, HS, scratch,
                               dqkv, stream, splits);
}

}  // namespace coppelius
