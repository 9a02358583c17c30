// File: trainer/kernels/launch.h
//
// Process-wide switch for programmatic dependent launch (PDL), read by every
// kernel launch of this package (launch.cuh) except AdamW's, which is always
// an ordinary launch (adamw.cu). Off by default: measured on
// the H200, the step graph ran about 0.05 ms/step slower with it
// (docs/PERFORMANCE.md run 6), and still 0.017 ms slower with every
// kernel's release of its dependents at exit (run 17). Benchmarks flip it (step_bench --pdl=1); the
// numerical results do not depend on it (cuda_backend_test compares both
// modes bit for bit).
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
