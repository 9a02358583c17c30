#include "trainer/reference_dump.h"

#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "tokencache/token_cache.h"
#include "trainer/adamw.h"
#include "trainer/initialization.h"
#include "trainer/model_config.h"
#include "trainer/reference_backend.h"

namespace coppelius {
namespace {

absl::string_view AsBytes(const std::vector<float>& v) {
  return absl::string_view(reinterpret_cast<const char*>(v.data()),
                           v.size() * sizeof(float));
}

}  // namespace

absl::Status RunReferenceDump(const ReferenceDumpOptions& options) {
  ASSIGN_OR_RETURN(const ModelConfig config, ModelConfigByName(options.config));
  if (options.steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps = ", options.steps, ", expected >= 1"));
  }
  const int64_t n = NumParameters(config);
  const uint64_t T = static_cast<uint64_t>(config.T);
  ASSIGN_OR_RETURN(TokenCache cache, TokenCache::Open(options.cache_path));
  const uint64_t need = options.first_context + options.steps;
  if (cache.NumContexts(T) < need) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.cache_path, ": holds ", cache.NumContexts(T),
        " contexts of ", T, " tokens, the dump needs ", need));
  }
  std::vector<float> pmv(3 * n);
  if (options.pmv_path.empty()) {
    RETURN_IF_ERROR(InitializeImage(config, 2, pmv.data()));
  } else {
    ASSIGN_OR_RETURN(const std::string bytes, ReadFile(options.pmv_path));
    if (bytes.size() != pmv.size() * sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.pmv_path, ": ", bytes.size(), " bytes, expected ",
          pmv.size() * sizeof(float), " (3 planes of ", n, " fp32)"));
    }
    std::memcpy(pmv.data(), bytes.data(), bytes.size());
  }
  const std::string dir = options.out_dir.empty() ? "." : options.out_dir;
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/initial_pmv.f32", AsBytes(pmv)));

  ReferenceOptions ref;
  ref.bf16_matmul_operands = options.bf16_matmul_operands;
  ref.num_threads = options.num_threads;
  std::vector<float> losses(options.steps * T), grads(n), grads0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < options.steps; ++s) {
    const uint32_t* inputs =
        cache.tokens() + (options.first_context + s) * T;
    RETURN_IF_ERROR(Annotate(
        ComputeLossAndGradients(config, ref, pmv.data(), inputs, inputs + 1,
                                losses.data() + s * T, grads.data()),
        absl::StrCat(options.cache_path, ": context ",
                     options.first_context + s)));
    if (s == 0) grads0 = grads;
    RETURN_IF_ERROR(AdamWUpdate(config, AdamWHyperparameters(),
                                options.update_count + s + 1, grads.data(),
                                ref.num_threads > 0 ? ref.num_threads : 2,
                                pmv.data()));
    double mean = 0;
    for (uint64_t r = 0; r < T; ++r) mean += losses[s * T + r];
    std::cerr << "step " << s << " mean loss " << mean / T << "\n";
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/losses.f32", AsBytes(losses)));
  RETURN_IF_ERROR(
      WriteFileAtomically(dir + "/gradients_step0.f32", AsBytes(grads0)));
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/final_pmv.f32", AsBytes(pmv)));
  const std::string manifest = absl::StrCat(
      "config=", config.name, "\nV=", config.V, "\nT=", config.T,
      "\nC=", config.C, "\nL=", config.L, "\nNH=", config.NH,
      "\nHS=", config.HS, "\nhidden=", config.hidden,
      "\nnum_parameters=", n, "\nsteps=", options.steps,
      "\nfirst_context=", options.first_context,
      "\nupdate_count=", options.update_count,
      "\nbf16_matmul_operands=", options.bf16_matmul_operands ? 1 : 0,
      "\nseconds_per_step=", seconds / options.steps, "\n");
  return WriteFileAtomically(dir + "/manifest.txt", manifest);
}

}  // namespace coppelius
