#include "trainer/adamw.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/base/internal/raw_logging.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/threads.h"
#include "trainer/model_config.h"

namespace coppelius {

AdamWStepScalars ComputeAdamWStepScalars(const AdamWHyperparameters& h,
                                         uint64_t t) {
  ABSL_RAW_CHECK(t >= 1,
                 "Failed precondition of ComputeAdamWStepScalars(): update "
                 "numbers are 1-based");
  const double td = static_cast<double>(t);
  AdamWStepScalars s;
  s.decay_factor = static_cast<float>(1.0 - h.lr * h.weight_decay);
  s.beta1 = static_cast<float>(h.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  s.step_size = static_cast<float>(h.lr / (1.0 - std::pow(h.beta1, td)));
  s.bias_correction2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(h.beta2, td)));
  s.epsilon = static_cast<float>(h.epsilon);
  return s;
}

void AdamWUpdateRange(const AdamWStepScalars& s, bool decayed, int64_t n,
                      float* p, float* m, float* v, const float* g) {
  // Each statement is a sequence of single fp32 operations; the build has no
  // FMA contraction on the host (x86-64 baseline has no FMA instruction).
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    const float gi = g[i];
    if (decayed) pi = pi * s.decay_factor;
    const float mi = (s.beta1 * m[i]) + (s.one_minus_beta1 * gi);
    const float gg = gi * gi;
    const float vi = (s.beta2 * v[i]) + (s.one_minus_beta2 * gg);
    const float denom = (std::sqrt(vi) / s.bias_correction2_sqrt) + s.epsilon;
    const float ratio = mi / denom;
    pi = pi - (s.step_size * ratio);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

absl::Status AdamWUpdate(const ModelConfig& config,
                         const AdamWHyperparameters& h, uint64_t t,
                         const float* gradients, int num_threads, float* pmv) {
  if (t == 0) {
    return absl::InvalidArgumentError(
        "AdamWUpdate: update number t = 0, expected >= 1 (1-based)");
  }
  if (gradients == nullptr || pmv == nullptr) {
    return absl::InvalidArgumentError("AdamWUpdate: null plane");
  }
  if (num_threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AdamWUpdate: num_threads = ", num_threads, ", expected >= 1"));
  }
  const AdamWStepScalars s = ComputeAdamWStepScalars(h, t);
  const int64_t n = NumParameters(config);
  const std::vector<TensorInfo> layout = ParameterLayout(config);
  float* p = pmv;
  float* m = pmv + n;
  float* v = pmv + 2 * n;
  auto work = [&](int thread) {
    for (const TensorInfo& tensor : layout) {
      const int64_t count = tensor.num_elements();
      const int64_t begin = tensor.offset + count * thread / num_threads;
      const int64_t end = tensor.offset + count * (thread + 1) / num_threads;
      AdamWUpdateRange(s, tensor.decayed, end - begin, p + begin, m + begin,
                       v + begin, gradients + begin);
    }
  };
  // Part i of num_threads on whichever thread takes it (common/threads.h:
  // fewer threads if the system refuses some; the same elementwise result).
  ParallelFor(num_threads, num_threads,
              [&](int64_t part) { work(static_cast<int>(part)); });
  return absl::OkStatus();
}

}  // namespace coppelius
