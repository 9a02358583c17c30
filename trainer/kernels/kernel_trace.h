// File: trainer/kernels/kernel_trace.h
//
// Benchmark-only kernel timeline: every kernel the process runs while the
// trace is on — kernel nodes of CUDA graphs included — with its device
// start and end, through the CUDA Profiling Tools Interface's activity API
// (CUPTI, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: the kernels are not
// serialized, so concurrent streams overlap as they do untraced). libcupti
// is loaded with dlopen when the trace starts (libcupti.so.13 from the
// loader's path, then /usr/local/cuda/lib64 and
// /usr/local/cuda/extras/CUPTI/lib64), so binaries that never trace do not
// need it.
//
// Used by step_bench --trace=FILE to find where a step's time goes between
// the streams (docs/PERFORMANCE.md); not part of any training run.
#ifndef COPPELIUS_TRAINER_KERNELS_KERNEL_TRACE_H_
#define COPPELIUS_TRAINER_KERNELS_KERNEL_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace coppelius {

// One kernel execution. Times in ns of CUPTI's clock (one clock for every
// record of a trace).
struct KernelRecord {
  std::string name;  // mangled
  uint64_t start = 0;
  uint64_t end = 0;
  uint32_t stream = 0;    // CUPTI's stream id
  uint32_t channel = 0;   // the hardware channel the kernel was pushed to
  uint64_t graph_node = 0;  // 0 outside graphs
  int32_t grid[3] = {0, 0, 0};
  int32_t block[3] = {0, 0, 0};
  int32_t dynamic_shared = 0;
};

// Starts recording (FailedPrecondition if already on; NotFound if libcupti
// cannot be loaded; Internal naming the CUPTI call that failed).
absl::Status StartKernelTrace();

// Waits for the device (cudaDeviceSynchronize), stops recording and returns
// the records since StartKernelTrace, sorted by start time.
absl::StatusOr<std::vector<KernelRecord>> StopKernelTrace();

// Writes `records` as CSV (header: name,start_ns,end_ns,stream,channel,
// graph_node,grid_x,grid_y,grid_z,block_x,block_y,block_z,dynamic_shared)
// to `path`; InvalidArgument naming the path if it cannot be written.
absl::Status WriteKernelTrace(const std::vector<KernelRecord>& records,
                              const std::string& path);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_KERNEL_TRACE_H_
