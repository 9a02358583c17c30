// File: trainer/kernels/cuda_status.h
//
// Converts CUDA runtime and cuBLAS(Lt) return codes into absl::Status naming
// the call and the code. The kernel launchers of trainer/kernels/*.cu return
// cudaError_t (no Abseil in device code); host code wraps them here:
//
//   CUDA_RETURN_IF_ERROR(LayerNormForward(...), "LayerNormForward");
//
// Every error is Internal (an unexpected device failure), except
// cudaErrorNoDevice / cudaErrorInsufficientDriver, which are
// FailedPrecondition (the machine has no usable GPU), and
// cudaErrorMemoryAllocation, which is ResourceExhausted.
#ifndef COPPELIUS_TRAINER_KERNELS_CUDA_STATUS_H_
#define COPPELIUS_TRAINER_KERNELS_CUDA_STATUS_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace coppelius {

// OK for cudaSuccess; otherwise "`what`: cudaErrorName (code N): text".
absl::Status CudaStatus(cudaError_t code, absl::string_view what);

// OK for CUBLAS_STATUS_SUCCESS; otherwise "`what`: CUBLAS_STATUS_... (N)".
absl::Status CublasStatus(cublasStatus_t code, absl::string_view what);

}  // namespace coppelius

#define CUDA_RETURN_IF_ERROR(expr, what)                              \
  do {                                                                \
    const cudaError_t _coppelius_cuda_code = (expr);                  \
    if (_coppelius_cuda_code != cudaSuccess)                          \
      return ::coppelius::CudaStatus(_coppelius_cuda_code, (what));   \
  } while (0)

#define CUBLAS_RETURN_IF_ERROR(expr, what)                            \
  do {                                                                \
    const cublasStatus_t _coppelius_cublas_code = (expr);             \
    if (_coppelius_cublas_code != CUBLAS_STATUS_SUCCESS)              \
      return ::coppelius::CublasStatus(_coppelius_cublas_code, (what)); \
  } while (0)

#endif  // COPPELIUS_TRAINER_KERNELS_CUDA_STATUS_H_
