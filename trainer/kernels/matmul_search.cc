// File: trainer/kernels/matmul_search.cc
//
// matmul_search: for the step's cuBLASLt products (trainer/cuda_products.h)
// at a model size, times cuBLASLt's algorithm configurations beyond the
// heuristic's list (MatmulShape::algo_config) and prints, per product, the
// fastest against the plan the backend pins now. A benchmark for choosing
// configurations offline, on the GPU the backend runs on; nothing here is
// part of a training run.
//
// Search, per product (at the SM counts the backend's default tuning plans
// it for, --step_sm_targets): every algorithm id cublasLtMatmulAlgoGetIds
// lists for bf16 operands, fp32 compute and the product's output type;
// for each, every tile × stages × cluster shape its capabilities allow
// (no split-K, custom option 0) that cublasLtMatmulAlgoCheck accepts, up
// to --max_first_pass timed; and the heuristic's own candidates. Then,
// around the --widen fastest: every tile × stages pair, cluster shape,
// custom option and CTA swizzle, and split-K by 2–16 with each reduction
// scheme the algorithm supports (in-place and output-type reductions only
// for fp32 results, which they add in the output type). Products whose
// algorithm is not persistent run on the whole device whatever their SM
// target, so a side-stream product's time alone says little about its
// cost beside the chain: only the step (step_bench) decides. Each
// configuration is timed as step_bench times a product (10 calls captured
// in a CUDA graph, time per call; median of --reps graph launches). The
// --top fastest are then
// re-timed with 3 × --reps launches and checked: their result against the
// pinned plan's (normwise relative difference, another summation order
// being allowed) and a second run's bits (deterministic).
//
// Prints one line per configuration kept: µs, speed-up over the pinned
// plan, relative difference, "same bits twice" or not, and the
// configuration as MatmulAlgoConfigString writes it (cuda_products.cc's
// pins are written from these lines).
//
// Usage: build here (bazel build //trainer/kernels:matmul_search), copy the
// binary into stage/bin (tools/stage_gpu.sh leaves it out, keeping the
// stage under the device tool's carry limit), then on the GPU machine
// stage/bin/matmul_search --products='down forward,gate|up dX' (about 20 s
// a product).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "trainer/cuda_backend.h"
#include "trainer/cuda_products.h"
#include "trainer/kernels/bench_util.h"
#include "trainer/kernels/matmul.h"
#include "trainer/model_config.h"

ABSL_FLAG(std::string, config, "coppelius", "model configuration name");
ABSL_FLAG(std::string, products, "",
          "comma-separated product names (cuda_products.cc); empty: all");
ABSL_FLAG(int, reps, 9, "graph launches per timing (median)");
ABSL_FLAG(int, widen, 12, "configurations of the first pass widened");
ABSL_FLAG(int, top, 6, "configurations re-timed, checked and printed");
ABSL_FLAG(int, max_first_pass, 3000, "most configurations timed in pass 1");
ABSL_FLAG(bool, step_sm_targets, true,
          "plan the products for the SM counts the backend's default tuning "
          "gives them (CudaStepTuning side_sms, logits_dx_sms, "
          "output_dx_sms); false: the whole device");

namespace coppelius {
namespace {

#define CHECK_CUDA(x)                                                    \
  do {                                                                   \
    const cudaError_t e_ = (x);                                          \
    if (e_ != cudaSuccess) {                                             \
      std::fprintf(stderr, "matmul_search: %s: %s\n", #x,                \
                   cudaGetErrorString(e_));                              \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

cudaStream_t g_stream = nullptr;

// Median µs per call of `run` (bench_util.h: 10 calls in one graph,
// `reps` launches), or -1 if a call fails.
double TimeCalls(const std::function<bool()>& run, int reps) {
  const double ms = GraphTimePerCallMs(g_stream, run, reps);
  return ms < 0 ? -1 : 1000.0 * ms;
}

// A capability array attribute (tile or stages ids) of `algo`; {0} (the
// "undefined" id) when the algorithm lists none.
std::vector<uint32_t> CapIds(const cublasLtMatmulAlgo_t& algo,
                             cublasLtMatmulAlgoCapAttributes_t cap) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, cap, nullptr, 0, &bytes) !=
          CUBLAS_STATUS_SUCCESS ||
      bytes == 0) {
    return {0};
  }
  std::vector<uint32_t> ids(bytes / sizeof(uint32_t));
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, cap, ids.data(), bytes,
                                        &bytes) != CUBLAS_STATUS_SUCCESS ||
      ids.empty()) {
    return {0};
  }
  return ids;
}

template <typename T>
T CapValue(const cublasLtMatmulAlgo_t& algo,
           cublasLtMatmulAlgoCapAttributes_t cap) {
  T v = 0;
  size_t written = 0;
  cublasLtMatmulAlgoCapGetAttribute(&algo, cap, &v, sizeof(v), &written);
  return v;
}

struct Buffers {
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  void* d = nullptr;
  size_t d_bytes = 0;
};

// A device buffer of `elements` N(0, 1) values, bf16 or fp32.
void* DeviceRandom(size_t elements, bool bf16, std::mt19937_64* rng) {
  void* p = nullptr;
  const size_t bytes = elements * (bf16 ? 2 : 4);
  CHECK_CUDA(cudaMalloc(&p, bytes));
  CHECK_CUDA(FillRandomNormal(p, bytes, bf16, rng));
  return p;
}

// One call of `plan` on the buffers (D += A·B for beta ≠ 0, in place, as
// the backend's residual products accumulate into their output).
absl::Status RunOnce(const MatmulPlan& plan, const Buffers& buf, void* ws) {
  const auto* a = static_cast<const __nv_bfloat16*>(buf.a);
  const auto* b = static_cast<const __nv_bfloat16*>(buf.b);
  if (plan.shape().d_bf16) {
    return plan.RunBf16(a, b, static_cast<__nv_bfloat16*>(buf.d), ws,
                        g_stream);
  }
  float* d = static_cast<float*>(buf.d);
  return plan.Run(a, b, plan.shape().beta != 0.0f ? d : nullptr, d, ws,
                  g_stream);
}

struct Timed {
  MatmulAlgoConfig config;
  double us = -1;
};

struct ConfigLess {
  bool operator()(const MatmulAlgoConfig& x, const MatmulAlgoConfig& y) const {
    return std::tie(x.algo_id, x.tile, x.stages, x.split_k, x.reduction,
                    x.swizzle, x.custom, x.cluster, x.inner) <
           std::tie(y.algo_id, y.tile, y.stages, y.split_k, y.reduction,
                    y.swizzle, y.custom, y.cluster, y.inner);
  }
};

// The product's result as fp32 on the host (D after one call from a
// D that held the same C, for beta ≠ 0 a fresh copy of C first).
std::vector<float> Result(const MatmulPlan& plan, const Buffers& buf,
                          void* ws) {
  const MatmulShape& s = plan.shape();
  if (s.beta != 0.0f) {
    CHECK_CUDA(cudaMemcpyAsync(buf.d, buf.c, buf.d_bytes,
                               cudaMemcpyDeviceToDevice, g_stream));
  }
  const absl::Status st = RunOnce(plan, buf, ws);
  if (!st.ok()) {
    std::fprintf(stderr, "matmul_search: %s\n", st.ToString().c_str());
    std::exit(1);
  }
  CHECK_CUDA(cudaStreamSynchronize(g_stream));
  const size_t n = s.m * s.ldc;
  std::vector<float> out(n);
  if (s.d_bf16) {
    std::vector<uint16_t> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), buf.d, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) {
      const uint32_t u = static_cast<uint32_t>(h[i]) << 16;
      std::memcpy(&out[i], &u, 4);
    }
  } else {
    CHECK_CUDA(cudaMemcpy(out.data(), buf.d, n * 4, cudaMemcpyDeviceToHost));
  }
  return out;
}

int Search(const MatmulShape& base, cublasLtHandle_t lt, void* ws,
           size_t ws_bytes, std::mt19937_64* rng) {
  const MatmulShape& s = base;
  auto pinned = MatmulPlan::Create(lt, s, ws_bytes);
  if (!pinned.ok()) {
    std::fprintf(stderr, "matmul_search: %s\n",
                 pinned.status().ToString().c_str());
    return 1;
  }
  Buffers buf;
  buf.a = DeviceRandom((s.trans_a ? s.k : s.m) * s.lda, true, rng);
  buf.b = DeviceRandom((s.trans_b ? s.n : s.k) * s.ldb, true, rng);
  buf.d_bytes = s.m * s.ldc * (s.d_bf16 ? 2 : 4);
  if (s.beta != 0.0f) buf.c = DeviceRandom(s.m * s.ldc, false, rng);
  CHECK_CUDA(cudaMalloc(&buf.d, buf.d_bytes));
  auto runner = [&](const MatmulPlan& plan) {
    return [&plan, &buf, ws]() { return RunOnce(plan, buf, ws).ok(); };
  };
  const int reps = absl::GetFlag(FLAGS_reps);
  const double pinned_us = TimeCalls(runner(**pinned), 3 * reps);
  const MatmulAlgoConfig pinned_config = (*pinned)->algo_config();
  std::printf("\n== %s (m %ld n %ld k %ld%s%s, SM target %d): pinned %s %.3f us\n",
              s.name.c_str(), static_cast<long>(s.m), static_cast<long>(s.n),
              static_cast<long>(s.k), s.beta != 0.0f ? ", beta 1" : "",
              s.d_bf16 ? ", bf16 D" : "", s.sm_count_target,
              MatmulAlgoConfigString(pinned_config).c_str(), pinned_us);
  std::fflush(stdout);

  std::map<MatmulAlgoConfig, double, ConfigLess> timed;
  int refused = 0;
  auto try_config = [&](const MatmulAlgoConfig& c) -> double {
    auto it = timed.find(c);
    if (it != timed.end()) return it->second;
    MatmulShape t = s;
    t.algo_config = c;
    auto plan = MatmulPlan::Create(lt, t, ws_bytes);
    double us = -1;
    // (A refused configuration gives the heuristic's plan: not timed.)
    if (plan.ok() && (*plan)->configured()) {
      us = TimeCalls(runner(**plan), reps);
    } else {
      ++refused;
    }
    timed[c] = us;
    return us;
  };

  // Pass 1: ids × tiles × stages.
  const cudaDataType_t out = s.d_bf16 ? CUDA_R_16BF : CUDA_R_32F;
  int ids[256];
  int num_ids = 0;
  if (cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F,
                               CUDA_R_16BF, CUDA_R_16BF, out, out, 256, ids,
                               &num_ids) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "matmul_search: cublasLtMatmulAlgoGetIds failed\n");
    return 1;
  }
  std::map<int, cublasLtMatmulAlgo_t> algos;
  const int max_first = absl::GetFlag(FLAGS_max_first_pass);
  int first_pass = 0;
  for (int i = 0; i < num_ids && first_pass < max_first; ++i) {
    cublasLtMatmulAlgo_t algo;
    if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F,
                               CUDA_R_16BF, CUDA_R_16BF, out, out, ids[i],
                               &algo) != CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    algos[ids[i]] = algo;
    for (uint32_t tile : CapIds(algo, CUBLASLT_ALGO_CAP_TILE_IDS)) {
      for (uint32_t stages : CapIds(algo, CUBLASLT_ALGO_CAP_STAGES_IDS)) {
        for (int cluster = 0; cluster < CUBLASLT_CLUSTER_SHAPE_END;
             ++cluster) {
          if (first_pass >= max_first) break;
          MatmulAlgoConfig c;
          c.algo_id = ids[i];
          c.tile = static_cast<int>(tile);
          c.stages = static_cast<int>(stages);
          c.cluster = cluster;
          if (try_config(c) > 0) ++first_pass;
        }
      }
    }
  }
  // The heuristic's own candidates (MatmulShape::algo_index 0..15).
  for (int i = 0; i < 16; ++i) {
    MatmulShape h = s;
    h.algo_index = i;
    h.algo_config = MatmulAlgoConfig();  // the heuristic's candidate i
    auto plan = MatmulPlan::Create(lt, h, ws_bytes);
    if (!plan.ok()) break;
    const MatmulAlgoConfig c = (*plan)->algo_config();
    const double us = try_config(c);
    std::printf("heuristic #%d: %s %.3f us\n", i,
                MatmulAlgoConfigString(c).c_str(), us);
  }
  std::printf("pass 1: %d algorithm ids, %d configurations timed, %d refused\n",
              num_ids, first_pass, refused);
  std::fflush(stdout);

  auto fastest = [&](size_t n) {
    std::vector<Timed> all;
    for (const auto& [c, us] : timed) {
      if (us > 0) all.push_back({c, us});
    }
    std::sort(all.begin(), all.end(),
              [](const Timed& x, const Timed& y) { return x.us < y.us; });
    if (all.size() > n) all.resize(n);
    return all;
  };

  // Pass 2: around the fastest, cluster shapes, custom options, swizzle,
  // split-K with each supported reduction.
  const int before = static_cast<int>(timed.size());
  for (const Timed& t : fastest(absl::GetFlag(FLAGS_widen))) {
    if (algos.count(t.config.algo_id) == 0) {
      cublasLtMatmulAlgo_t a;
      if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F,
                                 CUDA_R_16BF, CUDA_R_16BF, out, out,
                                 t.config.algo_id,
                                 &a) != CUBLAS_STATUS_SUCCESS) {
        continue;
      }
      algos[t.config.algo_id] = a;
    }
    const cublasLtMatmulAlgo_t& algo = algos[t.config.algo_id];
    for (uint32_t tile : CapIds(algo, CUBLASLT_ALGO_CAP_TILE_IDS)) {
      for (uint32_t stages : CapIds(algo, CUBLASLT_ALGO_CAP_STAGES_IDS)) {
        MatmulAlgoConfig c = t.config;
        c.tile = static_cast<int>(tile);
        c.stages = static_cast<int>(stages);
        try_config(c);
      }
    }
    const int custom_max =
        CapValue<int32_t>(algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX);
    const bool swizzle =
        CapValue<uint32_t>(algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) != 0;
    const bool split =
        CapValue<int32_t>(algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) != 0;
    const uint32_t reductions =
        CapValue<uint32_t>(algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
    for (int cluster = 0; cluster < CUBLASLT_CLUSTER_SHAPE_END; ++cluster) {
      MatmulAlgoConfig c = t.config;
      c.cluster = cluster;
      try_config(c);
    }
    for (int custom = 1; custom <= std::min(custom_max, 16); ++custom) {
      MatmulAlgoConfig c = t.config;
      c.custom = custom;
      try_config(c);
    }
    if (swizzle) {
      MatmulAlgoConfig c = t.config;
      c.swizzle = 1;
      try_config(c);
    }
    if (split) {
      for (int k : {2, 3, 4, 6, 8, 12, 16}) {
        for (uint32_t r : {CUBLASLT_REDUCTION_SCHEME_INPLACE,
                           CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                           CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE}) {
          if ((reductions & r) == 0) continue;
          if (s.d_bf16 && r != CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) continue;
          MatmulAlgoConfig c = t.config;
          c.split_k = k;
          c.reduction = static_cast<int>(r);
          try_config(c);
        }
      }
    }
  }
  std::printf("pass 2: %d more configurations tried\n",
              static_cast<int>(timed.size()) - before);

  // The fastest, re-timed and checked against the pinned plan.
  const std::vector<float> want = Result(**pinned, buf, ws);
  double want_norm = 0;
  for (float x : want) want_norm += static_cast<double>(x) * x;
  for (const Timed& t : fastest(absl::GetFlag(FLAGS_top))) {
    MatmulShape u = s;
    u.algo_config = t.config;
    auto plan = MatmulPlan::Create(lt, u, ws_bytes);
    if (!plan.ok() || !(*plan)->configured()) continue;
    const double us = TimeCalls(runner(**plan), 3 * reps);
    const std::vector<float> got = Result(**plan, buf, ws);
    const std::vector<float> again = Result(**plan, buf, ws);
    double diff = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = static_cast<double>(got[i]) - want[i];
      diff += e * e;
    }
    const bool same =
        std::memcmp(got.data(), again.data(), got.size() * 4) == 0;
    std::printf("  %7.3f us  x%.3f  rel %.2e  %s  %s\n", us, pinned_us / us,
                std::sqrt(diff / std::max(want_norm, 1e-30)),
                same ? "same bits twice" : "BITS DIFFER",
                MatmulAlgoConfigString(t.config).c_str());
  }
  std::fflush(stdout);
  cudaFree(buf.a);
  cudaFree(buf.b);
  if (buf.c != nullptr) cudaFree(buf.c);
  cudaFree(buf.d);
  return 0;
}

}  // namespace
}  // namespace coppelius

int main(int argc, char** argv) {
  using namespace coppelius;
  absl::ParseCommandLine(argc, argv);
  auto config = ModelConfigByName(absl::GetFlag(FLAGS_config));
  if (!config.ok()) {
    std::fprintf(stderr, "matmul_search: %s\n",
                 config.status().ToString().c_str());
    return 2;
  }
  std::set<std::string> wanted;
  for (absl::string_view p :
       absl::StrSplit(absl::GetFlag(FLAGS_products), ',', absl::SkipEmpty())) {
    wanted.insert(std::string(p));
  }
  CHECK_CUDA(cudaStreamCreate(&g_stream));
  cublasLtHandle_t lt = nullptr;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return 1;
  const size_t ws_bytes = kCudaProductWorkspaceBytes;
  void* ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  std::mt19937_64 rng(20261202);
  int rc = 0;
  std::vector<MatmulShape> shapes = CudaProductShapes(*config);
  if (absl::GetFlag(FLAGS_step_sm_targets)) {
    // As cuda_backend.cc plans them under the default tuning.
    const CudaStepTuning tuning;
    for (CudaProduct p : {kLogitsDw, kDownDw, kGateUpDw, kOutputDw, kQkvDw}) {
      shapes[p].sm_count_target = tuning.side_sms;
    }
    shapes[kLogitsDx].sm_count_target = tuning.logits_dx_sms;
    shapes[kOutputDx].sm_count_target = tuning.output_dx_sms;
  }
  for (const MatmulShape& s : shapes) {
    if (!wanted.empty() && wanted.count(s.name) == 0) continue;
    rc |= Search(s, lt, ws, ws_bytes, &rng);
  }
  cublasLtDestroy(lt);
  return rc;
}
