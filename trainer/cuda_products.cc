// File: trainer/cuda_products.cc
#include "trainer/cuda_products.h"

#include <cstdint>
#include <vector>

namespace coppelius {

std::vector<MatmulShape> CudaProductShapes(const ModelConfig& config) {
  const int64_t T = config.T, C = config.C, H = config.hidden, V = config.V;
  std::vector<MatmulShape> s(kNumCudaProducts);
  s[kQkvForward] = LinearForwardShape("qkv forward", T, 3 * C, C, 0);
  s[kOutputForward] = LinearForwardShape("output forward", T, C, C, 1);
  s[kGateUpForward] = LinearForwardShape("gate|up forward", T, 2 * H, C, 0);
  s[kDownForward] = LinearForwardShape("down forward", T, C, H, 1);
  s[kLogitsForward] = LinearForwardShape("logits forward", T, V, C, 0);
  s[kLogitsForward].algo_index = 3;
  s[kLogitsDx] = LinearDxShape("logits dX", T, V, C);
  s[kLogitsDw] = LinearDwShape("logits dW", T, V, C);
  s[kLogitsDw].algo_index = 2;
  s[kDownDx] = LinearDxShape("down dX", T, C, H);
  s[kDownDw] = LinearDwShape("down dW", T, C, H);
  s[kGateUpDx] = LinearDxShape("gate|up dX", T, 2 * H, C);
  s[kGateUpDw] = LinearDwShape("gate|up dW", T, 2 * H, C);
  s[kOutputDx] = LinearDxShape("output dX", T, C, C);
  s[kOutputDx].d_bf16 = true;
  s[kOutputDw] = LinearDwShape("output dW", T, C, C);
  s[kQkvDx] = LinearDxShape("qkv dX", T, 3 * C, C);
  s[kQkvDw] = LinearDwShape("qkv dW", T, 3 * C, C);
  // Measured at the coppelius shapes only (other shapes may have fewer
  // candidates): per call in a CUDA graph, qkv forward #6 5.28 µs against
  // #0 5.65, gate|up forward #4 7.86 against 8.27.
  if (T == 1024 && C == 512 && H == 1408) {
    s[kQkvForward].algo_index = 6;
    s[kGateUpForward].algo_index = 4;
    // Configurations beyond the heuristic's list, found by matmul_search
    // (H200, 2026-12-02, docs/PERFORMANCE.md run 28): the same kernel
    // family as the heuristic's picks with other cluster shapes and custom
    // options, K summed in the same order (the same bits). Alone, output
    // forward 3.85 against 3.97 µs, down forward 5.29 against 5.46,
    // gate|up forward 7.62 against 8.04; the step 2.205–2.206 against
    // 2.219 ms (forward 0.725 against 0.739). Pins measured and left
    // out (no gain in the step): gate|up dX, logits forward, down dW,
    // output dX. Where cuBLASLt refuses one, the heuristic's candidate
    // runs (MatmulShape::algo_config). In MatmulAlgoConfig's field order,
    // as matmul_search prints them (MatmulAlgoConfigString).
    s[kOutputForward].algo_config = {66, 15, 35, 1, 0, 0, 2, 5, 0};
    s[kDownForward].algo_config = {66, 15, 35, 1, 0, 0, 2, 5, 0};
    s[kGateUpForward].algo_config = {66, 200, 35, 1, 0, 0, 2, 5, 0};
  }
  return s;
}

}  // namespace coppelius
