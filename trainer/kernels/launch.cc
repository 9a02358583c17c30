// File: trainer/kernels/launch.cc
#include "trainer/kernels/launch.h"

#include <atomic>

namespace coppelius {
namespace {
// Off: on the H200 the step graph ran 0.05 ms/step slower with it (2026-11-30,
// docs/PERFORMANCE.md run 6).
std::atomic<bool> g_programmatic_dependent_launch{false};
}  // namespace

bool ProgrammaticDependentLaunchEnabled() {
  return g_programmatic_dependent_launch.load(std::memory_order_relaxed);
}

void SetProgrammaticDependentLaunch(bool enabled) {
  g_programmatic_dependent_launch.store(enabled, std::memory_order_relaxed);
}

}  // namespace coppelius
