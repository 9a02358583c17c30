// File: trainer/kernels/step.h
//
// Small control kernels that let ONE captured CUDA graph serve every step:
// the step index lives in device memory (`step`, an int64 counter that the
// graph's last node advances), and these kernels derive what changes per
// step from it.
//
// StageContext: context index i = *step (or `fixed_index` when `step` is
// null); copies ids [T·i, T·i + T] of the run's token buffer: inputs[t] =
// ids[T·i + t], targets[t] = ids[T·i + t + 1] (SPEC §2: a context is T + 1
// ids, the targets are the inputs one on). An id ≥ V sets *invalid_flag = 1
// (sticky) and is replaced by 0, so no kernel ever indexes out of range.
// A context beyond the buffer (i·T + T ≥ num_tokens) sets *invalid_flag = 2
// and stages zeros.
//
// CopyToRing: ring[(*step mod slots) · n + j] = src[j], j < n (the ring is
// mapped pinned host memory: the per-row losses reach the host without a
// copy node whose address would change per step).
//
// Timestamp: ring[(*step mod slots) · 2 + which] = %globaltimer (ns).
//
// AdvanceStep: *step += 1.
//
// AddMemsetKernelNode: a kernel node in `graph` (no dependencies yet) that
// does what a memset node with `memset`'s parameters does (height rows of
// width elements of elementSize 1, 2 or 4 bytes set to value, rows pitch
// bytes apart; cudaMemsetParams' meaning). For a captured library memset
// that would otherwise sit in the chain as a memset node (cuda_backend.cc
// ReplaceMemsetNodes). cudaErrorInvalidValue for another element size.
#ifndef COPPELIUS_TRAINER_KERNELS_STEP_H_
#define COPPELIUS_TRAINER_KERNELS_STEP_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace coppelius {

cudaError_t StageContext(const uint32_t* ids, uint64_t num_tokens,
                         const int64_t* step, int64_t fixed_index, int T,
                         int V, uint32_t* inputs, uint32_t* targets,
                         int* invalid_flag, cudaStream_t stream);

cudaError_t CopyToRing(const float* src, int n, const int64_t* step, int slots,
                       float* ring, cudaStream_t stream);

cudaError_t Timestamp(const int64_t* step, int slots, int which,
                      uint64_t* ring, cudaStream_t stream);

cudaError_t AdvanceStep(int64_t* step, cudaStream_t stream);

cudaError_t AddMemsetKernelNode(cudaGraph_t graph,
                                const cudaMemsetParams& memset,
                                cudaGraphNode_t* node);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_STEP_H_
