// File: trainer/cuda_products.cc
#include "trainer/cuda_products.h"

#include <cstdint>
#include <string>
#include <vector>

namespace coppelius {
namespace {

MatmulShape Forward(const char* name, int64_t T, int64_t out, int64_t in,
                    float beta) {
  MatmulShape s;
  s.name = name;
  s.trans_b = true;
  s.m = T;
  s.n = out;
  s.k = in;
  s.lda = in;
  s.ldb = in;
  s.ldc = out;
  s.beta = beta;
  return s;
}

MatmulShape Dx(const char* name, int64_t T, int64_t out, int64_t in) {
  MatmulShape s;
  s.name = name;
  s.m = T;
  s.n = in;
  s.k = out;
  s.lda = out;
  s.ldb = in;
  s.ldc = in;
  return s;
}

MatmulShape Dw(const char* name, int64_t T, int64_t out, int64_t in) {
  MatmulShape s;
  s.name = name;
  s.trans_a = true;
  s.m = out;
  s.n = in;
  s.k = T;
  s.lda = out;
  s.ldb = in;
  s.ldc = in;
  return s;
}

}  // namespace

std::vector<MatmulShape> CudaProductShapes(const ModelConfig& config) {
  const int64_t T = config.T, C = config.C, H = config.hidden, V = config.V;
  std::vector<MatmulShape> s(kNumCudaProducts);
  s[kQkvForward] = Forward("qkv forward", T, 3 * C, C, 0);
  s[kOutputForward] = Forward("output forward", T, C, C, 1);
  s[kGateUpForward] = Forward("gate|up forward", T, 2 * H, C, 0);
  s[kDownForward] = Forward("down forward", T, C, H, 1);
  s[kLogitsForward] = Forward("logits forward", T, V, C, 0);
  s[kLogitsForward].algo_index = 3;
  s[kLogitsDx] = Dx("logits dX", T, V, C);
  s[kLogitsDw] = Dw("logits dW", T, V, C);
  s[kLogitsDw].algo_index = 2;
  s[kDownDx] = Dx("down dX", T, C, H);
  s[kDownDw] = Dw("down dW", T, C, H);
  s[kGateUpDx] = Dx("gate|up dX", T, 2 * H, C);
  s[kGateUpDw] = Dw("gate|up dW", T, 2 * H, C);
  s[kOutputDx] = Dx("output dX", T, C, C);
  s[kOutputDx].d_bf16 = true;
  s[kOutputDw] = Dw("output dW", T, C, C);
  s[kQkvDx] = Dx("qkv dX", T, 3 * C, C);
  s[kQkvDw] = Dw("qkv dW", T, 3 * C, C);
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
    // runs (MatmulShape::algo_config).
    auto config = [](int algo_id, int tile, int stages, int custom,
                     int cluster) {
      MatmulAlgoConfig c;
      c.algo_id = algo_id;
      c.tile = tile;
      c.stages = stages;
      c.custom = custom;
      c.cluster = cluster;
      return c;
    };
    s[kOutputForward].algo_config = config(66, 15, 35, 2, 5);
    s[kDownForward].algo_config = config(66, 15, 35, 2, 5);
    s[kGateUpForward].algo_config = config(66, 200, 35, 2, 5);
  }
  return s;
}

}  // namespace coppelius
