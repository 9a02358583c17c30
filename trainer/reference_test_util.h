// File: trainer/reference_test_util.h (testonly)
//
// A deliberately plain, unblocked, single-threaded double-precision forward
// of the Coppelius model (SPEC §4), written independently of
// reference_backend.cc, for tests: returns the T per-row cross-entropies.
#ifndef COPPELIUS_TRAINER_REFERENCE_TEST_UTIL_H_
#define COPPELIUS_TRAINER_REFERENCE_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "trainer/model_config.h"

namespace coppelius {
namespace testing_internal {

inline std::vector<double> NaiveForwardRowLosses(
    const ModelConfig& cfg, const std::vector<double>& p,
    const uint32_t* inputs, const uint32_t* targets) {
  const int T = cfg.T, C = cfg.C, H = cfg.hidden, V = cfg.V, NH = cfg.NH,
            HS = cfg.HS;
  const double eps = 1e-5f;  // SPEC §4 ε as the fp32 value the kernels use
  // Walk the layout in SPEC order.
  int64_t off = 0;
  auto take = [&](int64_t n) { const double* q = p.data() + off; off += n; return q; };
  const double* emb = take(int64_t{V} * C);
  using Mat = std::vector<std::vector<double>>;
  Mat x(T, std::vector<double>(C));
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) x[t][c] = emb[int64_t{inputs[t]} * C + c];
  auto layer_norm = [&](const Mat& in, const double* w, const double* b) {
    Mat out(T, std::vector<double>(C));
    for (int t = 0; t < T; ++t) {
      double mean = 0, var = 0;
      for (int c = 0; c < C; ++c) mean += in[t][c] / C;
      for (int c = 0; c < C; ++c) var += (in[t][c] - mean) * (in[t][c] - mean) / C;
      for (int c = 0; c < C; ++c)
        out[t][c] = (in[t][c] - mean) / std::sqrt(var + eps) * w[c] + b[c];
    }
    return out;
  };
  // y = in · Wᵀ, W [out, in].
  auto linear = [&](const Mat& in, const double* w, int n_in, int n_out) {
    Mat out(T, std::vector<double>(n_out, 0.0));
    for (int t = 0; t < T; ++t)
      for (int o = 0; o < n_out; ++o) {
        double s = 0;
        for (int i = 0; i < n_in; ++i) s += in[t][i] * w[int64_t{o} * n_in + i];
        out[t][o] = s;
      }
    return out;
  };
  for (int l = 0; l < cfg.L; ++l) {
    const double* anw = take(C);
    const double* anb = take(C);
    const double* wqkv = take(3 * int64_t{C} * C);
    const double* wo = take(int64_t{C} * C);
    const double* mnw = take(C);
    const double* mnb = take(C);
    const double* wg = take(int64_t{H} * C);
    const double* wu = take(int64_t{H} * C);
    const double* wd = take(int64_t{C} * H);
    Mat h = layer_norm(x, anw, anb);
    Mat qkv = linear(h, wqkv, C, 3 * C);
    // RoPE, rotate-half within each head.
    for (int t = 0; t < T; ++t)
      for (int part = 0; part < 2; ++part)
        for (int n = 0; n < NH; ++n)
          for (int i = 0; i < HS / 2; ++i) {
            const double angle = t * std::pow(cfg.rope_base, -2.0 * i / HS);
            double& a = qkv[t][part * C + n * HS + i];
            double& b = qkv[t][part * C + n * HS + i + HS / 2];
            const double a0 = a, b0 = b;
            a = a0 * std::cos(angle) - b0 * std::sin(angle);
            b = b0 * std::cos(angle) + a0 * std::sin(angle);
          }
    Mat o(T, std::vector<double>(C, 0.0));
    for (int n = 0; n < NH; ++n)
      for (int t = 0; t < T; ++t) {
        std::vector<double> w(t + 1);
        double mx = -1e300, sum = 0;
        for (int u = 0; u <= t; ++u) {
          double s = 0;
          for (int i = 0; i < HS; ++i)
            s += qkv[t][n * HS + i] * qkv[u][C + n * HS + i];
          w[u] = s / std::sqrt(double(HS));
          mx = std::max(mx, w[u]);
        }
        for (int u = 0; u <= t; ++u) sum += (w[u] = std::exp(w[u] - mx));
        for (int u = 0; u <= t; ++u)
          for (int i = 0; i < HS; ++i)
            o[t][n * HS + i] += w[u] / sum * qkv[u][2 * C + n * HS + i];
      }
    Mat proj = linear(o, wo, C, C);
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) x[t][c] += proj[t][c];
    h = layer_norm(x, mnw, mnb);
    Mat g = linear(h, wg, C, H), u = linear(h, wu, C, H);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < H; ++j)
        g[t][j] = g[t][j] / (1 + std::exp(-g[t][j])) * u[t][j];
    Mat down = linear(g, wd, H, C);
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) x[t][c] += down[t][c];
  }
  const double* fnw = take(C);
  const double* fnb = take(C);
  Mat xf = layer_norm(x, fnw, fnb);
  Mat logits = linear(xf, emb, C, V);
  std::vector<double> losses(T);
  for (int t = 0; t < T; ++t) {
    double mx = -1e300, sum = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, logits[t][v]);
    for (int v = 0; v < V; ++v) sum += std::exp(logits[t][v] - mx);
    losses[t] = mx + std::log(sum) - logits[t][targets[t]];
  }
  return losses;
}

}  // namespace testing_internal
}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_REFERENCE_TEST_UTIL_H_
