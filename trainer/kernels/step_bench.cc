// File: trainer/kernels/step_bench.cc
//
// Timings on the GPU machine (tools/gpu_checks.sh runs it), in this order:
//   1. the whole CUDA backend (trainer/cuda_backend.h): ms/step over
//      --steps graph launches (after 20 warm-up steps), by host wall clock
//      from the first enqueue to the last poll, and the median device time
//      per step (device timestamps at the graph's first and last node);
//   2. with --kernels (the default), each kernel / product of one step at
//      the coppelius shapes (T=1024, C=512, H=1408, NH=8, HS=64, V=12288;
//      N = 57,705,472 for AdamW): per call, 10 calls captured back to back
//      into one CUDA graph (graph node gaps included, host launch latency
//      not), median of 30 graph launches timed with CUDA events. After the
//      backend, because the kernel rows slow a backend run in the same
//      process (Main); --backend=false leaves the backend out.
// Usage: step_bench --help (flags below).
// Inputs are random (never zeros); output is a table on stdout.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cublasLt.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "trainer/backend.h"
#include "trainer/cuda_backend.h"
#include "trainer/cuda_products.h"
#include "trainer/initialization.h"
#include "trainer/kernels/adamw.h"
#include "trainer/kernels/attention.h"
#include "trainer/kernels/cross_entropy.h"
#include "trainer/kernels/embedding.h"
#include "trainer/kernels/fused_matmul.h"
#include "trainer/kernels/bench_util.h"
#include "trainer/kernels/kernel_trace.h"
#include "trainer/kernels/launch.h"
#include "trainer/kernels/layernorm.h"
#include "trainer/kernels/matmul.h"
#include "trainer/kernels/rope.h"
#include "trainer/kernels/swiglu.h"
#include "trainer/model_config.h"

ABSL_FLAG(std::string, config, "coppelius", "model config of the backend run");
ABSL_FLAG(int, steps, 300, "timed steps of the backend run (after 20 warm-up)");
ABSL_FLAG(bool, kernels, true,
          "after the backend run, time each kernel and product alone");
ABSL_FLAG(bool, backend, true,
          "run the backend benchmark (false: the kernel rows only, e.g. for "
          "a profiler that should see their launches first)");
ABSL_FLAG(bool, pdl, false, "programmatic dependent launch");
ABSL_FLAG(int, adamw_blocks,
          coppelius::CudaStepTuning().adamw_overlap_blocks,
          "CTAs of 1,024 threads of each overlapped AdamW update (0: one "
          "256-thread CTA per chunk)");
ABSL_FLAG(std::string, trace, "",
          "after the timed run, trace --trace_steps more steps' kernels "
          "with CUPTI (kernels/kernel_trace.h) into this CSV file");
ABSL_FLAG(int, trace_steps, 4, "steps traced by --trace");
ABSL_FLAG(bool, trace_from_start, false,
          "--trace: start the trace before the backend is created");
ABSL_FLAG(int, side_schedule, coppelius::CudaStepTuning().side_schedule,
          "where the backward issues the dW products (cuda_backend.h)");
ABSL_FLAG(int, adamw_schedule, coppelius::CudaStepTuning().adamw_schedule,
          "where the backward issues the block updates (cuda_backend.h)");
ABSL_FLAG(int, side_priority, coppelius::CudaStepTuning().side_priority,
          "side stream priority: 0 below main, 1 least, 2 main's");
ABSL_FLAG(int, adamw_priority, coppelius::CudaStepTuning().adamw_priority,
          "AdamW stream priority: 0 below main, 1 least, 2 main's");
ABSL_FLAG(int, side_sms, coppelius::CudaStepTuning().side_sms,
          "SM count target of the side stream's dW products (0: whole device)");
ABSL_FLAG(int, logits_dx_sms, coppelius::CudaStepTuning().logits_dx_sms,
          "SM count target of the logits dX product (0: whole device)");
ABSL_FLAG(int, output_dx_sms, coppelius::CudaStepTuning().output_dx_sms,
          "SM count target of the attention output's dX product (0: whole "
          "device)");
ABSL_FLAG(bool, phase_times, true,
          "CudaStepTuning::phase_times: record the forward's and backward's "
          "end times for the phase lines (false: the step graph that train "
          "runs, 0.002-0.005 ms/step shorter)");
ABSL_FLAG(bool, lt_configs, coppelius::CudaStepTuning().lt_configs,
          "CudaStepTuning::lt_configs: the pinned cuBLASLt configurations "
          "(false: the heuristic's candidates)");
ABSL_FLAG(int, embedding_early_ctas,
          coppelius::CudaStepTuning().embedding_early_ctas,
          "CudaStepTuning::embedding_early_ctas: > 0 the embedding rows no "
          "input names are updated beside the backward on this many CTAs");
ABSL_FLAG(int, fused_qkv_config, coppelius::CudaStepTuning().fused_qkv_config,
          "qkv forward product with RoPE fused, in this tile configuration "
          "(fused_matmul.h); -1: cuBLASLt + RopeForward");
ABSL_FLAG(int, fused_gate_up_config,
          coppelius::CudaStepTuning().fused_gate_up_config,
          "gate|up forward product with SwiGLU fused, in this tile "
          "configuration (fused_matmul.h); -1: cuBLASLt + SwigluForward");
ABSL_FLAG(int, fused_down_dx_config,
          coppelius::CudaStepTuning().fused_down_dx_config,
          "down dX product with SwiGLU's backward fused, in this tile "
          "configuration (fused_matmul.h); -1: cuBLASLt + SwigluBackward");
ABSL_FLAG(int, fused_output_dx_config,
          coppelius::CudaStepTuning().fused_output_dx_config,
          "attention output dX product writing D too, in this tile "
          "configuration (fused_matmul.h); -1: cuBLASLt + the D kernel");
ABSL_FLAG(int, attention_forward_split,
          coppelius::CudaStepTuning().attention_forward_split,
          "key tiles per chunk of the attention forward's items (attention.h "
          "AttentionSplits); also for the kernel rows");
ABSL_FLAG(int, attention_query_split,
          coppelius::CudaStepTuning().attention_query_split,
          "key tiles per chunk of the attention backward's dq items");
ABSL_FLAG(int, attention_keys_split,
          coppelius::CudaStepTuning().attention_keys_split,
          "query tiles per chunk of the attention backward's dk/dv items");
ABSL_FLAG(int, attention_forward_warpgroups,
          coppelius::CudaStepTuning().attention_forward_warpgroups,
          "warpgroups per CTA of the attention forward (1, 2 or 4; "
          "attention.h AttentionSplits); also for the kernel rows");
ABSL_FLAG(int, attention_query_warpgroups,
          coppelius::CudaStepTuning().attention_query_warpgroups,
          "warpgroups per CTA of the attention backward's dq kernel (1, 2 "
          "or 4); also for the kernel rows");
ABSL_FLAG(int, attention_keys_warpgroups,
          coppelius::CudaStepTuning().attention_keys_warpgroups,
          "warpgroups per CTA of the attention backward's dk/dv kernel (1 "
          "or 2); also for the kernel rows");
ABSL_FLAG(bool, attention_pipelined_backward,
          coppelius::CudaStepTuning().attention_pipelined_backward,
          "the attention backward's one-warpgroup kernels issue the next "
          "tile's row products behind this tile's accumulation (the same "
          "bits); also for the kernel rows");
ABSL_FLAG(bool, attention_pipelined_forward,
          coppelius::CudaStepTuning().attention_pipelined_forward,
          "the attention forward of 2 or 4 warpgroups issues each "
          "warpgroup's next scores behind its P~v (the same bits); also for "
          "the kernel rows");
ABSL_FLAG(std::string, graph_dot, "",
          "diagnostics: write the captured step graph to this file (DOT)");
ABSL_FLAG(int, context, 0,
          "benchmark-only: run the backend with this context length T instead "
          "of the config's (0: the config's)");
ABSL_FLAG(int, concurrent_backends, 1,
          "benchmark-only: run this many backends side by side (each its own "
          "streams and step graph, steps enqueued in turn) and report the "
          "wall time per round of one step each (a proxy for splitting the "
          "context's rows into concurrent chains)");
ABSL_FLAG(std::vector<std::string>, skip, {},
          "ablation: parts left out of the step graph (results wrong)");

namespace coppelius {
namespace {

#define CHECK_CUDA(expr)                                                  \
  do {                                                                    \
    cudaError_t e_ = (expr);                                              \
    if (e_ != cudaSuccess) {                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr,   \
                   cudaGetErrorString(e_));                               \
      return 1;                                                           \
    }                                                                     \
  } while (0)

#define CHECK_OK(expr)                                                    \
  do {                                                                    \
    absl::Status s_ = (expr);                                             \
    if (!s_.ok()) {                                                       \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__,              \
                   s_.ToString().c_str());                                \
      return 1;                                                           \
    }                                                                     \
  } while (0)

struct Row {
  std::string name;
  double ms;
  double bytes;  // minimal bytes moved (0 if not counted)
  double flops;
};

std::vector<Row> g_rows;
std::vector<std::string> g_candidates;  // per product: us of each algo_index

// Every device buffer of the kernel benchmarks, freed before the backend
// benchmark runs (so that it finds the device as `train` does).
std::vector<void*> g_allocations;

void* DevAlloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {  // a benchmark binary: nothing to recover
    std::fprintf(stderr, "step_bench: cudaMalloc(%zu bytes): %s\n", bytes,
                 cudaGetErrorString(e));
    std::exit(1);
  }
  g_allocations.push_back(p);
  return p;
}

void* DevRandom(size_t bytes, std::mt19937_64* rng, bool bf16) {
  void* p = DevAlloc(bytes);
  const cudaError_t e = FillRandomNormal(p, bytes, bf16, rng);
  if (e != cudaSuccess) {  // as DevAlloc: nothing to recover
    std::fprintf(stderr, "step_bench: random inputs (%zu bytes): %s\n", bytes,
                 cudaGetErrorString(e));
    std::exit(1);
  }
  return p;
}

// The stream the kernel benchmarks run on (non-blocking; graph capture
// needs one other than the legacy default stream).
cudaStream_t g_stream = nullptr;

// Time per call of `fn` (which enqueues on g_stream), in ms
// (bench_util.h: 10 calls in one graph, median of `reps` launches).
double TimeIt(const std::function<bool()>& fn, int reps = 30) {
  return GraphTimePerCallMs(g_stream, fn, reps);
}

int KernelBench(const CudaStepTuning& tuning) {
  auto coppelius = ModelConfigByName("coppelius");
  CHECK_OK(coppelius.status());
  const ModelConfig& config = *coppelius;
  const int T = config.T, C = config.C, H = config.hidden, NH = config.NH,
            HS = config.HS, V = config.V;
  const int64_t N = NumParameters(config);
  std::mt19937_64 rng(1);
  CHECK_CUDA(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  using bf = __nv_bfloat16;
  auto F = [&](size_t n) { return static_cast<float*>(DevRandom(n * 4, &rng, false)); };
  auto B = [&](size_t n) { return static_cast<bf*>(DevRandom(n * 2, &rng, true)); };
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return 1;
  const size_t ws_bytes = kCudaProductWorkspaceBytes;
  void* ws = nullptr;
  ws = DevAlloc(ws_bytes);
  // The backend's products (cuda_products.h), each with its pinned
  // candidate; C (the residual) and a bf16 D where the backend has them.
  for (const MatmulShape& s : CudaProductShapes(config)) {
    auto plan = MatmulPlan::Create(lt, s, ws_bytes);
    CHECK_OK(plan.status());
    bf* a = B((s.trans_a ? s.k : s.m) * s.lda);
    bf* b = B((s.trans_b ? s.n : s.k) * s.ldb);
    float* c = s.beta != 0.0f ? F(s.m * s.ldc) : nullptr;
    float* d = F(s.m * s.ldc);
    bf* d16 = B(s.m * s.ldc);
    auto run = [&](const MatmulPlan& q) {
      return (s.d_bf16 ? q.RunBf16(a, b, d16, ws, g_stream)
                       : q.Run(a, b, c, d, ws, g_stream))
          .ok();
    };
    const double ms = TimeIt([&] { return run(**plan); });
    g_rows.push_back({s.name, ms, 0, 2.0 * s.m * s.n * s.k});
    // Every heuristic candidate (MatmulShape::algo_index), for choosing the
    // backend's fixed indices.
    // Up to 16 (matmul.cc's kMaxCandidates); Create refuses
    // (InvalidArgument) an index past the heuristic's list.
    std::string line;
    int best = -1;
    double best_ms = 1e30;
    for (int i = 0; i < 16; ++i) {
      MatmulShape si = s;
      si.algo_index = i;
      si.algo_config = MatmulAlgoConfig();  // the heuristic's candidate i
      auto pi = MatmulPlan::Create(lt, si, ws_bytes);
      if (i > 0 && absl::IsInvalidArgument(pi.status())) break;
      CHECK_OK(pi.status());
      const double mi = TimeIt([&] { return run(**pi); });
      line += " " + std::to_string(i) + ":" + std::to_string(mi * 1000).substr(0, 5);
      if (mi < best_ms) {
        best_ms = mi;
        best = i;
      }
    }
    // What the backend runs: the pinned configuration (MatmulShape::
    // algo_config) where cuBLASLt takes it, else the pinned candidate.
    const std::string runs =
        MatmulAlgoConfigString((*plan)->algo_config()) +
        ((*plan)->configured()         ? " (pinned configuration)"
         : (*plan)->refusal().empty() ? ""
                                      : " (" + (*plan)->refusal() + ")");
    g_candidates.push_back(s.name + " | runs " + runs + " | pinned index " +
                           std::to_string(s.algo_index) + ", best index " +
                           std::to_string(best) + " (" +
                           std::to_string(best_ms * 1000).substr(0, 5) +
                           " us) |" + line);
  }
  {
    float* x = F(T * C);
    float* w = F(C);
    float* bias = F(C);
    float* mean = F(T);
    float* rstd = F(T);
    bf* y = B(T * C);
    g_rows.push_back({"layernorm fwd", TimeIt([&] {
                        return LayerNormForward(x, w, bias, T, C, 1e-5f, y, nullptr,
                                                mean, rstd, g_stream) == cudaSuccess;
                      }),
                      T * C * 6.0, 0});
    float* dy = F(T * C);
    float* dres = F(T * C);
    bf* dres16 = B(T * C);
    float* scratch = F(LayerNormBackwardScratchFloats(T, C));
    float* dw = F(C);
    float* db = F(C);
    g_rows.push_back({"layernorm bwd", TimeIt([&] {
                        return LayerNormBackward(dy, x, w, mean, rstd, T, C, true,
                                                 dres, dres16, scratch, dw, db,
                                                 g_stream) == cudaSuccess;
                      }),
                      T * C * 18.0, 0});
  }
  {
    // Fused causal attention (8 heads, T = 1024, HS = 64). FLOP counted as
    // the useful causal products: forward 2 (S, P.v), backward 4 (dP, dV,
    // dQ, dK), each 2·NH·T·T/2·HS; the recomputations are not counted.
    bf* qkv = B(T * 3 * C);
    bf* y = B(T * C);
    bf* dy = B(T * C);
    float* stats = F(NH * T);
    bf* dqkv = B(T * 3 * C);
    const auto rope_h = RopeTable(T, HS, 10000.0);
    float* rope = F(rope_h.size());
    cudaMemcpy(rope, rope_h.data(), rope_h.size() * 4, cudaMemcpyHostToDevice);
    void* scratch = nullptr;
    const AttentionSplits splits = CudaAttentionSplits(tuning);
    const size_t scratch_bytes = AttentionScratchBytes(T, NH, HS, splits);
    scratch = static_cast<decltype(scratch)>(DevAlloc(scratch_bytes));
    CHECK_CUDA(cudaMemset(scratch, 0, scratch_bytes));
    const double causal_product = 2.0 * NH * T * (T + 1) / 2.0 * HS;
    g_rows.push_back({"attention fwd (fused, 1 kernel)", TimeIt([&] {
                        return AttentionForward(qkv, T, NH, HS, y, stats, scratch, g_stream,
                                                splits) ==
                               cudaSuccess;
                      }),
                      0, 2 * causal_product});
    g_rows.push_back({"attention bwd (fused, 3 kernels, 1 stream, incl. inverse RoPE)", TimeIt([&] {
                        return AttentionBackward(qkv, y, dy, stats, rope, T, NH, HS, scratch,
                                                 dqkv, g_stream, splits) == cudaSuccess;
                      }),
                      0, 4 * causal_product});
    g_rows.push_back({"  attention bwd: delta kernel", TimeIt([&] {
                        return AttentionBackwardDelta(y, dy, T, NH, HS, scratch,
                                                      g_stream, splits) == cudaSuccess;
                      }),
                      0, 0});
    g_rows.push_back({"  attention bwd: query kernel", TimeIt([&] {
                        return AttentionBackwardQuery(qkv, dy, stats, rope, T, NH, HS,
                                                      scratch, dqkv, g_stream,
                                                      splits) == cudaSuccess;
                      }),
                      0, 0});
    g_rows.push_back({"  attention bwd: keys kernel", TimeIt([&] {
                        return AttentionBackwardKeys(qkv, dy, stats, rope, T, NH, HS,
                                                     scratch, dqkv, g_stream,
                                                     splits) == cudaSuccess;
                      }),
                      0, 0});
  }
  {
    float* qkv = F(T * 3 * C);
    bf* out = B(T * 3 * C);
    const auto table_h = RopeTable(T, HS, 10000.0);
    float* table = F(table_h.size());
    cudaMemcpy(table, table_h.data(), table_h.size() * 4, cudaMemcpyHostToDevice);
    g_rows.push_back({"rope fwd", TimeIt([&] {
                        return RopeForward(qkv, table, T, NH, HS, out, g_stream) == cudaSuccess;
                      }),
                      T * 3 * C * 6.0, 0});
    // The fused products (fused_matmul.h): qkv with RoPE, gate|up with
    // SwiGLU, against the cuBLASLt product + kernel pairs above.
    bf* h = B(T * C);
    bf* w_qkv = B(3 * C * C);
    bf* w_gu = B(2 * H * C);
    float* gu = F(T * 2 * H);
    bf* a = B(T * H);
    for (int config = 0; config < kFusedConfigs; ++config) {
      // BN 64 or 128 (not 176): a tile holds whole heads.
      if (FusedConfigColumns(config) % 64 == 0) {
        g_rows.push_back({absl::StrCat("qkv forward + rope (fused, config ",
                                       config, ")"),
                          TimeIt([&] {
                            return QkvRopeMatmul(h, w_qkv, table, T, C, NH,
                                                 HS, out, config,
                                                 g_stream) == cudaSuccess;
                          }),
                          0, 2.0 * T * 3 * C * C});
      }
      g_rows.push_back({absl::StrCat("gate|up forward + swiglu (fused, "
                                     "config ", config, ")"),
                        TimeIt([&] {
                          return GateUpSwigluMatmul(h, w_gu, T, C, H, gu, a,
                                                    config,
                                                    g_stream) == cudaSuccess;
                        }),
                        0, 2.0 * T * 2 * H * C});
      // BN 64 or 128: whole 64-column boxes of the N-major W_output.
      if (FusedConfigColumns(config) % 64 == 0) {
        bf* y = B(T * C);
        bf* dy = B(T * C);
        float* delta = F(NH * T);
        g_rows.push_back({absl::StrCat("output dX + attention D (fused, "
                                       "config ", config, ")"),
                          TimeIt([&] {
                            return OutputDxDeltaMatmul(h, w_qkv, y, T, C, NH,
                                                       HS, dy, delta, config,
                                                       g_stream) ==
                                   cudaSuccess;
                          }),
                          0, 2.0 * T * C * C});
      }
      // BN 64 or 128: whole 64-column boxes of the N-major W_down.
      if (FusedConfigColumns(config) % 64 == 0) {
        bf* dgu = B(T * 2 * H);
        g_rows.push_back({absl::StrCat("down dX + swiglu bwd (fused, config ",
                                       config, ")"),
                          TimeIt([&] {
                            return DownDxSwigluBackwardMatmul(
                                       h, w_gu, gu, T, C, H, dgu, config,
                                       g_stream) == cudaSuccess;
                          }),
                          0, 2.0 * T * H * C});
      }
    }
  }
  {
    float* gu = F(T * 2 * H);
    float* da = F(T * H);
    bf* a = B(T * H);
    bf* dgu = B(T * 2 * H);
    g_rows.push_back({"swiglu fwd", TimeIt([&] {
                        return SwigluForward(gu, T, H, a, g_stream) == cudaSuccess;
                      }),
                      T * H * 10.0, 0});
    g_rows.push_back({"swiglu bwd", TimeIt([&] {
                        return SwigluBackward(gu, da, T, H, dgu, g_stream) == cudaSuccess;
                      }),
                      T * H * 16.0, 0});
  }
  {
    float* logits = F(int64_t{T} * V);
    bf* dl = B(int64_t{T} * V);
    float* losses = F(T);
    std::vector<uint32_t> tg(T);
    for (auto& t : tg) t = rng() % V;
    uint32_t* targets = nullptr;
    targets = static_cast<decltype(targets)>(DevAlloc(T * 4));
    cudaMemcpy(targets, tg.data(), T * 4, cudaMemcpyHostToDevice);
    g_rows.push_back({"cross-entropy fwd+bwd", TimeIt([&] {
                        return CrossEntropyForwardBackward(logits, targets, T, V,
                                                           1.0f / T, losses, dl,
                                                           g_stream) == cudaSuccess;
                      }),
                      double(T) * V * 6, 0});
    float* dx = F(T * C);
    float* emb = F(int64_t{V} * C);
    g_rows.push_back({"embedding bwd (scatter)", TimeIt([&] {
                        return EmbeddingBackward(targets, dx, T, C, emb, g_stream) ==
                               cudaSuccess;
                      }),
                      T * C * 12.0, 0});
  }
  {
    float* p = F(N);
    float* m = F(N);
    float* v = F(N);
    float* g = F(N);
    CHECK_CUDA(cudaMemset(v, 0, N * 4));  // v >= 0
    bf* p16 = B(N);
    std::vector<AdamWChunk> chunks;
    for (int64_t b = 0; b < N; b += kAdamWChunk) {
      chunks.push_back({b, static_cast<int32_t>(std::min<int64_t>(kAdamWChunk, N - b)), 1});
    }
    AdamWChunk* dchunks = nullptr;
    dchunks = static_cast<decltype(dchunks)>(DevAlloc(chunks.size() * sizeof(AdamWChunk)));
    cudaMemcpy(dchunks, chunks.data(), chunks.size() * sizeof(AdamWChunk),
               cudaMemcpyHostToDevice);
    AdamWDeviceScalars s = {0.99997f, 0.9f, 0.1f, 0.95f, 0.05f, 3e-4f, 0.2f, 1e-8f, 0.0f};
    SetAdamWDivisorReciprocal(&s);
    AdamWDeviceScalars* ds = nullptr;
    ds = static_cast<decltype(ds)>(DevAlloc(sizeof(s)));
    cudaMemcpy(ds, &s, sizeof(s), cudaMemcpyHostToDevice);
    g_rows.push_back({"adamw (57.7M params)", TimeIt([&] {
                        return AdamWUpdateChunks(dchunks, static_cast<int>(chunks.size()),
                                                 ds, nullptr, 0, p, m, v, g, p16,
                                                 g_stream) == cudaSuccess;
                      }, 20),
                      N * 30.0, 0});
    // The overlapped updates' grid alone (CudaStepTuning::adamw_overlap_blocks).
    const int capped = absl::GetFlag(FLAGS_adamw_blocks);
    if (capped > 0) {
      g_rows.push_back(
          {absl::StrCat("adamw (57.7M params) on ", capped, " CTAs x 1024"),
           TimeIt([&] {
             return AdamWUpdateChunks(dchunks, static_cast<int>(chunks.size()),
                                      ds, nullptr, 0, p, m, v, g, p16,
                                      g_stream, capped) == cudaSuccess;
           }, 20),
           N * 30.0, 0});
    }
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  cublasLtDestroy(lt);
  CHECK_CUDA(cudaStreamDestroy(g_stream));
  for (void* p : g_allocations) CHECK_CUDA(cudaFree(p));
  g_allocations.clear();
  return 0;
}

// Enqueues steps 0, 1, … of every backend in turn, each backend at most
// max_steps_in_flight() ahead of the last step polled, and polls them in
// step order; RunTo(upto) returns once step upto − 1 of every backend is
// polled. `on_polled(step, row_losses)`, if given, sees the first
// backend's T row losses of each step.
class StepPump {
 public:
  StepPump(std::vector<Backend*> backends, int T)
      : backends_(std::move(backends)),
        in_flight_(std::max(1, backends_[0]->max_steps_in_flight())),
        losses_(T) {}

  absl::Status RunTo(
      int64_t upto,
      const std::function<void(int64_t, const std::vector<float>&)>&
          on_polled = nullptr) {
    while (polled_ < upto) {
      while (next_ < upto && next_ - polled_ < in_flight_) {
        for (Backend* b : backends_) {
          absl::Status s = b->EnqueueStep(next_);
          if (!s.ok()) return s;
        }
        ++next_;
      }
      for (size_t i = backends_.size(); i-- > 0;) {  // the first one last
        absl::Status s = backends_[i]->PollStep(polled_, losses_.data());
        if (!s.ok()) return s;
      }
      if (on_polled) on_polled(polled_, losses_);
      ++polled_;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<Backend*> backends_;
  int in_flight_;
  std::vector<float> losses_;
  int64_t next_ = 0, polled_ = 0;
};

// The benchmark's model config: --config, with --context's T when given.
absl::StatusOr<ModelConfig> BenchConfig(const std::string& name) {
  absl::StatusOr<ModelConfig> config = ModelConfigByName(name);
  if (!config.ok()) return config.status();
  if (const int context = absl::GetFlag(FLAGS_context); context > 0) {
    config->T = context;
  }
  return config;
}

// A CUDA backend of `config` loaded with `pmv` (update count 0) and
// `contexts` contexts of random ids (the stream of `seed`; the backend
// keeps its own copy).
absl::StatusOr<std::unique_ptr<Backend>> LoadedBackend(
    const ModelConfig& config, const std::vector<float>& pmv, int contexts,
    uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> tokens(static_cast<size_t>(config.T) * contexts + 1);
  for (auto& t : tokens) t = rng() % config.V;
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(config);
  if (!backend.ok()) return backend.status();
  absl::Status s = (*backend)->Load(pmv.data(), 0);
  if (s.ok()) s = (*backend)->SetTokens(tokens.data(), tokens.size(), 0);
  if (!s.ok()) return s;
  return backend;
}

// --concurrent_backends=N (N ≥ 2): N backends of the same config, each with
// its own token stream, a step of each enqueued in turn; host wall time per
// round (one step of every backend), after 20 warm-up rounds.
int ConcurrentBackendBench(const std::string& config_name, int steps,
                           int count) {
  std::printf(
      "--concurrent_backends=%d: only the side-by-side rounds are timed (no "
      "single-backend run, no kernel rows)\n",
      count);
  auto config = BenchConfig(config_name);
  CHECK_OK(config.status());
  const int64_t n = NumParameters(*config);
  std::vector<float> pmv(3 * n);
  CHECK_OK(InitializeImage(*config, 16, pmv.data()));
  const int warm = 20;
  const int contexts = warm + steps + 1;
  std::vector<std::unique_ptr<Backend>> backends;
  for (int i = 0; i < count; ++i) {
    auto backend = LoadedBackend(*config, pmv, contexts, 2 + i);
    CHECK_OK(backend.status());
    backends.push_back(std::move(*backend));
  }
  std::vector<Backend*> pumped;
  for (auto& b : backends) pumped.push_back(b.get());
  StepPump pump(pumped, config->T);
  CHECK_OK(pump.RunTo(warm));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_OK(pump.RunTo(warm + steps));
  const auto t1 = std::chrono::steady_clock::now();
  std::printf("%d backends side by side, T = %d: ms/round (host wall) %.3f\n",
              count, config->T,
              std::chrono::duration<double, std::milli>(t1 - t0).count() /
                  steps);
  return 0;
}

int BackendBench(const std::string& config_name, int steps) {
  auto config = BenchConfig(config_name);
  CHECK_OK(config.status());
  if (absl::GetFlag(FLAGS_context) > 0) {
    std::printf("context overridden: T = %d (not the config's)\n", config->T);
  }
  const int64_t n = NumParameters(*config);
  std::vector<float> pmv(3 * n);
  CHECK_OK(InitializeImage(*config, 16, pmv.data()));
  const int warm = 20;
  const std::string trace_path = absl::GetFlag(FLAGS_trace);
  const int trace_steps =
      trace_path.empty() ? 0 : std::max(1, absl::GetFlag(FLAGS_trace_steps));
  const int contexts = warm + steps + trace_steps + 1;
  if (!trace_path.empty() && absl::GetFlag(FLAGS_trace_from_start)) {
    CHECK_OK(StartKernelTrace());
  }
  auto backend = LoadedBackend(*config, pmv, contexts, 2);
  CHECK_OK(backend.status());
  Backend* b = backend->get();
  std::vector<float> rec(3 * config->V);
  CHECK_OK(b->ForwardRecord(0, rec.data()));
  double first_loss = 0, last_loss = 0;
  StepPump pump({b}, config->T);
  auto run = [&](int64_t upto) {
    return pump.RunTo(upto, [&](int64_t step, const std::vector<float>& rows) {
      double mean = 0;
      for (float x : rows) mean += x;
      mean /= rows.size();
      if (step == 0) first_loss = mean;
      last_loss = mean;
    });
  };
  CHECK_OK(run(warm));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_OK(run(warm + steps));
  const auto t1 = std::chrono::steady_clock::now();
  const double wall_ms =
      std::chrono::duration<double, std::milli>(t1 - t0).count() / steps;
  std::vector<double> dev, fwd, bwd, tail;
  uint64_t first_start = 0, last_end = 0;
  for (int64_t s = warm; s < warm + steps; ++s) {
    uint64_t a = 0, e = 0;
    b->StepDeviceTimes(s, &a, &e);
    if (s == warm) first_start = a;
    last_end = e;
    dev.push_back((e - a) / 1e6);
    uint64_t ph[4];
    if (CudaStepPhaseTimes(b, s, ph)) {
      fwd.push_back((ph[1] - ph[0]) / 1e6);
      bwd.push_back((ph[2] - ph[1]) / 1e6);
      tail.push_back((ph[3] - ph[2]) / 1e6);
    }
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::sort(dev.begin(), dev.end());
  auto tel = b->Telemetry();
  CHECK_OK(tel.status());
  std::printf("\n== CUDA backend, config %s, %d timed steps (after %d warm-up) ==\n",
              config_name.c_str(), steps, warm);
  std::printf("%-44s %10.3f\n", "ms/step (host wall, enqueue..poll)", wall_ms);
  std::printf("%-44s %10.3f\n", "ms/step (device span first..last / steps)",
              (last_end - first_start) / 1e6 / steps);
  std::printf("%-44s %10.3f\n", "median device time of one step graph (ms)",
              dev[dev.size() / 2]);
  if (!fwd.empty()) {  // --phase_times
    std::printf("%-44s %10.3f\n", "  forward incl. CE (median ms)", median(fwd));
    std::printf("%-44s %10.3f\n", "  backward + overlapped block AdamW",
                median(bwd));
    std::printf("%-44s %10.3f\n", "  embedding/final AdamW, join, ring",
                median(tail));
  }
  std::printf("%-44s %10.1f\n", "peak device memory (MiB)",
              tel->peak_device_memory_bytes / 1048576.0);
  std::printf("%-44s %10.4f -> %.4f\n", "mean loss, step 0 -> last", first_loss,
              last_loss);
  std::printf("%-44s %10lld\n", "non-finite steps",
              static_cast<long long>(tel->nonfinite_steps));
  // FNV-1a (64-bit) of the P/M/V bytes after warm + steps updates: two
  // builds whose changes should not alter a single bit (stream layout,
  // launch mode) must print the same value for the same --steps.
  CHECK_OK(b->Snapshot(pmv.data()));
  uint64_t fnv = 14695981039346656037ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(pmv.data());
  for (size_t i = 0; i < pmv.size() * sizeof(float); ++i) {
    fnv = (fnv ^ bytes[i]) * 1099511628211ull;
  }
  std::printf("%-44s %016llx\n", "P/M/V FNV-1a after warm-up + timed steps",
              static_cast<unsigned long long>(fnv));
  if (!trace_path.empty()) {
    if (!absl::GetFlag(FLAGS_trace_from_start)) CHECK_OK(StartKernelTrace());
    CHECK_OK(run(warm + steps + trace_steps));
    auto records = StopKernelTrace();
    CHECK_OK(records.status());
    CHECK_OK(WriteKernelTrace(*records, trace_path));
    std::printf("%-44s %10zu -> %s\n", "kernel trace records", records->size(),
                trace_path.c_str());
  }
  return 0;
}

struct StepPartName {
  const char* name;
  uint32_t part;
};
constexpr StepPartName kStepParts[] = {
    {"dw", kPartWeightGradients},
    {"normreduce", kPartNormReduce},
    {"adamw", kPartAdamW},
    {"attnbwd", kPartAttentionBackward},
    {"attnfwd", kPartAttentionForward},
    {"swiglu", kPartSwiglu},
    {"rope", kPartRope},
    {"normfwd", kPartNormForward},
    {"normrows", kPartNormBackwardRows},
    {"dx", kPartInputGradients},
    {"fwdproducts", kPartForwardProducts},
    {"ce", kPartCrossEntropy},
    {"logits", kPartLogitsProducts},
    {"attnq", kPartAttentionQuery},
    {"attnkv", kPartAttentionKeys},
};

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "step_bench [--config=coppelius] [--steps=300] [--kernels=true] "
      "[--backend=true] [--pdl=false] [--adamw_blocks=N] [--side_schedule=N] "
      "[--adamw_schedule=N] [--side_priority=N] [--adamw_priority=N] "
      "[--attention_{forward,query,keys}_split=N] [--graph_dot=FILE] "
      "[--skip=PART,...] [--trace=FILE [--trace_steps=N]]\nms/step of the "
      "CUDA backend, then (--kernels) kernel timings at the coppelius "
      "shapes; --trace after the timed steps records the kernels of N more "
      "steps (CUPTI) into FILE (tools/trace_table.py summarizes it). --skip "
      "(ablation: the parts are left out of the step graph, the results are "
      "wrong): dw normreduce adamw "
      "attnbwd (attnq, attnkv: its dq or dk/dv kernel) attnfwd swiglu rope "
      "normfwd normrows dx fwdproducts ce logits.");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "step_bench: unexpected argument %s\n", rest[1]);
    return 2;
  }
  const std::string config = absl::GetFlag(FLAGS_config);
  const int steps = absl::GetFlag(FLAGS_steps);
  const bool kernels = absl::GetFlag(FLAGS_kernels);
  if (steps <= 0) {
    std::fprintf(stderr, "step_bench: --steps must be positive\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_concurrent_backends) > 1 &&
      !absl::GetFlag(FLAGS_backend)) {
    std::fprintf(stderr,
                 "step_bench: --concurrent_backends runs backends; it needs "
                 "--backend=true\n");
    return 2;
  }
  SetProgrammaticDependentLaunch(absl::GetFlag(FLAGS_pdl));
  CudaStepTuning tuning;
  tuning.side_schedule = absl::GetFlag(FLAGS_side_schedule);
  tuning.adamw_schedule = absl::GetFlag(FLAGS_adamw_schedule);
  tuning.side_priority = absl::GetFlag(FLAGS_side_priority);
  tuning.adamw_priority = absl::GetFlag(FLAGS_adamw_priority);
  tuning.side_sms = absl::GetFlag(FLAGS_side_sms);
  tuning.logits_dx_sms = absl::GetFlag(FLAGS_logits_dx_sms);
  tuning.output_dx_sms = absl::GetFlag(FLAGS_output_dx_sms);
  tuning.embedding_early_ctas = absl::GetFlag(FLAGS_embedding_early_ctas);
  tuning.adamw_overlap_blocks = absl::GetFlag(FLAGS_adamw_blocks);
  tuning.lt_configs = absl::GetFlag(FLAGS_lt_configs);
  tuning.phase_times = absl::GetFlag(FLAGS_phase_times);
  tuning.fused_qkv_config = absl::GetFlag(FLAGS_fused_qkv_config);
  tuning.fused_gate_up_config = absl::GetFlag(FLAGS_fused_gate_up_config);
  tuning.fused_down_dx_config = absl::GetFlag(FLAGS_fused_down_dx_config);
  tuning.fused_output_dx_config = absl::GetFlag(FLAGS_fused_output_dx_config);
  tuning.attention_forward_split = absl::GetFlag(FLAGS_attention_forward_split);
  tuning.attention_query_split = absl::GetFlag(FLAGS_attention_query_split);
  tuning.attention_keys_split = absl::GetFlag(FLAGS_attention_keys_split);
  tuning.attention_forward_warpgroups =
      absl::GetFlag(FLAGS_attention_forward_warpgroups);
  tuning.attention_query_warpgroups =
      absl::GetFlag(FLAGS_attention_query_warpgroups);
  tuning.attention_keys_warpgroups =
      absl::GetFlag(FLAGS_attention_keys_warpgroups);
  tuning.attention_pipelined_backward =
      absl::GetFlag(FLAGS_attention_pipelined_backward);
  tuning.attention_pipelined_forward =
      absl::GetFlag(FLAGS_attention_pipelined_forward);
  const std::string graph_dot = absl::GetFlag(FLAGS_graph_dot);
  if (!graph_dot.empty()) tuning.graph_dot_file = graph_dot.c_str();
  for (const std::string& name : absl::GetFlag(FLAGS_skip)) {
    const auto it =
        std::find_if(std::begin(kStepParts), std::end(kStepParts),
                     [&](const StepPartName& p) { return name == p.name; });
    if (it == std::end(kStepParts)) {
      std::fprintf(stderr, "step_bench: --skip: unknown part '%s'\n",
                   name.c_str());
      return 2;
    }
    tuning.skipped_parts |= it->part;
  }
  if (const absl::Status s = SetCudaStepTuning(tuning); !s.ok()) {
    std::fprintf(stderr, "step_bench: %s\n", s.ToString().c_str());
    return 2;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "device: %s (%d SMs); programmatic dependent launch %s; overlapped "
      "AdamW updates on %d CTAs of 1,024 threads (0: one per chunk)\n",
      prop.name, prop.multiProcessorCount,
      ProgrammaticDependentLaunchEnabled() ? "on" : "off",
      tuning.adamw_overlap_blocks);
  if (tuning.skipped_parts != 0) {
    std::printf(
        "ABLATION: step parts 0x%x left out of the step graph; the backend's "
        "numbers below are not a valid training run\n",
        tuning.skipped_parts);
  }
  // The backend first: run after the kernel rows, in the same process, it
  // measured 2.333–2.341 ms/step against 2.235–2.243 without them (longer
  // gaps between graph nodes and less overlap in the backward;
  // docs/PERFORMANCE.md run 23, cause not isolated). Its figure should be
  // the one `train` gets, which runs no kernel rows. (The rows, run second,
  // read 2–9 % slower than when they ran first.)
  if (absl::GetFlag(FLAGS_backend)) {
    if (const int count = absl::GetFlag(FLAGS_concurrent_backends);
        count > 1) {
      return ConcurrentBackendBench(config, steps, count);
    }
    if (const int rc = BackendBench(config, steps); rc != 0) return rc;
  }
  if (!kernels) return 0;
  if (KernelBench(tuning) != 0) return 1;
  std::printf("\n== kernels at coppelius shapes (ms per call in a graph of 10, median of 30) ==\n");
  std::printf("%-32s %10s %10s %10s\n", "kernel", "ms", "GB/s", "TFLOP/s");
  double total = 0;
  for (const Row& r : g_rows) {
    total += r.ms;
    std::printf("%-32s %10.4f %10.1f %10.1f\n", r.name.c_str(), r.ms,
                r.bytes > 0 ? r.bytes / r.ms / 1e6 : 0.0,
                r.flops > 0 ? r.flops / r.ms / 1e9 : 0.0);
  }
  std::printf("\n== cuBLASLt heuristic candidates per product (us per call in a graph of 10, median of 30) ==\n");
  for (const std::string& line : g_candidates) std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace
}  // namespace coppelius

int main(int argc, char** argv) {
  // Before any CUDA call, as train's main (cuda_backend.h).
  coppelius::RequestCudaWorkQueues();
  return coppelius::Main(argc, argv);
}
