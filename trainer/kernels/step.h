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
// and stages zeros. With `start_ring` not null (slots ≥ 1, else
// cudaErrorInvalidValue), the kernel's first act is Timestamp's write of
// which = 0 for index i: the step's start time without a kernel of its own.
//
// FinishStep, the step's last node, in one kernel of one CTA: the losses
// to the ring, loss_ring[(*step mod slots) · n + j] = losses[j] for j < n
// (the ring is mapped pinned host memory: the per-row losses reach the
// host without a copy node whose address would change per step); then
// time_ring[(*step mod slots) · 2 + 1] = %globaltimer (ns), the step's end
// time; then *step += 1. n ≥ 0 and slots ≥ 1, else cudaErrorInvalidValue.
// (Until 2026-12-01 three kernels, CopyToRing, Timestamp and AdvanceStep,
// which took 4.1 µs from the first's start to the last's end where
// FinishStep takes 2.4: H200 kernel trace, docs/PERFORMANCE.md run 22.)
//
// Timestamp: ring[(*step mod slots) · 2 + which] = %globaltimer (ns).
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
                         int* invalid_flag, cudaStream_t stream,
                         uint64_t* start_ring = nullptr, int slots = 0);

cudaError_t Timestamp(const int64_t* step, int slots, int which,
                      uint64_t* ring, cudaStream_t stream);

cudaError_t FinishStep(const float* losses, int n, int64_t* step, int slots,
                       float* loss_ring, uint64_t* time_ring,
                       cudaStream_t stream);

cudaError_t AddMemsetKernelNode(cudaGraph_t graph,
                                const cudaMemsetParams& memset,
                                cudaGraphNode_t* node);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_STEP_H_
