// File: trainer/cuda_backend.cc
//
// See cuda_backend.h. Layouts (T rows, C width, H hidden, NH heads, HS head
// size, V vocabulary, L layers), all row-major:
//   P/M/V planes fp32 [N] contiguous (pmv_), gradients G fp32 [N] (same
//   layout), p16_ bf16 [N]: the bf16 copy of P (matrices refreshed by AdamW).
//   Per layer l (saved for the backward): x_[l] fp32 [T,C] (layer input),
//   xmid_[l] fp32 [T,C], LayerNorm mean/rstd [T] x2, h1_/h2_ bf16 [T,C]
//   (normed inputs), qkv16_ bf16 [T,3C] (rotated q, k and v), stats_ fp32
//   [NH,T] (softmax row log2-sum-exp, attention.h), y16_ bf16
//   [T,C] (attention output, head h at columns h·HS, the bf16 result of P·v),
//   gu_ fp32 [T,2H] (gate|up),
//   a16_ bf16 [T,H]. x_[L] is the final residual.
#include "trainer/cuda_backend.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/threads.h"
#include "trainer/adamw.h"
#include "trainer/cuda_products.h"
#include "trainer/kernels/adamw.h"
#include "trainer/kernels/attention.h"
#include "trainer/kernels/cross_entropy.h"
#include "trainer/kernels/cuda_status.h"
#include "trainer/kernels/embedding.h"
#include "trainer/kernels/fused_matmul.h"
#include "trainer/kernels/layernorm.h"
#include "trainer/kernels/matmul.h"
#include "trainer/kernels/rope.h"
#include "trainer/kernels/step.h"
#include "trainer/kernels/swiglu.h"
#include "trainer/model_config.h"

namespace coppelius {
namespace {

// The benchmark tuning (cuda_backend.h CudaStepTuning, SetCudaStepTuning).
CudaStepTuning g_tuning;

// Where a block's weight-gradient products are issued in its backward (see
// BackwardPass): after the main stream has enqueued ...
enum DwPoint {
  kDwNow = 0,            // ... the kernel that produced the product's input
  kDwAfterSwiglu,        // ... the SwiGLU backward
  kDwAfterGateUpDx,      // ... the gate|up dX product
  kDwAfterDelta,         // ... the attention's D kernel (before dq, dk/dv)
  kDwAfterQkvDx,         // ... the qkv dX product
};
// The products a schedule places, in the order of kSideSchedules' columns.
enum DwProduct { kDownDwSlot = 0, kGateUpDwSlot, kOutputDwSlot, kQkvDwSlot };
constexpr DwPoint kSideSchedules[][4] = {
    {kDwNow, kDwNow, kDwNow, kDwNow},  // 0: run 7 and before
    {kDwAfterSwiglu, kDwAfterGateUpDx, kDwNow, kDwNow},
    {kDwAfterDelta, kDwAfterDelta, kDwAfterDelta, kDwNow},  // 2: default
    {kDwAfterSwiglu, kDwAfterGateUpDx, kDwAfterDelta, kDwAfterQkvDx},
    {kDwAfterDelta, kDwAfterDelta, kDwAfterDelta, kDwAfterQkvDx},
    {kDwAfterSwiglu, kDwAfterGateUpDx, kDwAfterDelta, kDwNow},
};
constexpr int kNumSideSchedules =
    static_cast<int>(sizeof(kSideSchedules) / sizeof(kSideSchedules[0]));

// Where block l's update is issued: at the end of its backward, or at a
// point of block l-1's (after the main stream's work up to there).
enum AdamWPoint {
  kAdamWAtBlockEnd = 0,  // run 7 and before
  kAdamWAfterDelta,
  kAdamWAfterSwiglu,
  kAdamWAfterGateUpDx,   // default
  kNumAdamWPoints,
};

static_assert(CudaStepTuning().adamw_schedule == kAdamWAfterGateUpDx,
              "cuda_backend.h documents this default");

// Stream priorities (CudaStepTuning), relative to the main stream's, which
// is the greatest (Init).
enum PriorityMode { kBelowMain = 0, kLeast = 1, kSameAsMain = 2 };
static_assert(CudaStepTuning().side_priority == kSameAsMain &&
                  CudaStepTuning().adamw_priority == kSameAsMain,
              "cuda_backend.h documents these defaults");
int StreamPriority(int mode, int greatest, int least) {
  // Priorities count down: `greatest` is the smallest number.
  switch (mode) {
    case kLeast:
      return least;
    case kSameAsMain:
      return greatest;
    default:
      return std::min(greatest + 1, least);
  }
}

// Ablation (benchmarks only).
bool Skip(uint32_t part) { return (g_tuning.skipped_parts & part) != 0; }

using bf16 = __nv_bfloat16;

constexpr int kRingSlots = 64;          // host windows of per-row losses
constexpr int kMaxInFlight = 32;        // steps beyond the last polled one
constexpr int kHeadLogits = 1024;       // telemetry heads

enum Kind { kForward = 0, kUpdate = 1, kFinal = 2 };

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const ModelConfig& config) : config_(config) {}
  ~CudaBackend() override;

  absl::Status Init();

  std::string name() const override { return "cuda"; }
  absl::Status Load(const float* pmv, uint64_t update_count) override;
  absl::Status SetTokens(const uint32_t* tokens, uint64_t num_tokens,
                         uint64_t first_context) override;
  absl::Status ForwardRecord(uint64_t context, float* logits) override;
  absl::Status EnqueueStep(int64_t step) override;
  absl::Status PollStep(int64_t step, float* row_losses) override;
  absl::Status Snapshot(float* pmv) override;
  absl::Status BeginSnapshot() override;
  absl::Status FinishSnapshot(float* pmv) override;
  absl::Status Final(uint64_t context, float* logits) override;
  absl::StatusOr<BackendTelemetry> Telemetry() override;
  // Fewer than checkpoint_interval, so at most one snapshot is pending at a
  // time under the run loop's protocol (a snapshot begun after step s is
  // finished max_steps_in_flight() enqueues later).
  int max_steps_in_flight() const override {
    return static_cast<int>(std::min<int64_t>(
        kMaxInFlight, std::max<int64_t>(0, config_.checkpoint_interval - 1)));
  }
  void StepDeviceTimes(int64_t step, uint64_t* start_ns,
                       uint64_t* end_ns) override;

 private:
  template <typename T>
  absl::Status Alloc(T** ptr, size_t count, const char* what) {
    void* p = nullptr;
    CUDA_RETURN_IF_ERROR(cudaMalloc(&p, count * sizeof(T)),
                         absl::StrCat("cudaMalloc(", what, ", ",
                                      count * sizeof(T), " bytes)"));
    allocations_.push_back(p);
    *ptr = static_cast<T*>(p);
    return absl::OkStatus();
  }
  absl::Status Plan(std::unique_ptr<MatmulPlan>* plan, const MatmulShape& s) {
    ASSIGN_OR_RETURN(*plan,
                     MatmulPlan::Create(lt_, s, kCudaProductWorkspaceBytes));
    return absl::OkStatus();
  }
  // Product p (cuda_products.h) on the main stream.
  absl::Status Mm(CudaProduct p, const bf16* a, const bf16* b, const float* c,
                  float* d) {
    return plans_[p]->Run(a, b, c, d, workspace_, stream_);
  }
  // The same on the side stream (its own workspace), after a Fork.
  absl::Status MmSide(CudaProduct p, const bf16* a, const bf16* b, float* d) {
    return plans_[p]->Run(a, b, nullptr, d, side_workspace_, side_stream_);
  }
  // Fork: the side stream waits for everything enqueued so far on the main
  // stream. Join: the main stream waits for the side stream. Used only
  // inside the step graph's capture. The side stream carries the backward's
  // weight-gradient work (dW products, LayerNorm parameter reductions, the
  // tied dE product), which the main stream's dX chain (the critical path)
  // does not read: the main stream waits for it only to reuse a ring copy
  // (SideRing, a block later), before the embedding backward adds into dE,
  // and at the end of the step. Each product writes its own buffer, so
  // results do not depend on the overlap.
  absl::Status Fork() {
    return StreamWait(side_stream_, stream_, fork_event_, "fork");
  }
  absl::Status Join() {
    return StreamWait(stream_, side_stream_, join_event_, "join");
  }
  // The dk/dv kernel runs on its own stream next to the dq kernel (not on
  // the side stream, where it would queue behind weight-gradient products).
  absl::Status ForkAttention() {
    return StreamWait(attention_stream_, stream_, attention_fork_event_,
                      "attention fork");
  }
  absl::Status JoinAttention() {
    return StreamWait(stream_, attention_stream_, attention_join_event_,
                      "attention join");
  }
  // `waiter` waits (in the stream) for everything enqueued so far on
  // `producer`, through `event` (recorded there now).
  static absl::Status StreamWait(cudaStream_t waiter, cudaStream_t producer,
                                 cudaEvent_t event, const char* what) {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(event, producer),
                         absl::StrCat("cudaEventRecord(", what, ")"));
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(waiter, event, 0),
                         absl::StrCat("cudaStreamWaitEvent(", what, ")"));
    return absl::OkStatus();
  }
  // A buffer the main stream writes and the side stream reads with no join
  // in between: copies used in turn. Before the main stream writes a copy
  // again it waits (in the stream) for the side stream's last read of that
  // copy, so a copy is never overwritten while a product still reads it.
  struct SideRing {
    std::vector<void*> copies;
    std::vector<cudaEvent_t> read_done;
    std::vector<char> pending;  // read_done recorded in this capture
    int next = 0;
  };
  absl::Status MakeSideRing(SideRing* ring, int copies, size_t bytes,
                            const char* what) {
    for (int i = 0; i < copies; ++i) {
      char* p = nullptr;
      RETURN_IF_ERROR(Alloc(&p, bytes, what));
      ring->copies.push_back(p);
      cudaEvent_t e = nullptr;
      CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                           absl::StrCat("cudaEventCreateWithFlags(", what, ")"));
      ring->read_done.push_back(e);
      ring->pending.push_back(0);
    }
    return absl::OkStatus();
  }
  // The next copy for the main stream to write; `*index` names it for
  // SideReadDone.
  template <typename T>
  absl::StatusOr<T*> NextCopy(SideRing* ring, int* index) {
    const int i = ring->next;
    ring->next = (i + 1) % static_cast<int>(ring->copies.size());
    if (ring->pending[i]) {
      CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, ring->read_done[i], 0),
                           "cudaStreamWaitEvent(side read done)");
      ring->pending[i] = 0;
    }
    *index = i;
    return static_cast<T*>(ring->copies[i]);
  }
  // After the side stream's last reader of copy `index` is enqueued.
  absl::Status SideReadDone(SideRing* ring, int index) {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(ring->read_done[index], side_stream_),
                         "cudaEventRecord(side read done)");
    ring->pending[index] = 1;
    return absl::OkStatus();
  }
  static void ResetRing(SideRing* ring) {
    std::fill(ring->pending.begin(), ring->pending.end(), 0);
    ring->next = 0;
  }
  void NotePeakMemory();
  absl::Status ForwardPass(const int64_t* step, int64_t fixed_index,
                           bool training);
  // AdamW of chunks [begin, end) on `stream` (update number from the step
  // counter).
  absl::Status AdamWRange(int begin, int end, cudaStream_t stream,
                          int max_blocks = 0) {
    if (end <= begin) return absl::OkStatus();
    CUDA_RETURN_IF_ERROR(
        AdamWUpdateChunks(chunks_ + begin, end - begin, adam_table_,
                          step_counter_, 0, pmv_, pmv_ + N_, pmv_ + 2 * N_,
                          grad_, p16_, stream, max_blocks),
        "AdamWUpdateChunks");
    return absl::OkStatus();
  }
  // AdamWEmbeddingRows over the tied embedding: its rows that no input of
  // the step's context names (touched false) or the others, on `blocks`
  // CTAs on `stream`.
  absl::Status EmbeddingRowsUpdate(bool touched, int blocks,
                                   cudaStream_t stream) {
    const int64_t e = offsets_.embedding;
    CUDA_RETURN_IF_ERROR(
        AdamWEmbeddingRows(inputs_, T_, V_, C_, touched, adam_table_,
                           step_counter_, 0, pmv_ + e, pmv_ + N_ + e,
                           pmv_ + 2 * N_ + e, grad_ + e, p16_ + e, blocks,
                           stream),
        touched ? "AdamWEmbeddingRows(input rows)"
                : "AdamWEmbeddingRows(other rows)");
    return absl::OkStatus();
  }
  absl::Status BackwardPass();
  absl::Status EnqueueStepBody();
  absl::Status BuildStepGraph();
  absl::Status CopyLogitRows(float* logits);
  absl::Status CheckContext(uint64_t context, int64_t* index) const;
  absl::Status SaveSlot(int64_t step);

  const ModelConfig config_;
  int T_ = 0, C_ = 0, L_ = 0, NH_ = 0, HS_ = 0, H_ = 0, V_ = 0;
  int64_t N_ = 0;
  ParameterOffsets offsets_;

  cudaStream_t stream_ = nullptr;
  cudaStream_t snapshot_stream_ = nullptr;
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t fork_event_ = nullptr;
  cudaEvent_t join_event_ = nullptr;
  void* side_workspace_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  std::vector<void*> allocations_;
  void* workspace_ = nullptr;

  // Parameters, moments, gradients.
  float* pmv_ = nullptr;
  float* grad_ = nullptr;
  bf16* p16_ = nullptr;
  float* snapshot_dev_ = nullptr;
  float* snapshot_host_ = nullptr;  // pinned
  // Tokens and step control.
  uint32_t* tokens_ = nullptr;
  uint64_t num_tokens_ = 0;
  uint64_t first_context_ = 0;
  bool tokens_set_ = false;
  uint32_t* inputs_ = nullptr;
  uint32_t* targets_ = nullptr;
  int64_t* step_counter_ = nullptr;
  int64_t* zero_index_ = nullptr;
  int* invalid_flag_ = nullptr;
  AdamWDeviceScalars* adam_table_ = nullptr;
  AdamWChunk* chunks_ = nullptr;
  int num_chunks_ = 0;
  // Chunk ranges [begin, end) of each block's tensors; the rest (embedding
  // at the start, final norm at the end) are updated after the backward.
  std::vector<std::pair<int, int>> layer_chunks_;
  int embedding_chunks_end_ = 0;
  int final_chunks_begin_ = 0;
  cudaStream_t adam_stream_ = nullptr;
  cudaEvent_t adam_fork_event_ = nullptr;
  int sm_count_ = 0;  // the device's SMs (Init)
  cudaEvent_t adam_join_event_ = nullptr;
  cudaEvent_t side_done_event_ = nullptr;
  cudaEvent_t demb_done_event_ = nullptr;
  cudaStream_t attention_stream_ = nullptr;
  cudaEvent_t attention_fork_event_ = nullptr;
  cudaEvent_t attention_join_event_ = nullptr;
  // The step's forward-end timestamp runs on a branch of its own, off the
  // main stream's chain, joined before FinishStep (EnqueueStepBody).
  cudaStream_t phase_stream_ = nullptr;
  cudaEvent_t phase_fork_event_ = nullptr;
  cudaEvent_t phase_join_event_ = nullptr;
  float* rope_table_ = nullptr;
  uint64_t update_count_ = 0;
  bool loaded_ = false;
  // Activations.
  std::vector<float*> x_, xmid_, mean1_, rstd1_, mean2_, rstd2_, stats_, gu_;
  std::vector<bf16*> h1_, h2_, qkv16_, y16_, a16_;
  float* meanf_ = nullptr;
  float* rstdf_ = nullptr;
  bf16* xf16_ = nullptr;
  float* qkv32_ = nullptr;
  float* logits_ = nullptr;
  bf16* dlogits16_ = nullptr;
  float* losses_ = nullptr;
  // Backward scratch. The side stream's inputs are rings (SideRing):
  // dresid bf16 [T,C] (read by the down and out dW products), dgu bf16
  // [T,2H], dqkv bf16 [T,3C], LayerNorm partials.
  float* dresid_ = nullptr;
  SideRing dresid16_ring_, dgu16_ring_, dqkv16_ring_, ln_scratch_ring_;
  float* dh32_ = nullptr;
  float* da32_ = nullptr;
  bf16* dy16_ = nullptr;
  void* attention_scratch_ = nullptr;
  // The tuning's attention splits when the backend was created (the
  // scratch is sized for them).
  AttentionSplits attention_splits_;
  // Host side (mapped pinned) rings and staging.
  float* loss_ring_ = nullptr;       // [kRingSlots][T]
  float* loss_ring_dev_ = nullptr;   // its device alias
  uint64_t* time_ring_ = nullptr;    // [kRingSlots][2] + [3][2] (kinds)
  uint64_t* time_ring_dev_ = nullptr;
  float* logit_rows_host_ = nullptr;  // pinned [3][V]
  cudaEvent_t step_events_[kRingSlots] = {};
  cudaEvent_t snapshot_copied_ = nullptr;
  cudaEvent_t snapshot_done_ = nullptr;
  bool snapshot_pending_ = false;

  // Plans of the step's products (cuda_products.h; shapes only, pointers
  // are given per run), indexed by CudaProduct.
  std::unique_ptr<MatmulPlan> plans_[kNumCudaProducts];

  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  int64_t next_step_ = 0;  // the next step EnqueueStep expects
  std::vector<char> consumed_;  // per step: polled (or saved)
  std::map<int64_t, std::vector<float>> saved_losses_;
  std::vector<std::pair<uint64_t, uint64_t>> step_times_;
  // Per step: device time at the end of the forward (after the CE) and at
  // the end of the main stream's backward (before the embedding's AdamW).
  std::vector<std::pair<uint64_t, uint64_t>> phase_times_;
  bool phase_times_recorded_ = false;  // the captured graph's (phase_times)

 public:
  // For benchmarks: start, forward end, backward end, end (ns) of `step`,
  // valid after PollStep(step).
  bool PhaseTimes(int64_t step, uint64_t ns[4]) const {
    if (!phase_times_recorded_ || step < 0 ||
        step >= static_cast<int64_t>(step_times_.size()) || !consumed_[step]) {
      return false;
    }
    ns[0] = step_times_[step].first;
    ns[1] = phase_times_[step].first;
    ns[2] = phase_times_[step].second;
    ns[3] = step_times_[step].second;
    return true;
  }

 private:
  std::vector<float> last_row_losses_;
  int64_t last_polled_ = -1;
  int64_t first_nonfinite_step_ = -1;
  int64_t nonfinite_steps_ = 0;
  uint64_t peak_memory_ = 0;
  uint64_t kind_start_[3] = {0, 0, 0}, kind_end_[3] = {0, 0, 0};
};

CudaBackend::~CudaBackend() {
  // Best effort: errors during teardown cannot be reported.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (snapshot_stream_ != nullptr) cudaStreamSynchronize(snapshot_stream_);
  if (side_stream_ != nullptr) cudaStreamSynchronize(side_stream_);
  if (fork_event_ != nullptr) cudaEventDestroy(fork_event_);
  if (adam_stream_ != nullptr) cudaStreamSynchronize(adam_stream_);
  if (adam_fork_event_ != nullptr) cudaEventDestroy(adam_fork_event_);
  if (adam_join_event_ != nullptr) cudaEventDestroy(adam_join_event_);
  if (side_done_event_ != nullptr) cudaEventDestroy(side_done_event_);
  if (demb_done_event_ != nullptr) cudaEventDestroy(demb_done_event_);
  if (attention_stream_ != nullptr) cudaStreamSynchronize(attention_stream_);
  if (attention_fork_event_ != nullptr) cudaEventDestroy(attention_fork_event_);
  if (attention_join_event_ != nullptr) cudaEventDestroy(attention_join_event_);
  if (phase_stream_ != nullptr) cudaStreamSynchronize(phase_stream_);
  if (phase_fork_event_ != nullptr) cudaEventDestroy(phase_fork_event_);
  if (phase_join_event_ != nullptr) cudaEventDestroy(phase_join_event_);
  for (SideRing* r : {&dresid16_ring_, &dgu16_ring_, &dqkv16_ring_,
                      &ln_scratch_ring_}) {
    for (cudaEvent_t e : r->read_done) cudaEventDestroy(e);
  }
  if (join_event_ != nullptr) cudaEventDestroy(join_event_);
  if (graph_exec_ != nullptr) cudaGraphExecDestroy(graph_exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  for (cudaEvent_t& e : step_events_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (snapshot_copied_ != nullptr) cudaEventDestroy(snapshot_copied_);
  if (snapshot_done_ != nullptr) cudaEventDestroy(snapshot_done_);
  // Plans hold cuBLASLt descriptors: destroy them before the handle.
  for (std::unique_ptr<MatmulPlan>& p : plans_) p.reset();
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  for (void* p : allocations_) cudaFree(p);
  if (snapshot_host_ != nullptr) cudaFreeHost(snapshot_host_);
  if (loss_ring_ != nullptr) cudaFreeHost(loss_ring_);
  if (time_ring_ != nullptr) cudaFreeHost(time_ring_);
  if (logit_rows_host_ != nullptr) cudaFreeHost(logit_rows_host_);
  if (snapshot_stream_ != nullptr) cudaStreamDestroy(snapshot_stream_);
  if (side_stream_ != nullptr) cudaStreamDestroy(side_stream_);
  if (adam_stream_ != nullptr) cudaStreamDestroy(adam_stream_);
  if (attention_stream_ != nullptr) cudaStreamDestroy(attention_stream_);
  if (phase_stream_ != nullptr) cudaStreamDestroy(phase_stream_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaBackend::NotePeakMemory() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    peak_memory_ = std::max<uint64_t>(peak_memory_, total_bytes - free_bytes);
  }
}

absl::Status CudaBackend::Init() {
  RETURN_IF_ERROR(ValidateModelConfig(config_));
  T_ = config_.T;
  C_ = config_.C;
  L_ = config_.L;
  NH_ = config_.NH;
  HS_ = config_.HS;
  if (!AttentionSupportsHeadSize(HS_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: config '", config_.name, "' has head size HS = ", HS_,
        "; the fused attention kernels support 16, 32 and 64"));
  }
  H_ = config_.hidden;
  V_ = config_.V;
  N_ = NumParameters(config_);
  offsets_ = ComputeParameterOffsets(config_);
  const int64_t T = T_, C = C_, H = H_, V = V_, NH = NH_;

  CUDA_RETURN_IF_ERROR(cudaSetDevice(0), "cudaSetDevice(0)");
  // Priorities: the forward/backward dX chain (main and attention streams)
  // is the step's critical path. The side stream's weight-gradient work
  // runs at the same priority by default: one level below measured slower
  // on the H200 (2.822 against 2.785 ms/step, docs/PERFORMANCE.md run 8),
  // since its products are issued at chosen points of the chain
  // (kSideSchedules) and a lower priority only lets them straggle into
  // later, busier ones. The per-block AdamW (memory-bound, overlapped) at
  // the main stream's priority too since run 19 (docs/PERFORMANCE.md; runs
  // 5 and 8, with other kernels, had measured the least faster).
  // Captured kernel nodes keep their stream's priority (the graph is
  // instantiated with cudaGraphInstantiateFlagUseNodePriority).
  int least_priority = 0, greatest_priority = 0;
  CUDA_RETURN_IF_ERROR(
      cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority),
      "cudaDeviceGetStreamPriorityRange");
  CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking,
                                   greatest_priority),
      "cudaStreamCreateWithPriority(main)");
  CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&snapshot_stream_, cudaStreamNonBlocking),
      "cudaStreamCreateWithFlags(snapshot)");
  const int side_priority =
      StreamPriority(g_tuning.side_priority, greatest_priority, least_priority);
  CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithPriority(&side_stream_, cudaStreamNonBlocking,
                                   side_priority),
      "cudaStreamCreateWithPriority(side)");
  CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithPriority(&attention_stream_, cudaStreamNonBlocking,
                                   greatest_priority),
      "cudaStreamCreateWithPriority(attention)");
  CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&phase_stream_, cudaStreamNonBlocking),
      "cudaStreamCreateWithFlags(phase)");
  for (cudaEvent_t* e : {&attention_fork_event_, &attention_join_event_,
                         &demb_done_event_, &phase_fork_event_,
                         &phase_join_event_}) {
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(e, cudaEventDisableTiming),
                         "cudaEventCreateWithFlags(backward)");
  }
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming),
      "cudaEventCreateWithFlags(fork)");
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming),
      "cudaEventCreateWithFlags(join)");
  CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithPriority(
          &adam_stream_, cudaStreamNonBlocking,
          StreamPriority(g_tuning.adamw_priority, greatest_priority, least_priority)),
      "cudaStreamCreateWithPriority(adamw)");
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&adam_fork_event_, cudaEventDisableTiming),
      "cudaEventCreateWithFlags(adamw fork)");
  {
    int device = 0;
    CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "cudaGetDevice");
    CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount,
                               device),
        "cudaDeviceGetAttribute(multiprocessors)");
  }
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&adam_join_event_, cudaEventDisableTiming),
      "cudaEventCreateWithFlags(adamw join)");
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&side_done_event_, cudaEventDisableTiming),
      "cudaEventCreateWithFlags(side done)");
  CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&lt_), "cublasLtCreate");
  for (cudaEvent_t& e : step_events_) {
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                         "cudaEventCreateWithFlags(step)");
  }
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&snapshot_copied_, cudaEventDisableTiming),
      "cudaEventCreateWithFlags(snapshot)");
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&snapshot_done_, cudaEventDisableTiming),
      "cudaEventCreateWithFlags(snapshot)");

  {
    char* ws = nullptr;
    RETURN_IF_ERROR(
        Alloc(&ws, kCudaProductWorkspaceBytes, "cuBLASLt workspace"));
    workspace_ = ws;
    RETURN_IF_ERROR(
        Alloc(&ws, kCudaProductWorkspaceBytes, "cuBLASLt side workspace"));
    side_workspace_ = ws;
  }
  RETURN_IF_ERROR(Alloc(&pmv_, 3 * N_, "P/M/V"));
  RETURN_IF_ERROR(Alloc(&grad_, N_, "gradients"));
  RETURN_IF_ERROR(Alloc(&p16_, N_, "bf16 parameters"));
  RETURN_IF_ERROR(Alloc(&snapshot_dev_, 3 * N_, "snapshot"));
  CUDA_RETURN_IF_ERROR(
      cudaMallocHost(reinterpret_cast<void**>(&snapshot_host_), 3 * N_ * sizeof(float)),
      "cudaMallocHost(snapshot)");
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(grad_, 0, N_ * sizeof(float), stream_),
                       "cudaMemsetAsync(gradients)");
  RETURN_IF_ERROR(Alloc(&inputs_, T, "inputs"));
  RETURN_IF_ERROR(Alloc(&targets_, T, "targets"));
  RETURN_IF_ERROR(Alloc(&step_counter_, 1, "step counter"));
  RETURN_IF_ERROR(Alloc(&zero_index_, 1, "zero index"));
  RETURN_IF_ERROR(Alloc(&invalid_flag_, 1, "invalid flag"));
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(zero_index_, 0, sizeof(int64_t), stream_),
                       "cudaMemsetAsync(zero index)");
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(step_counter_, 0, sizeof(int64_t), stream_),
                       "cudaMemsetAsync(step counter)");
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(invalid_flag_, 0, sizeof(int), stream_),
                       "cudaMemsetAsync(invalid flag)");

  // AdamW work list: chunks of at most kAdamWChunk elements, tensor by tensor.
  std::vector<AdamWChunk> chunks;
  layer_chunks_.assign(L_, {0, 0});
  for (const TensorInfo& t : ParameterLayout(config_)) {
    const int64_t n = t.num_elements();
    int layer = -1;
    for (int l = 0; l < L_; ++l) {
      const int64_t begin = offsets_.blocks[l].attention_norm_weight;
      const int64_t end = offsets_.blocks[l].down + C * H;
      if (t.offset >= begin && t.offset < end) layer = l;
    }
    if (layer >= 0 && layer_chunks_[layer].second == 0) {
      layer_chunks_[layer].first = static_cast<int>(chunks.size());
    }
    if (t.offset == offsets_.embedding) embedding_chunks_end_ = 0;
    if (t.offset == offsets_.final_norm_weight) {
      final_chunks_begin_ = static_cast<int>(chunks.size());
    }
    for (int64_t b = 0; b < n; b += kAdamWChunk) {
      AdamWChunk c;
      c.begin = t.offset + b;
      c.count = static_cast<int32_t>(std::min<int64_t>(kAdamWChunk, n - b));
      c.decayed = t.decayed ? 1 : 0;
      chunks.push_back(c);
    }
    if (layer >= 0) {
      layer_chunks_[layer].second = static_cast<int>(chunks.size());
    }
    if (t.offset == offsets_.embedding) {
      embedding_chunks_end_ = static_cast<int>(chunks.size());
    }
  }
  // The layout is embedding, blocks 0..L-1, final norm (SPEC §4): check the
  // ranges tile the list, so every element is updated exactly once.
  {
    int next = embedding_chunks_end_;
    for (int l = 0; l < L_; ++l) {
      if (layer_chunks_[l].first != next) {
        return absl::InternalError("cuda backend: AdamW chunk ranges do not tile");
      }
      next = layer_chunks_[l].second;
    }
    if (next != final_chunks_begin_) {
      return absl::InternalError("cuda backend: AdamW chunk ranges do not tile");
    }
  }
  num_chunks_ = static_cast<int>(chunks.size());
  RETURN_IF_ERROR(Alloc(&chunks_, chunks.size(), "AdamW chunks"));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(chunks_, chunks.data(), chunks.size() * sizeof(AdamWChunk),
                 cudaMemcpyHostToDevice),
      "cudaMemcpy(AdamW chunks)");
  const std::vector<float> rope = RopeTable(T_, HS_, config_.rope_base);
  RETURN_IF_ERROR(Alloc(&rope_table_, rope.size(), "RoPE table"));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(rope_table_, rope.data(),
                                  rope.size() * sizeof(float),
                                  cudaMemcpyHostToDevice),
                       "cudaMemcpy(RoPE table)");

  // Activations.
  x_.resize(L_ + 1);
  for (int l = 0; l <= L_; ++l) RETURN_IF_ERROR(Alloc(&x_[l], T * C, "x"));
  auto per_layer_f = [&](std::vector<float*>* v, size_t n, const char* what) {
    v->resize(L_);
    for (int l = 0; l < L_; ++l) RETURN_IF_ERROR(Alloc(&(*v)[l], n, what));
    return absl::OkStatus();
  };
  auto per_layer_h = [&](std::vector<bf16*>* v, size_t n, const char* what) {
    v->resize(L_);
    for (int l = 0; l < L_; ++l) RETURN_IF_ERROR(Alloc(&(*v)[l], n, what));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(per_layer_f(&xmid_, T * C, "xmid"));
  RETURN_IF_ERROR(per_layer_f(&mean1_, T, "mean1"));
  RETURN_IF_ERROR(per_layer_f(&rstd1_, T, "rstd1"));
  RETURN_IF_ERROR(per_layer_f(&mean2_, T, "mean2"));
  RETURN_IF_ERROR(per_layer_f(&rstd2_, T, "rstd2"));
  RETURN_IF_ERROR(per_layer_f(&stats_, NH * T, "softmax statistics"));
  RETURN_IF_ERROR(per_layer_f(&gu_, T * 2 * H, "gate|up"));
  RETURN_IF_ERROR(per_layer_h(&h1_, T * C, "h1"));
  RETURN_IF_ERROR(per_layer_h(&h2_, T * C, "h2"));
  RETURN_IF_ERROR(per_layer_h(&qkv16_, T * 3 * C, "qkv bf16"));
  RETURN_IF_ERROR(per_layer_h(&y16_, T * C, "attention output"));
  RETURN_IF_ERROR(per_layer_h(&a16_, T * H, "swiglu output"));
  RETURN_IF_ERROR(Alloc(&meanf_, T, "final mean"));
  RETURN_IF_ERROR(Alloc(&rstdf_, T, "final rstd"));
  RETURN_IF_ERROR(Alloc(&xf16_, T * C, "final norm output"));
  RETURN_IF_ERROR(Alloc(&qkv32_, T * 3 * C, "qkv fp32"));
  RETURN_IF_ERROR(Alloc(&logits_, T * V, "logits"));
  RETURN_IF_ERROR(Alloc(&dlogits16_, T * V, "dlogits"));
  RETURN_IF_ERROR(Alloc(&losses_, T, "losses"));
  RETURN_IF_ERROR(Alloc(&dresid_, T * C, "dresid"));
  // Ring sizes: dresid and the LayerNorm partials are written twice per
  // block, dgu and dqkv once, so the main stream would wait only for a
  // side stream more than a block behind.
  RETURN_IF_ERROR(MakeSideRing(&dresid16_ring_, 4, T * C * sizeof(bf16),
                               "dresid bf16"));
  RETURN_IF_ERROR(Alloc(&dh32_, T * C, "dh"));
  RETURN_IF_ERROR(Alloc(&da32_, T * H, "da"));
  RETURN_IF_ERROR(MakeSideRing(&dgu16_ring_, 2, T * 2 * H * sizeof(bf16), "dgu"));
  RETURN_IF_ERROR(Alloc(&dy16_, T * C, "dy bf16"));
  {
    attention_splits_ = CudaAttentionSplits(g_tuning);
    const size_t bytes = AttentionScratchBytes(T_, NH_, HS_, attention_splits_);
    char* scratch = nullptr;
    RETURN_IF_ERROR(Alloc(&scratch, bytes, "attention scratch"));
    // Zero once: the kernels' counters start (and stay) at zero.
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scratch, 0, bytes, stream_),
                         "cudaMemsetAsync(attention scratch)");
    attention_scratch_ = scratch;
  }
  RETURN_IF_ERROR(MakeSideRing(&dqkv16_ring_, 2, T * 3 * C * sizeof(bf16),
                               "dqkv bf16"));
  RETURN_IF_ERROR(MakeSideRing(
      &ln_scratch_ring_, 4,
      LayerNormBackwardScratchFloats(T_, C_) * sizeof(float),
      "LayerNorm partials"));

  CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(reinterpret_cast<void**>(&loss_ring_), kRingSlots * T * sizeof(float),
                    cudaHostAllocMapped),
      "cudaHostAlloc(loss ring)");
  CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(reinterpret_cast<void**>(&loss_ring_dev_), loss_ring_, 0),
                       "cudaHostGetDevicePointer(loss ring)");
  CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(reinterpret_cast<void**>(&time_ring_), (kRingSlots * 4 + 6) * sizeof(uint64_t),
                    cudaHostAllocMapped),
      "cudaHostAlloc(time ring)");
  std::memset(time_ring_, 0, (kRingSlots * 4 + 6) * sizeof(uint64_t));
  CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(reinterpret_cast<void**>(&time_ring_dev_), time_ring_, 0),
                       "cudaHostGetDevicePointer(time ring)");
  CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&logit_rows_host_), 3 * V * sizeof(float)),
                       "cudaMallocHost(logit rows)");

  // Matmul plans.
  std::vector<MatmulShape> shapes = CudaProductShapes(config_);
  // The side stream's products, planned for part of the device
  // (CudaStepTuning::side_sms): they run beside the dX chain.
  if (g_tuning.side_sms > 0) {
    for (CudaProduct p : {kLogitsDw, kDownDw, kGateUpDw, kOutputDw, kQkvDw}) {
      shapes[p].sm_count_target = g_tuning.side_sms;
    }
  }
  // Two of the chain's products likewise (CudaStepTuning::logits_dx_sms,
  // output_dx_sms): they run beside the side stream's.
  if (g_tuning.logits_dx_sms > 0) {
    shapes[kLogitsDx].sm_count_target = g_tuning.logits_dx_sms;
  }
  if (g_tuning.output_dx_sms > 0) {
    shapes[kOutputDx].sm_count_target = g_tuning.output_dx_sms;
  }
  if (!g_tuning.lt_configs) {
    for (MatmulShape& s : shapes) s.algo_config = MatmulAlgoConfig();
  }
  for (int p = 0; p < kNumCudaProducts; ++p) {
    RETURN_IF_ERROR(Plan(&plans_[p], shapes[p]));
  }
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                       "cudaStreamSynchronize(init)");
  NotePeakMemory();
  return absl::OkStatus();
}

absl::Status CudaBackend::Load(const float* pmv, uint64_t update_count) {
  if (graph_exec_ != nullptr) {
    return absl::FailedPreconditionError(
        "cuda backend: Load after steps were enqueued");
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pmv_, pmv, 3 * N_ * sizeof(float),
                                       cudaMemcpyHostToDevice, stream_),
                       "cudaMemcpyAsync(P/M/V to device)");
  CUDA_RETURN_IF_ERROR(CastToBf16(pmv_, N_, p16_, stream_),
                       "CastToBf16(parameters)");
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                       "cudaStreamSynchronize(Load)");
  update_count_ = update_count;
  loaded_ = true;
  return absl::OkStatus();
}

absl::Status CudaBackend::SetTokens(const uint32_t* tokens,
                                    uint64_t num_tokens,
                                    uint64_t first_context) {
  if (tokens_set_) {
    return absl::FailedPreconditionError("cuda backend: SetTokens called twice");
  }
  if (num_tokens < static_cast<uint64_t>(T_) + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: SetTokens needs at least T + 1 = ", T_ + 1,
        " ids, got ", num_tokens));
  }
  RETURN_IF_ERROR(Alloc(&tokens_, num_tokens, "token ids"));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(tokens_, tokens, num_tokens * sizeof(uint32_t),
                                  cudaMemcpyHostToDevice),
                       "cudaMemcpy(token ids)");
  num_tokens_ = num_tokens;
  first_context_ = first_context;
  tokens_set_ = true;
  NotePeakMemory();
  return absl::OkStatus();
}

absl::Status CudaBackend::CheckContext(uint64_t context, int64_t* index) const {
  if (!tokens_set_ || !loaded_) {
    return absl::FailedPreconditionError(
        "cuda backend: Load and SetTokens must come first");
  }
  const uint64_t contexts = (num_tokens_ - 1) / T_;
  if (context < first_context_ || context - first_context_ >= contexts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: context ", context, " is outside the tokens given (",
        "contexts ", first_context_, "..", first_context_ + contexts - 1, ")"));
  }
  *index = static_cast<int64_t>(context - first_context_);
  return absl::OkStatus();
}


absl::Status CudaBackend::ForwardPass(const int64_t* step, int64_t fixed_index,
                                      bool training) {
  const int T = T_, C = C_, H = H_, NH = NH_, HS = HS_;
  const float eps = config_.layer_norm_eps;
  // The training step's start time is written by the staging kernel
  // (StageContext's start_ring).
  CUDA_RETURN_IF_ERROR(
      StageContext(tokens_, num_tokens_, step, fixed_index, T, V_, inputs_,
                   targets_, invalid_flag_, stream_,
                   training ? time_ring_dev_ : nullptr, kRingSlots),
      "StageContext");
  const float* P = pmv_;
  // Products with their elementwise successor fused (fused_matmul.h) where
  // the tuning asks for them and the shapes allow.
  const CudaFusedProducts fused = CudaFusedProductsFor(config_);
  CUDA_RETURN_IF_ERROR(
      EmbeddingForward(inputs_, P + offsets_.embedding, T, C, x_[0], stream_),
      "EmbeddingForward");
  for (int l = 0; l < L_; ++l) {
    const BlockOffsets& o = offsets_.blocks[l];
    if (!Skip(kPartNormForward)) {
      CUDA_RETURN_IF_ERROR(
          LayerNormForward(x_[l], P + o.attention_norm_weight,
                           P + o.attention_norm_bias, T, C, eps, h1_[l], nullptr,
                           mean1_[l], rstd1_[l], stream_),
          "LayerNormForward(attention_norm)");
    }
    if (fused.qkv) {
      // The product with RoPE in its epilogue (fused_matmul.h); the
      // ablation's kPartRope then has nothing of its own to leave out.
      if (!Skip(kPartForwardProducts)) {
        CUDA_RETURN_IF_ERROR(
            QkvRopeMatmul(h1_[l], p16_ + o.qkv, rope_table_, T, C, NH, HS,
                          qkv16_[l], g_tuning.fused_qkv_config, stream_),
            "QkvRopeMatmul");
      }
    } else {
      if (!Skip(kPartForwardProducts)) {
        RETURN_IF_ERROR(
            Mm(kQkvForward, h1_[l], p16_ + o.qkv, nullptr, qkv32_));
      }
      if (!Skip(kPartRope)) {
        CUDA_RETURN_IF_ERROR(
            RopeForward(qkv32_, rope_table_, T, NH, HS, qkv16_[l], stream_),
            "RopeForward");
      }
    }
    if (!Skip(kPartAttentionForward)) {
      CUDA_RETURN_IF_ERROR(AttentionForward(qkv16_[l], T, NH, HS, y16_[l],
                                            stats_[l], attention_scratch_,
                                            stream_, attention_splits_),
                           "AttentionForward");
    }
    if (!Skip(kPartForwardProducts)) {
      RETURN_IF_ERROR(
          Mm(kOutputForward, y16_[l], p16_ + o.output, x_[l], xmid_[l]));
    }
    if (!Skip(kPartNormForward)) {
      CUDA_RETURN_IF_ERROR(
          LayerNormForward(xmid_[l], P + o.mlp_norm_weight, P + o.mlp_norm_bias,
                           T, C, eps, h2_[l], nullptr, mean2_[l], rstd2_[l],
                           stream_),
          "LayerNormForward(mlp_norm)");
    }
    if (fused.gate_up) {
      // The product with SwiGLU in its epilogue (fused_matmul.h).
      if (!Skip(kPartForwardProducts)) {
        CUDA_RETURN_IF_ERROR(
            GateUpSwigluMatmul(h2_[l], p16_ + o.gate, T, C, H, gu_[l],
                               a16_[l], g_tuning.fused_gate_up_config,
                               stream_),
            "GateUpSwigluMatmul");
      }
    } else {
      if (!Skip(kPartForwardProducts)) {
        RETURN_IF_ERROR(
            Mm(kGateUpForward, h2_[l], p16_ + o.gate, nullptr, gu_[l]));
      }
      if (!Skip(kPartSwiglu)) {
        CUDA_RETURN_IF_ERROR(SwigluForward(gu_[l], T, H, a16_[l], stream_),
                             "SwigluForward");
      }
    }
    if (!Skip(kPartForwardProducts)) {
      RETURN_IF_ERROR(
          Mm(kDownForward, a16_[l], p16_ + o.down, xmid_[l], x_[l + 1]));
    }
  }
  CUDA_RETURN_IF_ERROR(
      LayerNormForward(x_[L_], P + offsets_.final_norm_weight,
                       P + offsets_.final_norm_bias, T, C, eps, xf16_, nullptr,
                       meanf_, rstdf_, stream_),
      "LayerNormForward(final_norm)");
  if (!Skip(kPartLogitsProducts)) {
    RETURN_IF_ERROR(
        Mm(kLogitsForward, xf16_, p16_ + offsets_.embedding, nullptr, logits_));
  }
  if (!Skip(kPartCrossEntropy)) {
    CUDA_RETURN_IF_ERROR(
        CrossEntropyForwardBackward(logits_, targets_, T, V_, 1.0f / T, losses_,
                                    training ? dlogits16_ : nullptr, stream_),
        "CrossEntropyForwardBackward");
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::BackwardPass() {
  const int T = T_, C = C_, H = H_, NH = NH_, HS = HS_;
  const float* P = pmv_;
  float* G = grad_;
  // The down dX product with SwiGLU's backward and the output dX product
  // with the attention's D (fused_matmul.h) where the tuning asks for them
  // and the shapes allow.
  const CudaFusedProducts fused = CudaFusedProductsFor(config_);
  for (SideRing* r : {&dresid16_ring_, &dgu16_ring_, &dqkv16_ring_,
                      &ln_scratch_ring_}) {
    ResetRing(r);
  }
  // LayerNorm backward: the rows on the main stream (dresid += the norm's
  // dX; dresid bf16 and the dweight/dbias partials into ring copies), the
  // partials' reduction on the side stream.
  auto norm_backward = [&](const float* dh, const float* x, int64_t weight,
                           int64_t bias, const float* mean, const float* rstd,
                           bool accumulate, int* dresid16_index,
                           bf16** dresid16) -> absl::Status {
    int ln_index = 0;
    ASSIGN_OR_RETURN(float* partials,
                     NextCopy<float>(&ln_scratch_ring_, &ln_index));
    ASSIGN_OR_RETURN(*dresid16,
                     NextCopy<bf16>(&dresid16_ring_, dresid16_index));
    if (!Skip(kPartNormBackwardRows)) {
      CUDA_RETURN_IF_ERROR(
          LayerNormBackwardRows(dh, x, P + weight, mean, rstd, T, C, accumulate,
                                dresid_, *dresid16, partials, stream_),
          "LayerNormBackwardRows");
    }
    RETURN_IF_ERROR(Fork());
    if (!Skip(kPartNormReduce)) {
      CUDA_RETURN_IF_ERROR(LayerNormBackwardReduce(partials, T, C, G + weight,
                                                   G + bias, side_stream_),
                           "LayerNormBackwardReduce");
    }
    return SideReadDone(&ln_scratch_ring_, ln_index);
  };
  // A block's weight-gradient products (side stream) are issued at points
  // of the main stream's chain (kSideSchedules[side_schedule]): each waits
  // for everything the main stream enqueued before its point, so a later
  // point moves the product's run next to later kernels of the chain. The
  // results do not depend on it (each product writes its own buffer).
  const DwPoint* schedule = kSideSchedules[g_tuning.side_schedule];
  struct DwItem {
    CudaProduct product;
    const bf16* a;
    const bf16* b;
    float* d;
    SideRing* ring;
    int index;
    DwPoint at;
  };
  std::vector<DwItem> queued;
  // Block update (AdamW stream) after the side stream's side_done_event_
  // (recorded at the end of the block's backward) and the main stream's
  // work so far.
  int pending_update = -1;
  auto update_block = [&](int l) -> absl::Status {
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(adam_stream_, side_done_event_, 0),
                         "cudaStreamWaitEvent(side done)");
    RETURN_IF_ERROR(
        StreamWait(adam_stream_, stream_, adam_fork_event_, "adamw fork"));
    if (Skip(kPartAdamW)) return absl::OkStatus();
    // Beside the backward of the blocks below on a few SMs
    // (CudaStepTuning::adamw_overlap_blocks); block 0's update is part of
    // the step's tail: the whole device.
    return AdamWRange(layer_chunks_[l].first, layer_chunks_[l].second,
                      adam_stream_, l > 0 ? g_tuning.adamw_overlap_blocks : 0);
  };
  auto reach_update = [&](AdamWPoint point) -> absl::Status {
    if (pending_update < 0 || g_tuning.adamw_schedule != point) {
      return absl::OkStatus();
    }
    const int l = pending_update;
    pending_update = -1;
    return update_block(l);
  };
  auto reach = [&](DwPoint point) -> absl::Status {
    bool forked = false;
    for (auto it = queued.begin(); it != queued.end();) {
      if (it->at > point) {
        ++it;
        continue;
      }
      if (!forked) {
        RETURN_IF_ERROR(Fork());
        forked = true;
      }
      if (!Skip(kPartWeightGradients)) {
        RETURN_IF_ERROR(MmSide(it->product, it->a, it->b, it->d));
      }
      RETURN_IF_ERROR(SideReadDone(it->ring, it->index));
      it = queued.erase(it);
    }
    return absl::OkStatus();
  };
  auto weight_gradient = [&](DwProduct slot, CudaProduct product, const bf16* a,
                             const bf16* b, float* d, SideRing* ring,
                             int index) -> absl::Status {
    queued.push_back({product, a, b, d, ring, index, schedule[slot]});
    return reach(kDwNow);
  };
  // Tied output product: dE = dlogitsᵀ · xf (side stream, overwrites),
  // dxf = dlogits · E (main stream).
  RETURN_IF_ERROR(Fork());
  if (!Skip(kPartWeightGradients)) {
    RETURN_IF_ERROR(MmSide(kLogitsDw, dlogits16_, xf16_, G + offsets_.embedding));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(demb_done_event_, side_stream_),
                       "cudaEventRecord(dE done)");
  if (!Skip(kPartLogitsProducts)) {
    RETURN_IF_ERROR(
        Mm(kLogitsDx, dlogits16_, p16_ + offsets_.embedding, nullptr, dh32_));
  }
  // The embedding rows no input token names: their gradient is final once
  // the tied dE product has written it, and the logits dX product was the
  // backward's last reader of their bf16 copy (CudaStepTuning::
  // embedding_early_ctas).
  if (g_tuning.embedding_early_ctas > 0 && !Skip(kPartAdamW)) {
    CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(adam_stream_, demb_done_event_, 0),
        "cudaStreamWaitEvent(dE done)");
    RETURN_IF_ERROR(StreamWait(adam_stream_, stream_, adam_fork_event_,
                               "embedding update fork"));
    RETURN_IF_ERROR(EmbeddingRowsUpdate(/*touched=*/false,
                                        g_tuning.embedding_early_ctas,
                                        adam_stream_));
  }
  int dresid16_index = 0;
  bf16* dresid16 = nullptr;
  RETURN_IF_ERROR(norm_backward(dh32_, x_[L_], offsets_.final_norm_weight,
                                offsets_.final_norm_bias, meanf_, rstdf_,
                                /*accumulate=*/false, &dresid16_index,
                                &dresid16));
  for (int l = L_ - 1; l >= 0; --l) {
    const BlockOffsets& o = offsets_.blocks[l];
    // MLP: x_next = xmid + down(a).
    RETURN_IF_ERROR(weight_gradient(kDownDwSlot, kDownDw, dresid16, a16_[l], G + o.down,
                                    &dresid16_ring_, dresid16_index));
    int dgu16_index = 0;
    bf16* dgu16 = nullptr;
    if (fused.down_dx) {
      // The product with SwiGLU's backward in its epilogue (fused_matmul.h).
      ASSIGN_OR_RETURN(dgu16, NextCopy<bf16>(&dgu16_ring_, &dgu16_index));
      if (!Skip(kPartInputGradients)) {
        CUDA_RETURN_IF_ERROR(
            DownDxSwigluBackwardMatmul(dresid16, p16_ + o.down, gu_[l], T, C,
                                       H, dgu16, g_tuning.fused_down_dx_config,
                                       stream_),
            "DownDxSwigluBackwardMatmul");
      }
    } else {
      if (!Skip(kPartInputGradients)) {
        RETURN_IF_ERROR(
            Mm(kDownDx, dresid16, p16_ + o.down, nullptr, da32_));
      }
      ASSIGN_OR_RETURN(dgu16, NextCopy<bf16>(&dgu16_ring_, &dgu16_index));
      if (!Skip(kPartSwiglu)) {
        CUDA_RETURN_IF_ERROR(
            SwigluBackward(gu_[l], da32_, T, H, dgu16, stream_),
            "SwigluBackward");
      }
    }
    RETURN_IF_ERROR(reach(kDwAfterSwiglu));
    RETURN_IF_ERROR(reach_update(kAdamWAfterSwiglu));
    RETURN_IF_ERROR(weight_gradient(kGateUpDwSlot, kGateUpDw, dgu16, h2_[l], G + o.gate,
                                    &dgu16_ring_, dgu16_index));
    if (!Skip(kPartInputGradients)) {
      RETURN_IF_ERROR(Mm(kGateUpDx, dgu16, p16_ + o.gate, nullptr, dh32_));
    }
    RETURN_IF_ERROR(reach(kDwAfterGateUpDx));
    RETURN_IF_ERROR(reach_update(kAdamWAfterGateUpDx));
    RETURN_IF_ERROR(norm_backward(dh32_, xmid_[l], o.mlp_norm_weight,
                                  o.mlp_norm_bias, mean2_[l], rstd2_[l],
                                  /*accumulate=*/true, &dresid16_index,
                                  &dresid16));
    // Attention: xmid = x + y · Woᵀ.
    RETURN_IF_ERROR(weight_gradient(kOutputDwSlot, kOutputDw, dresid16, y16_[l],
                                    G + o.output, &dresid16_ring_,
                                    dresid16_index));
    if (fused.output_dx) {
      // dy and the attention backward's D in one kernel (fused_matmul.h).
      if (!Skip(kPartInputGradients)) {
        CUDA_RETURN_IF_ERROR(
            OutputDxDeltaMatmul(dresid16, p16_ + o.output, y16_[l], T, C, NH,
                                HS, dy16_,
                                AttentionDelta(attention_scratch_, T, NH, HS,
                                               attention_splits_),
                                g_tuning.fused_output_dx_config, stream_),
            "OutputDxDeltaMatmul");
      }
    } else if (!Skip(kPartInputGradients)) {
      RETURN_IF_ERROR(plans_[kOutputDx]->RunBf16(dresid16, p16_ + o.output, dy16_,
                                                 workspace_, stream_));
    }
    // Attention: D, then dq (main stream) ∥ dk, dv (attention stream).
    int dqkv16_index = 0;
    ASSIGN_OR_RETURN(bf16* dqkv16, NextCopy<bf16>(&dqkv16_ring_, &dqkv16_index));
    if (!fused.output_dx && !Skip(kPartAttentionBackward)) {
      CUDA_RETURN_IF_ERROR(
          AttentionBackwardDelta(y16_[l], dy16_, T, NH, HS, attention_scratch_,
                                 stream_, attention_splits_),
          "AttentionBackwardDelta");
    }
    RETURN_IF_ERROR(reach(kDwAfterDelta));
    RETURN_IF_ERROR(reach_update(kAdamWAfterDelta));
    RETURN_IF_ERROR(ForkAttention());
    if (!Skip(kPartAttentionBackward | kPartAttentionKeys)) {
      CUDA_RETURN_IF_ERROR(
          AttentionBackwardKeys(qkv16_[l], dy16_, stats_[l], rope_table_, T, NH,
                                HS, attention_scratch_, dqkv16,
                                attention_stream_, attention_splits_),
          "AttentionBackwardKeys");
    }
    if (!Skip(kPartAttentionBackward | kPartAttentionQuery)) {
      CUDA_RETURN_IF_ERROR(
          AttentionBackwardQuery(qkv16_[l], dy16_, stats_[l], rope_table_, T,
                                 NH, HS, attention_scratch_, dqkv16, stream_,
                                 attention_splits_),
          "AttentionBackwardQuery");
    }
    RETURN_IF_ERROR(JoinAttention());
    RETURN_IF_ERROR(weight_gradient(kQkvDwSlot, kQkvDw, dqkv16, h1_[l], G + o.qkv,
                                    &dqkv16_ring_, dqkv16_index));
    if (!Skip(kPartInputGradients)) {
      RETURN_IF_ERROR(Mm(kQkvDx, dqkv16, p16_ + o.qkv, nullptr, dh32_));
    }
    RETURN_IF_ERROR(reach(kDwAfterQkvDx));
    RETURN_IF_ERROR(norm_backward(dh32_, x_[l], o.attention_norm_weight,
                                  o.attention_norm_bias, mean1_[l], rstd1_[l],
                                  /*accumulate=*/true, &dresid16_index,
                                  &dresid16));
    // Block l's gradients are complete (the last of them on the side
    // stream) and its weights are not read again this step: it is updated
    // on the AdamW stream once both streams are done with it, overlapping
    // the backward of the blocks below (at the point of block l-1's chain
    // that CudaStepTuning::adamw_schedule names; block 0's update is part of the tail).
    CUDA_RETURN_IF_ERROR(cudaEventRecord(side_done_event_, side_stream_),
                         "cudaEventRecord(side done)");
    if (l == 0 || g_tuning.adamw_schedule == kAdamWAtBlockEnd) {
      RETURN_IF_ERROR(update_block(l));
    } else {
      pending_update = l;
    }
  }
  // Every schedule point lies inside a block (kSideSchedules, AdamWPoint),
  // so each block's products and update were issued before its end.
  if (!queued.empty() || pending_update >= 0) {
    return absl::InternalError(
        "cuda backend: a weight-gradient product or block update was left "
        "unissued by the backward's schedule");
  }
  // The embedding backward adds the gathered rows into dE, which the side
  // stream's tied product wrote at the start: wait for that product only
  // (the side stream's last block is joined after, see EnqueueStepBody).
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, demb_done_event_, 0),
                       "cudaStreamWaitEvent(dE done)");
  CUDA_RETURN_IF_ERROR(
      EmbeddingBackward(inputs_, dresid_, T, C, G + offsets_.embedding,
                        stream_),
      "EmbeddingBackward");
  return absl::OkStatus();
}

absl::Status CudaBackend::EnqueueStepBody() {
  uint64_t* phase_ring = time_ring_dev_ + kRingSlots * 2 + 6;
  RETURN_IF_ERROR(ForwardPass(step_counter_, 0, /*training=*/true));
  // The forward's end time on a branch of its own (phase_stream_), after
  // the main stream's work so far, so that the backward's first kernel
  // does not wait for it (in the chain the kernel cost 1.4 µs; on the
  // branch it runs at once beside the backward). The backward's end time
  // stays in the chain: on a branch it waited up to 30 µs for a slot
  // beside the tail's updates, which fill the device (docs/PERFORMANCE.md
  // run 22).
  const bool phases = g_tuning.phase_times;
  if (phases) {
    RETURN_IF_ERROR(
        StreamWait(phase_stream_, stream_, phase_fork_event_, "phase fork"));
    CUDA_RETURN_IF_ERROR(
        Timestamp(step_counter_, kRingSlots, 0, phase_ring, phase_stream_),
        "Timestamp(forward end)");
  }
  RETURN_IF_ERROR(BackwardPass());
  if (phases) {
    CUDA_RETURN_IF_ERROR(
        Timestamp(step_counter_, kRingSlots, 1, phase_ring, stream_),
        "Timestamp(backward end)");
  }
  // Embedding and final norm (read at the start of the backward) last; the
  // final norm's gradients come from the side stream, joined here (its last
  // products overlap the embedding backward and update).
  if (!Skip(kPartAdamW)) {
    // Only the input rows when the others were updated during the backward.
    RETURN_IF_ERROR(g_tuning.embedding_early_ctas > 0
                        ? EmbeddingRowsUpdate(/*touched=*/true,
                                              2 * sm_count_, stream_)
                        : AdamWRange(0, embedding_chunks_end_, stream_));
  }
  RETURN_IF_ERROR(Join());
  if (!Skip(kPartAdamW)) {
    RETURN_IF_ERROR(AdamWRange(final_chunks_begin_, num_chunks_, stream_));
  }
  RETURN_IF_ERROR(
      StreamWait(stream_, adam_stream_, adam_join_event_, "adamw join"));
  if (phases) {
    RETURN_IF_ERROR(
        StreamWait(stream_, phase_stream_, phase_join_event_, "phase join"));
  }
  // The losses to the host ring, the step's end time, the step counter.
  CUDA_RETURN_IF_ERROR(FinishStep(losses_, T_, step_counter_, kRingSlots,
                                  loss_ring_dev_, time_ring_dev_, stream_),
                       "FinishStep");
  return absl::OkStatus();
}

// cuBLASLt's persistent product kernels (the logits forward's, at the
// coppelius size) zero a counter in their workspace with a memset just
// before the kernel; captured, that is a memset node between the kernel
// and its predecessor, and the GPU sat idle 7 µs there every step. (Moved
// to the start of the graph as a second root node, as a memset or as a
// kernel, it left 11 µs idle there instead: docs/PERFORMANCE.md run 15.)
// So every memset node is replaced in place by a kernel node doing the same
// (AddMemsetKernelNode), with the memset's predecessors and dependents.
// Internal if a CUDA graph call fails.
absl::Status ReplaceMemsetNodes(cudaGraph_t graph) {
  size_t count = 0;
  CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph, nullptr, &count),
                       "cudaGraphGetNodes");
  std::vector<cudaGraphNode_t> nodes(count);
  CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph, nodes.data(), &count),
                       "cudaGraphGetNodes");
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CUDA_RETURN_IF_ERROR(cudaGraphNodeGetType(node, &type),
                         "cudaGraphNodeGetType");
    if (type != cudaGraphNodeTypeMemset) continue;
    cudaMemsetParams params;
    CUDA_RETURN_IF_ERROR(cudaGraphMemsetNodeGetParams(node, &params),
                         "cudaGraphMemsetNodeGetParams");
    size_t n_in = 0, n_out = 0;
    CUDA_RETURN_IF_ERROR(
        cudaGraphNodeGetDependencies(node, nullptr, nullptr, &n_in),
        "cudaGraphNodeGetDependencies");
    CUDA_RETURN_IF_ERROR(
        cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &n_out),
        "cudaGraphNodeGetDependentNodes");
    std::vector<cudaGraphNode_t> in(n_in), out(n_out);
    std::vector<cudaGraphEdgeData> in_edges(n_in), out_edges(n_out);
    CUDA_RETURN_IF_ERROR(cudaGraphNodeGetDependencies(node, in.data(),
                                                      in_edges.data(), &n_in),
                         "cudaGraphNodeGetDependencies");
    CUDA_RETURN_IF_ERROR(
        cudaGraphNodeGetDependentNodes(node, out.data(), out_edges.data(),
                                       &n_out),
        "cudaGraphNodeGetDependentNodes");
    cudaGraphNode_t fill = nullptr;
    CUDA_RETURN_IF_ERROR(AddMemsetKernelNode(graph, params, &fill),
                         "AddMemsetKernelNode");
    for (size_t i = 0; i < n_in; ++i) {
      CUDA_RETURN_IF_ERROR(
          cudaGraphAddDependencies(graph, &in[i], &fill, &in_edges[i], 1),
          "cudaGraphAddDependencies");
    }
    for (size_t j = 0; j < n_out; ++j) {
      CUDA_RETURN_IF_ERROR(
          cudaGraphAddDependencies(graph, &fill, &out[j], &out_edges[j], 1),
          "cudaGraphAddDependencies");
    }
    CUDA_RETURN_IF_ERROR(cudaGraphDestroyNode(node), "cudaGraphDestroyNode");
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::BuildStepGraph() {
  // The AdamW scalars of every step the tokens allow, computed on the host
  // exactly as trainer/adamw.h does.
  const int64_t contexts = static_cast<int64_t>((num_tokens_ - 1) / T_);
  std::vector<AdamWDeviceScalars> table(contexts);
  const AdamWHyperparameters hyper;
  for (int64_t s = 0; s < contexts; ++s) {
    const AdamWStepScalars a =
        ComputeAdamWStepScalars(hyper, update_count_ + s + 1);
    static_assert(sizeof(AdamWStepScalars) + sizeof(float) ==
                      sizeof(AdamWDeviceScalars),
                  "AdamW scalar structs differ");
    std::memcpy(&table[s], &a, sizeof(a));
    SetAdamWDivisorReciprocal(&table[s]);
  }
  RETURN_IF_ERROR(Alloc(&adam_table_, table.size(), "AdamW scalars"));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(adam_table_, table.data(),
                 table.size() * sizeof(AdamWDeviceScalars),
                 cudaMemcpyHostToDevice),
      "cudaMemcpy(AdamW scalars)");
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                       "cudaStreamSynchronize(before capture)");
  CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
      "cudaStreamBeginCapture");
  absl::Status body = EnqueueStepBody();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  if (!body.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return Annotate(body, "capturing the step graph");
  }
  CUDA_RETURN_IF_ERROR(end, "cudaStreamEndCapture");
  graph_ = graph;
  RETURN_IF_ERROR(ReplaceMemsetNodes(graph_));
  if (g_tuning.graph_dot_file != nullptr) {
    CUDA_RETURN_IF_ERROR(
        cudaGraphDebugDotPrint(graph_, g_tuning.graph_dot_file,
                               cudaGraphDebugDotFlagsVerbose),
        absl::StrCat("cudaGraphDebugDotPrint(", g_tuning.graph_dot_file, ")"));
  }
  CUDA_RETURN_IF_ERROR(
      cudaGraphInstantiate(&graph_exec_, graph_,
                           cudaGraphInstantiateFlagUseNodePriority),
      "cudaGraphInstantiate(step)");
  CUDA_RETURN_IF_ERROR(cudaGraphUpload(graph_exec_, stream_),
                       "cudaGraphUpload(step)");
  consumed_.assign(contexts, 0);
  step_times_.assign(contexts, {0, 0});
  phase_times_.assign(contexts, {0, 0});
  phase_times_recorded_ = g_tuning.phase_times;
  NotePeakMemory();
  return absl::OkStatus();
}

absl::Status CudaBackend::SaveSlot(int64_t step) {
  const int slot = static_cast<int>(step % kRingSlots);
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(step_events_[slot]),
                       absl::StrCat("cudaEventSynchronize(step ", step, ")"));
  std::vector<float> losses(loss_ring_ + static_cast<int64_t>(slot) * T_,
                            loss_ring_ + static_cast<int64_t>(slot + 1) * T_);
  step_times_[step] = {time_ring_[slot * 2], time_ring_[slot * 2 + 1]};
  {
    const uint64_t* phase = time_ring_ + kRingSlots * 2 + 6;
    phase_times_[step] = {phase[slot * 2], phase[slot * 2 + 1]};
  }
  saved_losses_[step] = std::move(losses);
  consumed_[step] = 1;
  return absl::OkStatus();
}

absl::Status CudaBackend::EnqueueStep(int64_t step) {
  if (step != next_step_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: EnqueueStep(", step, ") but step ", next_step_,
        " is next"));
  }
  if (graph_exec_ == nullptr) {
    int64_t index = 0;
    RETURN_IF_ERROR(CheckContext(first_context_, &index));
    // Step 0 stages context index 0: the counter must start there.
    CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(step_counter_, 0, sizeof(int64_t), stream_),
        "cudaMemsetAsync(step counter)");
    RETURN_IF_ERROR(BuildStepGraph());
  }
  if (step >= static_cast<int64_t>(consumed_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: step ", step, " needs context ", first_context_ + step,
        " but the tokens given hold ", consumed_.size(), " contexts"));
  }
  if (step >= kRingSlots && !consumed_[step - kRingSlots]) {
    RETURN_IF_ERROR(SaveSlot(step - kRingSlots));
  }
  CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph_exec_, stream_),
                       absl::StrCat("cudaGraphLaunch(step ", step, ")"));
  CUDA_RETURN_IF_ERROR(
      cudaEventRecord(step_events_[step % kRingSlots], stream_),
      absl::StrCat("cudaEventRecord(step ", step, ")"));
  ++next_step_;
  return absl::OkStatus();
}

absl::Status CudaBackend::PollStep(int64_t step, float* row_losses) {
  if (step < 0 || step >= next_step_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda backend: PollStep(", step, ") but ", next_step_,
        " steps were enqueued"));
  }
  std::vector<float> losses;
  auto saved = saved_losses_.find(step);
  if (saved != saved_losses_.end()) {
    losses = std::move(saved->second);
    saved_losses_.erase(saved);
  } else {
    if (consumed_[step] || step + kRingSlots < next_step_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cuda backend: step ", step, " was already polled"));
    }
    const int slot = static_cast<int>(step % kRingSlots);
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(step_events_[slot]),
                         absl::StrCat("cudaEventSynchronize(step ", step, ")"));
    losses.assign(loss_ring_ + static_cast<int64_t>(slot) * T_,
                  loss_ring_ + static_cast<int64_t>(slot + 1) * T_);
    step_times_[step] = {time_ring_[slot * 2], time_ring_[slot * 2 + 1]};
    {
      const uint64_t* phase = time_ring_ + kRingSlots * 2 + 6;
      phase_times_[step] = {phase[slot * 2], phase[slot * 2 + 1]};
    }
    consumed_[step] = 1;
  }
  bool finite = true;
  for (float x : losses) finite = finite && std::isfinite(x);
  if (!finite) {
    if (first_nonfinite_step_ < 0) first_nonfinite_step_ = step;
    ++nonfinite_steps_;
  }
  std::memcpy(row_losses, losses.data(), T_ * sizeof(float));
  if (step > last_polled_) {
    last_polled_ = step;
    last_row_losses_ = losses;
    kind_start_[kUpdate] = step_times_[step].first;
    kind_end_[kUpdate] = step_times_[step].second;
  }
  return absl::OkStatus();
}

void CudaBackend::StepDeviceTimes(int64_t step, uint64_t* start_ns,
                                  uint64_t* end_ns) {
  if (step >= 0 && step < static_cast<int64_t>(step_times_.size())) {
    *start_ns = step_times_[step].first;
    *end_ns = step_times_[step].second;
  } else {
    *start_ns = 0;
    *end_ns = 0;
  }
}

absl::Status CudaBackend::BeginSnapshot() {
  if (snapshot_pending_) {
    return absl::FailedPreconditionError(
        "cuda backend: BeginSnapshot while a snapshot is pending");
  }
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(snapshot_dev_, pmv_, 3 * N_ * sizeof(float),
                      cudaMemcpyDeviceToDevice, stream_),
      "cudaMemcpyAsync(P/M/V snapshot, device)");
  CUDA_RETURN_IF_ERROR(cudaEventRecord(snapshot_copied_, stream_),
                       "cudaEventRecord(snapshot copied)");
  CUDA_RETURN_IF_ERROR(
      cudaStreamWaitEvent(snapshot_stream_, snapshot_copied_, 0),
      "cudaStreamWaitEvent(snapshot)");
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(snapshot_host_, snapshot_dev_, 3 * N_ * sizeof(float),
                      cudaMemcpyDeviceToHost, snapshot_stream_),
      "cudaMemcpyAsync(P/M/V snapshot, to host)");
  CUDA_RETURN_IF_ERROR(cudaEventRecord(snapshot_done_, snapshot_stream_),
                       "cudaEventRecord(snapshot done)");
  snapshot_pending_ = true;
  return absl::OkStatus();
}

absl::Status CudaBackend::FinishSnapshot(float* pmv) {
  if (!snapshot_pending_) {
    return absl::FailedPreconditionError(
        "cuda backend: FinishSnapshot without BeginSnapshot");
  }
  snapshot_pending_ = false;
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(snapshot_done_),
                       "cudaEventSynchronize(snapshot)");
  // 692 MB for coppelius: copy with several threads so the host is back
  // quickly (the device keeps running the steps already enqueued).
  const int64_t total = 3 * N_;
  const int workers = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(8, total / (1 << 20))));
  // Part w of `workers` on whichever thread takes it (common/threads.h:
  // fewer threads if the system refuses some).
  ParallelFor(workers, workers, [&](int64_t w) {
    const int64_t begin = total * w / workers;
    const int64_t end = total * (w + 1) / workers;
    std::memcpy(pmv + begin, snapshot_host_ + begin,
                (end - begin) * sizeof(float));
  });
  return absl::OkStatus();
}

absl::Status CudaBackend::Snapshot(float* pmv) {
  RETURN_IF_ERROR(BeginSnapshot());
  return FinishSnapshot(pmv);
}

absl::Status CudaBackend::CopyLogitRows(float* logits) {
  const int rows[3] = {T_ / 4 - 1, T_ / 2 - 1, T_ - 1};
  for (int i = 0; i < 3; ++i) {
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(logit_rows_host_ + static_cast<int64_t>(i) * V_,
                        logits_ + static_cast<int64_t>(rows[i]) * V_,
                        V_ * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        "cudaMemcpyAsync(logit rows)");
  }
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                       "cudaStreamSynchronize(logit rows)");
  std::memcpy(logits, logit_rows_host_, 3 * V_ * sizeof(float));
  return absl::OkStatus();
}

absl::Status CudaBackend::ForwardRecord(uint64_t context, float* logits) {
  int64_t index = 0;
  RETURN_IF_ERROR(CheckContext(context, &index));
  uint64_t* kind = time_ring_dev_ + kRingSlots * 2 + 2 * kForward;
  CUDA_RETURN_IF_ERROR(Timestamp(zero_index_, 1, 0, kind, stream_),
                       "Timestamp(forward start)");
  RETURN_IF_ERROR(ForwardPass(nullptr, index, /*training=*/false));
  CUDA_RETURN_IF_ERROR(Timestamp(zero_index_, 1, 1, kind, stream_),
                       "Timestamp(forward end)");
  RETURN_IF_ERROR(CopyLogitRows(logits));
  kind_start_[kForward] = time_ring_[kRingSlots * 2 + 2 * kForward];
  kind_end_[kForward] = time_ring_[kRingSlots * 2 + 2 * kForward + 1];
  return absl::OkStatus();
}

absl::Status CudaBackend::Final(uint64_t context, float* logits) {
  int64_t index = 0;
  RETURN_IF_ERROR(CheckContext(context, &index));
  uint64_t* kind = time_ring_dev_ + kRingSlots * 2 + 2 * kFinal;
  CUDA_RETURN_IF_ERROR(Timestamp(zero_index_, 1, 0, kind, stream_),
                       "Timestamp(final start)");
  RETURN_IF_ERROR(ForwardPass(nullptr, index, /*training=*/false));
  CUDA_RETURN_IF_ERROR(Timestamp(zero_index_, 1, 1, kind, stream_),
                       "Timestamp(final end)");
  RETURN_IF_ERROR(CopyLogitRows(logits));
  kind_start_[kFinal] = time_ring_[kRingSlots * 2 + 2 * kFinal];
  kind_end_[kFinal] = time_ring_[kRingSlots * 2 + 2 * kFinal + 1];
  return absl::OkStatus();
}

absl::StatusOr<BackendTelemetry> CudaBackend::Telemetry() {
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                       "cudaStreamSynchronize(Telemetry)");
  BackendTelemetry t;
  t.last_row_losses = last_row_losses_;
  const int64_t head = std::min<int64_t>(kHeadLogits, N_);
  t.embedding_gradient_head.resize(head);
  t.embedding_parameter_head.resize(head);
  t.embedding_first_moment_head.resize(head);
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(t.embedding_gradient_head.data(), grad_ + offsets_.embedding,
                 head * sizeof(float), cudaMemcpyDeviceToHost),
      "cudaMemcpy(gradient head)");
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(t.embedding_parameter_head.data(), pmv_ + offsets_.embedding,
                 head * sizeof(float), cudaMemcpyDeviceToHost),
      "cudaMemcpy(parameter head)");
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(t.embedding_first_moment_head.data(),
                 pmv_ + N_ + offsets_.embedding, head * sizeof(float),
                 cudaMemcpyDeviceToHost),
      "cudaMemcpy(first moment head)");
  int invalid = 0;
  CUDA_RETURN_IF_ERROR(cudaMemcpy(&invalid, invalid_flag_, sizeof(int),
                                  cudaMemcpyDeviceToHost),
                       "cudaMemcpy(invalid flag)");
  t.first_nonfinite_step = first_nonfinite_step_;
  t.nonfinite_steps = nonfinite_steps_;
  t.invalid_token_seen = invalid != 0;
  for (int k = 0; k < 3; ++k) {
    t.device_start_ns[k] = kind_start_[k];
    t.device_end_ns[k] = kind_end_[k];
  }
  NotePeakMemory();
  t.peak_device_memory_bytes = peak_memory_;
  return t;
}

}  // namespace

CudaFusedProducts CudaFusedProductsFor(const ModelConfig& config) {
  const int T = config.T, C = config.C, H = config.hidden, NH = config.NH,
            HS = config.HS;
  // (Each *Supports is false for a configuration of −1: not fused.)
  CudaFusedProducts f;
  f.qkv = QkvRopeMatmulSupports(T, C, NH, HS, g_tuning.fused_qkv_config);
  f.gate_up =
      GateUpSwigluMatmulSupports(T, C, H, g_tuning.fused_gate_up_config);
  f.down_dx = DownDxSwigluBackwardMatmulSupports(
      T, C, H, g_tuning.fused_down_dx_config);
  f.output_dx = OutputDxDeltaMatmulSupports(T, C, NH, HS,
                                            g_tuning.fused_output_dx_config);
  return f;
}

AttentionSplits CudaAttentionSplits(const CudaStepTuning& tuning) {
  AttentionSplits s;
  s.forward = tuning.attention_forward_split;
  s.query = tuning.attention_query_split;
  s.keys = tuning.attention_keys_split;
  s.forward_warpgroups = tuning.attention_forward_warpgroups;
  s.query_warpgroups = tuning.attention_query_warpgroups;
  s.keys_warpgroups = tuning.attention_keys_warpgroups;
  s.pipelined_backward = tuning.attention_pipelined_backward;
  s.pipelined_forward = tuning.attention_pipelined_forward;
  return s;
}

void RequestCudaWorkQueues() {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS",
         std::to_string(kCudaWorkQueues).c_str(), /*overwrite=*/0);
}

absl::Status SetCudaStepTuning(const CudaStepTuning& tuning) {
  auto check = [](const char* field, int value, int choices) {
    return value >= 0 && value < choices
               ? absl::OkStatus()
               : absl::InvalidArgumentError(
                     absl::StrCat("CudaStepTuning.", field, " = ", value,
                                  ": not in 0..", choices - 1));
  };
  RETURN_IF_ERROR(
      check("side_schedule", tuning.side_schedule, kNumSideSchedules));
  RETURN_IF_ERROR(
      check("adamw_schedule", tuning.adamw_schedule, kNumAdamWPoints));
  RETURN_IF_ERROR(check("side_priority", tuning.side_priority, 3));
  RETURN_IF_ERROR(check("adamw_priority", tuning.adamw_priority, 3));
  RETURN_IF_ERROR(check("fused_qkv_config", tuning.fused_qkv_config + 1,
                        kFusedConfigs + 1));
  RETURN_IF_ERROR(check("fused_gate_up_config",
                        tuning.fused_gate_up_config + 1, kFusedConfigs + 1));
  RETURN_IF_ERROR(check("fused_down_dx_config",
                        tuning.fused_down_dx_config + 1, kFusedConfigs + 1));
  RETURN_IF_ERROR(check("fused_output_dx_config",
                        tuning.fused_output_dx_config + 1, kFusedConfigs + 1));
  // Configurations whose column tile splits heads or N-major boxes (BN not
  // a multiple of 64) suit only the gate|up product.
  for (const auto& [field, value] :
       {std::pair<const char*, int>{"fused_qkv_config",
                                    tuning.fused_qkv_config},
        {"fused_down_dx_config", tuning.fused_down_dx_config},
        {"fused_output_dx_config", tuning.fused_output_dx_config}}) {
    if (value >= 0 && FusedConfigColumns(value) % 64 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CudaStepTuning.", field, " = ", value, ": its column tile (",
          FusedConfigColumns(value),
          ") is not a multiple of 64; only fused_gate_up_config takes it"));
    }
  }
  for (const auto& [field, value] :
       {std::pair<const char*, int>{"side_sms", tuning.side_sms},
        {"logits_dx_sms", tuning.logits_dx_sms},
        {"output_dx_sms", tuning.output_dx_sms},
        {"adamw_overlap_blocks", tuning.adamw_overlap_blocks},
        {"embedding_early_ctas", tuning.embedding_early_ctas}}) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("CudaStepTuning.", field, " = ", value, ": negative"));
    }
  }
  for (const auto& [field, value] :
       {std::pair<const char*, int>{"attention_forward_split",
                                    tuning.attention_forward_split},
        {"attention_query_split", tuning.attention_query_split},
        {"attention_keys_split", tuning.attention_keys_split}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CudaStepTuning.", field, " = ", value, ": must be at least 1"));
    }
  }
  // Warpgroups per attention CTA: 1, 2 or 4 (the dk/dv kernel 1 or 2).
  for (const auto& [field, value, most] :
       {std::tuple<const char*, int, int>{"attention_forward_warpgroups",
                                          tuning.attention_forward_warpgroups,
                                          4},
        {"attention_query_warpgroups", tuning.attention_query_warpgroups, 4},
        {"attention_keys_warpgroups", tuning.attention_keys_warpgroups, 2}}) {
    if (value != 1 && value != 2 && value != most) {
      return absl::InvalidArgumentError(
          absl::StrCat("CudaStepTuning.", field, " = ", value,
                       most == 4 ? ": must be 1, 2 or 4" : ": must be 1 or 2"));
    }
  }
  g_tuning = tuning;
  return absl::OkStatus();
}

bool CudaStepPhaseTimes(Backend* backend, int64_t step, uint64_t ns[4]) {
  auto* cuda = dynamic_cast<CudaBackend*>(backend);
  return cuda != nullptr && cuda->PhaseTimes(step, ns);
}

absl::Status CheckCudaComputeCapability(const std::string& device_name,
                                        int major, int minor) {
  if (major == 9 && minor == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "cuda backend: device 0 (", device_name, ") has compute capability ",
      major, ".", minor,
      "; this build's kernels run only on compute capability 9.0 (sm_90a: "
      "H100, H200, GH200); use --backend=reference elsewhere"));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const ModelConfig& config) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda backend: no CUDA device is usable on this machine (",
        "cudaGetDeviceCount: ",
        e != cudaSuccess ? cudaGetErrorName(e) : "0 devices",
        "); the cuda backend needs an NVIDIA GPU (sm_90), there is no host "
        "fallback"));
  }
  cudaDeviceProp properties;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, 0),
                       "cudaGetDeviceProperties(0)");
  RETURN_IF_ERROR(CheckCudaComputeCapability(
      properties.name, properties.major, properties.minor));
  auto backend = std::make_unique<CudaBackend>(config);
  RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace coppelius
