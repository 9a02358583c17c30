// File: trainer/kernels/fused_matmul.cu (see fused_matmul.h for the math,
// the tiling and the requirements).
//
// Shared memory of a CTA (1024-byte aligned: the 128-byte swizzle repeats
// every 8 rows of 128 bytes), for stage s of `kStages`:
//   A[s]: BM rows × 64 bf16 of h (row r at 128·r, its 16-byte chunks
//         permuted by r % 8: the TMA's CU_TENSOR_MAP_SWIZZLE_128B, which is
//         wgmma's 128-byte-swizzle K-major layout)
//   B[s]: K-major W: BN rows × 64 bf16 of W, the same layout; rows
//         [0, BN/2) from W's row b_lo, rows [BN/2, BN) from row b_hi (qkv:
//         b_hi = b_lo + BN/2, contiguous; gate|up: the up rows H + b_lo
//         beside the gate rows). N-major W (the dX products): BN/64 boxes,
//         8 KB apart, each 64 K-rows × 64 columns (128 bytes a row, the same
//         swizzle), columns b_lo + 64·i of W's rows kt·64 ...
// then the mbarriers full[kStages] and empty[kStages] (8 bytes each).
#include "trainer/kernels/fused_matmul.h"

#include <cuda.h>

#include <cstdint>

#include "trainer/kernels/bf16.cuh"
#include "trainer/kernels/launch.cuh"
#include "trainer/kernels/swiglu.cuh"
#include "trainer/kernels/tma.cuh"
#include "trainer/kernels/wgmma.cuh"

namespace coppelius {
namespace {

using kernels::BarrierArrive;
using kernels::BarrierArriveExpectBytes;
using kernels::BarrierInit;
using kernels::BarrierWait;
using kernels::Descriptor;
using kernels::DescriptorNMajor;
using kernels::MakeMap;
using kernels::PinAccumulators;
using kernels::PrefetchTensorMap;
using kernels::SharedAddress;
using kernels::TmaLoad;
using kernels::Wgmma;
using kernels::WgmmaCommit;
using kernels::WgmmaFence;
using kernels::WgmmaWait;

// ------------------------------------------------------------ PTX helpers

// Asks L2 to fetch the 128-byte line holding `p` (a hint: no result).
__device__ __forceinline__ void PrefetchL2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// bar.sync on hardware barrier kId (0 is __syncthreads') for `threads`
// threads (a multiple of 32).
template <int kId>
__device__ __forceinline__ void NamedBarrierSync(int threads) {
  asm volatile("bar.sync %0, %1;" ::"n"(kId), "r"(threads) : "memory");
}

// The barrier of consumer warpgroup cw alone.
__device__ __forceinline__ void WarpgroupBarrierSync(int cw) {
  if (cw == 0) {
    NamedBarrierSync<2>(128);
  } else {
    NamedBarrierSync<3>(128);
  }
}


// ------------------------------------------------------------------ kernel

// kSwigluBackward's B (W_down [C, H], K = C) and kDelta's (W_output [C, C])
// are N-major; the others' B (W [N, C]) is K-major.
enum Epilogue { kRope = 0, kSwiglu = 1, kSwigluBackward = 2, kDelta = 3 };

template <int kEpi>
inline constexpr bool kNMajorB = kEpi == kSwigluBackward || kEpi == kDelta;

struct EpilogueArgs {
  // kRope: qkv16 [T, 3C]; kSwiglu: gu [T, 2H] (fp32) and a [T, H];
  // kSwigluBackward: dgu [T, 2H] (bf16), with `gu` the forward's;
  // kDelta: dy [T, C] (bf16) and delta [NH, T] (fp32), with `y` the
  // attention's output [T, C].
  void* out0 = nullptr;
  void* out1 = nullptr;
  const float* gu = nullptr;
  const __nv_bfloat16* y = nullptr;
  const float* rope_table = nullptr;  // [2, T, 32]
  int C = 0;
  int H = 0;
};

template <int kWG, int kBN, int kStages>
struct Tile {
  static constexpr int kRows = 64 * kWG;  // BM
  static constexpr int kThreads = 128 * (kWG + 1);
  static constexpr int kABytes = kRows * 128;
  static constexpr int kBBytes = kBN * 128;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // + the barriers, + slack to align the base to 1024 bytes.
  static constexpr int kSharedBytes = kStages * kStageBytes + 16 * kStages +
                                      1024;
  // The epilogue's staging (over the stage buffers), per warpgroup 64 rows
  // of: gate|up BN fp32 (stride kStrideGu) and BN/2 bf16 (kStrideA); qkv
  // and D BN + 8 bf16; the SwiGLU backward 2·BN + 8 bf16. Row strides in
  // 32-bit words ≡ 8 mod 16 for float2 fragment writes and ≡ 4 mod 8 for
  // bf16x2 ones: no bank conflicts.
  static constexpr int kStrideGu = kBN + 8;
  static constexpr int kStrideA = kBN / 2 + 2 * ((12 - (kBN / 4) % 8) % 8);
  static constexpr int kGateUpStaging = kStrideGu * 4 + kStrideA * 2;
  static constexpr int kBf16Staging = (2 * kBN + 8) * 2;
  static constexpr int kStagingBytes =
      kWG * 64 *
      (kGateUpStaging > kBf16Staging ? kGateUpStaging : kBf16Staging);
  static_assert(kWG <= 2, "barrier ids 2, 3: one per consumer warpgroup");
  static_assert(kStagingBytes <= kStages * kStageBytes,
                "the epilogue's staging does not fit in the stage buffers");
};

// Grid (N / BN, ⌈T / BM⌉); block: warpgroup 0 the producer (one thread
// issues the TMA loads), warpgroups 1..kWG the consumers. W's rows for
// column tile n: [n·b_step, n·b_step + BN/2) into B's first half and
// [n·b_step + b_offset, ... + BN/2) into its second. kMinBlocks: CTAs per
// SM the registers must allow (__launch_bounds__).
template <int kWG, int kBN, int kStages, int kMinBlocks, int kEpi>
__global__ void __launch_bounds__(128 * (kWG + 1), kMinBlocks)
    FusedMatmulKernel(const __grid_constant__ CUtensorMap map_h,
                      const __grid_constant__ CUtensorMap map_w, int T, int K,
                      int b_step, int b_offset, EpilogueArgs args) {
  using Tl = Tile<kWG, kBN, kStages>;
  GridDependencyWait();
  extern __shared__ uint8_t shared_raw[];
  const uint32_t raw = SharedAddress(shared_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t full = base + kStages * Tl::kStageBytes;
  const uint32_t empty = full + 8 * kStages;
  const int k_steps = K / 64;
  const int m0 = blockIdx.y * Tl::kRows;
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(full + 8 * s, 1);
      BarrierInit(empty + 8 * s, kWG);  // one arrival per consumer warpgroup
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == 0) {
    // Producer.
    if (threadIdx.x == 0) {
      PrefetchTensorMap(&map_h);
      PrefetchTensorMap(&map_w);
      const int b_lo = blockIdx.x * b_step;
      const int b_hi = b_lo + b_offset;
      for (int kt = 0; kt < k_steps; ++kt) {
        const int s = kt % kStages;
        if (kt >= kStages) BarrierWait(empty + 8 * s, ((kt / kStages) - 1) & 1);
        const uint32_t a_dst = base + s * Tl::kStageBytes;
        const uint32_t b_dst = a_dst + Tl::kABytes;
        BarrierArriveExpectBytes(full + 8 * s, Tl::kStageBytes);
        TmaLoad(a_dst, &map_h, kt * 64, m0, full + 8 * s);
        if constexpr (kNMajorB<kEpi>) {
          // N-major: BN / 64 boxes of 64 K-rows × 64 columns (8 KB each).
#pragma unroll
          for (int i = 0; i < kBN / 64; ++i) {
            TmaLoad(b_dst + i * 8192, &map_w, b_lo + 64 * i, kt * 64,
                    full + 8 * s);
          }
        } else {
          TmaLoad(b_dst, &map_w, kt * 64, b_lo, full + 8 * s);
          TmaLoad(b_dst + Tl::kBBytes / 2, &map_w, kt * 64, b_hi,
                  full + 8 * s);
        }
      }
    }
    return;
  }

  // Consumers: warpgroup cw multiplies rows [64·cw, 64·cw + 64) of the tile.
  const int cw = warpgroup - 1;
  if constexpr (kEpi == kSwigluBackward) {
    // The epilogue's g and u (written by the forward, long out of L2):
    // fetched into L2 while the products run. 64 rows × 2 parts × BN fp32.
    const int tid = threadIdx.x % 128;
    constexpr int kLines = 64 * 2 * kBN * 4 / 128;
    const int j0 = blockIdx.x * kBN;
    for (int i = tid; i < kLines; i += 128) {
      const int r = i / (2 * kBN / 32), part = (i / (kBN / 32)) % 2;
      const int col = (i % (kBN / 32)) * 32;
      const int t = m0 + cw * 64 + r;
      if (t < T) {
        PrefetchL2(args.gu + static_cast<int64_t>(t) * 2 * args.H +
                   part * args.H + j0 + col);
      }
    }
  }
  // Not initialized: the first wgmma ignores them (scale-d 0). Zeroing
  // them here would be a non-wgmma definition of accumulator registers,
  // which makes ptxas serialize every wgmma (warning C7515).
  float acc[kBN / 2];
  for (int kt = 0; kt < k_steps; ++kt) {
    const int s = kt % kStages;
    BarrierWait(full + 8 * s, (kt / kStages) & 1);
    const uint32_t a_tile = base + s * Tl::kStageBytes + cw * 64 * 128;
    const uint32_t b_tile = base + s * Tl::kStageBytes + Tl::kABytes;
    WgmmaFence();
#pragma unroll
    for (int k16 = 0; k16 < 4; ++k16) {
      if constexpr (kNMajorB<kEpi>) {
        Wgmma<kBN, 1>(acc, Descriptor(a_tile + 32 * k16),
                      DescriptorNMajor(b_tile + 2048 * k16, 8192),
                      kt > 0 || k16 > 0);
      } else {
        Wgmma<kBN, 0>(acc, Descriptor(a_tile + 32 * k16),
                      Descriptor(b_tile + 32 * k16), kt > 0 || k16 > 0);
      }
    }
    WgmmaCommit();
    // The previous slice's group is complete: its buffer may be refilled
    // (the group is the warpgroup's: one thread reports for it).
    WgmmaWait<1>();
    if (kt > 0 && threadIdx.x % 128 == 0) {
      BarrierArrive(empty + 8 * ((kt - 1) % kStages));
    }
  }
  WgmmaWait<0>();
  PinAccumulators(acc);

  // Epilogue. acc[4j + 2h + e] is row 16·warp + lane/4 + 8h of the
  // warpgroup's 64, column 8j + 2·(lane % 4) + e of the tile. The results
  // are staged in shared memory (over the stage buffers, free once every
  // consumer's last wgmma has completed; rows padded so that the fragment
  // writes hit 32 different banks) and then stored row by row, 16 bytes
  // per thread, coalesced.
  NamedBarrierSync<1>(128 * kWG);
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int tid = threadIdx.x % 128;  // within the warpgroup
  const int q2 = 2 * (lane % 4);
  const int r_lo = warp * 16 + lane / 4;  // + 8h
  const int t0 = m0 + cw * 64;            // the warpgroup's first row
  if constexpr (kEpi == kRope) {
    static_assert(kBN % 64 == 0, "a RoPE tile holds whole heads");
    // Stage: 64 rows × BN bf16, row stride BN + 8 elements.
    constexpr int kStride = kBN + 8;
    __nv_bfloat16* stage = reinterpret_cast<__nv_bfloat16*>(
        shared_raw + (base - raw)) + cw * 64 * kStride;
    const int C = args.C, N = 3 * C;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r_lo + 8 * h;
      // Rows ≥ T hold zeros' products; the table has no row for them.
      const int t = min(t0 + r, T - 1);
      const float* cos_row = args.rope_table + t * 32;
      const float* sin_row = args.rope_table + T * 32 + t * 32;
#pragma unroll
      for (int head = 0; head < kBN / 64; ++head) {
        const bool rotate = blockIdx.x * kBN + head * 64 < 2 * C;  // q or k
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const int i = 8 * jj + q2;
          const int lo = 4 * (head * 8 + jj) + 2 * h;
          const int hi = 4 * (head * 8 + jj + 4) + 2 * h;
          float2 out_lo = make_float2(acc[lo], acc[lo + 1]);
          float2 out_hi = make_float2(acc[hi], acc[hi + 1]);
          if (rotate) {
            const float2 cs = *reinterpret_cast<const float2*>(cos_row + i);
            const float2 sn = *reinterpret_cast<const float2*>(sin_row + i);
            const float a0 = out_lo.x, a1 = out_lo.y;
            const float b0 = out_hi.x, b1 = out_hi.y;
            out_lo = make_float2(a0 * cs.x - b0 * sn.x, a1 * cs.y - b1 * sn.y);
            out_hi = make_float2(b0 * cs.x + a0 * sn.x, b1 * cs.y + a1 * sn.y);
          }
          __nv_bfloat16* dst = stage + r * kStride + head * 64 + i;
          *reinterpret_cast<__nv_bfloat162*>(dst) =
              __float22bfloat162_rn(out_lo);
          *reinterpret_cast<__nv_bfloat162*>(dst + 32) =
              __float22bfloat162_rn(out_hi);
        }
      }
    }
    WarpgroupBarrierSync(cw);
    // Copy out: a row is BN / 8 chunks of 16 bytes.
    constexpr int kChunks = 64 * kBN / 8;
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(args.out0);
#pragma unroll
    for (int c = tid; c < kChunks; c += 128) {
      const int r = c / (kBN / 8), col = (c % (kBN / 8)) * 8;
      if (t0 + r < T) {
        *reinterpret_cast<uint4*>(out + static_cast<int64_t>(t0 + r) * N +
                                  blockIdx.x * kBN + col) =
            *reinterpret_cast<const uint4*>(stage + r * kStride + col);
      }
    }
  } else if constexpr (kEpi == kDelta) {
    static_assert(kBN % 64 == 0, "a D tile holds whole heads");
    // Stage dy: 64 rows × BN bf16, row stride BN + 8 elements.
    constexpr int kStride = kBN + 8;
    __nv_bfloat16* stage = reinterpret_cast<__nv_bfloat16*>(
        shared_raw + (base - raw)) + cw * 64 * kStride;
    const int C = args.C;
    const int n0 = blockIdx.x * kBN;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r_lo + 8 * h;
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        *reinterpret_cast<__nv_bfloat162*>(stage + r * kStride + 8 * j + q2) =
            __float22bfloat162_rn(
                make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]));
      }
    }
    WarpgroupBarrierSync(cw);
    __nv_bfloat16* dy = static_cast<__nv_bfloat16*>(args.out0);
    constexpr int kChunks = 64 * kBN / 8;
#pragma unroll
    for (int c = tid; c < kChunks; c += 128) {
      const int r = c / (kBN / 8), col = (c % (kBN / 8)) * 8;
      if (t0 + r < T) {
        *reinterpret_cast<uint4*>(dy + static_cast<int64_t>(t0 + r) * C + n0 +
                                  col) =
            *reinterpret_cast<const uint4*>(stage + r * kStride + col);
      }
    }
    // D[head][t] = Σ_d dy[t, d] · y[t, d] over the head's 64 columns, in
    // attention.cu's BackwardDeltaKernel order: 8 lanes per (row, head),
    // each an fma chain over 8 neighbouring columns from 0, then the xor
    // tree 1, 2, 4 (the same bits as that kernel).
    float* delta = static_cast<float*>(args.out1);
#pragma unroll
    for (int c = tid; c < 64 * kBN / 8; c += 128) {
      const int group = c % 8, head = (c / 8) % (kBN / 64);
      const int r = c / (8 * (kBN / 64));
      const int col = head * 64 + group * 8;
      const int t = t0 + r;
      float d = 0.0f;
      if (t < T) {
        d = kernels::DotBf16x8(
            *reinterpret_cast<const uint4*>(stage + r * kStride + col),
            *reinterpret_cast<const uint4*>(args.y +
                                            static_cast<int64_t>(t) * C + n0 +
                                            col),
            d);
      }
#pragma unroll
      for (int off = 1; off < 8; off <<= 1) {
        d += __shfl_xor_sync(0xffffffffu, d, off);
      }
      if (t < T && group == 0) {
        delta[static_cast<int64_t>((n0 + col) / 64) * T + t] = d;
      }
    }
  } else if constexpr (kEpi == kSwigluBackward) {
    // acc is da[t, j0 + col]. Stage: 64 rows × 2·BN bf16 (dg columns, then
    // du columns), row stride 2·BN + 8 elements.
    constexpr int kStride = 2 * kBN + 8;
    __nv_bfloat16* stage = reinterpret_cast<__nv_bfloat16*>(
        shared_raw + (base - raw)) + cw * 64 * kStride;
    const int H = args.H;
    const int j0 = blockIdx.x * kBN;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r_lo + 8 * h;
      const int t = min(t0 + r, T - 1);  // rows ≥ T are not stored
      const float* g_row = args.gu + static_cast<int64_t>(t) * 2 * H + j0;
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int col = 8 * j + q2;
        const float2 g2 = *reinterpret_cast<const float2*>(g_row + col);
        const float2 u2 = *reinterpret_cast<const float2*>(g_row + H + col);
        const float g[2] = {g2.x, g2.y}, u[2] = {u2.x, u2.y};
        const float d[2] = {acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]};
        float dg[2], du[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          kernels::SwigluGradients(g[e], u[e], d[e], &dg[e], &du[e]);
        }
        *reinterpret_cast<__nv_bfloat162*>(stage + r * kStride + col) =
            __float22bfloat162_rn(make_float2(dg[0], dg[1]));
        *reinterpret_cast<__nv_bfloat162*>(stage + r * kStride + kBN + col) =
            __float22bfloat162_rn(make_float2(du[0], du[1]));
      }
    }
    WarpgroupBarrierSync(cw);
    __nv_bfloat16* dgu = static_cast<__nv_bfloat16*>(args.out0);
    constexpr int kChunks = 64 * 2 * kBN / 8;
#pragma unroll
    for (int c = tid; c < kChunks; c += 128) {
      const int r = c / (2 * kBN / 8), col = (c % (2 * kBN / 8)) * 8;
      if (t0 + r < T) {
        const int dst_col = col < kBN ? j0 + col : H + j0 + col - kBN;
        *reinterpret_cast<uint4*>(dgu + static_cast<int64_t>(t0 + r) * 2 * H +
                                  dst_col) =
            *reinterpret_cast<const uint4*>(stage + r * kStride + col);
      }
    }
  } else {
    // Stage: gu as 64 rows × BN fp32 (gate columns, then up columns); after
    // it a as 64 rows × BN/2 bf16 (Tile's strides).
    constexpr int kStride = Tl::kStrideGu;
    constexpr int kStrideA = Tl::kStrideA;
    uint8_t* region = shared_raw + (base - raw) +
                      cw * 64 * (kStride * 4 + kStrideA * 2);
    float* stage = reinterpret_cast<float*>(region);
    __nv_bfloat16* stage_a =
        reinterpret_cast<__nv_bfloat16*>(region + 64 * kStride * 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r_lo + 8 * h;
#pragma unroll
      for (int j = 0; j < kBN / 16; ++j) {
        const int col = 8 * j + q2;
        const int gi = 4 * j + 2 * h;
        const int ui = 4 * (j + kBN / 16) + 2 * h;
        const float g[2] = {acc[gi], acc[gi + 1]};
        const float u[2] = {acc[ui], acc[ui + 1]};
        *reinterpret_cast<float2*>(stage + r * kStride + col) =
            make_float2(g[0], g[1]);
        *reinterpret_cast<float2*>(stage + r * kStride + kBN / 2 + col) =
            make_float2(u[0], u[1]);
        const float out[2] = {kernels::SwigluValue(g[0], u[0]),
                              kernels::SwigluValue(g[1], u[1])};
        *reinterpret_cast<__nv_bfloat162*>(stage_a + r * kStrideA + col) =
            __float22bfloat162_rn(make_float2(out[0], out[1]));
      }
    }
    WarpgroupBarrierSync(cw);
    const int H = args.H;
    const int g0 = blockIdx.x * (kBN / 2);
    float* gu = static_cast<float*>(args.out0);
    __nv_bfloat16* a = static_cast<__nv_bfloat16*>(args.out1);
    // gu: a row is BN / 4 chunks of 16 bytes, the first half gate columns
    // g0.., the second up columns H + g0...
    constexpr int kChunks = 64 * kBN / 4;
#pragma unroll
    for (int c = tid; c < kChunks; c += 128) {
      const int r = c / (kBN / 4), col = (c % (kBN / 4)) * 4;
      if (t0 + r < T) {
        const int dst_col = col < kBN / 2 ? g0 + col : H + g0 + col - kBN / 2;
        *reinterpret_cast<float4*>(gu + static_cast<int64_t>(t0 + r) * 2 * H +
                                   dst_col) =
            *reinterpret_cast<const float4*>(stage + r * kStride + col);
      }
    }
    // a: a row is BN / 16 chunks of 16 bytes.
    constexpr int kChunksA = 64 * kBN / 16;
#pragma unroll
    for (int c = tid; c < kChunksA; c += 128) {
      const int r = c / (kBN / 16), col = (c % (kBN / 16)) * 8;
      if (t0 + r < T) {
        *reinterpret_cast<uint4*>(a + static_cast<int64_t>(t0 + r) * H + g0 +
                                  col) =
            *reinterpret_cast<const uint4*>(stage_a + r * kStrideA + col);
      }
    }
  }
}

// -------------------------------------------------------------------- host

template <int kWG, int kBN, int kStages, int kMinBlocks, int kEpi>
cudaError_t LaunchTile(const __nv_bfloat16* h, const __nv_bfloat16* w,
                       int T, int K, int w_rows, int b_step, int b_offset,
                       const EpilogueArgs& args, cudaStream_t stream) {
  using Tl = Tile<kWG, kBN, kStages>;
  const auto kernel = FusedMatmulKernel<kWG, kBN, kStages, kMinBlocks, kEpi>;
  // Every call (cheap, and per device): the opt-in to more than 48 KB.
  const cudaError_t attribute = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tl::kSharedBytes);
  if (attribute != cudaSuccess) return attribute;
  CUtensorMap map_h, map_w;
  cudaError_t e = MakeMap(h, T, K, Tl::kRows, &map_h);
  if (e != cudaSuccess) return e;
  if constexpr (kEpi == kSwigluBackward) {
    e = MakeMap(w, K, args.H, 64, &map_w);  // W_down [C = K, H], N-major
  } else if constexpr (kEpi == kDelta) {
    e = MakeMap(w, K, args.C, 64, &map_w);  // W_output [C = K, C], N-major
  } else {
    e = MakeMap(w, w_rows, K, kBN / 2, &map_w);
  }
  if (e != cudaSuccess) return e;
  const int n_tiles = kEpi == kRope            ? 3 * args.C / kBN
                      : kEpi == kSwiglu        ? args.H / (kBN / 2)
                      : kEpi == kSwigluBackward ? args.H / kBN
                                               : args.C / kBN;
  const dim3 grid(n_tiles, (T + Tl::kRows - 1) / Tl::kRows);
  return LaunchKernel(kernel, grid, Tl::kThreads, Tl::kSharedBytes, stream,
                      map_h, map_w, T, K, b_step, b_offset, args);
}

// Column-tile width of each configuration (fused_matmul.h).
constexpr int kConfigBN[kFusedConfigs] = {128, 128, 64, 64, 176, 176};

template <int kEpi>
cudaError_t Launch(int config, const __nv_bfloat16* h,
                   const __nv_bfloat16* w, int T, int K, int w_rows,
                   int b_step, int b_offset, const EpilogueArgs& args,
                   cudaStream_t stream) {
// (The N-major B of kSwigluBackward and kDelta comes in boxes of 64
// columns, and kRope's and kDelta's tiles hold whole 64-column heads: BN a
// multiple of 64; the others are never instantiated.)
#define COPPELIUS_FUSED_CONFIG(index, wg, bn, stages, min_blocks)           \
  case index:                                                               \
    static_assert(kConfigBN[index] == bn, "kConfigBN");                     \
    if constexpr ((kNMajorB<kEpi> || kEpi == kRope) && bn % 64 != 0) {    \
      return cudaErrorInvalidValue;                                         \
    } else {                                                                \
      return LaunchTile<wg, bn, stages, min_blocks, kEpi>(                  \
          h, w, T, K, w_rows, b_step, b_offset, args, stream);              \
    }
  switch (config) {
    COPPELIUS_FUSED_CONFIG(0, 2, 128, 5, 1)
    COPPELIUS_FUSED_CONFIG(1, 1, 128, 4, 2)
    COPPELIUS_FUSED_CONFIG(2, 2, 64, 4, 1)
    COPPELIUS_FUSED_CONFIG(3, 1, 64, 4, 1)
    COPPELIUS_FUSED_CONFIG(4, 1, 176, 3, 2)
    COPPELIUS_FUSED_CONFIG(5, 2, 176, 4, 1)
    default:
      return cudaErrorInvalidValue;
  }
#undef COPPELIUS_FUSED_CONFIG
}

// Non-null and aligned to `bytes`.
bool Aligned(const void* p, uintptr_t bytes) {
  return p != nullptr && reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

bool Aligned16(const void* p) { return Aligned(p, 16); }

}  // namespace

int FusedConfigColumns(int config) {
  return config >= 0 && config < kFusedConfigs ? kConfigBN[config] : 0;
}

namespace {

// Rows: the grid's y dimension holds ⌈T / BM⌉ ≤ 65,535 row tiles (BM ≥ 64).
bool RowsFit(int T) { return T >= 1 && (T + 63) / 64 <= 65535; }

// K: C a positive multiple of the 64-column slice.
bool ColumnsFit(int C) { return C >= 64 && C % 64 == 0; }

}  // namespace

bool QkvRopeMatmulSupports(int T, int C, int NH, int HS, int config) {
  const int bn = FusedConfigColumns(config);
  return bn > 0 && bn % 64 == 0 && RowsFit(T) && NH >= 1 && HS == 64 &&
         C == NH * HS && (3 * C) % bn == 0;
}

bool GateUpSwigluMatmulSupports(int T, int C, int H, int config) {
  const int bn = FusedConfigColumns(config);
  return bn > 0 && RowsFit(T) && ColumnsFit(C) && H >= 1 &&
         H % (bn / 2) == 0;
}

bool DownDxSwigluBackwardMatmulSupports(int T, int C, int H, int config) {
  const int bn = FusedConfigColumns(config);
  return bn > 0 && bn % 64 == 0 && RowsFit(T) && ColumnsFit(C) && H >= 1 &&
         H % bn == 0;
}

bool OutputDxDeltaMatmulSupports(int T, int C, int NH, int HS, int config) {
  const int bn = FusedConfigColumns(config);
  return bn > 0 && bn % 64 == 0 && RowsFit(T) && NH >= 1 && HS == 64 &&
         C == NH * HS && C % bn == 0;
}

cudaError_t QkvRopeMatmul(const __nv_bfloat16* h, const __nv_bfloat16* w_qkv,
                          const float* rope_table, int T, int C, int NH,
                          int HS, __nv_bfloat16* qkv16, int config,
                          cudaStream_t stream) {
  if (!QkvRopeMatmulSupports(T, C, NH, HS, config) || !Aligned16(h) ||
      !Aligned16(w_qkv) || !Aligned16(qkv16) || !Aligned(rope_table, 8)) {
    return cudaErrorInvalidValue;
  }
  EpilogueArgs args;
  args.out0 = qkv16;
  args.rope_table = rope_table;
  args.C = C;
  const int bn = kConfigBN[config];
  return Launch<kRope>(config, h, w_qkv, T, C, 3 * C, bn, bn / 2, args,
                       stream);
}

cudaError_t GateUpSwigluMatmul(const __nv_bfloat16* h,
                               const __nv_bfloat16* w_gate_up, int T, int C,
                               int H, float* gu, __nv_bfloat16* a, int config,
                               cudaStream_t stream) {
  if (!GateUpSwigluMatmulSupports(T, C, H, config) || !Aligned16(h) ||
      !Aligned16(w_gate_up) || !Aligned16(gu) || !Aligned16(a)) {
    return cudaErrorInvalidValue;
  }
  EpilogueArgs args;
  args.out0 = gu;
  args.out1 = a;
  args.H = H;
  const int half = kConfigBN[config] / 2;
  return Launch<kSwiglu>(config, h, w_gate_up, T, C, 2 * H, half, H, args,
                         stream);
}

cudaError_t DownDxSwigluBackwardMatmul(const __nv_bfloat16* dy,
                                       const __nv_bfloat16* w_down,
                                       const float* gu, int T, int C, int H,
                                       __nv_bfloat16* dgu, int config,
                                       cudaStream_t stream) {
  if (!DownDxSwigluBackwardMatmulSupports(T, C, H, config) ||
      !Aligned16(dy) || !Aligned16(w_down) || !Aligned16(gu) ||
      !Aligned16(dgu)) {
    return cudaErrorInvalidValue;
  }
  EpilogueArgs args;
  args.out0 = dgu;
  args.gu = gu;
  args.H = H;
  return Launch<kSwigluBackward>(config, dy, w_down, T, C, C,
                                 kConfigBN[config], 0, args, stream);
}

cudaError_t OutputDxDeltaMatmul(const __nv_bfloat16* dresid,
                                const __nv_bfloat16* w_output,
                                const __nv_bfloat16* y, int T, int C, int NH,
                                int HS, __nv_bfloat16* dy, float* delta,
                                int config, cudaStream_t stream) {
  if (!OutputDxDeltaMatmulSupports(T, C, NH, HS, config) ||
      !Aligned16(dresid) || !Aligned16(w_output) || !Aligned16(y) ||
      !Aligned16(dy) || !Aligned(delta, 4)) {
    return cudaErrorInvalidValue;
  }
  EpilogueArgs args;
  args.out0 = dy;
  args.out1 = delta;
  args.y = y;
  args.C = C;
  return Launch<kDelta>(config, dresid, w_output, T, C, C, kConfigBN[config],
                        0, args, stream);
}

}  // namespace coppelius
