// File: trainer/backends.h
//
// The backend registry used by `train`: "cuda" (trainer/cuda_backend.h, the
// production GPU backend) and "reference" (trainer/reference_backend.h, the
// exact CPU backend for verification). Never chosen implicitly.
#ifndef COPPELIUS_TRAINER_BACKENDS_H_
#define COPPELIUS_TRAINER_BACKENDS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/backend.h"
#include "trainer/model_config.h"

namespace coppelius {

// Makes backend `name` for `config`. InvalidArgument for an unknown name;
// FailedPrecondition when the CUDA backend cannot run here (no device).
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& name,
                                                     const ModelConfig& config);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_BACKENDS_H_
