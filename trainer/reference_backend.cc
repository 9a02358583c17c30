#include "trainer/reference_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/threads.h"
#include "trainer/adamw.h"
#include "trainer/backend.h"
#include "trainer/model_config.h"

namespace coppelius {

float RoundToBfloat16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    bits |= 0x00400000u;  // NaN: keep it a (quiet) NaN
    bits &= 0xffff0000u;
  } else {
    // Round to nearest, ties to even, on the upper 16 bits (overflow to
    // ±inf is the correct rounding).
    bits += 0x7fffu + ((bits >> 16) & 1u);
    bits &= 0xffff0000u;
  }
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

namespace {

int ResolveThreads(int requested) { return ResolveThreadCount(requested); }

constexpr int64_t kRowTile = 4;
constexpr int64_t kColTile = 256;

// Tiles of MatMul (below): kRowTile rows × kColTile columns of double
// accumulators. One call covers all of C's columns for rows
// [tile·kRowTile, tile·kRowTile + kRowTile).
template <typename In, typename Out>
inline __attribute__((always_inline)) void MatMulRowTile(
    const In* A, const In* B, Out* C, int64_t M, int64_t K, int64_t N,
    bool accumulate, bool lower_a, bool upper_a, bool lower_c, int64_t tile) {
  const int64_t i0 = tile * kRowTile;
  const int64_t rows = std::min(kRowTile, M - i0);
  const int64_t i1 = i0 + rows;
  const int64_t n_limit = lower_c ? std::min(N, i1) : N;
  const int64_t k_begin = upper_a ? std::min(K, i0) : 0;
  const int64_t k_end = lower_a ? std::min(K, i1) : K;
  alignas(64) double acc[kRowTile][kColTile];
  for (int64_t j0 = 0; j0 < n_limit; j0 += kColTile) {
    const int64_t jn = std::min(kColTile, n_limit - j0);
    for (int64_t r = 0; r < rows; ++r) {
      const Out* c = C + (i0 + r) * N + j0;
      for (int64_t j = 0; j < jn; ++j) {
        acc[r][j] = accumulate ? static_cast<double>(c[j]) : 0.0;
      }
    }
    if (rows == kRowTile) {
      double* acc0 = acc[0];
      double* acc1 = acc[1];
      double* acc2 = acc[2];
      double* acc3 = acc[3];
      for (int64_t k = k_begin; k < k_end; ++k) {
        const double a0 = A[(i0 + 0) * K + k];
        const double a1 = A[(i0 + 1) * K + k];
        const double a2 = A[(i0 + 2) * K + k];
        const double a3 = A[(i0 + 3) * K + k];
        const In* b = B + k * N + j0;
        for (int64_t j = 0; j < jn; ++j) {
          const double bj = b[j];
          acc0[j] += a0 * bj;
          acc1[j] += a1 * bj;
          acc2[j] += a2 * bj;
          acc3[j] += a3 * bj;
        }
      }
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        double* accr = acc[r];
        for (int64_t k = k_begin; k < k_end; ++k) {
          const double a = A[(i0 + r) * K + k];
          const In* b = B + k * N + j0;
          for (int64_t j = 0; j < jn; ++j) accr[j] += a * double(b[j]);
        }
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      Out* c = C + (i0 + r) * N + j0;
      const int64_t i = i0 + r;
      for (int64_t j = 0; j < jn; ++j) {
        if (lower_c && j0 + j > i) {
          if (!accumulate) c[j] = 0;
        } else {
          c[j] = static_cast<Out>(acc[r][j]);
        }
      }
    }
  }
  if (lower_c && !accumulate) {
    for (int64_t r = 0; r < rows; ++r) {
      Out* c = C + (i0 + r) * N;
      for (int64_t j = n_limit; j < N; ++j) c[j] = 0;
    }
  }
}

// The row-tile kernel compiled twice, for AVX2 and for baseline x86-64,
// chosen at load time (GCC target_clones). Neither enables FMA, so both
// perform the same IEEE double multiplies and adds in the same order: the
// results are bitwise identical; AVX2 only widens the vectors.
__attribute__((target_clones("avx2", "default"))) void RowTile(
    const float* A, const float* B, float* C, int64_t M, int64_t K, int64_t N,
    bool accumulate, bool lower_a, bool upper_a, bool lower_c, int64_t tile) {
  MatMulRowTile(A, B, C, M, K, N, accumulate, lower_a, upper_a, lower_c, tile);
}
__attribute__((target_clones("avx2", "default"))) void RowTile(
    const double* A, const double* B, double* C, int64_t M, int64_t K,
    int64_t N, bool accumulate, bool lower_a, bool upper_a, bool lower_c,
    int64_t tile) {
  MatMulRowTile(A, B, C, M, K, N, accumulate, lower_a, upper_a, lower_c, tile);
}

// C[M, N] = (accumulate ? C : 0) + A[M, K] · B[K, N], all row-major. Each
// C[i][j] is a double sum over k = 0, 1, ..., K-1 in order, started from
// C[i][j] (when accumulating) or 0, then rounded once to Out.
//   lower_a: A[i][k] == 0 for k > i (A is lower-triangular and zero above):
//            those terms are skipped (exactly: they add 0).
//   upper_a: A[i][k] == 0 for k < i: those terms are skipped.
//   lower_c: only C[i][j] for j <= i are computed; C[i][j > i] is set to 0
//            (or left unchanged when accumulating).
// The operands are used as given (callers round them to bf16 beforehand).
template <typename T>
void MatMul(const T* A, const T* B, T* C, int64_t M, int64_t K, int64_t N,
            bool accumulate, int threads, bool lower_a = false,
            bool lower_c = false, bool upper_a = false) {
  const int64_t row_tiles = (M + kRowTile - 1) / kRowTile;
  ParallelFor(row_tiles, threads, [&](int64_t tile) {
    RowTile(A, B, C, M, K, N, accumulate, lower_a, upper_a, lower_c, tile);
  });
}

double Silu(double g) { return g / (1.0 + std::exp(-g)); }

// The model's forward and backward on one context, for Real = float (the
// reference precision rule of the header) or double (everything in double).
template <typename Real>
class Model {
 public:
  Model(const ModelConfig& config, bool bf16, int threads)
      : cfg_(config),
        bf16_(bf16 && std::is_same<Real, float>::value),
        threads_(threads),
        offsets_(ComputeParameterOffsets(config)) {
    const int64_t T = cfg_.T, C = cfg_.C, H = cfg_.hidden, NH = cfg_.NH;
    layers_.resize(cfg_.L);
    for (Layer& l : layers_) {
      l.x_in.resize(T * C);
      l.h1.resize(T * C);
      l.mean1.resize(T);
      l.rstd1.resize(T);
      l.qkv.resize(T * 3 * C);
      l.probabilities.resize(NH * T * T);
      l.o.resize(T * C);
      l.x_mid.resize(T * C);
      l.h2.resize(T * C);
      l.mean2.resize(T);
      l.rstd2.resize(T);
      l.gate.resize(T * H);
      l.up.resize(T * H);
      l.a.resize(T * H);
    }
    x_final_.resize(T * C);
    xf_.resize(T * C);
    meanf_.resize(T);
    rstdf_.resize(T);
    logits_.resize(T * int64_t{cfg_.V});
    lse_.resize(T);
    // RoPE tables, double: angle = t · base^(−2i/HS).
    const int64_t half = cfg_.HS / 2;
    rope_cos_.resize(T * half);
    rope_sin_.resize(T * half);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const double inv_freq =
            std::pow(cfg_.rope_base, -2.0 * double(i) / double(cfg_.HS));
        const double angle = double(t) * inv_freq;
        rope_cos_[t * half + i] = std::cos(angle);
        rope_sin_[t * half + i] = std::sin(angle);
      }
    }
  }

  const std::vector<Real>& logits() const { return logits_; }

  void Forward(const Real* p, const uint32_t* inputs) {
    const int64_t T = cfg_.T, C = cfg_.C, H = cfg_.hidden;
    std::vector<Real> x(T * C);
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(p + offsets_.embedding + int64_t{inputs[t]} * C, C,
                  x.data() + t * C);
    }
    std::vector<Real> tmp(T * C);
    for (int l = 0; l < cfg_.L; ++l) {
      Layer& s = layers_[l];
      const BlockOffsets& b = offsets_.blocks[l];
      s.x_in = x;
      LayerNormForward(x.data(), p + b.attention_norm_weight,
                       p + b.attention_norm_bias, s.h1.data(), s.mean1.data(),
                       s.rstd1.data());
      // qkv = h1 · qkvᵀ
      LinearForward(s.h1.data(), p + b.qkv, s.qkv.data(), T, C, 3 * C);
      RopeForward(s.qkv.data());
      AttentionForward(&s);
      LinearForward(s.o.data(), p + b.output, tmp.data(), T, C, C);
      AddInto(x.data(), tmp.data(), T * C);
      s.x_mid = x;
      LayerNormForward(x.data(), p + b.mlp_norm_weight, p + b.mlp_norm_bias,
                       s.h2.data(), s.mean2.data(), s.rstd2.data());
      LinearForward(s.h2.data(), p + b.gate, s.gate.data(), T, C, H);
      LinearForward(s.h2.data(), p + b.up, s.up.data(), T, C, H);
      ParallelFor(T, threads_, [&](int64_t t) {
        for (int64_t j = t * H; j < (t + 1) * H; ++j) {
          s.a[j] = static_cast<Real>(Silu(s.gate[j]) * double(s.up[j]));
        }
      });
      LinearForward(s.a.data(), p + b.down, tmp.data(), T, H, C);
      AddInto(x.data(), tmp.data(), T * C);
    }
    x_final_ = x;
    LayerNormForward(x.data(), p + offsets_.final_norm_weight,
                     p + offsets_.final_norm_bias, xf_.data(), meanf_.data(),
                     rstdf_.data());
    LinearForward(xf_.data(), p + offsets_.embedding, logits_.data(), T, C,
                  cfg_.V);
  }

  // Per-row cross-entropy from the logits of the last Forward.
  void Loss(const uint32_t* targets, Real* row_losses) {
    const int64_t V = cfg_.V;
    ParallelFor(cfg_.T, threads_, [&](int64_t t) {
      const Real* z = logits_.data() + t * V;
      double max = -INFINITY;
      for (int64_t v = 0; v < V; ++v) max = std::max(max, double(z[v]));
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - max);
      lse_[t] = max + std::log(sum);
      const double loss = lse_[t] - double(z[targets[t]]);
      if (row_losses != nullptr) row_losses[t] = static_cast<Real>(loss);
    });
  }

  // Gradient of the mean loss (after Forward and Loss) into `g`.
  void Backward(const Real* p, const uint32_t* inputs,
                const uint32_t* targets, Real* g) {
    const int64_t T = cfg_.T, C = cfg_.C, H = cfg_.hidden, V = cfg_.V;
    // dlogits = (softmax − onehot) / T.
    std::vector<Real> dlogits(T * V);
    ParallelFor(T, threads_, [&](int64_t t) {
      const Real* z = logits_.data() + t * V;
      Real* d = dlogits.data() + t * V;
      for (int64_t v = 0; v < V; ++v) {
        const double prob = std::exp(double(z[v]) - lse_[t]);
        d[v] = static_cast<Real>((prob - (v == targets[t] ? 1.0 : 0.0)) /
                                 double(T));
      }
    });
    std::vector<Real> dxf(T * C), dx(T * C), dh(T * C);
    LinearBackward(dlogits.data(), xf_.data(), p + offsets_.embedding,
                   dxf.data(), g + offsets_.embedding, T, C, V,
                   /*accumulate_dx=*/false);
    std::fill(dx.begin(), dx.end(), Real(0));
    LayerNormBackward(x_final_.data(), meanf_.data(), rstdf_.data(),
                      p + offsets_.final_norm_weight, dxf.data(), dx.data(),
                      g + offsets_.final_norm_weight,
                      g + offsets_.final_norm_bias);
    std::vector<Real> da(T * H), dgate(T * H), dup(T * H), dqkv(T * 3 * C);
    for (int l = cfg_.L - 1; l >= 0; --l) {
      Layer& s = layers_[l];
      const BlockOffsets& b = offsets_.blocks[l];
      // MLP: x_out = x_mid + a · downᵀ.
      LinearBackward(dx.data(), s.a.data(), p + b.down, da.data(),
                     g + b.down, T, H, C, false);
      ParallelFor(T, threads_, [&](int64_t t) {
        for (int64_t j = t * H; j < (t + 1) * H; ++j) {
          const double gate = s.gate[j];
          const double sig = 1.0 / (1.0 + std::exp(-gate));
          const double silu = gate * sig;
          const double dsilu = sig * (1.0 + gate * (1.0 - sig));
          dgate[j] = static_cast<Real>(double(da[j]) * double(s.up[j]) * dsilu);
          dup[j] = static_cast<Real>(double(da[j]) * silu);
        }
      });
      LinearBackward(dgate.data(), s.h2.data(), p + b.gate, dh.data(),
                     g + b.gate, T, C, H, false);
      LinearBackward(dup.data(), s.h2.data(), p + b.up, dh.data(), g + b.up,
                     T, C, H, /*accumulate_dx=*/true);
      LayerNormBackward(s.x_mid.data(), s.mean2.data(), s.rstd2.data(),
                        p + b.mlp_norm_weight, dh.data(), dx.data(),
                        g + b.mlp_norm_weight, g + b.mlp_norm_bias);
      // Attention: x_mid = x_in + o · outputᵀ.
      std::vector<Real> dout(T * C);
      LinearBackward(dx.data(), s.o.data(), p + b.output, dout.data(),
                     g + b.output, T, C, C, false);
      AttentionBackward(s, dout.data(), dqkv.data());
      RopeBackward(dqkv.data());
      LinearBackward(dqkv.data(), s.h1.data(), p + b.qkv, dh.data(),
                     g + b.qkv, T, C, 3 * C, false);
      LayerNormBackward(s.x_in.data(), s.mean1.data(), s.rstd1.data(),
                        p + b.attention_norm_weight, dh.data(), dx.data(),
                        g + b.attention_norm_weight, g + b.attention_norm_bias);
    }
    // Embedding rows: after the tied logits part, add dx rows in order t.
    Real* de = g + offsets_.embedding;
    for (int64_t t = 0; t < T; ++t) {
      Real* row = de + int64_t{inputs[t]} * C;
      const Real* d = dx.data() + t * C;
      for (int64_t c = 0; c < C; ++c) row[c] = row[c] + d[c];
    }
  }

 private:
  struct Layer {
    std::vector<Real> x_in, h1, mean1, rstd1, qkv, probabilities, o, x_mid,
        h2, mean2, rstd2, gate, up, a;
  };

  Real Op(Real x) const {
    if constexpr (std::is_same<Real, float>::value) {
      return bf16_ ? RoundToBfloat16(x) : x;
    } else {
      return x;
    }
  }

  // The operand `src` [rows, cols] (leading dimension ld, starting at column
  // col0), optionally transposed to [cols, rows], rounded per Op.
  std::vector<Real> Operand(const Real* src, int64_t rows, int64_t cols,
                            int64_t ld, int64_t col0, bool transpose) const {
    std::vector<Real> out(rows * cols);
    if (transpose) {
      constexpr int64_t kBlock = 32;  // cache-friendly blocked transpose
      for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
        for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
          const int64_t r1 = std::min(rows, r0 + kBlock);
          const int64_t c1 = std::min(cols, c0 + kBlock);
          for (int64_t r = r0; r < r1; ++r) {
            for (int64_t c = c0; c < c1; ++c) {
              out[c * rows + r] = Op(src[r * ld + col0 + c]);
            }
          }
        }
      }
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          out[r * cols + c] = Op(src[r * ld + col0 + c]);
        }
      }
    }
    return out;
  }

  // y[T, out] = x[T, in] · W[out, in]ᵀ.
  void LinearForward(const Real* x, const Real* w, Real* y, int64_t rows,
                     int64_t in, int64_t out) {
    const std::vector<Real> xo = Operand(x, rows, in, in, 0, false);
    const std::vector<Real> wt = Operand(w, out, in, in, 0, true);
    MatMul(xo.data(), wt.data(), y, rows, in, out, false, threads_);
  }

  // For y = x · Wᵀ with upstream dy [rows, out]: dx [rows, in] = dy · W
  // (accumulated onto dx's fp32 values when accumulate_dx), and
  // dW [out, in] = dyᵀ · x (overwritten).
  void LinearBackward(const Real* dy, const Real* x, const Real* w, Real* dx,
                      Real* dw, int64_t rows, int64_t in, int64_t out,
                      bool accumulate_dx) {
    const std::vector<Real> dyo = Operand(dy, rows, out, out, 0, false);
    const std::vector<Real> wo = Operand(w, out, in, in, 0, false);
    MatMul(dyo.data(), wo.data(), dx, rows, out, in, accumulate_dx, threads_);
    const std::vector<Real> dyt = Operand(dy, rows, out, out, 0, true);
    const std::vector<Real> xo = Operand(x, rows, in, in, 0, false);
    MatMul(dyt.data(), xo.data(), dw, out, rows, in, false, threads_);
  }

  void AddInto(Real* x, const Real* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<Real>(double(x[i]) + double(y[i]));
    }
  }

  void LayerNormForward(const Real* x, const Real* w, const Real* b, Real* y,
                        Real* mean, Real* rstd) {
    const int64_t C = cfg_.C;
    const double eps = static_cast<double>(
        std::is_same<Real, float>::value ? double(cfg_.layer_norm_eps)
                                         : double(cfg_.layer_norm_eps_numerator) /
                                               double(cfg_.layer_norm_eps_denominator));
    ParallelFor(cfg_.T, threads_, [&](int64_t t) {
      const Real* xr = x + t * C;
      double sum = 0;
      for (int64_t c = 0; c < C; ++c) sum += xr[c];
      const double m = sum / double(C);
      double var = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double d = double(xr[c]) - m;
        var += d * d;
      }
      var /= double(C);
      mean[t] = static_cast<Real>(m);
      rstd[t] = static_cast<Real>(1.0 / std::sqrt(var + eps));
      const double ms = mean[t], rs = rstd[t];
      for (int64_t c = 0; c < C; ++c) {
        y[t * C + c] = static_cast<Real>((double(xr[c]) - ms) * rs *
                                             double(w[c]) +
                                         double(b[c]));
      }
    });
  }

  // dx += LayerNorm-backward(dy) (one rounding per element); dw, db are
  // overwritten with the double sums over rows.
  void LayerNormBackward(const Real* x, const Real* mean, const Real* rstd,
                         const Real* w, const Real* dy, Real* dx, Real* dw,
                         Real* db) {
    const int64_t C = cfg_.C, T = cfg_.T;
    ParallelFor(T, threads_, [&](int64_t t) {
      const double ms = mean[t], rs = rstd[t];
      double sum_dxhat = 0, sum_dxhat_xhat = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double xhat = (double(x[t * C + c]) - ms) * rs;
        const double dxhat = double(dy[t * C + c]) * double(w[c]);
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * xhat;
      }
      const double m1 = sum_dxhat / double(C), m2 = sum_dxhat_xhat / double(C);
      for (int64_t c = 0; c < C; ++c) {
        const double xhat = (double(x[t * C + c]) - ms) * rs;
        const double dxhat = double(dy[t * C + c]) * double(w[c]);
        const double d = rs * (dxhat - m1 - xhat * m2);
        dx[t * C + c] = static_cast<Real>(double(dx[t * C + c]) + d);
      }
    });
    const int64_t col_blocks = (C + 63) / 64;
    ParallelFor(col_blocks, threads_, [&](int64_t blk) {
      const int64_t c0 = blk * 64, c1 = std::min(C, c0 + 64);
      for (int64_t c = c0; c < c1; ++c) {
        double sw = 0, sb = 0;
        for (int64_t t = 0; t < T; ++t) {
          const double xhat = (double(x[t * C + c]) - double(mean[t])) *
                              double(rstd[t]);
          sw += double(dy[t * C + c]) * xhat;
          sb += double(dy[t * C + c]);
        }
        dw[c] = static_cast<Real>(sw);
        db[c] = static_cast<Real>(sb);
      }
    });
  }

  // Rotates the q and k columns of qkv [T, 3C] in place (sign = +1) or back
  // (sign = −1, the transpose, for gradients).
  void Rope(Real* qkv, double sign) {
    const int64_t C = cfg_.C, HS = cfg_.HS, half = HS / 2;
    ParallelFor(cfg_.T, threads_, [&](int64_t t) {
      for (int64_t part = 0; part < 2; ++part) {  // q, then k
        for (int64_t n = 0; n < cfg_.NH; ++n) {
          Real* v = qkv + t * 3 * C + part * C + n * HS;
          for (int64_t i = 0; i < half; ++i) {
            const double cs = rope_cos_[t * half + i];
            const double sn = sign * rope_sin_[t * half + i];
            const double a = v[i], bb = v[i + half];
            v[i] = static_cast<Real>(a * cs - bb * sn);
            v[i + half] = static_cast<Real>(bb * cs + a * sn);
          }
        }
      }
    });
  }
  void RopeForward(Real* qkv) { Rope(qkv, 1.0); }
  void RopeBackward(Real* dqkv) { Rope(dqkv, -1.0); }

  void AttentionForward(Layer* s) {
    const int64_t T = cfg_.T, C = cfg_.C, HS = cfg_.HS;
    const double scale = 1.0 / std::sqrt(double(HS));
    ParallelFor(cfg_.NH, threads_, [&](int64_t n) {
      const std::vector<Real> q = Operand(s->qkv.data(), T, HS, 3 * C, n * HS, false);
      const std::vector<Real> kt =
          Operand(s->qkv.data(), T, HS, 3 * C, C + n * HS, true);
      const std::vector<Real> v =
          Operand(s->qkv.data(), T, HS, 3 * C, 2 * C + n * HS, false);
      Real* prob = s->probabilities.data() + n * T * T;
      // scores (unscaled dot products), causal.
      MatMul(q.data(), kt.data(), prob, T, HS, T, false, 1, false, true);
      for (int64_t t = 0; t < T; ++t) {
        Real* row = prob + t * T;
        double max = -INFINITY;
        std::vector<double> e(t + 1);
        for (int64_t u = 0; u <= t; ++u) {
          e[u] = double(row[u]) * scale;
          max = std::max(max, e[u]);
        }
        double sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          e[u] = std::exp(e[u] - max);
          sum += e[u];
        }
        for (int64_t u = 0; u <= t; ++u) row[u] = static_cast<Real>(e[u] / sum);
      }
      const std::vector<Real> po = Operand(prob, T, T, T, 0, false);
      std::vector<Real> out(T * HS);
      MatMul(po.data(), v.data(), out.data(), T, T, HS, false, 1, true, false);
      for (int64_t t = 0; t < T; ++t) {
        std::copy_n(out.data() + t * HS, HS, s->o.data() + t * C + n * HS);
      }
    });
  }

  // From dout [T, C] (gradient of the attention output o) to dqkv [T, 3C]
  // (gradient of the post-RoPE q, k and of v).
  void AttentionBackward(const Layer& s, const Real* dout, Real* dqkv) {
    const int64_t T = cfg_.T, C = cfg_.C, HS = cfg_.HS;
    const double scale = 1.0 / std::sqrt(double(HS));
    ParallelFor(cfg_.NH, threads_, [&](int64_t n) {
      const Real* prob = s.probabilities.data() + n * T * T;
      const std::vector<Real> dob = Operand(dout, T, HS, C, n * HS, false);
      const std::vector<Real> vt =
          Operand(s.qkv.data(), T, HS, 3 * C, 2 * C + n * HS, true);
      // dP = dO · vᵀ (causal part only).
      std::vector<Real> dp(T * T);
      MatMul(dob.data(), vt.data(), dp.data(), T, HS, T, false, 1, false, true);
      // dv = Pᵀ · dO.
      const std::vector<Real> pt = Operand(prob, T, T, T, 0, true);
      std::vector<Real> dv(T * HS);
      MatMul(pt.data(), dob.data(), dv.data(), T, T, HS, false, 1,
             /*lower_a=*/false, /*lower_c=*/false, /*upper_a=*/true);
      // dS = P ⊙ (dP − Σ_u P dP) · scale (gradient of the unscaled dots).
      std::vector<Real> ds(T * T, Real(0));
      for (int64_t t = 0; t < T; ++t) {
        double dot = 0;
        for (int64_t u = 0; u <= t; ++u) {
          dot += double(prob[t * T + u]) * double(dp[t * T + u]);
        }
        for (int64_t u = 0; u <= t; ++u) {
          ds[t * T + u] = static_cast<Real>(
              double(prob[t * T + u]) * (double(dp[t * T + u]) - dot) * scale);
        }
      }
      const std::vector<Real> dso = Operand(ds.data(), T, T, T, 0, false);
      const std::vector<Real> k =
          Operand(s.qkv.data(), T, HS, 3 * C, C + n * HS, false);
      std::vector<Real> dq(T * HS), dk(T * HS);
      MatMul(dso.data(), k.data(), dq.data(), T, T, HS, false, 1, true, false);
      const std::vector<Real> dst = Operand(ds.data(), T, T, T, 0, true);
      const std::vector<Real> q = Operand(s.qkv.data(), T, HS, 3 * C, n * HS, false);
      MatMul(dst.data(), q.data(), dk.data(), T, T, HS, false, 1,
             /*lower_a=*/false, /*lower_c=*/false, /*upper_a=*/true);
      for (int64_t t = 0; t < T; ++t) {
        std::copy_n(dq.data() + t * HS, HS, dqkv + t * 3 * C + n * HS);
        std::copy_n(dk.data() + t * HS, HS, dqkv + t * 3 * C + C + n * HS);
        std::copy_n(dv.data() + t * HS, HS, dqkv + t * 3 * C + 2 * C + n * HS);
      }
    });
  }

  const ModelConfig cfg_;
  const bool bf16_;
  const int threads_;
  const ParameterOffsets offsets_;
  std::vector<Layer> layers_;
  std::vector<Real> x_final_, xf_, meanf_, rstdf_, logits_;
  std::vector<double> lse_;
  std::vector<double> rope_cos_, rope_sin_;
};

absl::Status CheckInputs(const ModelConfig& config, const void* params,
                         const uint32_t* inputs, const uint32_t* targets) {
  RETURN_IF_ERROR(ValidateModelShape(config));
  if (params == nullptr || inputs == nullptr || targets == nullptr) {
    return absl::InvalidArgumentError("null params, inputs or targets");
  }
  for (int t = 0; t < config.T; ++t) {
    if (inputs[t] >= static_cast<uint32_t>(config.V)) {
      return absl::InvalidArgumentError(
          absl::StrCat("input id ", inputs[t], " at row ", t,
                       " is out of range (vocabulary ", config.V, ")"));
    }
  }
  for (int t = 0; t < config.T; ++t) {
    if (targets[t] >= static_cast<uint32_t>(config.V)) {
      return absl::InvalidArgumentError(
          absl::StrCat("target id ", targets[t], " at row ", t,
                       " is out of range (vocabulary ", config.V, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ComputeLossAndGradients(const ModelConfig& config,
                                     const ReferenceOptions& options,
                                     const float* params,
                                     const uint32_t* inputs,
                                     const uint32_t* targets,
                                     float* row_losses, float* gradients,
                                     float* logits) {
  RETURN_IF_ERROR(Annotate(CheckInputs(config, params, inputs, targets),
                           "reference forward"));
  Model<float> model(config, options.bf16_matmul_operands,
                     ResolveThreads(options.num_threads));
  model.Forward(params, inputs);
  model.Loss(targets, row_losses);
  if (logits != nullptr) {
    std::copy(model.logits().begin(), model.logits().end(), logits);
  }
  if (gradients != nullptr) model.Backward(params, inputs, targets, gradients);
  return absl::OkStatus();
}

absl::Status ComputeLossAndGradientsDouble(const ModelConfig& config,
                                           int num_threads,
                                           const double* params,
                                           const uint32_t* inputs,
                                           const uint32_t* targets,
                                           double* row_losses,
                                           double* gradients) {
  RETURN_IF_ERROR(Annotate(CheckInputs(config, params, inputs, targets),
                           "reference forward (double)"));
  Model<double> model(config, false, ResolveThreads(num_threads));
  model.Forward(params, inputs);
  model.Loss(targets, row_losses);
  if (gradients != nullptr) model.Backward(params, inputs, targets, gradients);
  return absl::OkStatus();
}

namespace {

class ReferenceBackend : public Backend {
 public:
  ReferenceBackend(const ModelConfig& config, ReferenceOptions options)
      : config_(config),
        options_(options),
        n_(NumParameters(config)),
        gradients_(n_) {}

  std::string name() const override { return "reference"; }

  absl::Status Load(const float* pmv, uint64_t update_count) override {
    RETURN_IF_ERROR(Annotate(ValidateModelShape(config_), "reference Load"));
    if (pmv == nullptr) {
      return absl::InvalidArgumentError("reference Load: null P/M/V image");
    }
    pmv_.assign(pmv, pmv + 3 * n_);
    update_count_ = update_count;
    loaded_ = true;
    return absl::OkStatus();
  }

  absl::Status SetTokens(const uint32_t* tokens, uint64_t num_tokens,
                         uint64_t first_context) override {
    if (tokens == nullptr && num_tokens > 0) {
      return absl::InvalidArgumentError("reference SetTokens: null tokens");
    }
    for (uint64_t i = 0; i < num_tokens; ++i) {
      if (tokens[i] >= static_cast<uint32_t>(config_.V)) {
        invalid_token_seen_ = true;
        return absl::InvalidArgumentError(absl::StrCat(
            "reference SetTokens: token id ", tokens[i], " at stream index ",
            uint64_t{static_cast<uint64_t>(config_.T)} * first_context + i,
            " is out of range (vocabulary ", config_.V, ")"));
      }
    }
    tokens_.assign(tokens, tokens + num_tokens);
    first_context_ = first_context;
    tokens_set_ = true;
    return absl::OkStatus();
  }

  absl::Status ForwardRecord(uint64_t context, float* logits) override {
    return PredictionRowLogits(context, logits, "reference ForwardRecord");
  }

  absl::Status EnqueueStep(int64_t step) override {
    if (!loaded_ || !tokens_set_) {
      return absl::FailedPreconditionError(
          "reference EnqueueStep: Load and SetTokens must come first");
    }
    if (step != next_step_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "reference EnqueueStep: step ", step, " enqueued, expected ",
          next_step_));
    }
    const uint64_t context = first_context_ + static_cast<uint64_t>(step);
    const uint32_t* inputs = nullptr;
    RETURN_IF_ERROR(Annotate(ContextIds(context, &inputs),
                             absl::StrCat("reference step ", step)));
    std::vector<float> losses(config_.T);
    RETURN_IF_ERROR(Annotate(
        ComputeLossAndGradients(config_, options_, pmv_.data(), inputs,
                                inputs + 1, losses.data(), gradients_.data()),
        absl::StrCat("reference step ", step)));
    RETURN_IF_ERROR(Annotate(
        AdamWUpdate(config_, AdamWHyperparameters(),
                    update_count_ + static_cast<uint64_t>(step) + 1,
                    gradients_.data(), ResolveThreads(options_.num_threads),
                    pmv_.data()),
        absl::StrCat("reference step ", step)));
    bool finite = true;
    for (float x : losses) finite = finite && std::isfinite(x);
    if (!finite) {
      if (telemetry_.first_nonfinite_step < 0) {
        telemetry_.first_nonfinite_step = step;
      }
      ++telemetry_.nonfinite_steps;
    }
    last_losses_ = losses;
    completed_[step] = std::move(losses);
    ++next_step_;
    return absl::OkStatus();
  }

  absl::Status PollStep(int64_t step, float* row_losses) override {
    auto it = completed_.find(step);
    if (it == completed_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "reference PollStep: step ", step, " was not enqueued (or was "
          "already polled)"));
    }
    std::copy(it->second.begin(), it->second.end(), row_losses);
    completed_.erase(it);
    return absl::OkStatus();
  }

  absl::Status Snapshot(float* pmv) override {
    if (!loaded_) {
      return absl::FailedPreconditionError("reference Snapshot: not loaded");
    }
    std::copy(pmv_.begin(), pmv_.end(), pmv);
    return absl::OkStatus();
  }

  absl::Status Final(uint64_t context, float* logits) override {
    return PredictionRowLogits(context, logits, "reference Final");
  }

  absl::StatusOr<BackendTelemetry> Telemetry() override {
    BackendTelemetry t = telemetry_;
    t.invalid_token_seen = invalid_token_seen_;
    t.last_row_losses = last_losses_;
    const int64_t head = std::min<int64_t>(1024, n_);
    t.embedding_gradient_head.assign(gradients_.begin(),
                                     gradients_.begin() + head);
    if (loaded_) {
      t.embedding_parameter_head.assign(pmv_.begin(), pmv_.begin() + head);
      t.embedding_first_moment_head.assign(pmv_.begin() + n_,
                                           pmv_.begin() + n_ + head);
    }
    return t;
  }

 private:
  // Forward of the current parameters on `context`; copies the logits of
  // rows T/4-1, T/2-1, T-1 to `logits` (3 V floats), as backend.h specifies
  // for ForwardRecord and Final.
  absl::Status PredictionRowLogits(uint64_t context, float* logits,
                                   absl::string_view what) {
    std::vector<float> all;
    RETURN_IF_ERROR(Annotate(ForwardLogits(context, &all), what));
    const int64_t V = config_.V, T = config_.T;
    const int64_t rows[3] = {T / 4 - 1, T / 2 - 1, T - 1};
    for (int r = 0; r < 3; ++r) {
      std::copy_n(all.data() + rows[r] * V, V, logits + r * V);
    }
    return absl::OkStatus();
  }

  // Points `inputs` at context c's T + 1 ids (inputs, then targets one on).
  absl::Status ContextIds(uint64_t context, const uint32_t** inputs) const {
    const uint64_t T = static_cast<uint64_t>(config_.T);
    if (!tokens_set_ || context < first_context_ ||
        (context - first_context_) * T + T + 1 > tokens_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "context ", context, " is not in the tokens set (first context ",
          first_context_, ", ", tokens_.size(), " ids)"));
    }
    *inputs = tokens_.data() + (context - first_context_) * T;
    return absl::OkStatus();
  }

  absl::Status ForwardLogits(uint64_t context, std::vector<float>* logits) {
    if (!loaded_) return absl::FailedPreconditionError("not loaded");
    const uint32_t* inputs = nullptr;
    RETURN_IF_ERROR(ContextIds(context, &inputs));
    logits->resize(int64_t{config_.T} * config_.V);
    return ComputeLossAndGradients(config_, options_, pmv_.data(), inputs,
                                   inputs + 1, nullptr, nullptr,
                                   logits->data());
  }

  const ModelConfig config_;
  const ReferenceOptions options_;
  const int64_t n_;
  std::vector<float> pmv_;
  std::vector<float> gradients_;
  std::vector<uint32_t> tokens_;
  uint64_t update_count_ = 0;
  uint64_t first_context_ = 0;
  bool loaded_ = false;
  bool tokens_set_ = false;
  bool invalid_token_seen_ = false;
  int64_t next_step_ = 0;
  std::map<int64_t, std::vector<float>> completed_;
  std::vector<float> last_losses_;
  BackendTelemetry telemetry_;
};

}  // namespace

std::unique_ptr<Backend> CreateReferenceBackend(const ModelConfig& config,
                                                ReferenceOptions options) {
  return std::make_unique<ReferenceBackend>(config, options);
}

}  // namespace coppelius
