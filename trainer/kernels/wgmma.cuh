// File: trainer/kernels/wgmma.cuh
//
// Hopper warpgroup products (PTX ISA 8.x, "Asynchronous Warpgroup Level
// Matrix Multiply-Accumulate": wgmma.mma_async, sm_90a) shared by our
// product kernels (fused_matmul.cu) and the fused attention
// (attention.cu): shared-memory matrix descriptors for the 128-byte
// swizzle, the fence / commit / wait of a batch, and the m64nNk16 bf16
// products with fp32 accumulators, B always from shared memory, A from
// shared memory (Wgmma) or from registers (WgmmaRegA).
//
// Shapes: one warpgroup (4 warps, 128 threads) computes a 64 × N slice;
// warp w owns rows 16·w .. 16·w + 15. Accumulator layout (PTX ISA figure
// "WGMMA .m64nNk16 register fragment layout for accumulator matrix D"),
// with g = lane / 4 and c = lane % 4, per 8-column slice n: elements 0, 1
// at (row g, columns 8n + 2c, +1), elements 2, 3 at (row g + 8, the same
// columns): for each slice, mma.m16n8k16's C fragment. A from registers:
// four 32-bit registers of two bf16, mma.m16n8k16's A fragment layout
// ((g, 2c..2c+1), (g + 8, 2c..), (g, 2c + 8..), (g + 8, 2c + 8..)).
// Shared-memory operands in the 128-byte-swizzle layout (rows of 64 bf16,
// 128 bytes, the 16-byte chunk j of row r stored at chunk j ^ (r % 8);
// the base 1024-byte aligned), K-major (rows are the M or N index, K along
// the row) or, for B, N-major (rows are the K index).
//
// The rules the callers keep: WgmmaFence before the first product of a
// batch whose registers (A or accumulators) other instructions wrote;
// WgmmaCommit after the batch; WgmmaWait<n> before reading accumulators
// or reusing A registers or shared memory the batch reads; shared memory
// written by ordinary stores must be fenced (FenceProxyAsync) before a
// barrier that precedes the products reading it.
#ifndef COPPELIUS_TRAINER_KERNELS_WGMMA_CUH_
#define COPPELIUS_TRAINER_KERNELS_WGMMA_CUH_

#include <cstdint>

namespace coppelius {
namespace kernels {

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// wgmma shared-memory matrix descriptor (PTX ISA "Matrix Descriptor"):
// bits 0-13 start address / 16, 16-29 leading-dimension byte offset / 16
// (unused by swizzled K-major layouts: 1), 32-45 stride byte offset / 16
// (1024: from one 8-row group to the next), 62-63 swizzle (1: 128 bytes).
// Within a 128-byte row the K slice k16 starts 32·k16 bytes further on.
__device__ __forceinline__ uint64_t Descriptor(uint32_t address) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) |
         (static_cast<uint64_t>(1) << 62);
}

// The descriptor of an N-major operand with the 128-byte swizzle (PTX ISA
// canonical layout ((8, 8, m), (8, k)) : ((1, 8, LBO), (64, SBO)) in
// elements): a swizzle atom is 8 K-rows of 64 N-elements (1024 bytes),
// atoms along N are `n_atom_bytes` apart (the leading-dimension byte
// offset), atoms along K 1024 bytes (the stride byte offset). The K slice
// k16 starts 16 rows (2048 bytes) further on.
__device__ __forceinline__ uint64_t DescriptorNMajor(uint32_t address,
                                                     uint32_t n_atom_bytes) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(n_atom_bytes >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) |
         (static_cast<uint64_t>(1) << 62);
}

// Makes this thread's earlier ordinary shared-memory stores visible to the
// async proxy (the wgmma operand reads that follow a barrier).
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending)
               : "memory");
}

// Ties the accumulators to this point of the instruction stream (the
// compiler must not read them before the wgmma that writes them is waited
// for).
template <int kN>
__device__ __forceinline__ void PinAccumulators(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d = A · B + (scale_d ? d : 0) for a 64 × kBN × 16 slice (kBN = 64, 128
// or 176): A 64 rows K-major, B kBN columns, K-major (kTransB = 0: B
// stored as kBN rows of K) or N-major (kTransB = 1: 16 rows of kBN), both
// in shared memory; fp32 accumulators d[kBN / 2].
template <int kBN, int kTransB>
__device__ __forceinline__ void Wgmma(float (&d)[kBN / 2], uint64_t desc_a,
                                      uint64_t desc_b, int scale_d) {
  static_assert(kBN == 64 || kBN == 128 || kBN == 176, "no such shape here");
  static_assert(kTransB == 0 || kTransB == 1, "kTransB is 0 or 1");
  if constexpr (kBN == 64) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "%32, %33, p, 1, 1, 0, %35;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB));
  } else if constexpr (kBN == 128) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
        "%64, %65, p, 1, 1, 0, %67;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB));
  } else if constexpr (kBN == 176) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87}, "
        "%88, %89, p, 1, 1, 0, %91;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB));
  }
}

// d = A · B for a 64 × 64 × 16 slice (Wgmma<64, 0> with scale-d 0), the
// accumulators written only: their earlier values are not inputs, so no
// instruction before it has to keep or define them (ptxas serializes a
// pipeline stage in which ordinary instructions define accumulator
// registers of a wgmma in flight, C7515).
__device__ __forceinline__ void WgmmaFirst64(float (&d)[32], uint64_t desc_a,
                                             uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(0));
}

// d = A · B + (scale_d ? d : 0) for a 64 × kBN × 16 slice, A from this
// warpgroup's registers (the layout above: 16 of the warp's rows × 16 of
// K), B in shared memory K-major (kTransB = 0) or N-major (kTransB = 1);
// accumulators as kBN / 8 slices of 4.
template <int kBN, int kTransB>
__device__ __forceinline__ void WgmmaRegA(float (&d)[kBN / 8][4],
                                          const uint32_t (&a)[4],
                                          uint64_t desc_b, int scale_d);

template <>
__device__ __forceinline__ void WgmmaRegA<64, 1>(float (&d)[8][4],
                                                 const uint32_t (&a)[4],
                                                 uint64_t desc_b,
                                                 int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
      "{%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

}  // namespace kernels
}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_WGMMA_CUH_
