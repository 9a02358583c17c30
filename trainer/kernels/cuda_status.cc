// File: trainer/kernels/cuda_status.cc
#include "trainer/kernels/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace coppelius {

absl::Status CudaStatus(cudaError_t code, absl::string_view what) {
  if (code == cudaSuccess) return absl::OkStatus();
  std::string message =
      absl::StrCat(what, ": ", cudaGetErrorName(code), " (code ",
                   static_cast<int>(code), "): ", cudaGetErrorString(code));
  switch (code) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return absl::FailedPreconditionError(message);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CublasStatus(cublasStatus_t code, absl::string_view what) {
  if (code == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const char* name = "CUBLAS_STATUS_UNKNOWN";
  switch (code) {
    case CUBLAS_STATUS_NOT_INITIALIZED: name = "CUBLAS_STATUS_NOT_INITIALIZED"; break;
    case CUBLAS_STATUS_ALLOC_FAILED: name = "CUBLAS_STATUS_ALLOC_FAILED"; break;
    case CUBLAS_STATUS_INVALID_VALUE: name = "CUBLAS_STATUS_INVALID_VALUE"; break;
    case CUBLAS_STATUS_ARCH_MISMATCH: name = "CUBLAS_STATUS_ARCH_MISMATCH"; break;
    case CUBLAS_STATUS_MAPPING_ERROR: name = "CUBLAS_STATUS_MAPPING_ERROR"; break;
    case CUBLAS_STATUS_EXECUTION_FAILED: name = "CUBLAS_STATUS_EXECUTION_FAILED"; break;
    case CUBLAS_STATUS_INTERNAL_ERROR: name = "CUBLAS_STATUS_INTERNAL_ERROR"; break;
    case CUBLAS_STATUS_NOT_SUPPORTED: name = "CUBLAS_STATUS_NOT_SUPPORTED"; break;
    case CUBLAS_STATUS_LICENSE_ERROR: name = "CUBLAS_STATUS_LICENSE_ERROR"; break;
    default: break;
  }
  std::string message =
      absl::StrCat(what, ": ", name, " (", static_cast<int>(code), ")");
  if (code == CUBLAS_STATUS_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::InternalError(message);
}

}  // namespace coppelius
