// File: trainer/kernels/launch.cc
#include "trainer/kernels/launch.h"

#include <atomic>

namespace coppelius {
namespace {
std::atomic<bool> g_programmatic_dependent_launch{true};
}  // namespace

bool ProgrammaticDependentLaunchEnabled() {
  return g_programmatic_dependent_launch.load(std::memory_order_relaxed);
}

void SetProgrammaticDependentLaunch(bool enabled) {
  g_programmatic_dependent_launch.store(enabled, std::memory_order_relaxed);
}

}  // namespace coppelius
