// File: trainer/backend.h
//
// The interface between the run loop (trainer/run.h, shared by every
// backend) and a compute backend: `reference` (CPU, exact, slow) or `cuda`
// (the production GPU backend, one CUDA-graph launch per step).
//
// Vocabulary: V vocabulary, T context, C width, L layers, NH heads, HS head
// size. The P/M/V image is three planes of `num_parameters` fp32 each, in the
// order and layout of trainer/model_config.h's ParameterLayout (SPEC §4).
//
// Protocol (the run loop's calls, in order):
//   Load(pmv, update_count)            once
//   SetTokens(tokens, n, first_context) once: the ids of contexts
//                                       [first_context, first_context+steps]
//   ForwardRecord(first_context, out)  once, before any step
//   EnqueueStep(s) for s = 0, 1, ...   step s trains on context
//                                       first_context + s with AdamW update
//                                       number update_count + s + 1
//   PollStep(s, losses)                blocks until step s has finished and
//                                       copies its T per-row cross-entropies
//   BeginSnapshot() / FinishSnapshot(pmv)
//                                      a snapshot of P/M/V ordered after the
//                                       last enqueued step: Begin returns at
//                                       once (the CUDA backend enqueues a
//                                       device-side copy), more steps may be
//                                       enqueued, Finish waits and copies out
//   Final(context, out)                forward of the current parameters on
//                                       the last step's context: logits of
//                                       rows T/4-1, T/2-1, T-1 (3 * V)
//   Telemetry()                        the loss-block windows etc.
// A backend may run ahead: EnqueueStep need not wait for earlier steps
// (the CUDA backend launches a graph and returns). Every method returns a
// non-OK status on any failure (a CUDA error names the call and the code);
// after an error the run loop stops and never publishes again.
#ifndef COPPELIUS_TRAINER_BACKEND_H_
#define COPPELIUS_TRAINER_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace coppelius {

struct ModelConfig;  // trainer/model_config.h

// What the result file's loss block and error notifier need (SPEC §7).
struct BackendTelemetry {
  // Last step's per-row cross-entropy, T floats.
  std::vector<float> last_row_losses;
  // First 1,024 values of the embedding gradient of the last step.
  std::vector<float> embedding_gradient_head;
  // First 1,024 embedding parameters after the final update.
  std::vector<float> embedding_parameter_head;
  // Their AdamW first moment.
  std::vector<float> embedding_first_moment_head;
  // Error notifier: first step with a non-finite loss (-1 if none), count of
  // steps with a non-finite loss, whether an out-of-range id was seen.
  int64_t first_nonfinite_step = -1;
  int64_t nonfinite_steps = 0;
  bool invalid_token_seen = false;
  // Device timestamps (ns) of the last forward/update/final submissions'
  // start and end; 0 where the backend has no device clock.
  uint64_t device_start_ns[3] = {0, 0, 0};
  uint64_t device_end_ns[3] = {0, 0, 0};
  // Peak device memory in bytes (0 for the reference backend).
  uint64_t peak_device_memory_bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "reference" or "cuda": recorded in every output.
  virtual std::string name() const = 0;

  // Copies the P/M/V image (3 * num_parameters fp32) in; `update_count` is
  // the checkpoint's in-band count t0 (0 when fresh).
  virtual absl::Status Load(const float* pmv, uint64_t update_count) = 0;

  // The token ids of the contexts the run uses: `num_tokens` ids starting at
  // id T * first_context of the stream (T * steps + 1 ids for a full run).
  virtual absl::Status SetTokens(const uint32_t* tokens, uint64_t num_tokens,
                                 uint64_t first_context) = 0;

  // Forward pass of the loaded parameters on `context`; writes the fp32
  // logits of rows T/4-1, T/2-1, T-1 to `logits` (3 * V floats).
  virtual absl::Status ForwardRecord(uint64_t context, float* logits) = 0;

  // Enqueues step `step` (0-based within this run).
  virtual absl::Status EnqueueStep(int64_t step) = 0;

  // Waits for step `step` and copies its T per-row cross-entropies (the
  // forward before the update) to `row_losses`.
  virtual absl::Status PollStep(int64_t step, float* row_losses) = 0;

  // Copies the current P/M/V image (after every enqueued step) to `pmv`
  // (3 * num_parameters floats), waiting for those steps.
  virtual absl::Status Snapshot(float* pmv) = 0;

  // Split form of Snapshot, so publication need not stall the device:
  // BeginSnapshot() captures P/M/V as of the last enqueued step and returns
  // without waiting; steps enqueued afterwards do not affect it;
  // FinishSnapshot(pmv) waits for the capture and copies it to `pmv`.
  // Default: the capture happens in FinishSnapshot (correct only when no
  // step is enqueued in between, as with a synchronous backend).
  virtual absl::Status BeginSnapshot() { return absl::OkStatus(); }
  virtual absl::Status FinishSnapshot(float* pmv) { return Snapshot(pmv); }

  // Forward of the current parameters on `context`: logits of rows T/4-1,
  // T/2-1, T-1 (3 * V floats, as ForwardRecord) to `logits`. The result
  // file keeps row T-1; the argmax of each row gives the predictions.
  virtual absl::Status Final(uint64_t context, float* logits) = 0;

  virtual absl::StatusOr<BackendTelemetry> Telemetry() = 0;

  // How many steps may be enqueued beyond the last polled one (and beyond a
  // BeginSnapshot before its FinishSnapshot). 0 for a synchronous backend:
  // the run loop then polls each step and finishes each snapshot at once.
  virtual int max_steps_in_flight() const { return 0; }

  // Device timestamps (ns, the device's global timer) of step `step`'s
  // start and end; valid after PollStep(step). Zeros where there is no
  // device clock (the reference backend).
  virtual void StepDeviceTimes(int64_t step, uint64_t* start_ns,
                               uint64_t* end_ns) {
    (void)step;
    *start_ns = 0;
    *end_ns = 0;
  }
};

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_BACKEND_H_
