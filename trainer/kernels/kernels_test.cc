// File: trainer/kernels/kernels_test.cc (tag "gpu")
//
// Every kernel of trainer/kernels against a CPU reference in double on the
// same (bf16-rounded where the kernel reads bf16) inputs, with fresh random
// inputs, poisoned outputs (test_util.h's DeviceBuffer fills 0xFF: NaN) and
// sizes that are not multiples of the block sizes. Tolerances, by what the
// kernel does:
//   fp32 arithmetic, fp32 output:               rel-norm ≤ 1e-5
//   output rounded to bf16 (one rounding):      rel-norm ≤ 5e-3 (2⁻⁸ bound)
//   matrix products of bf16 operands, fp32 out: rel-norm ≤ 1e-5 (exact
//                                               products, fp32 sums)
//   AdamW, embedding backward:                  bitwise (same fp32 order)
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/adamw.h"
#include "trainer/kernels/adamw.h"
#include "trainer/kernels/attention.h"
#include "trainer/kernels/attention_items.h"
#include "trainer/kernels/cross_entropy.h"
#include "trainer/kernels/embedding.h"
#include "trainer/kernels/fused_matmul.h"
#include "trainer/kernels/layernorm.h"
#include "trainer/kernels/matmul.h"
#include "trainer/kernels/rope.h"
#include "trainer/kernels/step.h"
#include "trainer/kernels/swiglu.h"
#include "trainer/kernels/test_util.h"

namespace coppelius {
namespace {

using test::AsBf16;
using test::Bf16Buffer;
using test::DeviceBuffer;
using test::FromBf16;
using test::RandomNormal;
using test::RelErr;
using test::RoundBf16;
using test::ToBf16;

constexpr double kFp32Tol = 1e-5;
constexpr double kBf16OutTol = 5e-3;

std::mt19937_64& Rng() {
  static std::mt19937_64 rng(std::random_device{}());
  return rng;
}

// ---------------------------------------------------------------- matmul

struct MatmulCase {
  bool ta, tb;
  int64_t m, n, k;
  int batch;
  float alpha, beta;
  int algo_index = 0;  // MatmulShape::algo_index
  int sm_count_target = 0;  // MatmulShape::sm_count_target
  MatmulAlgoConfig algo_config = {};  // MatmulShape::algo_config
  bool expect_configured = false;  // the plan must run algo_config
};

void RunMatmulCase(const MatmulCase& c) {
  SCOPED_TRACE(testing::Message() << "ta=" << c.ta << " tb=" << c.tb
                                  << " m=" << c.m << " n=" << c.n
                                  << " k=" << c.k << " batch=" << c.batch);
  // Row-major stored shapes, padded leading dimensions (multiples of 8).
  const int64_t a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
  const int64_t b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
  // Leading dimensions padded and rounded to multiples of 8 elements (16-byte
  // aligned rows, as every buffer of the backend has).
  auto pad = [](int64_t cols, int64_t extra) { return (cols + 7) / 8 * 8 + extra; };
  const int64_t lda = pad(a_cols, 8), ldb = pad(b_cols, 16), ldc = pad(c.n, 8);
  const int64_t sa = a_rows * lda, sb = b_rows * ldb, sc = c.m * ldc;
  auto a = RandomNormal(sa * c.batch, 1.0f, &Rng());
  auto b = RandomNormal(sb * c.batch, 1.0f, &Rng());
  auto cin = RandomNormal(sc * c.batch, 1.0f, &Rng());
  Bf16Buffer da(a.size()), db(b.size());
  DeviceBuffer<float> dc(cin.size()), dd(cin.size());
  da.Upload(ToBf16(a));
  db.Upload(ToBf16(b));
  dc.Upload(cin);
  cublasLtHandle_t lt;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  MatmulShape s;
  s.name = "test";
  s.trans_a = c.ta;
  s.trans_b = c.tb;
  s.m = c.m;
  s.n = c.n;
  s.k = c.k;
  s.lda = lda;
  s.ldb = ldb;
  s.ldc = ldc;
  s.batch = c.batch;
  s.stride_a = sa;
  s.stride_b = sb;
  s.stride_c = sc;
  s.alpha = c.alpha;
  s.beta = c.beta;
  s.algo_index = c.algo_index;
  s.sm_count_target = c.sm_count_target;
  s.algo_config = c.algo_config;
  const size_t ws_bytes = 32u << 20;
  DeviceBuffer<char> ws(ws_bytes);
  auto plan = MatmulPlan::Create(lt, s, ws_bytes);
  ASSERT_TRUE(plan.ok()) << plan.status();
  if (c.expect_configured) {
    ASSERT_TRUE((*plan)->configured()) << (*plan)->refusal();
  }
  ASSERT_TRUE((*plan)->Run(AsBf16(da), AsBf16(db), c.beta != 0 ? dc.get() : nullptr,
                           dd.get(), ws.get(), nullptr)
                  .ok());
  auto out = dd.Download();
  std::vector<double> ref;
  std::vector<float> got;
  for (int bi = 0; bi < c.batch; ++bi) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          const float av = c.ta ? a[bi * sa + p * lda + i] : a[bi * sa + i * lda + p];
          const float bv = c.tb ? b[bi * sb + j * ldb + p] : b[bi * sb + p * ldb + j];
          acc += static_cast<double>(RoundBf16(av)) * RoundBf16(bv);
        }
        double r = c.alpha * acc;
        if (c.beta != 0) r += c.beta * cin[bi * sc + i * ldc + j];
        ref.push_back(r);
        got.push_back(out[bi * sc + i * ldc + j]);
      }
    }
  }
  EXPECT_LT(RelErr(got, ref), kFp32Tol);
  plan->reset();
  cublasLtDestroy(lt);
}

TEST(MatmulTest, AllTransposeFormsAgainstDoubleReference) {
  SKIP_WITHOUT_GPU();
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      RunMatmulCase({ta, tb, 77, 88, 120, 1, 1.0f, 0.0f});
    }
  }
}

TEST(MatmulTest, ResidualEpilogueAndScale) {
  SKIP_WITHOUT_GPU();
  RunMatmulCase({false, true, 65, 72, 200, 1, 1.0f, 1.0f});
  RunMatmulCase({false, true, 33, 40, 16, 1, 0.125f, 0.0f});
}

TEST(MatmulTest, StridedBatch) {
  SKIP_WITHOUT_GPU();
  RunMatmulCase({false, true, 45, 45, 16, 3, 0.25f, 0.0f});
  RunMatmulCase({false, false, 45, 16, 45, 3, 1.0f, 0.0f});
  RunMatmulCase({true, false, 45, 16, 45, 3, 0.25f, 0.0f});
}

// A bf16 result is the fp32 result rounded to nearest even (checked against
// an fp32-result plan of the same shape: the two plans may sum in different
// orders, so a few roundings may differ; truncation would differ in ~half).
TEST(MatmulTest, Bf16ResultIsRoundedFp32) {
  SKIP_WITHOUT_GPU();
  const int64_t M = 77, N = 96, K = 200;
  auto a = RandomNormal(M * K, 1.0f, &Rng());
  auto b = RandomNormal(N * K, 1.0f, &Rng());
  Bf16Buffer da(a.size()), db(b.size()), d16(M * N);
  DeviceBuffer<float> d32(M * N);
  da.Upload(ToBf16(a));
  db.Upload(ToBf16(b));
  cublasLtHandle_t lt;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  const size_t ws_bytes = 32u << 20;
  DeviceBuffer<char> ws(ws_bytes);
  MatmulShape s = LinearForwardShape("fp32 result", M, N, K);
  auto p32 = MatmulPlan::Create(lt, s, ws_bytes);
  ASSERT_TRUE(p32.ok()) << p32.status();
  s.name = "bf16 result";
  s.d_bf16 = true;
  auto p16 = MatmulPlan::Create(lt, s, ws_bytes);
  ASSERT_TRUE(p16.ok()) << p16.status();
  ASSERT_TRUE((*p32)->Run(AsBf16(da), AsBf16(db), nullptr, d32.get(), ws.get(), nullptr).ok());
  ASSERT_TRUE((*p16)->RunBf16(AsBf16(da), AsBf16(db), AsBf16(d16), ws.get(), nullptr).ok());
  EXPECT_FALSE((*p16)->Run(AsBf16(da), AsBf16(db), nullptr, d32.get(), ws.get(), nullptr).ok());
  const auto f = d32.Download();
  const auto h = d16.Download();
  int mismatches = 0;
  for (size_t i = 0; i < f.size(); ++i) mismatches += h[i] != test::Bf16Bits(f[i]);
  EXPECT_LE(mismatches, static_cast<int>(f.size() / 100)) << "of " << f.size();
  std::vector<double> ref(M * N);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < K; ++p) {
        acc += static_cast<double>(RoundBf16(a[i * K + p])) * RoundBf16(b[j * K + p]);
      }
      ref[i * N + j] = acc;
    }
  }
  EXPECT_LT(RelErr(FromBf16(h), ref), kBf16OutTol);
  p32->reset();
  p16->reset();
  cublasLtDestroy(lt);
}

TEST(MatmulTest, RejectsBadShapes) {
  SKIP_WITHOUT_GPU();
  cublasLtHandle_t lt;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  MatmulShape s;
  s.name = "bad";
  s.m = 4;
  s.n = 4;
  s.k = 4;
  s.lda = 2;
  s.ldb = 4;
  s.ldc = 4;
  EXPECT_EQ(MatmulPlan::Create(lt, s, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  s.lda = 4;
  s.algo_index = 16;  // beyond any heuristic list
  EXPECT_EQ(MatmulPlan::Create(lt, s, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  s.algo_index = -1;
  EXPECT_EQ(MatmulPlan::Create(lt, s, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  cublasLtDestroy(lt);
}

// The backend pins non-default heuristic candidates (logits forward #3,
// logits dW #2): those algorithms must compute the same product.
TEST(MatmulTest, NonDefaultCandidatesAgainstDoubleReference) {
  SKIP_WITHOUT_GPU();
  for (int index : {1, 2, 3}) {
    SCOPED_TRACE(testing::Message() << "algo_index=" << index);
    RunMatmulCase({false, true, 1024, 1000, 64, 1, 1.0f, 0.0f, index});
    RunMatmulCase({true, false, 1000, 128, 256, 1, 1.0f, 0.0f, index});
  }
}

// MatmulShape::algo_config: the heuristic's own pick, read back from its
// plan and given as a configuration, is taken (configured()) and computes
// the same bits; a configuration cuBLASLt refuses (an algorithm id it does
// not have; a tile id no algorithm lists) falls back to the heuristic's
// pick (refusal() says why), the same bits again; a field out of its
// attribute's range is InvalidArgument; the first split of K (2 or 4, any
// reduction scheme) cuBLASLt takes for the heuristic's algorithm, of which
// there must be one, matches the double reference.
TEST(MatmulTest, AlgoConfigurations) {
  SKIP_WITHOUT_GPU();
  const int64_t M = 256, N = 192, K = 320;
  auto a = RandomNormal(M * K, 1.0f, &Rng());
  auto b = RandomNormal(N * K, 1.0f, &Rng());
  Bf16Buffer da(a.size()), db(b.size());
  da.Upload(ToBf16(a));
  db.Upload(ToBf16(b));
  cublasLtHandle_t lt;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  const size_t ws_bytes = 32u << 20;
  DeviceBuffer<char> ws(ws_bytes);
  const MatmulShape s = LinearForwardShape("configured", M, N, K);
  // What a plan of `shape` runs, whether it took the configuration and why
  // not, and its result.
  struct Ran {
    bool configured = true;
    std::string refusal = "unset";
    MatmulAlgoConfig config;
    std::vector<float> d;
  };
  auto run = [&](const MatmulShape& shape) {
    Ran r;
    auto plan = MatmulPlan::Create(lt, shape, ws_bytes);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return r;
    r.configured = (*plan)->configured();
    r.refusal = (*plan)->refusal();
    r.config = (*plan)->algo_config();
    DeviceBuffer<float> d(M * N);
    EXPECT_TRUE((*plan)
                    ->Run(AsBf16(da), AsBf16(db), nullptr, d.get(), ws.get(),
                          nullptr)
                    .ok());
    r.d = d.Download();
    return r;
  };
  const Ran heuristic = run(s);
  EXPECT_FALSE(heuristic.configured);
  EXPECT_EQ(heuristic.refusal, "");
  ASSERT_GE(heuristic.config.algo_id, 0);
  MatmulShape given = s;
  given.algo_config = heuristic.config;
  const Ran same = run(given);
  EXPECT_TRUE(same.configured) << same.refusal;
  EXPECT_EQ(same.refusal, "");
  EXPECT_EQ(MatmulAlgoConfigString(same.config),
            MatmulAlgoConfigString(heuristic.config));
  EXPECT_EQ(same.d, heuristic.d);
  for (const bool bad_id : {true, false}) {
    SCOPED_TRACE(bad_id ? "unknown algorithm id" : "unknown tile id");
    MatmulShape refused = s;
    refused.algo_config = heuristic.config;
    if (bad_id) {
      refused.algo_config.algo_id = 1 << 20;
    } else {
      refused.algo_config.tile = 1 << 20;
    }
    const Ran fallback = run(refused);
    EXPECT_FALSE(fallback.configured);
    EXPECT_NE(fallback.refusal.find(MatmulAlgoConfigString(refused.algo_config)),
              std::string::npos)
        << fallback.refusal;
    EXPECT_EQ(MatmulAlgoConfigString(fallback.config),
              MatmulAlgoConfigString(heuristic.config));
    EXPECT_EQ(fallback.d, heuristic.d);
  }
  for (const auto& [field, value] :
       {std::pair<const char*, int>{"split_k", 0}, {"cluster", 70000},
        {"inner", -1}, {"tile", -2}}) {
    SCOPED_TRACE(field);
    MatmulShape bad = s;
    bad.algo_config = heuristic.config;
    if (std::string(field) == "split_k") bad.algo_config.split_k = value;
    if (std::string(field) == "cluster") bad.algo_config.cluster = value;
    if (std::string(field) == "inner") bad.algo_config.inner = value;
    if (std::string(field) == "tile") bad.algo_config.tile = value;
    EXPECT_EQ(MatmulPlan::Create(lt, bad, ws_bytes).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // A split of K the heuristic's algorithm takes.
  MatmulAlgoConfig split;
  bool found = false;
  for (const int k : {2, 4}) {
    for (const int reduction : {CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                                CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE,
                                CUBLASLT_REDUCTION_SCHEME_INPLACE}) {
      if (found) break;
      MatmulShape t = s;
      t.algo_config = heuristic.config;
      t.algo_config.split_k = k;
      t.algo_config.reduction = reduction;
      auto plan = MatmulPlan::Create(lt, t, ws_bytes);
      ASSERT_TRUE(plan.ok()) << plan.status();
      if ((*plan)->configured()) {
        split = t.algo_config;
        found = true;
      }
    }
  }
  cublasLtDestroy(lt);
  ASSERT_TRUE(found) << "no split of K taken for "
                     << MatmulAlgoConfigString(heuristic.config);
  SCOPED_TRACE(MatmulAlgoConfigString(split));
  MatmulCase c{false, true, M, N, K, 1, 1.0f, 0.0f};
  c.algo_config = split;
  c.expect_configured = true;
  RunMatmulCase(c);
}

// The backend plans the side stream's dW products for part of the device
// (CudaStepTuning::side_sms): the algorithms chosen for a smaller SM count
// must compute the same product. The dW shapes (Aᵀ · B, K = the context).
TEST(MatmulTest, SmCountTargetAgainstDoubleReference) {
  SKIP_WITHOUT_GPU();
  for (int sms : {44, 22, 1}) {
    SCOPED_TRACE(testing::Message() << "sm_count_target=" << sms);
    RunMatmulCase({true, false, 512, 384, 1024, 1, 1.0f, 0.0f, 0, sms});
    RunMatmulCase({true, false, 200, 136, 72, 1, 1.0f, 0.0f, 0, sms});
  }
}

// ------------------------------------------------------------- layernorm

void LayerNormCase(int T, int C) {
  SCOPED_TRACE(testing::Message() << "T=" << T << " C=" << C);
  const float eps = 1e-5f;
  auto x = RandomNormal(static_cast<size_t>(T) * C, 1.0f, &Rng());
  for (int t = 0; t < T; ++t) x[static_cast<size_t>(t) * C] += 3.0f;  // offset mean
  auto w = RandomNormal(C, 1.0f, &Rng());
  auto b = RandomNormal(C, 1.0f, &Rng());
  DeviceBuffer<float> dx(x.size()), dw(C), dbias(C), yf(x.size()), mean(T), rstd(T);
  Bf16Buffer y16(x.size());
  dx.Upload(x);
  dw.Upload(w);
  dbias.Upload(b);
  ASSERT_EQ(LayerNormForward(dx.get(), dw.get(), dbias.get(), T, C, eps,
                             AsBf16(y16), yf.get(), mean.get(), rstd.get(),
                             nullptr),
            cudaSuccess);
  std::vector<double> ref_y, ref_mean(T), ref_rstd(T), ref_xhat;
  for (int t = 0; t < T; ++t) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[t * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[t * C + c] - m) * (x[t * C + c] - m);
    v /= C;
    const double r = 1.0 / std::sqrt(v + eps);
    ref_mean[t] = m;
    ref_rstd[t] = r;
    for (int c = 0; c < C; ++c) {
      ref_xhat.push_back((x[t * C + c] - m) * r);
      ref_y.push_back(ref_xhat.back() * w[c] + b[c]);
    }
  }
  EXPECT_LT(RelErr(mean.Download(), ref_mean), kFp32Tol);
  EXPECT_LT(RelErr(rstd.Download(), ref_rstd), kFp32Tol);
  EXPECT_LT(RelErr(yf.Download(), ref_y), kFp32Tol);
  EXPECT_LT(RelErr(FromBf16(y16.Download()), ref_y), kBf16OutTol);

  // Backward, accumulating into a random residual gradient.
  auto dy = RandomNormal(x.size(), 1.0f, &Rng());
  auto resid0 = RandomNormal(x.size(), 1.0f, &Rng());
  DeviceBuffer<float> ddy(x.size()), dresid(x.size()),
      scratch(LayerNormBackwardScratchFloats(T, C)), gw(C), gb(C);
  Bf16Buffer dresid16(x.size());
  ddy.Upload(dy);
  dresid.Upload(resid0);
  ASSERT_EQ(LayerNormBackward(ddy.get(), dx.get(), dw.get(), mean.get(),
                              rstd.get(), T, C, true, dresid.get(),
                              AsBf16(dresid16), scratch.get(), gw.get(),
                              gb.get(), nullptr),
            cudaSuccess);
  std::vector<double> ref_dresid(x.size()), ref_gw(C, 0.0), ref_gb(C, 0.0);
  for (int t = 0; t < T; ++t) {
    double sg = 0, sgx = 0;
    for (int c = 0; c < C; ++c) {
      const double g = dy[t * C + c] * static_cast<double>(w[c]);
      sg += g;
      sgx += g * ref_xhat[t * C + c];
    }
    for (int c = 0; c < C; ++c) {
      const double g = dy[t * C + c] * static_cast<double>(w[c]);
      const double xh = ref_xhat[t * C + c];
      ref_dresid[t * C + c] =
          resid0[t * C + c] + ref_rstd[t] * (g - sg / C - xh * sgx / C);
      ref_gw[c] += dy[t * C + c] * xh;
      ref_gb[c] += dy[t * C + c];
    }
  }
  const auto got_resid = dresid.Download();
  EXPECT_LT(RelErr(got_resid, ref_dresid), kFp32Tol);
  const auto got16 = dresid16.Download();
  for (size_t i = 0; i < got16.size(); ++i) {
    ASSERT_EQ(got16[i], test::Bf16Bits(got_resid[i])) << "element " << i;
  }
  EXPECT_LT(RelErr(gw.Download(), ref_gw), kFp32Tol);
  EXPECT_LT(RelErr(gb.Download(), ref_gb), kFp32Tol);
}

TEST(LayerNormTest, ForwardBackwardAgainstDouble) {
  SKIP_WITHOUT_GPU();
  LayerNormCase(77, 72);
  LayerNormCase(33, 512);
  LayerNormCase(45, 128);
  LayerNormCase(1024, 512);
}

// ------------------------------------------------------------------ rope

void RunRopeCase(int T, int NH, int HS) {
  SCOPED_TRACE(testing::Message() << "T=" << T << " NH=" << NH << " HS=" << HS);
  const int C = NH * HS;
  const double base = 10000.0;
  auto in = RandomNormal(static_cast<size_t>(T) * 3 * C, 1.0f, &Rng());
  const auto table = RopeTable(T, HS, base);
  DeviceBuffer<float> din(in.size()), dtable(table.size());
  Bf16Buffer out(in.size());
  din.Upload(in);
  dtable.Upload(table);
  ASSERT_EQ(RopeForward(din.get(), dtable.get(), T, NH, HS, AsBf16(out), nullptr),
            cudaSuccess);
  std::vector<double> ref_f(in.size());
  const int half = HS / 2;
  for (int t = 0; t < T; ++t) {
    for (int col = 0; col < 3 * C; ++col) {
      const size_t idx = static_cast<size_t>(t) * 3 * C + col;
      if (col >= 2 * C) {
        ref_f[idx] = in[idx];
        continue;
      }
      const int j = col % HS;
      const int i = j < half ? j : j - half;
      const double a = t * std::pow(base, -2.0 * i / HS);
      const double cs = std::cos(a), sn = std::sin(a);
      if (j < half) {
        ref_f[idx] = in[idx] * cs - in[idx + half] * sn;
      } else {
        ref_f[idx] = in[idx] * cs + in[idx - half] * sn;
      }
    }
  }
  EXPECT_LT(RelErr(FromBf16(out.Download()), ref_f), kBf16OutTol);
}

TEST(RopeTest, ForwardAgainstDouble) {
  SKIP_WITHOUT_GPU();
  RunRopeCase(37, 3, 16);
  RunRopeCase(29, 8, 64);
  EXPECT_EQ(RopeForward(nullptr, nullptr, 4, 2, 12, nullptr, nullptr), cudaErrorInvalidValue);
}

// ---------------------------------------------------------- fused matmul

// y[t, n] = Σ_k h[t, k] · w[n, k] in double (h, w: bf16 values).
std::vector<double> ProductDouble(const std::vector<float>& h,
                                  const std::vector<float>& w, int T, int C,
                                  int N) {
  std::vector<double> y(static_cast<size_t>(T) * N);
  for (int t = 0; t < T; ++t) {
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < C; ++k) {
        acc += static_cast<double>(h[static_cast<size_t>(t) * C + k]) *
               w[static_cast<size_t>(n) * C + k];
      }
      y[static_cast<size_t>(t) * N + n] = acc;
    }
  }
  return y;
}

// Elementwise: |got − ref| ≤ 2⁻⁷·|ref| + 2⁻⁷·rms(ref) (one bf16 rounding
// plus the fp32 accumulation), and every element finite (outputs start
// poisoned with NaN, so an element never written fails).
void ExpectBf16Close(const std::vector<float>& got,
                     const std::vector<double>& ref, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  double ss = 0;
  for (double r : ref) ss += r * r;
  const double rms = std::sqrt(ss / ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " " << i;
    ASSERT_LE(std::abs(got[i] - ref[i]),
              std::abs(ref[i]) / 128.0 + rms / 128.0)
        << what << " " << i << ": " << got[i] << " vs " << ref[i];
  }
  EXPECT_LT(RelErr(got, ref), kBf16OutTol) << what;
}

void RunQkvRopeCase(int T, int NH, int config) {
  SCOPED_TRACE(testing::Message()
               << "T=" << T << " NH=" << NH << " config=" << config);
  const int HS = 64, C = NH * HS, N = 3 * C;
  const auto h = FromBf16(
      ToBf16(RandomNormal(static_cast<size_t>(T) * C, 1.0f, &Rng())));
  const auto w = FromBf16(
      ToBf16(RandomNormal(static_cast<size_t>(N) * C, 0.05f, &Rng())));
  const std::vector<float> rope = RopeTable(T, HS, 10000.0);
  Bf16Buffer dh(h.size()), dw(w.size()), dout(static_cast<size_t>(T) * N);
  DeviceBuffer<float> drope(rope.size());
  dh.Upload(ToBf16(h));
  dw.Upload(ToBf16(w));
  drope.Upload(rope);
  ASSERT_EQ(QkvRopeMatmul(AsBf16(dh), AsBf16(dw), drope.get(), T, C, NH, HS,
                          AsBf16(dout), config, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Reference: the product in double, then rope.h's rotation of q and k
  // (the table's fp32 cos/sin) in double.
  auto ref = ProductDouble(h, w, T, C, N);
  const int half = HS / 2;
  for (int t = 0; t < T; ++t) {
    double* row = ref.data() + static_cast<size_t>(t) * N;
    for (int head = 0; head < 2 * NH; ++head) {
      for (int i = 0; i < half; ++i) {
        const double cs = rope[t * half + i];
        const double sn = rope[T * half + t * half + i];
        const double a = row[head * HS + i], b = row[head * HS + i + half];
        row[head * HS + i] = a * cs - b * sn;
        row[head * HS + i + half] = b * cs + a * sn;
      }
    }
  }
  ExpectBf16Close(FromBf16(dout.Download()), ref, "qkv");
}

// The shape checks alone (host functions: no device needed).
TEST(FusedMatmulTest, SupportsMatchesTheDocumentedRequirements) {
  EXPECT_EQ(FusedConfigColumns(0), 128);
  EXPECT_EQ(FusedConfigColumns(3), 64);
  EXPECT_EQ(FusedConfigColumns(5), 176);
  EXPECT_EQ(FusedConfigColumns(kFusedConfigs), 0);
  EXPECT_EQ(FusedConfigColumns(-1), 0);
  EXPECT_TRUE(QkvRopeMatmulSupports(1024, 512, 8, 64, 3));
  EXPECT_FALSE(QkvRopeMatmulSupports(1024, 704, 11, 64, 4));  // BN 176
  EXPECT_FALSE(QkvRopeMatmulSupports(1024, 64, 1, 64, 0));    // 192 % 128
  EXPECT_TRUE(QkvRopeMatmulSupports(65535 * 64, 512, 8, 64, 3));
  EXPECT_FALSE(QkvRopeMatmulSupports(65535 * 64 + 1, 512, 8, 64, 3));
  EXPECT_FALSE(QkvRopeMatmulSupports(0, 512, 8, 64, 3));
  EXPECT_TRUE(GateUpSwigluMatmulSupports(1024, 512, 1408, 5));
  EXPECT_FALSE(GateUpSwigluMatmulSupports(1024, 512, 1024, 5));  // 1024 % 88
  EXPECT_FALSE(GateUpSwigluMatmulSupports(1024, 96, 1408, 3));   // C % 64
  EXPECT_TRUE(DownDxSwigluBackwardMatmulSupports(1024, 512, 1408, 2));
  EXPECT_FALSE(DownDxSwigluBackwardMatmulSupports(1024, 512, 1408, 4));
  EXPECT_FALSE(DownDxSwigluBackwardMatmulSupports(1024, 512, 1344, 0));
  EXPECT_TRUE(OutputDxDeltaMatmulSupports(1024, 512, 8, 64, 3));
  EXPECT_FALSE(OutputDxDeltaMatmulSupports(1024, 64, 1, 64, 0));  // 64 % 128
  EXPECT_FALSE(OutputDxDeltaMatmulSupports(1024, 512, 16, 32, 3));  // HS 32
}

TEST(FusedMatmulTest, QkvRopeAgainstDouble) {
  SKIP_WITHOUT_GPU();
  for (int config = 0; config < 4; ++config) {  // the qkv configurations
    RunQkvRopeCase(200, 2, config);  // a partial row tile
    RunQkvRopeCase(70, 2, config);   // two K steps: fewer than the stages
    RunQkvRopeCase(1024, 8, config);  // coppelius
    // K = 768 (12 slices: the ring wraps more than twice); T = 130: a
    // second warpgroup's rows past T.
    RunQkvRopeCase(130, 12, config);
  }
  RunQkvRopeCase(130, 1, 2);  // one K step; 3C = 192 tiles only by 64
  RunQkvRopeCase(130, 1, 3);
  Bf16Buffer dummy(64 * 192);
  DeviceBuffer<float> table(64);
  EXPECT_EQ(QkvRopeMatmul(AsBf16(dummy), AsBf16(dummy), table.get(), 4, 64,
                          1, 64, AsBf16(dummy), 0, nullptr),
            cudaErrorInvalidValue);  // 3C = 192 is not a multiple of 128
  EXPECT_EQ(QkvRopeMatmul(AsBf16(dummy), AsBf16(dummy), table.get(), 4, 64,
                          2, 32, AsBf16(dummy), 2, nullptr),
            cudaErrorInvalidValue);  // HS = 32
  EXPECT_EQ(QkvRopeMatmul(AsBf16(dummy), AsBf16(dummy), table.get(), 4, 128,
                          2, 64, AsBf16(dummy), kFusedConfigs, nullptr),
            cudaErrorInvalidValue);  // no such configuration
  for (int config : {4, 5}) {  // BN = 176: tiles would split heads
    EXPECT_EQ(QkvRopeMatmul(AsBf16(dummy), AsBf16(dummy), table.get(), 4,
                            704, 11, 64, AsBf16(dummy), config, nullptr),
              cudaErrorInvalidValue);
  }
}

void RunGateUpSwigluCase(int T, int C, int H, int config) {
  SCOPED_TRACE(testing::Message() << "T=" << T << " C=" << C << " H=" << H
                                  << " config=" << config);
  const int N = 2 * H;
  const auto h = FromBf16(
      ToBf16(RandomNormal(static_cast<size_t>(T) * C, 1.0f, &Rng())));
  const auto w = FromBf16(
      ToBf16(RandomNormal(static_cast<size_t>(N) * C, 0.08f, &Rng())));
  Bf16Buffer dh(h.size()), dw(w.size()), da(static_cast<size_t>(T) * H);
  DeviceBuffer<float> dgu(static_cast<size_t>(T) * N);
  dh.Upload(ToBf16(h));
  dw.Upload(ToBf16(w));
  ASSERT_EQ(GateUpSwigluMatmul(AsBf16(dh), AsBf16(dw), T, C, H, dgu.get(),
                               AsBf16(da), config, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto ref = ProductDouble(h, w, T, C, N);
  const auto gu = dgu.Download();
  for (float x : gu) ASSERT_TRUE(std::isfinite(x));
  EXPECT_LT(RelErr(gu, ref), kFp32Tol);
  std::vector<double> ref_a(static_cast<size_t>(T) * H);
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < H; ++j) {
      const double g = ref[static_cast<size_t>(t) * N + j];
      const double u = ref[static_cast<size_t>(t) * N + H + j];
      ref_a[static_cast<size_t>(t) * H + j] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  ExpectBf16Close(FromBf16(da.Download()), ref_a, "a");
}

TEST(FusedMatmulTest, GateUpSwigluAgainstDouble) {
  SKIP_WITHOUT_GPU();
  for (int config = 0; config < kFusedConfigs; ++config) {
    // H a multiple of every configuration's BN/2 (32, 64, 88).
    const int h = config < 4 ? 192 : 176;
    RunGateUpSwigluCase(200, 128, h, config);
    RunGateUpSwigluCase(70, 64, h, config);  // one K step
    RunGateUpSwigluCase(1024, 512, 1408, config);  // coppelius
    // K = 704: 11 slices, the ring wrapping more than twice.
    RunGateUpSwigluCase(130, 704, h, config);
  }
  RunGateUpSwigluCase(33, 64, 96, 2);  // H a multiple of 32, not of 64
  Bf16Buffer dummy(64 * 128);
  DeviceBuffer<float> gu(64 * 128);
  EXPECT_EQ(GateUpSwigluMatmul(AsBf16(dummy), AsBf16(dummy), 4, 64, 96,
                               gu.get(), AsBf16(dummy), 0, nullptr),
            cudaErrorInvalidValue);  // H not a multiple of 64
  EXPECT_EQ(GateUpSwigluMatmul(AsBf16(dummy), AsBf16(dummy), 4, 32, 64,
                               gu.get(), AsBf16(dummy), 0, nullptr),
            cudaErrorInvalidValue);  // C not a multiple of 64
  EXPECT_EQ(GateUpSwigluMatmul(AsBf16(dummy), AsBf16(dummy), 4, 64, 64,
                               gu.get(), AsBf16(dummy), -1, nullptr),
            cudaErrorInvalidValue);  // no such configuration
}

void RunDownDxSwigluBackwardCase(int T, int C, int H, int config) {
  SCOPED_TRACE(testing::Message() << "T=" << T << " C=" << C << " H=" << H
                                  << " config=" << config);
  const auto dy = FromBf16(
      ToBf16(RandomNormal(static_cast<size_t>(T) * C, 1.0f, &Rng())));
  const auto w = FromBf16(
      ToBf16(RandomNormal(static_cast<size_t>(C) * H, 0.05f, &Rng())));
  const auto gu = RandomNormal(static_cast<size_t>(T) * 2 * H, 1.5f, &Rng());
  Bf16Buffer ddy(dy.size()), dw(w.size()),
      ddgu(static_cast<size_t>(T) * 2 * H);
  DeviceBuffer<float> dgu_in(gu.size());
  ddy.Upload(ToBf16(dy));
  dw.Upload(ToBf16(w));
  dgu_in.Upload(gu);
  ASSERT_EQ(DownDxSwigluBackwardMatmul(AsBf16(ddy), AsBf16(dw), dgu_in.get(),
                                       T, C, H, AsBf16(ddgu), config,
                                       nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Reference in double: da = dy · W_down (W_down [C, H]), then SwiGLU's
  // backward (swiglu.h) with the fp32 g, u.
  std::vector<double> ref(static_cast<size_t>(T) * 2 * H);
  std::vector<double> da(H);
  for (int t = 0; t < T; ++t) {
    std::fill(da.begin(), da.end(), 0.0);
    for (int c = 0; c < C; ++c) {
      const double d = dy[static_cast<size_t>(t) * C + c];
      const float* wrow = w.data() + static_cast<size_t>(c) * H;
      for (int j = 0; j < H; ++j) da[j] += d * wrow[j];
    }
    for (int j = 0; j < H; ++j) {
      const double g = gu[static_cast<size_t>(t) * 2 * H + j];
      const double u = gu[static_cast<size_t>(t) * 2 * H + H + j];
      const double sig = 1.0 / (1.0 + std::exp(-g));
      ref[static_cast<size_t>(t) * 2 * H + j] =
          da[j] * u * sig * (1.0 + g * (1.0 - sig));
      ref[static_cast<size_t>(t) * 2 * H + H + j] = da[j] * g * sig;
    }
  }
  ExpectBf16Close(FromBf16(ddgu.Download()), ref, "dgu");
}

TEST(FusedMatmulTest, DownDxSwigluBackwardAgainstDouble) {
  SKIP_WITHOUT_GPU();
  for (int config = 0; config < 4; ++config) {  // BN = 64 or 128
    RunDownDxSwigluBackwardCase(200, 128, 128, config);  // partial row tile
    RunDownDxSwigluBackwardCase(70, 64, 256, config);    // one K step
    RunDownDxSwigluBackwardCase(1024, 512, 1408, config);  // coppelius
    // K = 704 (11 slices); T = 130: a second warpgroup's rows past T.
    RunDownDxSwigluBackwardCase(130, 704, 256, config);
  }
  Bf16Buffer dummy(64 * 512);
  DeviceBuffer<float> gu(64 * 512);
  for (int config : {4, 5}) {  // BN = 176: not for N-major W_down
    EXPECT_EQ(DownDxSwigluBackwardMatmul(AsBf16(dummy), AsBf16(dummy),
                                         gu.get(), 4, 64, 176, AsBf16(dummy),
                                         config, nullptr),
              cudaErrorInvalidValue);
  }
  EXPECT_EQ(DownDxSwigluBackwardMatmul(AsBf16(dummy), AsBf16(dummy), gu.get(),
                                       4, 64, 192, AsBf16(dummy), 0, nullptr),
            cudaErrorInvalidValue);  // H not a multiple of BN = 128
  EXPECT_EQ(DownDxSwigluBackwardMatmul(AsBf16(dummy), AsBf16(dummy), gu.get(),
                                       4, 96, 64, AsBf16(dummy), 3, nullptr),
            cudaErrorInvalidValue);  // C not a multiple of 64
}

void RunOutputDxDeltaCase(int T, int NH, int config) {
  SCOPED_TRACE(testing::Message()
               << "T=" << T << " NH=" << NH << " config=" << config);
  const int HS = 64, C = NH * HS;
  const auto dresid = FromBf16(
      ToBf16(RandomNormal(static_cast<size_t>(T) * C, 1.0f, &Rng())));
  const auto w = FromBf16(
      ToBf16(RandomNormal(static_cast<size_t>(C) * C, 0.05f, &Rng())));
  const auto y = FromBf16(
      ToBf16(RandomNormal(static_cast<size_t>(T) * C, 0.5f, &Rng())));
  Bf16Buffer ddresid(dresid.size()), dw(w.size()), dy_in(y.size()),
      ddy(static_cast<size_t>(T) * C);
  ddresid.Upload(ToBf16(dresid));
  dw.Upload(ToBf16(w));
  dy_in.Upload(ToBf16(y));
  const size_t scratch_words = AttentionScratchBytes(T, NH, HS) / 4;
  DeviceBuffer<float> scratch(scratch_words), scratch2(scratch_words);
  ASSERT_EQ(cudaMemset(scratch.get(), 0, scratch_words * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(scratch2.get(), 0, scratch_words * 4), cudaSuccess);
  float* delta = AttentionDelta(scratch.get(), T, NH, HS);
  ASSERT_EQ(OutputDxDeltaMatmul(AsBf16(ddresid), AsBf16(dw), AsBf16(dy_in), T,
                                C, NH, HS, AsBf16(ddy), delta, config,
                                nullptr),
            cudaSuccess);
  // The unfused D kernel over the fused product's dy: the same bits.
  ASSERT_EQ(AttentionBackwardDelta(AsBf16(dy_in), AsBf16(ddy), T, NH, HS,
                                   scratch2.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> d_fused(static_cast<size_t>(NH) * T),
      d_kernel(d_fused.size());
  ASSERT_EQ(cudaMemcpy(d_fused.data(), delta, d_fused.size() * 4,
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_kernel.data(),
                       AttentionDelta(scratch2.get(), T, NH, HS),
                       d_kernel.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (size_t i = 0; i < d_fused.size(); ++i) {
    ASSERT_EQ(d_fused[i], d_kernel[i]) << "D " << i;
  }
  // dy against double: dy = dresid · W_output (W_output [C, C], [out, in]).
  std::vector<double> ref(static_cast<size_t>(T) * C, 0.0);
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) {
      const double d = dresid[static_cast<size_t>(t) * C + c];
      const float* wrow = w.data() + static_cast<size_t>(c) * C;
      double* out = ref.data() + static_cast<size_t>(t) * C;
      for (int j = 0; j < C; ++j) out[j] += d * wrow[j];
    }
  }
  const auto dy = FromBf16(ddy.Download());
  ExpectBf16Close(dy, ref, "dy");
  // D against double over the double product (bf16 rounding of dy allowed).
  std::vector<double> ref_d(d_fused.size(), 0.0);
  for (int h = 0; h < NH; ++h) {
    for (int t = 0; t < T; ++t) {
      double acc = 0;
      for (int d = 0; d < HS; ++d) {
        const size_t i = static_cast<size_t>(t) * C + h * HS + d;
        acc += ref[i] * y[i];
      }
      ref_d[static_cast<size_t>(h) * T + t] = acc;
    }
  }
  EXPECT_LT(RelErr(d_fused, ref_d), kBf16OutTol);
}

TEST(FusedMatmulTest, OutputDxDeltaAgainstDoubleAndTheDeltaKernel) {
  SKIP_WITHOUT_GPU();
  for (int config = 0; config < 4; ++config) {  // BN = 64 or 128
    RunOutputDxDeltaCase(200, 2, config);  // a partial row tile
    RunOutputDxDeltaCase(70, 4, config);
    RunOutputDxDeltaCase(1024, 8, config);  // coppelius
    // K = 704 or 768 (11 or 12 slices: the ring wraps more than twice);
    // T = 130: a second warpgroup's rows past T.
    RunOutputDxDeltaCase(130, FusedConfigColumns(config) == 128 ? 12 : 11,
                         config);
  }
  RunOutputDxDeltaCase(33, 1, 3);  // one head, one K step
  Bf16Buffer dummy(64 * 128);
  DeviceBuffer<float> delta(256);
  EXPECT_EQ(OutputDxDeltaMatmul(AsBf16(dummy), AsBf16(dummy), AsBf16(dummy),
                                4, 64, 1, 64, AsBf16(dummy), delta.get(), 0,
                                nullptr),
            cudaErrorInvalidValue);  // C = 64 not a multiple of BN = 128
  EXPECT_EQ(OutputDxDeltaMatmul(AsBf16(dummy), AsBf16(dummy), AsBf16(dummy),
                                4, 64, 2, 32, AsBf16(dummy), delta.get(), 3,
                                nullptr),
            cudaErrorInvalidValue);  // HS = 32
  EXPECT_EQ(OutputDxDeltaMatmul(AsBf16(dummy), AsBf16(dummy), AsBf16(dummy),
                                4, 128, 2, 64, AsBf16(dummy), delta.get(), 4,
                                nullptr),
            cudaErrorInvalidValue);  // BN = 176
}

// ------------------------------------------------------------- attention

// Fused attention against the unfused formulation in double on the same bf16
// inputs: S, the softmax, P rounded to bf16 for P·v and Pᵀ·dy, dS rounded to
// bf16 for the dq / dk products (the CPU reference backend's order). The
// kernels round at FlashAttention-2's points instead (the unnormalized P̃,
// D from the rounded y: attention.h); the relative bf16 tolerance covers
// both.
void RunAttentionCase(int NH, int T, int HS, const AttentionSplits& splits = {}) {
  SCOPED_TRACE(testing::Message() << "NH=" << NH << " T=" << T << " HS=" << HS
                                  << " splits " << splits.forward << "/"
                                  << splits.query << "/" << splits.keys << " forward "
                                  << splits.forward_warpgroups << " dq "
                                  << splits.query_warpgroups << " dk/dv "
                                  << splits.keys_warpgroups << " warpgroup(s), pipelined "
                                  << splits.pipelined_backward << "/"
                                  << splits.pipelined_forward << " (backward/forward)");
  const int C = NH * HS;
  const size_t nqkv = static_cast<size_t>(T) * 3 * C, ny = static_cast<size_t>(T) * C;
  // Scores of standard deviation ~2: peaked and flat rows both occur.
  const auto qkv = FromBf16(ToBf16(RandomNormal(nqkv, 1.4f, &Rng())));
  const auto dy = FromBf16(ToBf16(RandomNormal(ny, 1.0f, &Rng())));
  Bf16Buffer d_qkv(nqkv), d_dy(ny), d_y(ny);
  DeviceBuffer<float> d_stats(static_cast<size_t>(NH) * T);
  Bf16Buffer d_dqkv(nqkv);
  const std::vector<float> rope = RopeTable(T, HS, 10000.0);
  DeviceBuffer<float> d_rope(rope.size());
  d_rope.Upload(rope);
  // Scratch: the counters (its first 3·NH·⌈T/64⌉ words) zero-filled once,
  // as the backend zero-fills the whole; the rest is poisoned (NaN) to show
  // it is written before it is read.
  const size_t scratch_bytes = AttentionScratchBytes(T, NH, HS, splits);
  const size_t counter_bytes = 3 * static_cast<size_t>(NH) * AttentionTiles(T) * 4;
  DeviceBuffer<char> scratch(scratch_bytes);
  ASSERT_LE(counter_bytes, scratch_bytes);
  ASSERT_EQ(cudaMemset(scratch.get(), 0, counter_bytes), cudaSuccess);
  d_qkv.Upload(ToBf16(qkv));
  d_dy.Upload(ToBf16(dy));
  ASSERT_EQ(AttentionForward(AsBf16(d_qkv), T, NH, HS, AsBf16(d_y), d_stats.get(),
                             scratch.get(), nullptr, splits),
            cudaSuccess);
  ASSERT_EQ(AttentionBackward(AsBf16(d_qkv), AsBf16(d_y), AsBf16(d_dy), d_stats.get(),
                              d_rope.get(), T,
                              NH, HS, scratch.get(), AsBf16(d_dqkv), nullptr, splits),
            cudaSuccess);
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> y(ny, 0.0), stats(static_cast<size_t>(NH) * T),
      dqkv(nqkv, 0.0);
  std::vector<double> s(T), p(T), dp(T);
  for (int h = 0; h < NH; ++h) {
    auto at = [&](int row, int part, int d) {
      return static_cast<double>(qkv[static_cast<size_t>(row) * 3 * C + part * C + h * HS + d]);
    };
    for (int t = 0; t < T; ++t) {
      double m = -INFINITY, sum = 0.0, dot = 0.0;
      for (int j = 0; j <= t; ++j) {
        double acc = 0.0;
        for (int d = 0; d < HS; ++d) acc += at(t, 0, d) * at(j, 1, d);
        s[j] = scale * acc;
        m = std::max(m, s[j]);
      }
      for (int j = 0; j <= t; ++j) sum += std::exp(s[j] - m);
      stats[h * T + t] = (m + std::log(sum)) / std::log(2.0);  // lse2
      for (int j = 0; j <= t; ++j) {
        p[j] = std::exp(s[j] - m) / sum;
        double acc = 0.0;
        for (int d = 0; d < HS; ++d) acc += dy[static_cast<size_t>(t) * C + h * HS + d] * at(j, 2, d);
        dp[j] = acc;
        dot += p[j] * dp[j];
      }
      for (int j = 0; j <= t; ++j) {
        const double p16 = RoundBf16(static_cast<float>(p[j]));
        // dS = bf16(scale · P ⊙ (dP − D)), the reference backend's order.
        const double ds16 =
            RoundBf16(static_cast<float>(scale * p[j] * (dp[j] - dot)));
        for (int d = 0; d < HS; ++d) {
          y[static_cast<size_t>(t) * C + h * HS + d] += p16 * at(j, 2, d);
          dqkv[static_cast<size_t>(t) * 3 * C + h * HS + d] += ds16 * at(j, 1, d);
          dqkv[static_cast<size_t>(j) * 3 * C + C + h * HS + d] += ds16 * at(t, 0, d);
          dqkv[static_cast<size_t>(j) * 3 * C + 2 * C + h * HS + d] +=
              p16 * dy[static_cast<size_t>(t) * C + h * HS + d];
        }
      }
    }
  }
  // The inverse RoPE of dq and dk (rope.h), with the same table.
  const int half = HS / 2;
  for (int t = 0; t < T; ++t) {
    for (int part = 0; part < 2; ++part) {
      for (int h = 0; h < NH; ++h) {
        double* g = &dqkv[static_cast<size_t>(t) * 3 * C + part * C + h * HS];
        for (int i = 0; i < half; ++i) {
          const double cs = rope[static_cast<size_t>(t) * half + i];
          const double sn = rope[static_cast<size_t>(T) * half + static_cast<size_t>(t) * half + i];
          const double a = g[i], b = g[i + half];
          g[i] = a * cs + b * sn;
          g[i + half] = b * cs - a * sn;
        }
      }
    }
  }
  const auto got_y = FromBf16(d_y.Download());
  const auto got_stats = d_stats.Download();
  const auto got_dqkv = FromBf16(d_dqkv.Download());
  EXPECT_LT(RelErr(got_y, y), kBf16OutTol);
  EXPECT_LT(RelErr(got_stats, stats), kFp32Tol);
  // dq, dk, dv separately (each part of dqkv).
  for (int part = 0; part < 3; ++part) {
    std::vector<float> g;
    std::vector<double> r;
    for (int t = 0; t < T; ++t) {
      for (int col = 0; col < C; ++col) {
        const size_t i = static_cast<size_t>(t) * 3 * C + part * C + col;
        g.push_back(got_dqkv[i]);
        r.push_back(dqkv[i]);
      }
    }
    EXPECT_LT(RelErr(g, r), kBf16OutTol) << "part " << part << " (q, k, v)";
  }
  // Deterministic: a second run (counters left at zero by the first) gives
  // the same bits, with the backward's query and keys kernels on two
  // concurrent streams this time, and with the other form of the loops
  // (AttentionSplits::pipelined_backward and pipelined_forward: the same
  // products in the same order); the outputs are poisoned again first, so
  // an element the second run fails to write cannot pass. Only the kernels
  // on the tensor memory accelerator (HS = 64) with one warpgroup for dq
  // and dk/dv (dk/dv splits ≤ 16) and 2 or 4 for the forward have the two
  // forms; elsewhere the rerun checks determinism alone.
  AttentionSplits other = splits;
  other.pipelined_backward = !splits.pipelined_backward;
  other.pipelined_forward = !splits.pipelined_forward;
  ASSERT_EQ(cudaMemset(d_y.get(), 0xFF, ny * 2), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_stats.get(), 0xFF, static_cast<size_t>(NH) * T * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_dqkv.get(), 0xFF, nqkv * 2), cudaSuccess);
  cudaStream_t side;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(AttentionForward(AsBf16(d_qkv), T, NH, HS, AsBf16(d_y), d_stats.get(),
                             scratch.get(), nullptr, other),
            cudaSuccess);
  ASSERT_EQ(AttentionBackwardDelta(AsBf16(d_y), AsBf16(d_dy), T, NH, HS, scratch.get(),
                                   nullptr, splits),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(AttentionBackwardKeys(AsBf16(d_qkv), AsBf16(d_dy), d_stats.get(), d_rope.get(),
                                  T, NH, HS, scratch.get(), AsBf16(d_dqkv), side, other),
            cudaSuccess);
  ASSERT_EQ(AttentionBackwardQuery(AsBf16(d_qkv), AsBf16(d_dy), d_stats.get(), d_rope.get(),
                                   T, NH, HS, scratch.get(), AsBf16(d_dqkv), nullptr,
                                   other),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStreamDestroy(side);
  EXPECT_EQ(FromBf16(d_y.Download()), got_y);
  EXPECT_EQ(d_stats.Download(), got_stats);
  EXPECT_EQ(FromBf16(d_dqkv.Download()), got_dqkv);
}

TEST(AttentionTest, FusedForwardBackwardAgainstDouble) {
  SKIP_WITHOUT_GPU();
  RunAttentionCase(3, 45, 16);   // tiny-like, one partial tile
  RunAttentionCase(2, 130, 32);  // three tiles, the last with 2 rows
  RunAttentionCase(2, 200, 64);  // coppelius head size, partial last tile
  RunAttentionCase(8, 256, 64);  // coppelius heads, whole tiles
  RunAttentionCase(2, 1000, 64); // 16 tiles: one chunk each
  RunAttentionCase(2, 1100, 64); // 18 tiles: 2 chunks for the last rows
  // Several chunks (T > 1024) at the other head sizes too.
  RunAttentionCase(3, 1500, 16);
  RunAttentionCase(4, 1100, 32);
}

TEST(AttentionTest, OtherSplitsAgainstDouble) {
  SKIP_WITHOUT_GPU();
  // Chunks of 1..5 tiles per kernel (CudaStepTuning's attention splits):
  // more chunks to combine, the scratch sized for the smallest split. At
  // HS = 64 the TMA kernels refill their slots when a chunk is longer than
  // their slots (forward 3, dq 4, dk/dv 3); dk/dv chunks of more than 16
  // tiles run the register-staged kernel instead.
  RunAttentionCase(2, 1000, 64, {3, 4, 5});
  RunAttentionCase(2, 1000, 64, {7, 8, 16});
  RunAttentionCase(3, 900, 64, {8, 5, 7});
  RunAttentionCase(8, 1024, 64, {4, 3, 6});
  RunAttentionCase(2, 500, 64, {2, 1, 3});
  RunAttentionCase(3, 777, 16, {1, 2, 4});
  RunAttentionCase(2, 1100, 32, {5, 3, 2});
  // One warpgroup per forward CTA (runs 16–19's forward kernel), at the
  // splits of then and of now.
  RunAttentionCase(2, 1000, 64, {6, 6, 6, 1});
  RunAttentionCase(8, 1024, 64, {16, 16, 16, 1});
}

TEST(AttentionTest, ForwardWarpgroupsAgainstDouble) {
  SKIP_WITHOUT_GPU();
  // Two or four warpgroups per forward CTA taking the key tiles in turn
  // (the TMA kernel, HS = 64): chunks of 1..16 tiles, so that a warpgroup
  // may have no tile; refilled slots; partial last tiles; and where the
  // form does not apply (HS = 32) the field is ignored.
  RunAttentionCase(8, 1024, 64, {6, 6, 6, 2});
  RunAttentionCase(2, 1000, 64, {5, 6, 6, 2});
  RunAttentionCase(3, 200, 64, {1, 6, 6, 2});
  RunAttentionCase(2, 777, 64, {2, 4, 3, 2});
  RunAttentionCase(2, 500, 64, {3, 6, 6, 2});
  RunAttentionCase(2, 900, 64, {7, 6, 6, 2});
  RunAttentionCase(8, 1024, 64, {12, 6, 6, 2});  // refilled slots
  RunAttentionCase(2, 1000, 64, {16, 6, 6, 2});
  RunAttentionCase(8, 1024, 64, {16, 16, 16, 4});
  RunAttentionCase(2, 1000, 64, {6, 12, 11, 4});
  RunAttentionCase(3, 200, 64, {1, 6, 6, 4});
  RunAttentionCase(2, 900, 64, {5, 6, 6, 4});
}

TEST(AttentionTest, QueryWarpgroupsAgainstDouble) {
  SKIP_WITHOUT_GPU();
  // The dq kernel with 2 or 4 warpgroups per CTA taking the key tiles in
  // turn: chunks of 1..16 tiles (a warpgroup with none, refilled slots),
  // partial last tiles.
  RunAttentionCase(8, 1024, 64, {6, 16, 6, 1, 2});
  RunAttentionCase(8, 1024, 64, {16, 16, 16, 2, 4});
  RunAttentionCase(2, 1000, 64, {6, 6, 6, 1, 2});
  RunAttentionCase(3, 200, 64, {6, 1, 6, 1, 4});
  RunAttentionCase(2, 777, 64, {6, 5, 6, 1, 4});
  RunAttentionCase(2, 900, 64, {6, 11, 6, 1, 2});
  RunAttentionCase(2, 130, 32, {6, 6, 6, 1, 4});
}

TEST(AttentionTest, KeysWarpgroupsAgainstDouble) {
  SKIP_WITHOUT_GPU();
  // The dk/dv kernel with 2 warpgroups per CTA taking the query tiles
  // in turn: chunks of 1..16 tiles, refilled slots, partial last tiles;
  // keys split 17 (beyond the TMA kernel's 16) ignores the field.
  RunAttentionCase(8, 1024, 64, {6, 6, 16, 1, 1, 2});
  RunAttentionCase(8, 1024, 64, {16, 16, 16, 4, 1, 2});
  RunAttentionCase(2, 1000, 64, {6, 6, 6, 1, 1, 2});
  RunAttentionCase(3, 200, 64, {6, 6, 1, 1, 1, 2});
  RunAttentionCase(2, 777, 64, {6, 6, 5, 1, 1, 2});
  RunAttentionCase(2, 900, 64, {6, 6, 11, 1, 1, 2});
  RunAttentionCase(2, 1100, 64, {6, 6, 17, 1, 1, 2});
  RunAttentionCase(2, 130, 32, {6, 6, 6, 2});
}

TEST(AttentionTest, RejectsSplitBelowOne) {
  SKIP_WITHOUT_GPU();
  EXPECT_EQ(AttentionScratchBytes(256, 2, 64, {0, 6, 6}), 0u);
  EXPECT_EQ(AttentionForward(nullptr, 256, 2, 64, nullptr, nullptr, nullptr, nullptr,
                             {6, 6, 0}),
            cudaErrorInvalidValue);
  EXPECT_EQ(AttentionBackwardQuery(nullptr, nullptr, nullptr, nullptr, 256, 2, 64, nullptr,
                                   nullptr, nullptr, {6, -1, 6}),
            cudaErrorInvalidValue);
  EXPECT_EQ(AttentionDelta(nullptr, 256, 2, 64, {6, 6, 0}), nullptr);
  EXPECT_EQ(AttentionScratchBytes(256, 2, 64, {6, 6, 6, 3}), 0u);
  EXPECT_EQ(AttentionForward(nullptr, 256, 2, 64, nullptr, nullptr, nullptr, nullptr,
                             {6, 6, 6, 0}),
            cudaErrorInvalidValue);
}

TEST(AttentionTest, RejectsUnsupportedHeadSize) {
  SKIP_WITHOUT_GPU();
  EXPECT_FALSE(AttentionSupportsHeadSize(48));
  EXPECT_TRUE(AttentionSupportsHeadSize(64));
  EXPECT_EQ(AttentionForward(nullptr, 64, 2, 48, nullptr, nullptr, nullptr, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(AttentionBackward(nullptr, nullptr, nullptr, nullptr, nullptr, 64, 2, 128,
                              nullptr, nullptr, nullptr),
            cudaErrorInvalidValue);
}

// ---------------------------------------------------------------- swiglu

void RunSwigluCase(int T, int H) {
  SCOPED_TRACE(testing::Message() << "T=" << T << " H=" << H);
  auto gu = RandomNormal(static_cast<size_t>(T) * 2 * H, 2.0f, &Rng());
  auto da = RandomNormal(static_cast<size_t>(T) * H, 1.0f, &Rng());
  DeviceBuffer<float> dgu_in(gu.size()), dda(da.size());
  Bf16Buffer a(da.size()), dgu(gu.size());
  dgu_in.Upload(gu);
  dda.Upload(da);
  ASSERT_EQ(SwigluForward(dgu_in.get(), T, H, AsBf16(a), nullptr), cudaSuccess);
  ASSERT_EQ(SwigluBackward(dgu_in.get(), dda.get(), T, H, AsBf16(dgu), nullptr),
            cudaSuccess);
  std::vector<double> ref_a(da.size()), ref_d(gu.size());
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < H; ++j) {
      const double g = gu[t * 2 * H + j], u = gu[t * 2 * H + H + j];
      const double sig = 1.0 / (1.0 + std::exp(-g));
      const double d = da[t * H + j];
      ref_a[t * H + j] = g * sig * u;
      ref_d[t * 2 * H + j] = d * u * sig * (1 + g * (1 - sig));
      ref_d[t * 2 * H + H + j] = d * g * sig;
    }
  }
  EXPECT_LT(RelErr(FromBf16(a.Download()), ref_a), kBf16OutTol);
  EXPECT_LT(RelErr(FromBf16(dgu.Download()), ref_d), kBf16OutTol);
}

TEST(SwigluTest, ForwardAndBackwardAgainstDouble) {
  SKIP_WITHOUT_GPU();
  RunSwigluCase(33, 50);    // H % 4 != 0: one column per thread
  RunSwigluCase(17, 1408);  // coppelius H: four columns per thread
}

// --------------------------------------------------------- cross-entropy

// Vocabularies below, at and above the kernel's 512 threads per row, the
// coppelius V among them.
void RunCrossEntropyCase(int T, int V) {
  SCOPED_TRACE(testing::Message() << "T=" << T << " V=" << V);
  auto logits = RandomNormal(static_cast<size_t>(T) * V, 3.0f, &Rng());
  std::vector<uint32_t> targets(T);
  for (auto& t : targets) t = static_cast<uint32_t>(Rng()() % V);
  DeviceBuffer<float> dl(logits.size()), losses(T);
  DeviceBuffer<uint32_t> dt(T);
  Bf16Buffer dlog(logits.size());
  dl.Upload(logits);
  dt.Upload(targets);
  ASSERT_EQ(CrossEntropyForwardBackward(dl.get(), dt.get(), T, V, 1.0f / T,
                                        losses.get(), AsBf16(dlog), nullptr),
            cudaSuccess);
  std::vector<double> ref_loss(T), ref_d(logits.size());
  for (int t = 0; t < T; ++t) {
    const size_t o = static_cast<size_t>(t) * V;
    double m = -INFINITY, sum = 0;
    for (int v = 0; v < V; ++v) m = std::max<double>(m, logits[o + v]);
    for (int v = 0; v < V; ++v) sum += std::exp(logits[o + v] - m);
    const double lse = m + std::log(sum);
    ref_loss[t] = lse - logits[o + targets[t]];
    for (int v = 0; v < V; ++v) {
      ref_d[o + v] = (std::exp(logits[o + v] - lse) -
                      (static_cast<uint32_t>(v) == targets[t] ? 1.0 : 0.0)) /
                     T;
    }
  }
  EXPECT_LT(RelErr(losses.Download(), ref_loss), kFp32Tol);
  EXPECT_LT(RelErr(FromBf16(dlog.Download()), ref_d), kBf16OutTol);
}

TEST(CrossEntropyTest, LossesAndGradientsAgainstDouble) {
  SKIP_WITHOUT_GPU();
  RunCrossEntropyCase(5, 300);
  RunCrossEntropyCase(33, 1000);
  RunCrossEntropyCase(9, 4096);
  RunCrossEntropyCase(7, 12288);  // coppelius V
  RunCrossEntropyCase(4, 13001);
  // A NaN logit makes that row's loss NaN (recorded, never hidden).
  const int T = 33, V = 1000;
  auto logits = RandomNormal(static_cast<size_t>(T) * V, 3.0f, &Rng());
  std::vector<uint32_t> targets(T);
  for (auto& t : targets) t = static_cast<uint32_t>(Rng()() % V);
  logits[5 * V + 7] = NAN;
  DeviceBuffer<float> dl(logits.size()), losses(T);
  DeviceBuffer<uint32_t> dt(T);
  dl.Upload(logits);
  dt.Upload(targets);
  ASSERT_EQ(CrossEntropyForwardBackward(dl.get(), dt.get(), T, V, 1.0f / T,
                                        losses.get(), nullptr, nullptr),
            cudaSuccess);
  const auto l2 = losses.Download();
  EXPECT_TRUE(std::isnan(l2[5]));
  EXPECT_TRUE(std::isfinite(l2[4]));
}

// At V = 12,288 with aligned buffers the kernel holds each row in
// registers; unaligned, it streams the row one float at a time (V % 4 == 0
// and aligned, other V: 16 bytes at a time). The sum of exponentials keeps
// one order on every path, so they give the same bits. The streaming path
// is forced by offsetting both buffers by one element.
TEST(CrossEntropyTest, VectorAndScalarPathsGiveTheSameBits) {
  SKIP_WITHOUT_GPU();
  const int T = 6, V = 12288;
  const auto logits = RandomNormal(static_cast<size_t>(T) * V, 3.0f, &Rng());
  std::vector<uint32_t> targets(T);
  for (auto& t : targets) t = static_cast<uint32_t>(Rng()() % V);
  DeviceBuffer<float> aligned(logits.size()), shifted(logits.size() + 1);
  DeviceBuffer<float> loss_a(T), loss_s(T);
  DeviceBuffer<uint32_t> dt(T);
  Bf16Buffer d_a(logits.size()), d_s(logits.size() + 1);
  aligned.Upload(logits);
  std::vector<float> padded(1, 0.0f);
  padded.insert(padded.end(), logits.begin(), logits.end());
  shifted.Upload(padded);
  dt.Upload(targets);
  ASSERT_EQ(CrossEntropyForwardBackward(aligned.get(), dt.get(), T, V,
                                        1.0f / T, loss_a.get(), AsBf16(d_a),
                                        nullptr),
            cudaSuccess);
  ASSERT_EQ(CrossEntropyForwardBackward(shifted.get() + 1, dt.get(), T, V,
                                        1.0f / T, loss_s.get(),
                                        AsBf16(d_s) + 1, nullptr),
            cudaSuccess);
  EXPECT_EQ(loss_a.Download(), loss_s.Download());
  const auto ga = d_a.Download();
  auto gs = d_s.Download();
  gs.erase(gs.begin());
  EXPECT_EQ(ga, gs);
}

// ------------------------------------------------------------- embedding

// The gather at several widths: 16-byte pieces (C = 512, the coppelius
// size with its T; C = 72; C = 1028, two pieces for some threads), 4-byte
// ones (C = 70; C = 301, up to three elements a thread; C = 72 with x, or
// with the table, not 16-byte aligned), rows copied exactly; x's other
// elements untouched.
TEST(EmbeddingTest, GatherAtSeveralWidths) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int T, C, V, x_offset, table_offset;
  };
  for (const Case& k :
       {Case{1024, 512, 12288, 0, 0}, Case{33, 72, 10, 0, 0},
        Case{9, 1028, 5, 0, 0}, Case{33, 70, 10, 0, 0}, Case{9, 301, 5, 0, 0},
        Case{33, 72, 10, 1, 0}, Case{33, 72, 10, 0, 1}}) {
    SCOPED_TRACE(testing::Message() << "T=" << k.T << " C=" << k.C
                                    << " x offset " << k.x_offset
                                    << " table offset " << k.table_offset);
    const auto table = RandomNormal(static_cast<size_t>(k.V) * k.C, 1.0f, &Rng());
    std::vector<uint32_t> tokens(k.T);
    for (auto& t : tokens) t = static_cast<uint32_t>(Rng()() % k.V);
    tokens[0] = 0;
    tokens[k.T - 1] = k.V - 1;
    const size_t n = static_cast<size_t>(k.T) * k.C + 2;
    DeviceBuffer<float> dtable(table.size() + 1), x(n);
    DeviceBuffer<uint32_t> dtok(k.T);
    std::vector<float> shifted(table.size() + 1, 0.0f);
    std::copy(table.begin(), table.end(), shifted.begin() + k.table_offset);
    dtable.Upload(shifted);
    dtok.Upload(tokens);
    x.Upload(std::vector<float>(n, -7.0f));
    ASSERT_EQ(EmbeddingForward(dtok.get(), dtable.get() + k.table_offset, k.T,
                               k.C, x.get() + k.x_offset, nullptr),
              cudaSuccess);
    const auto got = x.Download();
    for (size_t i = 0; i < n; ++i) {
      const int64_t j = static_cast<int64_t>(i) - k.x_offset;
      const float want =
          j >= 0 && j < static_cast<int64_t>(k.T) * k.C
              ? table[static_cast<size_t>(tokens[j / k.C]) * k.C + j % k.C]
              : -7.0f;
      ASSERT_EQ(got[i], want) << i;
    }
  }
  DeviceBuffer<float> one(4);
  DeviceBuffer<uint32_t> tok(1);
  EXPECT_EQ(EmbeddingForward(tok.get(), one.get(), 0, 4, one.get(), nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(EmbeddingForward(tok.get(), one.get(), 1, 0, one.get(), nullptr),
            cudaErrorInvalidValue);
}

TEST(EmbeddingTest, GatherAndDeterministicScatter) {
  SKIP_WITHOUT_GPU();
  const int T = 50, C = 72, V = 7;  // few ids: many repeats
  auto table = RandomNormal(static_cast<size_t>(V) * C, 1.0f, &Rng());
  std::vector<uint32_t> tokens(T);
  for (auto& t : tokens) t = static_cast<uint32_t>(Rng()() % (V - 1));  // id 6 unused
  DeviceBuffer<float> dtable(table.size()), x(static_cast<size_t>(T) * C);
  DeviceBuffer<uint32_t> dtok(T);
  dtable.Upload(table);
  dtok.Upload(tokens);
  ASSERT_EQ(EmbeddingForward(dtok.get(), dtable.get(), T, C, x.get(), nullptr),
            cudaSuccess);
  const auto got = x.Download();
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) {
      ASSERT_EQ(got[t * C + c], table[tokens[t] * C + c]);
    }
  }
  auto dx = RandomNormal(static_cast<size_t>(T) * C, 1.0f, &Rng());
  DeviceBuffer<float> ddx(dx.size());
  ddx.Upload(dx);
  ASSERT_EQ(EmbeddingBackward(dtok.get(), ddx.get(), T, C, dtable.get(), nullptr),
            cudaSuccess);
  // Same fp32 order as the reference backend: dE[v] += dx[t] for t ascending.
  std::vector<float> ref = table;
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) ref[tokens[t] * C + c] += dx[t * C + c];
  }
  const auto got_e = dtable.Download();
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(got_e[i], ref[i]) << i;
}

// ----------------------------------------------------------------- adamw

// The device scalars of update t (trainer/adamw.h's, then the divisor's
// reciprocal), as the backend uploads them.
AdamWDeviceScalars DeviceScalars(const AdamWHyperparameters& h, uint64_t t) {
  const AdamWStepScalars s = ComputeAdamWStepScalars(h, t);
  static_assert(sizeof(s) <= sizeof(AdamWDeviceScalars), "the same leading fields");
  AdamWDeviceScalars d;
  std::memcpy(&d, &s, sizeof(s));
  SetAdamWDivisorReciprocal(&d);
  return d;
}

// The update's fp32 planes on the device, uploaded, and the bf16 copy of p
// (poisoned, as every DeviceBuffer).
struct DevicePlanes {
  DevicePlanes(const std::vector<float>& p, const std::vector<float>& m,
               const std::vector<float>& v, const std::vector<float>& g)
      : dp(p.size()), dm(m.size()), dv(v.size()), dg(g.size()),
        p16(p.size()) {
    dp.Upload(p);
    dm.Upload(m);
    dv.Upload(v);
    dg.Upload(g);
  }
  DeviceBuffer<float> dp, dm, dv, dg;
  Bf16Buffer p16;
};

// Every grid: one 256-thread CTA per chunk (max_blocks 0) and capped grids
// of 1,024-thread CTAs, fewer CTAs than chunks (a CTA takes several, the
// last chunk of a tensor partial) and more. Chunks starting at element
// offsets that are and are not multiples of 4, and of lengths that are and
// are not (the kernels' 16-byte and element-wise accesses), with the planes
// 16-byte aligned and, shifted by one element, not (element-wise only); the
// planes' elements outside the chunks are left as they were.
class AdamWTest : public testing::TestWithParam<int> {};

TEST_P(AdamWTest, BitwiseEqualToHostRule) {
  SKIP_WITHOUT_GPU();
  const int max_blocks = GetParam();
  struct Tensor {
    int64_t n;
    bool decayed;
  };
  const std::vector<Tensor> tensors = {
      {5000, true}, {123, false}, {4097, true}, {8192, true}, {6, false}};
  for (const int64_t shift : {0, 1}) {
    SCOPED_TRACE(testing::Message() << "planes shifted by " << shift);
    std::vector<AdamWChunk> chunks;
    int64_t n = 0;
    for (const Tensor& t : tensors) {
      for (int64_t b = 0; b < t.n; b += kAdamWChunk) {
        chunks.push_back({n + b,
                          static_cast<int32_t>(std::min<int64_t>(kAdamWChunk, t.n - b)),
                          t.decayed ? 1 : 0});
      }
      n += t.n;
    }
    // The chunks' elements start at plane element `lead`: 16-byte aligned
    // (shift 0) or 4 bytes past it (shift 1); the planes' first `lead` and
    // last 8 − lead elements are not the chunks'.
    const int64_t lead = 4 - shift, total = n + 8;
    auto p = RandomNormal(total, 0.02f, &Rng());
    auto m = RandomNormal(total, 0.001f, &Rng());
    auto v = RandomNormal(total, 0.001f, &Rng());
    for (float& x : v) x = x * x;
    auto g = RandomNormal(total, 0.01f, &Rng());
    const AdamWHyperparameters h;
    std::vector<AdamWDeviceScalars> table;
    for (uint64_t t : {1, 2, 1000}) {
      const AdamWDeviceScalars d = DeviceScalars(h, t);
      table.push_back(d);
    }
    DevicePlanes planes(p, m, v, g);
    auto& [dp, dm, dv, dg, p16] = planes;
    DeviceBuffer<AdamWChunk> dchunks(chunks.size());
    DeviceBuffer<AdamWDeviceScalars> dtable(table.size());
    DeviceBuffer<int64_t> step(1);
    dchunks.Upload(chunks);
    dtable.Upload(table);
    step.Upload({1});  // table entry 1: t = 2
    ASSERT_EQ(AdamWUpdateChunks(dchunks.get(), static_cast<int>(chunks.size()),
                                dtable.get(), step.get(), 0, dp.get() + lead,
                                dm.get() + lead, dv.get() + lead,
                                dg.get() + lead, AsBf16(p16) + lead, nullptr,
                                max_blocks),
              cudaSuccess);
    const AdamWStepScalars s = ComputeAdamWStepScalars(h, 2);
    std::vector<float> hp = p, hm = m, hv = v;
    int64_t off = lead;
    for (const Tensor& t : tensors) {
      AdamWUpdateRange(s, t.decayed, t.n, hp.data() + off, hm.data() + off,
                       hv.data() + off, g.data() + off);
      off += t.n;
    }
    const auto gp = dp.Download(), gm = dm.Download(), gv = dv.Download();
    const auto g16 = p16.Download();
    for (int64_t i = 0; i < total; ++i) {
      ASSERT_EQ(gp[i], hp[i]) << "p " << i;
      ASSERT_EQ(gm[i], hm[i]) << "m " << i;
      ASSERT_EQ(gv[i], hv[i]) << "v " << i;
    }
    // The bf16 copy: written for the decayed tensors' elements only (the
    // buffer's poison elsewhere).
    std::vector<bool> written(total, false);
    off = lead;
    for (const Tensor& t : tensors) {
      for (int64_t i = off; i < off + t.n; ++i) written[i] = t.decayed;
      off += t.n;
    }
    for (int64_t i = 0; i < total; ++i) {
      ASSERT_EQ(g16[i], written[i] ? test::Bf16Bits(hp[i]) : uint16_t{0xFFFF})
          << "bf16 " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Grids, AdamWTest, testing::Values(0, 1, 2, 26));

// Values over every binade the fp32 update can meet without overflowing
// (zeros, subnormals, tiny and large moments and gradients, both signs),
// so that the division and square root meet their slow paths (ptxas's
// range checks) as well as their fast ones: p, m and v must equal the host
// rule's bit for bit (zeros' signs included) for both grids and for t = 1
// and t = 1,000.
TEST(AdamWTest, HostileValuesBitwise) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kHalf = 1 << 19;
  constexpr int64_t n = 2 * kHalf;  // [decayed tensor][not decayed]
  std::mt19937_64& rng = Rng();
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // ±2^e, e uniform in [lo, hi] (subnormals where e < −126), or 0 with
  // probability `zeros`.
  auto draw = [&](double lo, double hi, double zeros, bool sign) {
    if (unit(rng) < zeros) return unit(rng) < 0.5 ? 0.0f : -0.0f;
    const float x = static_cast<float>(std::exp2(lo + (hi - lo) * unit(rng)));
    return sign && unit(rng) < 0.5 ? -x : x;
  };
  std::vector<float> p(n), m(n), v(n), g(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = draw(-40, 20, 0.02, true);
    m[i] = draw(-160, 20, 0.1, true);
    v[i] = std::fabs(draw(-160, 60, 0.1, false));
    g[i] = draw(-100, 30, 0.1, true);
  }
  std::vector<AdamWChunk> chunks;
  for (int64_t b = 0; b < n; b += kAdamWChunk) {
    chunks.push_back({b, static_cast<int32_t>(std::min<int64_t>(kAdamWChunk, n - b)),
                      b < kHalf ? 1 : 0});
  }
  const AdamWHyperparameters h;
  for (const uint64_t t : {uint64_t{1}, uint64_t{1000}}) {
    for (const int max_blocks : {0, 26}) {
      const AdamWStepScalars s = ComputeAdamWStepScalars(h, t);
      const AdamWDeviceScalars d = DeviceScalars(h, t);
      DevicePlanes planes(p, m, v, g);
      auto& [dp, dm, dv, dg, p16] = planes;
      DeviceBuffer<AdamWChunk> dchunks(chunks.size());
      DeviceBuffer<AdamWDeviceScalars> dtable(1);
      dchunks.Upload(chunks);
      dtable.Upload({d});
      ASSERT_EQ(AdamWUpdateChunks(dchunks.get(), static_cast<int>(chunks.size()),
                                  dtable.get(), nullptr, 0, dp.get(), dm.get(),
                                  dv.get(), dg.get(), AsBf16(p16), nullptr,
                                  max_blocks),
                cudaSuccess);
      std::vector<float> hp = p, hm = m, hv = v;
      AdamWUpdateRange(s, true, kHalf, hp.data(), hm.data(), hv.data(), g.data());
      AdamWUpdateRange(s, false, kHalf, hp.data() + kHalf, hm.data() + kHalf,
                       hv.data() + kHalf, g.data() + kHalf);
      const auto gp = dp.Download(), gm = dm.Download(), gv = dv.Download();
      auto bits = [](float x) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        return u;
      };
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(bits(gp[i]), bits(hp[i]))
            << "p " << i << " t " << t << " grid " << max_blocks << ": p0 "
            << p[i] << " m0 " << m[i] << " v0 " << v[i] << " g " << g[i];
        ASSERT_EQ(bits(gm[i]), bits(hm[i])) << "m " << i;
        ASSERT_EQ(bits(gv[i]), bits(hv[i])) << "v " << i;
      }
    }
  }
}

// The tied embedding's update split by rows: the rows no input names
// first, then the input rows (ids repeated, the first and last rows among
// them), must give the host rule's bits for the whole table, and the first
// call alone must leave the input rows' p, m, v untouched; for several
// grids (more row groups than rows, and fewer) and for C below, equal to
// and above a row group's 512-element pass, not a multiple of it.
TEST(AdamWTest, EmbeddingRowsSplitByInputs) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int V, C, T, blocks;
  };
  for (const Case& c : {Case{300, 72, 100, 1}, Case{300, 72, 100, 26},
                        Case{12288, 512, 1024, 26}, Case{12288, 512, 1024, 264},
                        Case{5, 8, 3, 2}, Case{97, 700, 50, 3},
                        Case{1000, 1100, 300, 1},
                        // Rows at offsets that are not all multiples of 4
                        // (element-wise accesses there, 16-byte elsewhere).
                        Case{50, 37, 20, 3}, Case{64, 514, 40, 26},
                        // More CTAs than rows: launched as ⌈V / 8⌉ (unclamped,
                        // the grid's group count would overflow an int).
                        Case{300, 72, 100, 1 << 29}}) {
    SCOPED_TRACE(testing::Message() << "V=" << c.V << " C=" << c.C
                                    << " T=" << c.T << " blocks=" << c.blocks);
    const int64_t n = static_cast<int64_t>(c.V) * c.C;
    std::uniform_int_distribution<uint32_t> id(0, c.V - 1);
    std::vector<uint32_t> inputs(c.T);
    for (uint32_t& x : inputs) x = id(Rng()) % (c.V / 2 + 1);  // repeats
    inputs[0] = 0;
    inputs[c.T - 1] = c.V - 1;
    if (c.T > 2) inputs[1] = c.V + 5;  // names no row: ignored
    std::vector<char> is_input(c.V, 0);
    for (uint32_t x : inputs) {
      if (x < static_cast<uint32_t>(c.V)) is_input[x] = 1;
    }
    const auto p = RandomNormal(n, 0.02f, &Rng());
    const auto m = RandomNormal(n, 0.001f, &Rng());
    auto v = RandomNormal(n, 0.001f, &Rng());
    for (float& x : v) x = x * x;
    const auto g = RandomNormal(n, 0.01f, &Rng());
    const AdamWHyperparameters h;
    const AdamWStepScalars hs = ComputeAdamWStepScalars(h, 3);
    const AdamWDeviceScalars d = DeviceScalars(h, 3);
    DevicePlanes planes(p, m, v, g);
    auto& [dp, dm, dv, dg, p16] = planes;
    DeviceBuffer<uint32_t> din(c.T);
    DeviceBuffer<AdamWDeviceScalars> dtable(1);
    din.Upload(inputs);
    dtable.Upload({d});
    ASSERT_EQ(AdamWEmbeddingRows(din.get(), c.T, c.V, c.C, false, dtable.get(),
                                 nullptr, 0, dp.get(), dm.get(), dv.get(),
                                 dg.get(), AsBf16(p16), c.blocks, nullptr),
              cudaSuccess);
    std::vector<float> hp = p, hm = m, hv = v;
    AdamWUpdateRange(hs, true, n, hp.data(), hm.data(), hv.data(), g.data());
    {
      const auto gp = dp.Download(), gm = dm.Download(), gv = dv.Download();
      for (int64_t i = 0; i < n; ++i) {
        const bool input = is_input[i / c.C] != 0;
        ASSERT_EQ(gp[i], input ? p[i] : hp[i]) << "p " << i;
        ASSERT_EQ(gm[i], input ? m[i] : hm[i]) << "m " << i;
        ASSERT_EQ(gv[i], input ? v[i] : hv[i]) << "v " << i;
      }
    }
    ASSERT_EQ(AdamWEmbeddingRows(din.get(), c.T, c.V, c.C, true, dtable.get(),
                                 nullptr, 0, dp.get(), dm.get(), dv.get(),
                                 dg.get(), AsBf16(p16), c.blocks, nullptr),
              cudaSuccess);
    const auto gp = dp.Download(), gm = dm.Download(), gv = dv.Download();
    const auto g16 = p16.Download();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(gp[i], hp[i]) << "p " << i;
      ASSERT_EQ(gm[i], hm[i]) << "m " << i;
      ASSERT_EQ(gv[i], hv[i]) << "v " << i;
      ASSERT_EQ(g16[i], test::Bf16Bits(hp[i])) << "p16 " << i;
    }
  }
  DeviceBuffer<uint32_t> din(1);
  EXPECT_EQ(AdamWEmbeddingRows(din.get(), 1, 4, 4, true, nullptr, nullptr, 0,
                               nullptr, nullptr, nullptr, nullptr, nullptr, 0,
                               nullptr),
            cudaErrorInvalidValue);
}

TEST(CastTest, RoundsToNearestEven) {
  SKIP_WITHOUT_GPU();
  auto x = RandomNormal(1001, 10.0f, &Rng());
  x[0] = 1.00390625f;  // halfway between two bf16 values: even wins
  DeviceBuffer<float> dx(x.size());
  Bf16Buffer out(x.size());
  dx.Upload(x);
  ASSERT_EQ(CastToBf16(dx.get(), static_cast<int64_t>(x.size()), AsBf16(out), nullptr),
            cudaSuccess);
  const auto got = out.Download();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], test::Bf16Bits(x[i])) << i;
}

// ------------------------------------------------------------------ step

// AddMemsetKernelNode against cudaMemset2D's meaning, for each element
// size: a 3-row pitched region inside a poisoned buffer; the bytes outside
// the rows' elements must stay poisoned.
TEST(StepKernelsTest, MemsetKernelNodeDoesWhatTheMemsetDoes) {
  SKIP_WITHOUT_GPU();
  for (unsigned element_size : {1u, 2u, 4u}) {
    SCOPED_TRACE(testing::Message() << "element size " << element_size);
    const size_t pitch = 64, width = 13, height = 3, bytes = 256;
    DeviceBuffer<uint8_t> buf(bytes);
    ASSERT_EQ(cudaMemset(buf.get(), 0xAB, bytes), cudaSuccess);
    cudaMemsetParams m = {};
    m.dst = buf.get() + 8;
    m.pitch = pitch;
    m.value = 0x12345678u;
    m.elementSize = element_size;
    m.width = width;
    m.height = height;
    cudaGraph_t graph;
    ASSERT_EQ(cudaGraphCreate(&graph, 0), cudaSuccess);
    cudaGraphNode_t node;
    ASSERT_EQ(AddMemsetKernelNode(graph, m, &node), cudaSuccess);
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    const std::vector<uint8_t> got = buf.Download();
    for (size_t i = 0; i < bytes; ++i) {
      uint8_t want = 0xAB;
      if (i >= 8) {
        const size_t row = (i - 8) / pitch, col = (i - 8) % pitch;
        if (row < height && col < width * element_size) {
          want = static_cast<uint8_t>(m.value >> (8 * (col % element_size)));
        }
      }
      ASSERT_EQ(got[i], want) << "byte " << i;
    }
  }
  cudaMemsetParams bad = {};
  bad.elementSize = 3;
  bad.width = bad.height = 1;
  cudaGraph_t graph;
  ASSERT_EQ(cudaGraphCreate(&graph, 0), cudaSuccess);
  cudaGraphNode_t node;
  EXPECT_EQ(AddMemsetKernelNode(graph, bad, &node), cudaErrorInvalidValue);
  cudaGraphDestroy(graph);
}

TEST(StepKernelsTest, StageContextRingAndCounter) {
  SKIP_WITHOUT_GPU();
  const int T = 8, V = 100;
  std::vector<uint32_t> ids(3 * T + 1);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(i * 3 % V);
  ids[2 * T + 3] = 5000;  // invalid, in context 2
  DeviceBuffer<uint32_t> dids(ids.size()), in(T), tg(T);
  DeviceBuffer<int64_t> step(1);
  DeviceBuffer<int> flag(1);
  // A time ring of 3 slots, two times each; slot 1 is the step's.
  DeviceBuffer<uint64_t> times(3 * 2);
  times.Upload(std::vector<uint64_t>(6, 0));
  dids.Upload(ids);
  step.Upload({1});
  flag.Upload({0});
  ASSERT_EQ(StageContext(dids.get(), ids.size(), step.get(), 0, T, V, in.get(),
                         tg.get(), flag.get(), nullptr, times.get(), 3),
            cudaSuccess);
  auto gi = in.Download(), gt = tg.Download();
  for (int t = 0; t < T; ++t) {
    EXPECT_EQ(gi[t], ids[T + t]);
    EXPECT_EQ(gt[t], ids[T + t + 1]);
  }
  EXPECT_EQ(flag.Download()[0], 0);
  ASSERT_EQ(StageContext(dids.get(), ids.size(), nullptr, 2, T, V, in.get(),
                         tg.get(), flag.get(), nullptr),
            cudaSuccess);
  gi = in.Download();
  EXPECT_EQ(gi[3], 0u);
  EXPECT_EQ(flag.Download()[0], 1);
  EXPECT_EQ(StageContext(dids.get(), ids.size(), step.get(), 0, T, V, in.get(),
                         tg.get(), flag.get(), nullptr, times.get(), 0),
            cudaErrorInvalidValue);

  // FinishStep: losses into the ring's slot 1, the end time, the counter.
  DeviceBuffer<float> src(T), ring(3 * T);
  ring.Upload(std::vector<float>(3 * T, -1.0f));
  std::vector<float> vals(T);
  for (int t = 0; t < T; ++t) vals[t] = 0.5f * t;
  src.Upload(vals);
  ASSERT_EQ(FinishStep(src.get(), T, step.get(), 3, ring.get(), times.get(),
                       nullptr),
            cudaSuccess);
  const auto r = ring.Download();
  for (int j = 0; j < 3 * T; ++j) {
    EXPECT_EQ(r[j], j >= T && j < 2 * T ? vals[j - T] : -1.0f) << j;
  }
  EXPECT_EQ(step.Download()[0], 2);
  const auto tm = times.Download();
  EXPECT_GT(tm[2], 0u);      // slot 1's start, by StageContext
  EXPECT_GE(tm[3], tm[2]);   // slot 1's end, after it
  for (int i : {0, 1, 4, 5}) EXPECT_EQ(tm[i], 0u) << i;
  // More losses than the CTA's threads; the step's slot 2 of 2 wraps to 0.
  const int n = 1500;
  std::vector<float> many(n);
  for (int j = 0; j < n; ++j) many[j] = 1.0f + j;
  DeviceBuffer<float> src2(n), ring2(2 * n);
  ring2.Upload(std::vector<float>(2 * n, -1.0f));
  src2.Upload(many);
  DeviceBuffer<uint64_t> times2(4);
  times2.Upload(std::vector<uint64_t>(4, 0));
  ASSERT_EQ(FinishStep(src2.get(), n, step.get(), 2, ring2.get(), times2.get(),
                       nullptr),
            cudaSuccess);
  const auto r2 = ring2.Download();
  for (int j = 0; j < 2 * n; ++j) {
    EXPECT_EQ(r2[j], j < n ? many[j] : -1.0f) << j;
  }
  EXPECT_GT(times2.Download()[1], 0u);
  EXPECT_EQ(step.Download()[0], 3);
  EXPECT_EQ(FinishStep(src2.get(), -1, step.get(), 2, ring2.get(),
                       times2.get(), nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(FinishStep(src2.get(), n, step.get(), 0, ring2.get(), times2.get(),
                       nullptr),
            cudaErrorInvalidValue);

  DeviceBuffer<int64_t> zero(1);
  zero.Upload({0});
  DeviceBuffer<uint64_t> phase(2);
  ASSERT_EQ(Timestamp(zero.get(), 1, 0, phase.get(), nullptr), cudaSuccess);
  ASSERT_EQ(Timestamp(zero.get(), 1, 1, phase.get(), nullptr), cudaSuccess);
  const auto pt = phase.Download();
  EXPECT_GT(pt[0], 0u);
  EXPECT_GE(pt[1], pt[0]);
}

}  // namespace
}  // namespace coppelius
