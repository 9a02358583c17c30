// File: trainer/cuda_backend_test.cc (tag "gpu")
//
// The CUDA backend against the CPU reference backend (same numerics rule:
// bf16 operands at every product, fp32 elsewhere) and against itself
// (bitwise determinism), on small configs with fresh random parameters and
// tokens:
//   * forward-record logits and per-row losses: rel-norm ≤ 2e-3 (both round
//     the same values to bf16 at the same points; fp32 sums in different
//     orders can flip a rounding, which stays at the bf16 level);
//   * the gradient, read back as M / (1 − β1) after the first update (M starts
//     at 0, so M = fp32(1 − β1)·g): per-tensor rel-norm ≤ 2e-2;
//   * two backends given the same inputs: losses, P/M/V bitwise equal (at
//     the coppelius size, one with programmatic dependent launch, one without);
//     BeginSnapshot/FinishSnapshot with steps enqueued in between returns the
//     image as of BeginSnapshot.
//   * step 0's row losses agree with the forward record by the rule that
//     recognises a killed run's result (StepZeroAgreesWithForwardRecord).
#include "trainer/cuda_backend.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <memory>
#include <random>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "gtest/gtest.h"
#include "trainer/adamw.h"
#include "trainer/backend.h"
#include "trainer/cuda_products.h"
#include "trainer/initialization.h"
#include "trainer/kernels/attention.h"
#include "trainer/kernels/launch.h"
#include "trainer/kernels/matmul.h"
#include "trainer/model_config.h"
#include "trainer/reference_backend.h"
#include "trainer/result_file.h"

namespace coppelius {
namespace {

bool HasDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

double RelErr(const float* a, const float* ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// A mid-sized config: several blocks of every kernel, T not a power of two.
ModelConfig MidConfig() {
  ModelConfig c = *ModelConfigByName("tiny");
  c.name = "mid";
  c.V = 1000;
  c.T = 192;
  c.C = 128;
  c.L = 2;
  c.NH = 2;
  c.HS = 64;
  c.hidden = 352;
  return c;
}

struct Inputs {
  std::vector<float> pmv;
  std::vector<uint32_t> tokens;
};

Inputs MakeInputs(const ModelConfig& config, int contexts, uint64_t seed) {
  Inputs in;
  const int64_t n = NumParameters(config);
  in.pmv.assign(3 * n, 0.0f);
  EXPECT_TRUE(InitializeImage(config, 4, in.pmv.data()).ok());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  for (int64_t i = 0; i < n; ++i) in.pmv[i] += noise(rng);  // norms too
  in.tokens.resize(static_cast<size_t>(config.T) * contexts + 1);
  for (auto& t : in.tokens) t = static_cast<uint32_t>(rng() % config.V);
  return in;
}

struct RunResult {
  std::vector<float> record;              // 3 V
  std::vector<std::vector<float>> losses;  // per step, T
  std::vector<float> pmv;
  std::vector<float> final_logits;
};

RunResult RunBackend(Backend* b, const ModelConfig& config, const Inputs& in,
                     int steps) {
  RunResult r;
  const int64_t n = NumParameters(config);
  EXPECT_TRUE(b->Load(in.pmv.data(), 0).ok());
  EXPECT_TRUE(b->SetTokens(in.tokens.data(), in.tokens.size(), 0).ok());
  r.record.resize(3 * config.V);
  absl::Status s = b->ForwardRecord(0, r.record.data());
  EXPECT_TRUE(s.ok()) << s;
  for (int i = 0; i < steps; ++i) {
    s = b->EnqueueStep(i);
    EXPECT_TRUE(s.ok()) << s;
  }
  for (int i = 0; i < steps; ++i) {
    r.losses.emplace_back(config.T);
    s = b->PollStep(i, r.losses.back().data());
    EXPECT_TRUE(s.ok()) << s;
  }
  r.pmv.resize(3 * n);
  s = b->Snapshot(r.pmv.data());
  EXPECT_TRUE(s.ok()) << s;
  r.final_logits.resize(3 * config.V);
  s = b->Final(steps - 1, r.final_logits.data());
  EXPECT_TRUE(s.ok()) << s;
  return r;
}

// Two runs of RunBackend on the same inputs: forward record, every step's
// losses, P/M/V and the final logits bitwise equal.
void ExpectSameBits(const RunResult& a, const RunResult& b, const char* what) {
  SCOPED_TRACE(what);
  auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() &&
           std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same(a.record, b.record)) << "forward record";
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t st = 0; st < a.losses.size(); ++st) {
    EXPECT_TRUE(same(a.losses[st], b.losses[st])) << "losses of step " << st;
  }
  EXPECT_TRUE(same(a.pmv, b.pmv)) << "P/M/V";
  EXPECT_TRUE(same(a.final_logits, b.final_logits)) << "final logits";
}

void CompareWithReference(const ModelConfig& config) {
  SCOPED_TRACE(config.name);
  const Inputs in = MakeInputs(config, 2, std::random_device{}());
  auto cuda = CreateCudaBackend(config);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  const RunResult g = RunBackend(cuda->get(), config, in, 1);
  ReferenceOptions options;
  auto ref_backend = CreateReferenceBackend(config, options);
  const RunResult r = RunBackend(ref_backend.get(), config, in, 1);

  EXPECT_LT(RelErr(g.record.data(), r.record.data(), g.record.size()), 1e-2);
  EXPECT_LT(RelErr(g.losses[0].data(), r.losses[0].data(), config.T), 1e-2);
  // Final: 3 rows (T/4-1, T/2-1, T-1) of the updated parameters' forward on
  // context 0, against ComputeLossAndGradients on the reference's P plane.
  {
    const int T = config.T, V = config.V;
    std::vector<float> all(static_cast<size_t>(T) * V);
    ASSERT_TRUE(ComputeLossAndGradients(config, options, r.pmv.data(),
                                        in.tokens.data(), in.tokens.data() + 1,
                                        nullptr, nullptr, all.data())
                    .ok());
    std::vector<float> rows;
    for (int row : {T / 4 - 1, T / 2 - 1, T - 1}) {
      rows.insert(rows.end(), all.begin() + static_cast<size_t>(row) * V,
                  all.begin() + static_cast<size_t>(row + 1) * V);
    }
    EXPECT_LT(RelErr(g.final_logits.data(), rows.data(), rows.size()), 1e-2);
  }
  const int64_t n = NumParameters(config);
  double worst = 0;
  std::string worst_name;
  for (const TensorInfo& t : ParameterLayout(config)) {
    const float* gm = g.pmv.data() + n + t.offset;
    const float* rm = r.pmv.data() + n + t.offset;
    const double err = RelErr(gm, rm, t.num_elements());
    if (!(err <= worst)) {
      worst = err;
      worst_name = t.name;
    }
    EXPECT_LT(err, 2e-2) << "gradient of " << t.name;
    // P after the first update moves by about lr·sign(g): a sign that
    // differs where |g| is at rounding level moves an element by 2·lr, so
    // this is only a coarse check (the M check above is the sharp one).
    EXPECT_LT(RelErr(g.pmv.data() + t.offset, r.pmv.data() + t.offset,
                     t.num_elements()),
              5e-3)
        << "parameters of " << t.name;
  }
  std::printf(
      "[ %s ] rel-norm errors vs reference: record logits %.3g, row losses "
      "%.3g, worst gradient %.3g (%s)\n",
      config.name.c_str(),
      RelErr(g.record.data(), r.record.data(), g.record.size()),
      RelErr(g.losses[0].data(), r.losses[0].data(), config.T), worst,
      worst_name.c_str());
}

// Runs on CPU-only machines too (target cuda_backend_nodevice_test).
TEST(CudaBackendNoDeviceTest, FailedPreconditionWithoutDevice) {
  if (HasDevice()) GTEST_SKIP() << "a CUDA device is present";
  auto backend = CreateCudaBackend(*ModelConfigByName("tiny"));
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(backend.status().message().find("no CUDA device"),
            absl::string_view::npos)
      << backend.status();
}

// Runs everywhere: only compute capability 9.0 is accepted. The known
// answers are NVIDIA's published capabilities (CUDA C++ Programming Guide,
// "Compute Capabilities"): A100 8.0, RTX 4090 8.9, H100/H200 9.0, B200 10.0,
// RTX 5090 12.0.
TEST(CudaBackendNoDeviceTest, OnlyComputeCapability90IsAccepted) {
  EXPECT_TRUE(CheckCudaComputeCapability("NVIDIA H200", 9, 0).ok());
  EXPECT_TRUE(CheckCudaComputeCapability("NVIDIA H100 PCIe", 9, 0).ok());
  const struct {
    const char* name;
    int major, minor;
    const char* capability;
  } kOthers[] = {{"NVIDIA A100-SXM4-80GB", 8, 0, "8.0"},
                 {"NVIDIA GeForce RTX 4090", 8, 9, "8.9"},
                 {"NVIDIA B200", 10, 0, "10.0"},
                 {"NVIDIA GeForce RTX 5090", 12, 0, "12.0"}};
  for (const auto& other : kOthers) {
    const absl::Status status =
        CheckCudaComputeCapability(other.name, other.major, other.minor);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition)
        << other.name;
    const std::string message(status.message());
    EXPECT_NE(message.find(other.name), std::string::npos) << message;
    EXPECT_NE(message.find(std::string("compute capability ") +
                           other.capability + ";"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("9.0"), std::string::npos) << message;
    EXPECT_NE(message.find("--backend=reference"), std::string::npos)
        << message;
  }
}

// Runs everywhere: RequestCudaWorkQueues sets CUDA_DEVICE_MAX_CONNECTIONS
// only where the environment does not, and leaves a user's value alone.
TEST(CudaBackendNoDeviceTest, WorkQueuesRequestedUnlessTheUserSetThem) {
  const char* kName = "CUDA_DEVICE_MAX_CONNECTIONS";
  const char* before = getenv(kName);
  const std::string saved = before != nullptr ? before : "";
  unsetenv(kName);
  RequestCudaWorkQueues();
  ASSERT_NE(getenv(kName), nullptr);
  EXPECT_EQ(std::string(getenv(kName)), std::to_string(kCudaWorkQueues));
  setenv(kName, "3", /*overwrite=*/1);
  RequestCudaWorkQueues();
  EXPECT_EQ(std::string(getenv(kName)), "3");
  if (before != nullptr) {
    setenv(kName, saved.c_str(), 1);
  } else {
    unsetenv(kName);
  }
}

// Runs everywhere: CudaAttentionSplits carries each attention field of the
// tuning to its AttentionSplits field.
TEST(CudaBackendNoDeviceTest, AttentionSplitsComeFromTheTuning) {
  CudaStepTuning tuning;
  tuning.attention_forward_split = 3;
  tuning.attention_query_split = 5;
  tuning.attention_keys_split = 7;
  tuning.attention_forward_warpgroups = 2;
  tuning.attention_query_warpgroups = 4;
  tuning.attention_keys_warpgroups = 1;
  const AttentionSplits s = CudaAttentionSplits(tuning);
  EXPECT_EQ(s.forward, 3);
  EXPECT_EQ(s.query, 5);
  EXPECT_EQ(s.keys, 7);
  EXPECT_EQ(s.forward_warpgroups, 2);
  EXPECT_EQ(s.query_warpgroups, 4);
  EXPECT_EQ(s.keys_warpgroups, 1);
}

// Runs everywhere (no device needed): SetCudaStepTuning validates every
// field and names the bad one, leaving the tuning as it was.
TEST(CudaBackendNoDeviceTest, TuningRejectsOutOfRangeFields) {
  const CudaStepTuning defaults;
  struct Case {
    const char* field;
    CudaStepTuning tuning;
  };
  std::vector<Case> cases;
  cases.push_back({"side_schedule", defaults});
  cases.back().tuning.side_schedule = 99;
  cases.push_back({"adamw_priority", defaults});
  cases.back().tuning.adamw_priority = -1;
  cases.push_back({"side_sms", defaults});
  cases.back().tuning.side_sms = -1;
  cases.push_back({"logits_dx_sms", defaults});
  cases.back().tuning.logits_dx_sms = -1;
  cases.push_back({"output_dx_sms", defaults});
  cases.back().tuning.output_dx_sms = -3;
  cases.push_back({"adamw_overlap_blocks", defaults});
  cases.back().tuning.adamw_overlap_blocks = -1;
  cases.push_back({"embedding_early_ctas", defaults});
  cases.back().tuning.embedding_early_ctas = -1;
  cases.push_back({"fused_qkv_config", defaults});
  cases.back().tuning.fused_qkv_config = -2;
  cases.push_back({"fused_down_dx_config", defaults});
  cases.back().tuning.fused_down_dx_config = 99;
  cases.push_back({"fused_qkv_config", defaults});
  cases.back().tuning.fused_qkv_config = 4;  // BN 176 splits heads
  cases.push_back({"fused_output_dx_config", defaults});
  cases.back().tuning.fused_output_dx_config = 5;
  cases.push_back({"attention_forward_warpgroups", defaults});
  cases.back().tuning.attention_forward_warpgroups = 3;
  cases.push_back({"attention_forward_warpgroups", defaults});
  cases.back().tuning.attention_forward_warpgroups = 0;
  cases.push_back({"attention_query_warpgroups", defaults});
  cases.back().tuning.attention_query_warpgroups = 8;
  cases.push_back({"attention_keys_warpgroups", defaults});
  cases.back().tuning.attention_keys_warpgroups = 4;
  for (const Case& c : cases) {
    const absl::Status s = SetCudaStepTuning(c.tuning);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(s.message().find(c.field), absl::string_view::npos) << s;
  }
  CudaStepTuning fine = defaults;
  fine.side_sms = 0;  // the whole device: allowed
  fine.embedding_early_ctas = 0;  // the whole table in the tail: allowed
  fine.fused_gate_up_config = 5;  // BN 176: gate|up takes it
  fine.attention_forward_warpgroups = 2;
  fine.attention_query_warpgroups = 4;
  EXPECT_TRUE(SetCudaStepTuning(fine).ok());
  // Shapes the fused products do not take fall back to cuBLASLt + kernel:
  // gate|up in BN 176 needs H a multiple of 88 (coppelius 1,408: yes).
  ModelConfig odd = *ModelConfigByName("coppelius");
  EXPECT_TRUE(CudaFusedProductsFor(odd).gate_up);
  odd.hidden = 1024;
  EXPECT_FALSE(CudaFusedProductsFor(odd).gate_up);
  EXPECT_FALSE(CudaFusedProductsFor(*ModelConfigByName("tiny")).qkv);
  EXPECT_TRUE(SetCudaStepTuning(defaults).ok());
}

TEST(CudaBackendTest, TinyMatchesReferenceBackend) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  CompareWithReference(*ModelConfigByName("tiny"));
}

TEST(CudaBackendTest, MidMatchesReferenceBackend) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  CompareWithReference(MidConfig());
}

// The full Coppelius config against the reference backend for three steps
// (issue: "the full Coppelius config for a few steps"): per-step mean loss,
// the forward record, and the step-0 gradient of every tensor, read back as
// the AdamW first moment after the first update (M = (1 - beta1) g there).
// Tolerances: bf16 rounding flips make per-row losses differ by ~1e-3 and
// gradients by a few 1e-3 of their norm at this size (docs/VERIFICATION.md).
TEST(CudaBackendTest, CoppeliusMatchesReferenceBackendForThreeSteps) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  const ModelConfig config = *ModelConfigByName("coppelius");
  // The SPEC initialization itself (what a fresh run trains from), random
  // tokens.
  Inputs in;
  const int64_t n = NumParameters(config);
  in.pmv.assign(3 * n, 0.0f);
  ASSERT_TRUE(InitializeImage(config, 8, in.pmv.data()).ok());
  std::mt19937_64 rng(std::random_device{}());
  in.tokens.resize(static_cast<size_t>(config.T) * 4 + 1);
  for (auto& t : in.tokens) t = static_cast<uint32_t>(rng() % config.V);
  struct Out {
    std::vector<float> record, m_after_first;
    std::vector<double> mean_loss;
  };
  auto run = [&](Backend* b) {
    Out o;
    std::vector<float> rows(config.T), pmv(3 * n);
    o.record.resize(3 * config.V);
    EXPECT_TRUE(b->Load(in.pmv.data(), 0).ok());
    EXPECT_TRUE(b->SetTokens(in.tokens.data(), in.tokens.size(), 0).ok());
    EXPECT_TRUE(b->ForwardRecord(0, o.record.data()).ok());
    for (int s = 0; s < 3; ++s) {
      EXPECT_TRUE(b->EnqueueStep(s).ok());
      EXPECT_TRUE(b->PollStep(s, rows.data()).ok());
      double sum = 0;
      for (float x : rows) sum += x;
      o.mean_loss.push_back(sum / config.T);
      if (s == 0) {
        EXPECT_TRUE(b->Snapshot(pmv.data()).ok());
        o.m_after_first.assign(pmv.begin() + n, pmv.begin() + 2 * n);
      }
    }
    return o;
  };
  auto cuda = CreateCudaBackend(config);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  const Out g = run(cuda->get());
  auto reference = CreateReferenceBackend(config, ReferenceOptions());
  const Out r = run(reference.get());
  const double record_err = RelErr(g.record.data(), r.record.data(), g.record.size());
  EXPECT_LT(record_err, 1e-2);
  double worst_loss = 0;
  for (int s = 0; s < 3; ++s) {
    const double e = std::fabs(g.mean_loss[s] - r.mean_loss[s]) / std::fabs(r.mean_loss[s]);
    worst_loss = std::max(worst_loss, e);
    EXPECT_LT(e, 1e-3) << "step " << s << ": " << g.mean_loss[s] << " vs " << r.mean_loss[s];
  }
  double worst = 0;
  std::string worst_name;
  for (const TensorInfo& t : ParameterLayout(config)) {
    const double e = RelErr(g.m_after_first.data() + t.offset,
                            r.m_after_first.data() + t.offset, t.num_elements());
    if (!(e <= worst)) {
      worst = e;
      worst_name = t.name;
    }
    EXPECT_LT(e, 2e-2) << "step-0 gradient of " << t.name;
  }
  std::printf(
      "[ coppelius ] vs reference, 3 steps: record logits %.3g, mean loss "
      "(worst step) %.3g [%.6f %.6f %.6f vs %.6f %.6f %.6f], worst step-0 "
      "gradient %.3g (%s)\n",
      record_err, worst_loss, g.mean_loss[0], g.mean_loss[1], g.mean_loss[2],
      r.mean_loss[0], r.mean_loss[1], r.mean_loss[2], worst, worst_name.c_str());
}

// Two backends on the same inputs must agree bit for bit. With
// `compare_launch_modes` the first captures its step graph with
// programmatic dependent launch on and the second with it off
// (trainer/kernels/launch.h): a kernel that touched memory before its
// griddepcontrol.wait would race with its predecessor in the first run only.
void CheckDeterminism(const ModelConfig& config, int steps,
                      bool compare_launch_modes) {
  SCOPED_TRACE(config.name);
  const Inputs in = MakeInputs(config, steps + 1, std::random_device{}());
  const bool initial_mode = ProgrammaticDependentLaunchEnabled();
  if (compare_launch_modes) SetProgrammaticDependentLaunch(true);
  auto a = CreateCudaBackend(config);
  ASSERT_TRUE(a.ok()) << a.status();
  const RunResult ra = RunBackend(a->get(), config, in, steps);
  a->reset();
  if (compare_launch_modes) SetProgrammaticDependentLaunch(false);
  auto b = CreateCudaBackend(config);
  ASSERT_TRUE(b.ok()) << b.status();
  const RunResult rb = RunBackend(b->get(), config, in, steps);
  SetProgrammaticDependentLaunch(initial_mode);
  ExpectSameBits(ra, rb, "second run");
  for (int s = 0; s < steps; ++s) {
    for (float x : ra.losses[s]) ASSERT_TRUE(std::isfinite(x));
  }
  auto telemetry = (*b)->Telemetry();
  ASSERT_TRUE(telemetry.ok()) << telemetry.status();
  EXPECT_EQ(telemetry->first_nonfinite_step, -1);
  EXPECT_FALSE(telemetry->invalid_token_seen);
  EXPECT_GT(telemetry->peak_device_memory_bytes, 0u);
  EXPECT_EQ(telemetry->embedding_parameter_head.size(), 1024u);
  EXPECT_EQ(0, std::memcmp(telemetry->embedding_parameter_head.data(),
                           rb.pmv.data(), 1024 * 4));
  EXPECT_GT(telemetry->device_end_ns[1], telemetry->device_start_ns[1]);
}

TEST(CudaBackendTest, MidIsBitwiseDeterministic) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  CheckDeterminism(MidConfig(), 4, /*compare_launch_modes=*/false);
}

TEST(CudaBackendTest, CoppeliusIsBitwiseDeterministic) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  CheckDeterminism(*ModelConfigByName("coppelius"), 3,
                   /*compare_launch_modes=*/true);
}

// The products with fused epilogues (kernels/fused_matmul.h) compute the
// bits of the cuBLASLt product + elementwise kernel they replace: the
// default tuning (some fused) against none fused and against all fused, at
// the coppelius size. Holds while cuBLASLt's algorithms for these shapes
// accumulate in k order as the fused kernels do (cuBLAS 13 on the H200,
// 2026-11-30); a failure after a cuBLAS or GPU change means the bits moved,
// and the fused kernels are then checked against double by kernels_test.
TEST(CudaBackendTest, CoppeliusFusedProductsGiveTheUnfusedBits) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  const ModelConfig config = *ModelConfigByName("coppelius");
  const int steps = 2;
  const Inputs in = MakeInputs(config, steps + 1, std::random_device{}());
  const CudaStepTuning defaults;
  CudaStepTuning none = defaults;
  none.fused_qkv_config = -1;
  none.fused_gate_up_config = -1;
  none.fused_down_dx_config = -1;
  none.fused_output_dx_config = -1;
  CudaStepTuning all = defaults;
  all.fused_qkv_config = 3;
  all.fused_gate_up_config = 5;
  all.fused_down_dx_config = 2;
  all.fused_output_dx_config = 3;
  std::vector<RunResult> runs;
  for (const CudaStepTuning& tuning : {defaults, none, all}) {
    ASSERT_TRUE(SetCudaStepTuning(tuning).ok());
    // The fused kernels do run where asked (a gate that turned false would
    // leave all three runs on the cuBLASLt path and this test empty).
    const CudaFusedProducts used = CudaFusedProductsFor(config);
    EXPECT_EQ(used.qkv, tuning.fused_qkv_config >= 0);
    EXPECT_EQ(used.gate_up, tuning.fused_gate_up_config >= 0);
    EXPECT_EQ(used.down_dx, tuning.fused_down_dx_config >= 0);
    EXPECT_EQ(used.output_dx, tuning.fused_output_dx_config >= 0);
    auto backend = CreateCudaBackend(config);
    ASSERT_TRUE(backend.ok()) << backend.status();
    runs.push_back(RunBackend(backend->get(), config, in, steps));
  }
  ASSERT_TRUE(SetCudaStepTuning(defaults).ok());
  ExpectSameBits(runs[0], runs[1], "none fused");
  ExpectSameBits(runs[0], runs[2], "all fused");
}

// How many CTAs the overlapped block updates run on (a few of 1,024
// threads, or one of 256 threads per 4,096-element chunk), and whether the
// embedding rows no input names are updated early (on how many CTAs) or
// in the tail with the rest, must not change a bit: every element is
// updated once, by the same rule, from the same gradient.
TEST(CudaBackendTest, UpdateGridsGiveTheSameBits) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  for (const char* name : {"tiny", "coppelius"}) {
    SCOPED_TRACE(name);
    const ModelConfig config = *ModelConfigByName(name);
    const int steps = 3;
    const Inputs in = MakeInputs(config, steps + 1, std::random_device{}());
    const CudaStepTuning defaults;
    std::vector<RunResult> runs;
    // (blocks, embedding CTAs): the defaults; the block updates on one CTA
    // per chunk or on one CTA; the whole embedding in the tail; its rows
    // without an input on one CTA.
    for (const auto& [blocks, embedding] :
         {std::pair<int, int>{defaults.adamw_overlap_blocks,
                              defaults.embedding_early_ctas},
          {0, defaults.embedding_early_ctas},
          {1, defaults.embedding_early_ctas},
          {defaults.adamw_overlap_blocks, 0},
          {defaults.adamw_overlap_blocks, 1}}) {
      CudaStepTuning tuning = defaults;
      tuning.adamw_overlap_blocks = blocks;
      tuning.embedding_early_ctas = embedding;
      ASSERT_TRUE(SetCudaStepTuning(tuning).ok());
      auto backend = CreateCudaBackend(config);
      ASSERT_TRUE(backend.ok()) << backend.status();
      runs.push_back(RunBackend(backend->get(), config, in, steps));
    }
    ASSERT_TRUE(SetCudaStepTuning(defaults).ok());
    ExpectSameBits(runs[0], runs[1], "one CTA per chunk");
    ExpectSameBits(runs[0], runs[2], "one CTA");
    ExpectSameBits(runs[0], runs[3], "the whole embedding in the tail");
    ExpectSameBits(runs[0], runs[4], "the embedding's early rows on one CTA");
  }
}

// The cuBLASLt configurations cuda_products.cc pins (MatmulShape::
// algo_config) are taken on this GPU, and the step computes the same bits
// with them as with the heuristic's candidates they replace
// (CudaStepTuning::lt_configs false): losses of every step, P/M/V, the
// forward record and the final logits.
TEST(CudaBackendTest, PinnedLtConfigurationsGiveTheSameBits) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  const ModelConfig config = *ModelConfigByName("coppelius");
  {
    cublasLtHandle_t lt;
    ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
    int pinned = 0;
    for (const MatmulShape& s : CudaProductShapes(config)) {
      if (s.algo_config.algo_id < 0) continue;
      ++pinned;
      auto plan = MatmulPlan::Create(lt, s, kCudaProductWorkspaceBytes);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_TRUE((*plan)->configured()) << s.name << ": "
                                         << (*plan)->refusal();
    }
    EXPECT_GT(pinned, 0);
    cublasLtDestroy(lt);
  }
  const int steps = 3;
  const Inputs in = MakeInputs(config, steps + 1, std::random_device{}());
  const CudaStepTuning defaults;
  ASSERT_TRUE(defaults.lt_configs);
  std::vector<RunResult> runs;
  for (const bool pins : {true, false}) {
    CudaStepTuning tuning = defaults;
    tuning.lt_configs = pins;
    ASSERT_TRUE(SetCudaStepTuning(tuning).ok());
    auto backend = CreateCudaBackend(config);
    ASSERT_TRUE(SetCudaStepTuning(defaults).ok());
    ASSERT_TRUE(backend.ok()) << backend.status();
    runs.push_back(RunBackend(backend->get(), config, in, steps));
  }
  ExpectSameBits(runs[0], runs[1], "heuristic candidates");
}

TEST(CudaBackendTest, SplitSnapshotIsOrderedAfterEarlierSteps) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  const ModelConfig config = *ModelConfigByName("tiny");
  const Inputs in = MakeInputs(config, 4, std::random_device{}());
  const int64_t n = NumParameters(config);
  auto a = CreateCudaBackend(config);
  ASSERT_TRUE(a.ok()) << a.status();
  const RunResult two = RunBackend(a->get(), config, in, 2);
  auto b = CreateCudaBackend(config);
  ASSERT_TRUE(b.ok()) << b.status();
  Backend* be = b->get();
  ASSERT_TRUE(be->Load(in.pmv.data(), 0).ok());
  ASSERT_TRUE(be->SetTokens(in.tokens.data(), in.tokens.size(), 0).ok());
  ASSERT_TRUE(be->EnqueueStep(0).ok());
  ASSERT_TRUE(be->EnqueueStep(1).ok());
  ASSERT_TRUE(be->BeginSnapshot().ok());
  ASSERT_TRUE(be->EnqueueStep(2).ok());
  ASSERT_TRUE(be->EnqueueStep(3).ok());
  std::vector<float> snap(3 * n);
  ASSERT_TRUE(be->FinishSnapshot(snap.data()).ok());
  EXPECT_EQ(0, std::memcmp(snap.data(), two.pmv.data(), snap.size() * 4));
  std::vector<float> losses(config.T);
  for (int s = 0; s < 4; ++s) ASSERT_TRUE(be->PollStep(s, losses.data()).ok());
  for (int s = 0; s < 2; ++s) {
    std::vector<float> again(config.T);
    EXPECT_FALSE(be->PollStep(s, again.data()).ok()) << "polled twice";
  }
}

// 100 steps: the loss ring (64 slots) wraps; a backend polled only after all
// enqueues (slots saved before reuse) and one polled step by step agree
// bitwise, and the step counter / AdamW table stay in step past the ring.
// The first records no phase times (the default), the second does
// (CudaStepTuning::phase_times): the same bits.
TEST(CudaBackendTest, RingWrapsAroundAndRunAheadMatchesLockstep) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  const ModelConfig config = *ModelConfigByName("tiny");
  const int steps = 100;
  const Inputs in = MakeInputs(config, steps + 1, std::random_device{}());
  const int64_t n = NumParameters(config);
  std::vector<std::vector<float>> ahead(steps, std::vector<float>(config.T)),
      lockstep(steps, std::vector<float>(config.T));
  std::vector<float> pa(3 * n), pb(3 * n);
  {
    auto b = CreateCudaBackend(config);
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE((*b)->Load(in.pmv.data(), 5).ok());
    ASSERT_TRUE((*b)->SetTokens(in.tokens.data(), in.tokens.size(), 0).ok());
    for (int s = 0; s < steps; ++s) ASSERT_TRUE((*b)->EnqueueStep(s).ok());
    for (int s = 0; s < steps; ++s) {
      ASSERT_TRUE((*b)->PollStep(s, ahead[s].data()).ok()) << s;
      uint64_t phases[4] = {};
      EXPECT_FALSE(CudaStepPhaseTimes(b->get(), s, phases)) << s;
    }
    ASSERT_TRUE((*b)->Snapshot(pa.data()).ok());
  }
  CudaStepTuning with_phases;
  with_phases.phase_times = true;
  ASSERT_TRUE(SetCudaStepTuning(with_phases).ok());
  // Back to the defaults however the test ends.
  const auto restore = absl::MakeCleanup(
      [] { EXPECT_TRUE(SetCudaStepTuning(CudaStepTuning()).ok()); });
  {
    auto b = CreateCudaBackend(config);
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE((*b)->Load(in.pmv.data(), 5).ok());
    ASSERT_TRUE((*b)->SetTokens(in.tokens.data(), in.tokens.size(), 0).ok());
    for (int s = 0; s < steps; ++s) {
      ASSERT_TRUE((*b)->EnqueueStep(s).ok());
      ASSERT_TRUE((*b)->PollStep(s, lockstep[s].data()).ok()) << s;
      uint64_t start = 0, end = 0;
      (*b)->StepDeviceTimes(s, &start, &end);
      ASSERT_GT(end, start) << s;
      // The four device times of the step, in order: start (the staging
      // kernel), forward end (on a branch), backward end, end (FinishStep).
      uint64_t phases[4] = {};
      ASSERT_TRUE(CudaStepPhaseTimes(b->get(), s, phases)) << s;
      EXPECT_EQ(phases[0], start) << s;
      EXPECT_EQ(phases[3], end) << s;
      EXPECT_GT(phases[1], phases[0]) << s;
      EXPECT_GT(phases[2], phases[1]) << s;
      EXPECT_GT(phases[3], phases[2]) << s;
    }
    ASSERT_TRUE((*b)->Snapshot(pb.data()).ok());
  }
  for (int s = 0; s < steps; ++s) {
    ASSERT_EQ(0, std::memcmp(ahead[s].data(), lockstep[s].data(), config.T * 4))
        << "step " << s;
  }
  ASSERT_EQ(0, std::memcmp(pa.data(), pb.data(), pa.size() * 4));
  // Training on random tokens still lowers the loss from the initial ~log V.
  double first = 0, last = 0;
  for (int t = 0; t < config.T; ++t) {
    first += ahead[0][t];
    last += ahead[steps - 1][t];
  }
  std::printf("[ tiny ] mean loss step 0 %.4f, step %d %.4f\n",
              first / config.T, steps - 1, last / config.T);
}

TEST(CudaBackendTest, InvalidTokenIsReported) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  const ModelConfig config = *ModelConfigByName("tiny");
  Inputs in = MakeInputs(config, 2, 7);
  in.tokens[3] = config.V + 5;
  auto a = CreateCudaBackend(config);
  ASSERT_TRUE(a.ok()) << a.status();
  RunBackend(a->get(), config, in, 1);
  auto telemetry = (*a)->Telemetry();
  ASSERT_TRUE(telemetry.ok());
  EXPECT_TRUE(telemetry->invalid_token_seen);
}

// A CUDA run's step 0 agrees with its forward record by the rule with which
// train --overwrite, tokenize and inspect recognise a killed run's result
// (StepZeroAgreesWithForwardRecord, trainer/result_file.h; run_test checks
// it on the reference backend's results): each checked row's loss lies in
// [logsumexp − max, logsumexp − min] of its record row. At the tiny, mid
// and coppelius sizes, from perturbed initial parameters and again from
// the state after three updates (a model that has seen context 0, whose
// targets move toward the rule's lower bound); the same window with row
// T − 1 moved out of range does not agree.
TEST(CudaBackendTest, StepZeroAgreesWithForwardRecordAsResultsAreRecognised) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  for (const ModelConfig& config :
       {*ModelConfigByName("tiny"), MidConfig(),
        *ModelConfigByName("coppelius")}) {
    SCOPED_TRACE(config.name);
    const ResultGeometry geometry = ResultGeometryOf(config);
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE(seed);
    Inputs in = MakeInputs(config, 4, seed);
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE(round == 0 ? "perturbed initial state"
                              : "after three updates");
      auto cuda = CreateCudaBackend(config);
      ASSERT_TRUE(cuda.ok()) << cuda.status();
      RunResult r = RunBackend(cuda->get(), config, in, 3);
      ASSERT_EQ(r.losses.size(), 3u);
      const std::string record(reinterpret_cast<const char*>(r.record.data()),
                               r.record.size() * sizeof(float));
      const std::string window(
          reinterpret_cast<const char*>(r.losses[0].data()),
          static_cast<size_t>(config.T) * sizeof(float));
      EXPECT_TRUE(ReadsAsLosses(window));
      EXPECT_TRUE(StepZeroAgreesWithForwardRecord(record, window, geometry));
      std::string moved = window;
      const float far = 1000.0f;  // beyond logsumexp − min of these rows
      std::memcpy(&moved[(static_cast<size_t>(config.T) - 1) * sizeof(float)],
                  &far, sizeof(far));
      EXPECT_FALSE(StepZeroAgreesWithForwardRecord(record, moved, geometry));
      in.pmv = std::move(r.pmv);
    }
  }
}

}  // namespace
}  // namespace coppelius
