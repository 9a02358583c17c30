#include "trainer/backends.h"

#include "absl/strings/str_cat.h"
#include "trainer/cuda_backend.h"
#include "trainer/reference_backend.h"

namespace coppelius {

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& name,
                                                     const ModelConfig& config) {
  if (name == "reference") {
    return CreateReferenceBackend(config, ReferenceOptions());
  }
  if (name == "cuda") return CreateCudaBackend(config);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend \"", name, "\": expected cuda or reference"));
}

}  // namespace coppelius
