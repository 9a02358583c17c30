// File: trainer/kernels/launch.cuh
//
// Kernel launch with programmatic dependent launch (PDL, CUDA 12 on sm_90;
// CUDA programming guide, "Programmatic Dependent Launch and
// Synchronization").
//
// In a stream, or a CUDA graph captured from one, a kernel normally starts
// only after its predecessor has completed: on the step graph's chain of a
// few hundred small kernels every boundary costs the next grid's launch
// latency (a few µs). Launched with the programmatic-stream-serialization
// attribute, a kernel may start as soon as every CTA of its predecessor
// has executed `griddepcontrol.launch_dependents`; it must then execute
// `griddepcontrol.wait`, which returns once the predecessor grids have
// completed and their memory operations are visible, before it touches
// any memory they read or write.
//
// Rule for every kernel of this package: its first statement is
// GridDependencyWait(). The wait precedes every global load and store, so a
// kernel neither reads its inputs early nor overwrites a buffer its
// predecessor still reads. No kernel executes `launch_dependents`: a CTA
// counts as having done so when it exits, so a dependent grid launches as
// the last CTA of its predecessor leaves, without waiting for the grid's
// completion to be signalled, and no CTA of it sits parked on an SM that
// the running grid or the side streams' work needs. (Until 2026-12-01 each
// kernel released its dependents right after its wait. Measured on the
// H200, docs/PERFORMANCE.md run 17: with PDL on, 2.447 / 2.441 ms/step
// against 2.415 / 2.415 with the release at exit; and with PDL off, where
// the instruction has no dependents to release, the forward still ran
// 0.776 ms against 0.766 without it, the step 2.392 against 2.381.)
// Without the attribute (or when the switch of launch.h is off) the wait
// does nothing, and the results are the same bits either way.
#ifndef COPPELIUS_TRAINER_KERNELS_LAUNCH_CUH_
#define COPPELIUS_TRAINER_KERNELS_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <utility>

#include "trainer/kernels/launch.h"

namespace coppelius {

// Waits for the grids this one depends on (their completion and memory).
__device__ __forceinline__ void GridDependencyWait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...), with PDL when
// enabled (launch.h). Returns the launch's error (cudaLaunchKernelEx).
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block,
                         size_t shared_bytes, cudaStream_t stream,
                         Args&&... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = ProgrammaticDependentLaunchEnabled() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_LAUNCH_CUH_
