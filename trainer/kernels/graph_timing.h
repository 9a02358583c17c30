// File: trainer/kernels/graph_timing.h
//
// How the benchmarks (step_bench, matmul_search) time one kernel or
// product: `calls` calls of `fn` captured back to back into one CUDA graph,
// as the step graph runs its nodes, so that the figure is a kernel's
// duration plus the gap between graph nodes, not the host's launch
// latency. Benchmarks only; nothing in a training run uses it.
#ifndef COPPELIUS_TRAINER_KERNELS_GRAPH_TIMING_H_
#define COPPELIUS_TRAINER_KERNELS_GRAPH_TIMING_H_

#include <cuda_runtime_api.h>

#include <functional>

namespace coppelius {

// Median over `reps` graph launches (after 3 unmeasured ones) of the time
// per call of `fn`, in ms. `fn` enqueues one call on `stream` (not the
// legacy default stream: graph capture needs another) and returns false if
// it could not; it runs once before the capture (lazy module loading).
// -1 if `fn` fails, reps < 1 or calls < 1, or a CUDA call fails (its error
// written to stderr).
double GraphTimePerCallMs(cudaStream_t stream, const std::function<bool()>& fn,
                          int reps = 30, int calls = 10);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_GRAPH_TIMING_H_
