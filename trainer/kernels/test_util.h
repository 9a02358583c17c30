// File: trainer/kernels/test_util.h (testonly)
//
// Helpers for the GPU kernel tests: device buffers, fresh random inputs,
// poisoned outputs, bf16 rounding on the host, relative-norm errors.
// Tolerances (METHOD): ‖out − ref‖ / ‖ref‖ with the reference in double on
// the same bf16-rounded operands: fp32 arithmetic lands far below 1e-5;
// where the GPU's bf16 rounding of an fp32 intermediate may flip against the
// reference's, up to ~1e-2 is bf16-level. NaN never passes (the error is NaN
// then, and every comparison with it fails).
#ifndef COPPELIUS_TRAINER_KERNELS_TEST_UTIL_H_
#define COPPELIUS_TRAINER_KERNELS_TEST_UTIL_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace coppelius {
namespace test {

inline bool HasCudaDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define SKIP_WITHOUT_GPU()                                           \
  do {                                                               \
    if (!::coppelius::test::HasCudaDevice()) {                       \
      GTEST_SKIP() << "no CUDA device on this machine";              \
    }                                                                \
  } while (0)

// Round to nearest even fp32 -> bf16 bits (NaN kept quiet).
inline uint16_t Bf16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
inline float RoundBf16(float x) { return Bf16ToFloat(Bf16Bits(x)); }

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&ptr_, n * sizeof(T) + 16), cudaSuccess);
    // Poison: 0xFF bytes (NaN for floats and bf16).
    EXPECT_EQ(cudaMemset(ptr_, 0xFF, n * sizeof(T) + 16), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() { return static_cast<T*>(ptr_); }
  size_t size() const { return n_; }
  void Upload(const std::vector<T>& v) {
    ASSERT_EQ(v.size(), n_);
    ASSERT_EQ(cudaMemcpy(ptr_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<T> Download() {
    std::vector<T> v(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return v;
  }

 private:
  void* ptr_ = nullptr;
  size_t n_;
};

// bf16 buffers are handled as raw uint16 bits on the host.
using Bf16Buffer = DeviceBuffer<uint16_t>;
inline __nv_bfloat16* AsBf16(Bf16Buffer& b) {
  return reinterpret_cast<__nv_bfloat16*>(b.get());
}

inline std::vector<float> RandomNormal(size_t n, float std, std::mt19937_64* rng) {
  std::normal_distribution<float> dist(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

inline std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16Bits(v[i]);
  return out;
}
inline std::vector<float> FromBf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToFloat(v[i]);
  return out;
}

// ‖a − ref‖ / ‖ref‖ in double (NaN if any element is NaN).
template <typename A, typename B>
double RelErr(const std::vector<A>& a, const std::vector<B>& ref) {
  double num = 0, den = 0;
  if (a.size() != ref.size()) return NAN;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

}  // namespace test
}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_TEST_UTIL_H_
