// File: trainer/cuda_backend.h
//
// The production backend (SPEC §5 "native only"): the whole training step of
// the model of SPEC §4 on one CUDA GPU, as ONE captured CUDA graph launched
// once per step, with no host synchronization between steps.
//
// Numerics (the same as the reference backend): every operand of every
// matrix product is rounded to bf16 (RNE) at the product, accumulation and
// results fp32 (cuBLASLt, trainer/kernels/matmul.h; the attention products
// in our fused kernels, trainer/kernels/attention.h); P, M, V and gradients
// fp32; LayerNorm statistics, softmax and cross-entropy fp32; AdamW mirrors
// trainer/adamw.h's fp32 operation order bitwise. Deterministic: fixed
// grids, fixed-order reductions, no float atomics, cuBLASLt algorithms fixed
// (heuristic candidate by index); the same inputs give bitwise identical results run after run on the
// same GPU model.
//
// Step graph (captured once, at the first EnqueueStep): device timestamp;
// stage context c0 + s from the device token buffer (s read from a device
// counter); forward; backward; AdamW with update number t0 + s + 1 (scalars
// from a host-computed table indexed by s); per-row CE into a ring of mapped
// pinned host windows; device timestamp; advance the counter. EnqueueStep
// launches it and records an event; PollStep waits on that step's event.
// Inside the graph, the backward's weight-gradient work (the dW products,
// the tied dE product, the LayerNorm weight/bias reductions) runs on a
// side stream that the main stream (the dX chain, the critical path) does
// not join after each product: it waits for the side stream only where it
// reuses a copy of one of the side stream's input rings (a block later),
// before the embedding backward adds into dE, and at the end of the step.
// The attention's dk/dv kernel runs beside its dq kernel on an attention
// stream (the two write disjoint columns of dqkv); each block's AdamW runs
// on a fourth stream (at the main stream's priority) as soon as the
// block's gradients are complete, on a few 1,024-thread CTAs
// (CudaStepTuning::adamw_overlap_blocks) so that it holds few SMs beside
// the chain, and so does the tied embedding's update of the rows no input
// token names, once the tied dE product has written their gradient
// (CudaStepTuning::embedding_early_ctas; the input rows, which the
// embedding backward adds into at the end, are updated in the tail). These are fork/join edges of the capture; no buffer is written
// while another stream may still read it, so the overlap cannot change a
// bit.
// BeginSnapshot enqueues a device-side copy of P/M/V, then an asynchronous
// copy to pinned host memory on its own stream; FinishSnapshot waits for it.
// At most one snapshot is pending: max_steps_in_flight() is
// min(32, checkpoint_interval − 1).
//
// Device memory (coppelius): 2.81 GiB peak as `train` reports it (incl.
// the CUDA context) — P/M/V 692 MB + its snapshot copy 692 MB, gradients
// 231 MB, bf16 weights 115 MB, per-block saved activations (no [T, T]
// matrices: the fused attention keeps one [NH, T] statistic per block),
// logits 50 MB, attention scratch 25 MB, two 32 MiB cuBLASLt workspaces,
// the side stream's input rings (23 MiB: 4 dresid, 2 dgu, 2 dqkv, 4
// LayerNorm partial copies; 13 MiB more than single buffers).
#ifndef COPPELIUS_TRAINER_CUDA_BACKEND_H_
#define COPPELIUS_TRAINER_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/backend.h"
#include "trainer/kernels/attention_items.h"
#include "trainer/model_config.h"

namespace coppelius {

// Creates the backend on device 0: allocates every buffer and builds the
// cuBLASLt plans. Errors: FailedPrecondition when no CUDA device is usable
// (the message says so and names the CUDA error) or when device 0 is not
// of compute capability 9.0 (CheckCudaComputeCapability); InvalidArgument for an
// invalid config; ResourceExhausted when device memory runs out; Internal for
// other CUDA/cuBLAS failures (naming the call and the code).
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const ModelConfig& config);

// OK when a device of compute capability major.minor can run this build's
// kernels: 9.0 only (H100, H200, GH200). They are compiled for sm_90a
// (build_defs/cuda.bzl: machine code for sm_90a and compute_90a PTX, which
// no other architecture can compile, as the "a" features are specific to
// it; CUDA C++ Programming Guide, "Feature Availability"); the attention and
// fused products use wgmma and the tensor memory accelerator. Otherwise
// FailedPrecondition naming `device_name`, its capability and the one
// needed, instead of the first kernel launch failing with "no kernel image".
absl::Status CheckCudaComputeCapability(const std::string& device_name,
                                        int major, int minor);

// For benchmarks: device times (ns) of step `step` of a CUDA backend: start,
// end of the forward (after the cross-entropy), end of the main stream's
// backward, end of the step graph. False if `backend` is not a CUDA backend,
// its step graph was captured without CudaStepTuning::phase_times, or the
// step was not polled yet.
bool CudaStepPhaseTimes(Backend* backend, int64_t step, uint64_t ns[4]);

// For benchmarks only (step_bench --skip=...): kinds of work that the step
// graph leaves out when it is captured, to measure what each costs inside
// the whole step (the ms/step saved). The forward of ForwardRecord / Final
// leaves them out too; the final norm is never left out. The numbers the
// backend then computes are wrong; no other caller may set it. A bit mask
// of CudaStepPart.
enum CudaStepPart : uint32_t {
  kPartWeightGradients = 1u << 0,   // side-stream dW products (incl. tied dE)
  kPartNormReduce = 1u << 1,        // LayerNorm weight/bias reductions
  kPartAdamW = 1u << 2,             // every AdamW update
  kPartAttentionBackward = 1u << 3, // D, dq, dk/dv kernels
  kPartAttentionForward = 1u << 4,
  kPartSwiglu = 1u << 5,            // forward and backward
  kPartRope = 1u << 6,              // forward (the backward's is fused)
  kPartNormForward = 1u << 7,
  kPartNormBackwardRows = 1u << 8,
  kPartInputGradients = 1u << 9,    // main-stream dX products of the blocks
  kPartForwardProducts = 1u << 10,  // the blocks' forward products
  kPartCrossEntropy = 1u << 11,
  kPartLogitsProducts = 1u << 12,   // logits forward and dX
  kPartAttentionQuery = 1u << 13,   // the attention backward's dq kernel
  kPartAttentionKeys = 1u << 14,    // the attention backward's dk/dv kernel
};

// For benchmarks only (step_bench's flags): how the step graph is built.
// Priorities are read when the backend is created, the rest when the step
// graph is captured. Only `skipped_parts` changes the numbers a step
// computes. The defaults are the fastest combination measured on the H200
// (docs/PERFORMANCE.md run 8).
struct CudaStepTuning {
  // Where the backward issues each block's weight-gradient products on the
  // side stream (cuda_backend.cc kSideSchedules, 0..5): 0 each as soon as
  // its input is ready; 2 the down, gate|up and output dW after the
  // attention's D kernel.
  int side_schedule = 2;
  // Where block l's AdamW update is issued (cuda_backend.cc AdamWPoint):
  // 0 at the end of its backward; 1 / 2 / 3 after block l-1's D kernel /
  // SwiGLU backward / gate|up dX.
  int adamw_schedule = 3;
  // The side / AdamW stream's priority: 0 one level below the main
  // stream's, 1 the least, 2 the main stream's. The AdamW stream at the
  // main stream's priority: 2.377 / 2.377 / 2.376 against 2.382–2.386
  // ms/step for the least, and 2.372 (three rounds) with
  // embedding_early_ctas (docs/PERFORMANCE.md run 19, H200, 2026-12-01;
  // runs 5 and 8 had measured the least faster, with other kernels).
  int side_priority = 2;
  int adamw_priority = 2;
  // > 0: each overlapped block update (blocks L−1 .. 1; the tail's updates
  // always take the whole device) runs as this many 1,024-thread CTAs
  // (kernels/adamw.h), so it holds at most this many SMs beside the
  // backward's chain; 0: one 256-thread CTA per 4,096-element chunk, on
  // every SM. The same bits either way. Measured (docs/PERFORMANCE.md run
  // 13, H200, 200 steps): 26 2.517 ms/step against 2.612 for 0; 22 2.526,
  // 33 2.544, 40 2.539; 16 falls behind (2.724: the tail waits for it).
  int adamw_overlap_blocks = 26;
  // > 0: the tied embedding's rows that no input token of the context
  // names (their gradient is final once the logits dW product has written
  // it) are updated early, on the AdamW stream beside the backward as this
  // many 1,024-thread CTAs, and only the input rows in the step's tail
  // (kernels/adamw.h AdamWEmbeddingRows); 0: the whole table in the tail.
  // The same bits either way. Measured (docs/PERFORMANCE.md run 19, H200,
  // 2026-12-01, the AdamW stream at the least priority): tail 0.049 against
  // 0.080 ms, backward +0.03; 8 / 16 / 26 / 40 / 56 / 80 / 132 CTAs
  // 2.480–2.486 / 2.422–2.423 / 2.411–2.414 / 2.382–2.385 / 2.377–2.380 /
  // 2.384–2.385 / 2.392–2.395
  // against 2.382–2.386 ms/step; 56 with adamw_priority 2: 2.372.
  // (Issued at the start of block 14's or 11's backward instead: 2.385–2.390
  // against 2.362–2.363, run 19's final call; branch
  // exp/embedding-early-block.) Since the update walks the table by rows
  // (run 22, 2026-12-01; the same bits), 40: 2.224–2.225 against 2.229 for
  // 48, 2.230–2.232 for 32, 2.232–2.234 for 56 (three rounds each; with
  // the element-wise walk 56 had measured 2.235–2.236 and 40 2.243–2.245).
  int embedding_early_ctas = 40;
  // > 0: cuBLASLt plans the side stream's dW products (and the tied dE
  // product) for this many SMs (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET), as
  // they run beside the main stream's chain; 0: for the whole device. Read
  // when the backend is created. The P/M/V digest was the same for every
  // value measured (0, 22, 33, 44, 56, 66, 100). 44 (a third of the H200's 132 SMs) measured fastest:
  // 2.735 against 2.771 ms/step for 0, 2.764 for 33, 2.750 for 56, 3.19
  // for 22 (docs/PERFORMANCE.md run 9).
  int side_sms = 44;
  // > 0: cuBLASLt plans two products of the main stream's chain for this
  // many SMs, as they run beside the side stream's work; 0: the whole
  // device. Read when the backend is created. The logits dX product (the
  // backward's first, beside the tied dE product on side_sms SMs): at 88
  // its CTAs and dE's start together (on the whole device dE waited 18 µs
  // for SMs); other bits (another split of K), 2.372 / 2.372 against 2.381
  // / 2.382 ms/step, 80 2.375 / 2.373, 96 2.380 / 2.381, 110 the whole
  // device's plan. The attention output's dX product (beside the block's
  // dW products and the overlapped update): at 62 2.376 / 2.377, the same
  // bits; 56 2.376 / 2.377, 72 2.377 / 2.379, 88 2.388 / 2.385. Together
  // 2.370 / 2.371 (docs/PERFORMANCE.md run 18, H200, 2026-12-01). The
  // same target for the gate|up or qkv dX products was slower (62: 2.418,
  // 2.407).
  int logits_dx_sms = 88;
  int output_dx_sms = 62;
  // The cuBLASLt algorithm configurations cuda_products.cc pins for some
  // products (MatmulShape::algo_config); false: the heuristic's candidate
  // (algo_index) for every product. Read when the backend is created. The
  // same bits either way. Measured (docs/PERFORMANCE.md run 28, H200,
  // 2026-12-02, four rounds): 2.205–2.206 against 2.219 ms/step, the
  // forward 0.725 against 0.739.
  bool lt_configs = true;
  // The qkv / gate|up forward product as our own TMA/wgmma kernel with
  // RoPE / SwiGLU in its epilogue (kernels/fused_matmul.h), with this tile
  // configuration (0 .. kFusedConfigs − 1), where the shapes allow; −1: a
  // cuBLASLt product followed by RopeForward / SwigluForward. The same
  // P/M/V bits either way (docs/PERFORMANCE.md run 11). Measured: qkv in
  // configuration 3 6.6 µs against 5.4 + 3.3, step 2.698 against 2.730 ms;
  // gate|up fused at best (configuration 5) 12.1 µs against 8.1 + 4.5, in
  // the step a tie (2.661 against 2.663): off.
  int fused_qkv_config = 3;
  int fused_gate_up_config = -1;
  // The down dX product with SwiGLU's backward in its epilogue
  // (DownDxSwigluBackwardMatmul), in this configuration; −1: cuBLASLt's
  // product into fp32 da followed by SwigluBackward. The same P/M/V bits.
  // Measured in the step (two rounds): configuration 2 2.670 / 2.670
  // against 2.687 / 2.688 ms; 3, 0, 1 slower (2.737, 2.789, 2.784), though
  // alone 3 is the fastest (11.7 µs against 11.9; cuBLASLt + kernel 5.6 +
  // 4.6).
  int fused_down_dx_config = 2;
  // The attention output's dX product writing the attention backward's D
  // as well (OutputDxDeltaMatmul: the same bits), in this configuration;
  // −1: cuBLASLt's product followed by AttentionBackwardDelta. Measured:
  // configuration 3 4.6 µs against 3.6 + 2.0, but the step slower (2.686
  // against 2.663 ms): off.
  int fused_output_dx_config = -1;
  // Key (or query) tiles per chunk of the attention kernels' items
  // (kernels/attention.h AttentionSplits; each ≥ 1): fewer give more CTAs
  // with fewer tile steps each, and partials to combine. Read when the
  // backend is created (the attention scratch is sized for them).
  // Measured (docs/PERFORMANCE.md run 20, H200, 2026-12-01, ms/step): all
  // three 16 with 4 forward warpgroups 2.236–2.237 against 2.355 for 6 / 6
  // / 6 with one; alone, forward 16 with 4 warpgroups 2.330–2.332, dq 16
  // 2.319–2.322, dk/dv 16 2.310–2.315 (against 2.352–2.357); with the rest
  // at 16, dk/dv 12 2.263 (against 2.236) and 14 2.267 (against 2.243).
  int attention_forward_split = kAttentionSplit;
  int attention_query_split = kAttentionSplit;
  int attention_keys_split = kAttentionSplit;
  // Warpgroups per CTA of the attention forward and the backward's dq and
  // dk/dv kernels (AttentionSplits::forward_warpgroups, query_warpgroups,
  // keys_warpgroups: 1, 2 or 4; dk/dv 1 or 2). Measured at splits of 16
  // (run 20): forward 4 / 2 / 1 2.236 / 2.250 / 2.265 ms/step, dk/dv 2
  // 2.270–2.272 (against 2.236) in one call; dq 2 2.267–2.268 against
  // 2.243 in another (fatter CTAs leave the concurrent dq and dk/dv
  // kernels fewer SMs to share).
  int attention_forward_warpgroups = kAttentionForwardWarpgroups;
  int attention_query_warpgroups = 1;
  int attention_keys_warpgroups = 1;
  // The attention kernels issue the next tile's row products behind this
  // tile's accumulation (AttentionSplits::pipelined_backward for the
  // one-warpgroup dq and dk/dv kernels, pipelined_forward for the forward
  // of several warpgroups; the same bits either way). Measured (run 27):
  // both 2.212–2.213 ms/step against 2.218–2.220 with neither, three
  // rounds; alone, dk/dv 16.4 against 17.7 µs, dq 12.4 against 12.9.
  bool attention_pipelined_backward = true;
  bool attention_pipelined_forward = true;
  // Diagnostics: the step graph also records the forward's and the
  // backward's end times (CudaStepPhaseTimes; a kernel on a branch of the
  // graph after the forward, one in the chain after the backward). Off,
  // CudaStepPhaseTimes returns false. Read when the step graph is captured.
  // The same bits either way. Measured (docs/PERFORMANCE.md run 29, H200,
  // 2026-12-02, three rounds): median device time of a step 2.197–2.199 ms
  // without them against 2.200–2.202 with them; off for `train`, on in
  // step_bench (its phase lines).
  bool phase_times = false;
  // Diagnostics: when not null, the captured step graph is written to this
  // file in Graphviz DOT form (cudaGraphDebugDotPrint, verbose: every
  // node's kernel, its dependencies as edges). The caller keeps the string
  // alive while the tuning is in force.
  const char* graph_dot_file = nullptr;
  // Ablation: a CudaStepPart mask.
  uint32_t skipped_parts = 0;
};
// Asks the CUDA driver for kCudaWorkQueues hardware work queues per context
// (the environment variable CUDA_DEVICE_MAX_CONNECTIONS; the driver's
// default is 8) unless the environment already sets it. The step graph's
// concurrent branches (the main, side, AdamW and attention streams: the
// kernel trace of run 21 shows some 60 streams of the instantiated graph)
// then share each queue with fewer others. The same bits
// either way. Takes effect only before the process's first CUDA call: the
// binaries call it first thing in main. Measured (docs/PERFORMANCE.md run
// 21, H200, 2026-12-01; step_bench, 11 rounds in five device calls): 16
// queues 0.002–0.007 ms/step faster than 8 in every round
// (2.233 / 2.234 against 2.238 / 2.238 at the final tree); 4 and 32 as 8.
inline constexpr int kCudaWorkQueues = 16;
void RequestCudaWorkQueues();

// InvalidArgument naming the field when a value is not one of its choices
// (nothing is changed then).
absl::Status SetCudaStepTuning(const CudaStepTuning& tuning);

// Which products with fused epilogues (kernels/fused_matmul.h) a step
// graph captured now would use for `config`: those the tuning asks for
// and the shapes allow (the others run as cuBLASLt + kernel).
struct CudaFusedProducts {
  bool qkv = false;
  bool gate_up = false;
  bool down_dx = false;
  bool output_dx = false;
};
CudaFusedProducts CudaFusedProductsFor(const ModelConfig& config);

// The attention kernels' splits and warpgroups (kernels/attention.h) that
// `tuning` asks for: its attention_* fields, as a backend created under it
// uses them.
struct AttentionSplits;
AttentionSplits CudaAttentionSplits(const CudaStepTuning& tuning);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_CUDA_BACKEND_H_
