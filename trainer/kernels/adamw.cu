// File: trainer/kernels/adamw.cu (see adamw.h for the math).
#include "trainer/kernels/adamw.h"
#include "trainer/kernels/launch.cuh"

namespace coppelius {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 8;

// Element k of the planes (the math of adamw.h); every kernel below updates
// through this one function, so a parameter gets the same bits whichever
// kernel updates it.
__device__ __forceinline__ void UpdateElement(
    int64_t k, bool decayed, const AdamWDeviceScalars& s,
    float* __restrict__ p, float* __restrict__ m, float* __restrict__ v,
    const float* __restrict__ g, __nv_bfloat16* __restrict__ p_bf16) {
  float pi = p[k];
  const float gi = g[k];
  if (decayed) pi = __fmul_rn(pi, s.decay_factor);
  const float mi =
      __fadd_rn(__fmul_rn(s.beta1, m[k]), __fmul_rn(s.one_minus_beta1, gi));
  const float gg = __fmul_rn(gi, gi);
  const float vi =
      __fadd_rn(__fmul_rn(s.beta2, v[k]), __fmul_rn(s.one_minus_beta2, gg));
  const float denom =
      __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bias_correction2_sqrt), s.epsilon);
  const float ratio = __fdiv_rn(mi, denom);
  pi = __fsub_rn(pi, __fmul_rn(s.step_size, ratio));
  p[k] = pi;
  m[k] = mi;
  v[k] = vi;
  if (decayed) p_bf16[k] = __float2bfloat16_rn(pi);
}

__global__ void __launch_bounds__(kThreads)
    AdamWKernel(const AdamWChunk* __restrict__ chunks,
                const AdamWDeviceScalars* __restrict__ table,
                const int64_t* __restrict__ step, int64_t fixed_step,
                float* __restrict__ p, float* __restrict__ m,
                float* __restrict__ v, const float* __restrict__ g,
                __nv_bfloat16* __restrict__ p_bf16) {
  GridDependencyWait();
  const AdamWChunk chunk = chunks[blockIdx.x];
  const AdamWDeviceScalars s = table[step != nullptr ? *step : fixed_step];
  for (int i = threadIdx.x; i < chunk.count; i += kThreads) {
    UpdateElement(chunk.begin + i, chunk.decayed, s, p, m, v, g, p_bf16);
  }
}

__global__ void MarkRowsKernel(const uint32_t* __restrict__ ids, int n,
                               const int64_t* __restrict__ step,
                               int64_t* __restrict__ row_stamp) {
  GridDependencyWait();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  // Every thread marking a row writes the same value.
  if (t < n) row_stamp[ids[t]] = *step + 1;
}

// Block b: rows b·kRowsPerBlock .. + kRowsPerBlock − 1 of the tensor, those
// whose mark state is `marked`.
__global__ void __launch_bounds__(kThreads)
    AdamWRowsKernel(int64_t begin, int num_rows, int row_size, bool decayed,
                    const int64_t* __restrict__ row_stamp, bool marked,
                    const AdamWDeviceScalars* __restrict__ table,
                    const int64_t* __restrict__ step, float* __restrict__ p,
                    float* __restrict__ m, float* __restrict__ v,
                    const float* __restrict__ g,
                    __nv_bfloat16* __restrict__ p_bf16) {
  GridDependencyWait();
  const int64_t current = *step;
  const AdamWDeviceScalars s = table[current];
  const int first = blockIdx.x * kRowsPerBlock;
  for (int r = first; r < first + kRowsPerBlock && r < num_rows; ++r) {
    if ((row_stamp[r] == current + 1) != marked) continue;
    const int64_t row_begin = begin + static_cast<int64_t>(r) * row_size;
    for (int i = threadIdx.x; i < row_size; i += kThreads) {
      UpdateElement(row_begin + i, decayed, s, p, m, v, g, p_bf16);
    }
  }
}

__global__ void CastKernel(const float* __restrict__ in, int64_t n,
                           __nv_bfloat16* __restrict__ out) {
  GridDependencyWait();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

}  // namespace

cudaError_t AdamWUpdateChunks(const AdamWChunk* chunks, int num_chunks,
                              const AdamWDeviceScalars* scalars_table,
                              const int64_t* step, int64_t fixed_step,
                              float* p, float* m, float* v, const float* g,
                              __nv_bfloat16* p_bf16, cudaStream_t stream) {
  // An ordinary launch, not a programmatic one (launch.cuh): the update runs
  // on its own low-priority stream beside the backward, and its CTAs (one
  // per chunk, hundreds) launched early would sit on SMs waiting while the
  // backward's kernels need them.
  AdamWKernel<<<num_chunks, kThreads, 0, stream>>>(
      chunks, scalars_table, step, fixed_step, p, m, v, g, p_bf16);
  return cudaGetLastError();
}

cudaError_t MarkRows(const uint32_t* ids, int n, const int64_t* step,
                     int64_t* row_stamp, cudaStream_t stream) {
  const int threads = 256;
  return LaunchKernel(MarkRowsKernel, (n + threads - 1) / threads, threads, 0,
                      stream, ids, n, step, row_stamp);
}

cudaError_t AdamWUpdateRows(int64_t begin, int num_rows, int row_size,
                            bool decayed, const int64_t* row_stamp,
                            bool marked,
                            const AdamWDeviceScalars* scalars_table,
                            const int64_t* step, float* p, float* m, float* v,
                            const float* g, __nv_bfloat16* p_bf16,
                            cudaStream_t stream) {
  // An ordinary launch, as AdamWUpdateChunks.
  AdamWRowsKernel<<<(num_rows + kRowsPerBlock - 1) / kRowsPerBlock, kThreads,
                    0, stream>>>(begin, num_rows, row_size, decayed, row_stamp,
                                 marked, scalars_table, step, p, m, v, g,
                                 p_bf16);
  return cudaGetLastError();
}

cudaError_t CastToBf16(const float* in, int64_t n, __nv_bfloat16* out,
                       cudaStream_t stream) {
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  return LaunchKernel(CastKernel, blocks, threads, 0, stream, in, n, out);
}

}  // namespace coppelius
