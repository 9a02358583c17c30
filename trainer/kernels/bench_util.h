// File: trainer/kernels/bench_util.h
//
// What the benchmarks (step_bench, matmul_search) share: how they time one
// kernel or product (`calls` calls of `fn` captured back to back into one
// CUDA graph, as the step graph runs its nodes, so that the figure is a
// kernel's duration plus the gap between graph nodes, not the host's
// launch latency) and their random inputs. Benchmarks only; nothing in a
// training run uses it.
#ifndef COPPELIUS_TRAINER_KERNELS_BENCH_UTIL_H_
#define COPPELIUS_TRAINER_KERNELS_BENCH_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <random>

namespace coppelius {

// Median over `reps` graph launches (after 3 unmeasured ones) of the time
// per call of `fn`, in ms. `fn` enqueues one call on `stream` (not the
// legacy default stream: graph capture needs another) and returns false if
// it could not; it runs once before the capture (lazy module loading).
// -1 if `fn` fails, reps < 1 or calls < 1, or a CUDA call fails (its error
// written to stderr).
double GraphTimePerCallMs(cudaStream_t stream, const std::function<bool()>& fn,
                          int reps = 30, int calls = 10);

// Fills `bytes` of device memory at `p` with independent N(0, 1) draws from
// `rng`: bytes / 2 bf16 values (rounded to nearest even) or bytes / 4 fp32
// ones. Returns the copy's error.
cudaError_t FillRandomNormal(void* p, size_t bytes, bool bf16,
                             std::mt19937_64* rng);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_BENCH_UTIL_H_
