#include "trainer/pmv_state.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace coppelius {

std::vector<std::string> PmvStateProblems(absl::string_view path,
                                          uint64_t payload_offset,
                                          const float* pmv,
                                          uint64_t num_parameters,
                                          const ModelConfig& config) {
  const uint64_t n = num_parameters;
  const std::vector<TensorInfo> layout =
      n == static_cast<uint64_t>(NumParameters(config))
          ? ParameterLayout(config)
          : std::vector<TensorInfo>();
  static constexpr const char* kPlaneLetter[3] = {"P", "M", "V"};
  static constexpr const char* kPlaneName[3] = {
      "parameters", "AdamW first moments", "AdamW second moments"};
  auto where = [&](int plane, uint64_t i) {
    std::string tensor;
    for (const TensorInfo& t : layout) {
      if (i >= static_cast<uint64_t>(t.offset) &&
          i < static_cast<uint64_t>(t.offset + t.num_elements())) {
        tensor = absl::StrCat(", tensor ", t.name);
      }
    }
    return absl::StrCat(path, ": offset ", payload_offset + 4 * (plane * n + i),
                        " (plane ", kPlaneLetter[plane], ", parameter ", i,
                        tensor, ")");
  };
  std::vector<std::string> problems;
  for (int plane = 0; plane < 3; ++plane) {
    const float* values = pmv + plane * n;
    uint64_t nonfinite = 0, negative = 0;
    uint64_t first_nonfinite = 0, first_negative = 0;
    for (uint64_t i = 0; i < n; ++i) {
      const float x = values[i];
      if (!std::isfinite(x)) {
        if (nonfinite++ == 0) first_nonfinite = i;
      } else if (plane == 2 && x < 0.0f) {
        if (negative++ == 0) first_negative = i;
      }
    }
    if (nonfinite > 0) {
      // P: every forward from it gives non-finite losses. M or V: the
      // next update makes those parameters non-finite (or, for an
      // infinite V, stops their gradient steps).
      problems.push_back(absl::StrCat(
          where(plane, first_nonfinite), ": ", nonfinite, " of ", n, " ",
          kPlaneName[plane], " are not finite: ",
          plane == 0 ? "a diverged run's state (its forward gives "
                       "non-finite losses)"
                     : "not a state a healthy run writes (the next update "
                       "makes those parameters non-finite or stops them)"));
    }
    if (negative > 0) {
      problems.push_back(absl::StrCat(
          where(plane, first_negative), ": ", negative, " of ", n,
          " AdamW second moments are negative, expected >= 0 (V = beta2 V + "
          "(1 - beta2) g^2 never is): not a state AdamW writes"));
    }
  }
  return problems;
}

}  // namespace coppelius
