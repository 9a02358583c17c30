// File: trainer/kernels/host_device.h
//
// COPPELIUS_HOST_DEVICE marks a small inline function that both the host
// and, when nvcc compiles it, the device call (work decompositions and
// arithmetic that CPU tests check and kernels use): __host__ __device__
// __forceinline__ under nvcc, plain inline otherwise.
#ifndef COPPELIUS_TRAINER_KERNELS_HOST_DEVICE_H_
#define COPPELIUS_TRAINER_KERNELS_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define COPPELIUS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define COPPELIUS_HOST_DEVICE inline
#endif

#endif  // COPPELIUS_TRAINER_KERNELS_HOST_DEVICE_H_
