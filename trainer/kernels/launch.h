// File: trainer/kernels/launch.h
//
// Process-wide switch for programmatic dependent launch (PDL), read by every
// kernel launch of this package (launch.cuh). On by default. Benchmarks flip
// it to measure what it saves (step_bench --pdl=0); the numerical results do
// not depend on it (a kernel computes the same with or without it).
// Set it before a CUDA graph is captured: a captured graph keeps the launch
// mode it was captured with.
#ifndef COPPELIUS_TRAINER_KERNELS_LAUNCH_H_
#define COPPELIUS_TRAINER_KERNELS_LAUNCH_H_

namespace coppelius {

// Whether kernel launches use programmatic dependent launch.
bool ProgrammaticDependentLaunchEnabled();
void SetProgrammaticDependentLaunch(bool enabled);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_LAUNCH_H_
