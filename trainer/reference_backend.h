// File: trainer/reference_backend.h
//
// The CPU reference backend: forward, backward and AdamW of the Coppelius
// model (SPEC §4) for any ModelConfig, written for clarity and exactness,
// multithreaded with std::thread. It exists to verify the CUDA backend and is
// only ever selected explicitly (SPEC §5).
//
// Vocabulary: V vocabulary, T context, C width, L layers, NH heads, HS head
// size, H = config.hidden. One context per step (B = 1).
//
// Model (SPEC §4), x the residual stream [T, C]:
//   x = embedding[inputs]
//   per layer l:
//     h = LayerNorm(x; attention_norm)                         [T, C]
//     qkv = h · qkvᵀ  (columns: q [0,C), k [C,2C), v [2C,3C);  [T, 3C]
//                      head n uses columns n·HS .. n·HS+HS-1 of each)
//     RoPE on q and k: within each head, pairs (i, i + HS/2), i < HS/2,
//       angle = t · base^(−2i/HS) for row t:
//       (a, b) → (a cos − b sin, b cos + a sin)
//     per head: scores = q·kᵀ · (1/√HS), causal (s ≤ t), softmax over s,
//       o = probabilities · v                                   [T, C]
//     x = x + o · outputᵀ
//     h = LayerNorm(x; mlp_norm)
//     x = x + (silu(h · gateᵀ) ⊙ (h · upᵀ)) · downᵀ             [T, H] inside
//   xf = LayerNorm(x; final_norm); logits = xf · embeddingᵀ       [T, V] fp32
//   row loss r_t = logsumexp(logits_t) − logits_t[target_t]; loss = mean_t r_t
// LayerNorm(x; w, b) = (x − mean)·(var + ε)^(−1/2)·w + b, biased variance.
//
// Precision rule (shared with the CUDA backend; `bf16_matmul_operands`):
//   * Storage: P, M, V, activations and all gradients are fp32.
//   * Matrix products: EVERY operand of EVERY matrix product is rounded to
//     bf16 (round-to-nearest-even, RoundToBfloat16) at the product; the
//     products of two bf16 values are exact; accumulation is in double here
//     (fp32 on the GPU); the result is rounded once to fp32. The products:
//       forward:  h·qkvᵀ, q·kᵀ (q, k after RoPE), probabilities·v,
//                 o·outputᵀ, h·gateᵀ, h·upᵀ, a·downᵀ (a = silu(gate)⊙up),
//                 xf·embeddingᵀ (the logits);
//       backward: for each forward product Y = X·Wᵀ with upstream dY (fp32):
//                 dX = dY·W and dW = dYᵀ·X, both with bf16 dY, W, X;
//                 attention: dP = dO·vᵀ, dv = Pᵀ·dO, dq = dS·k, dk = dSᵀ·q
//                 with dS = softmax-backward(dP)·(1/√HS) in fp32.
//       Where two products feed one gradient (dh = dgate·gate + dup·up; the
//       embedding gradient = dlogitsᵀ·xf plus the scattered input-row
//       gradients), the second is accumulated onto the first's fp32 result
//       (embedding rows: fp32 adds in increasing row t).
//   * Elementwise math takes fp32 inputs, evaluates in double and rounds
//     each stored result once to fp32:
//       LayerNorm: mean = Σx/C, var = Σ(x − mean)²/C (double, two-pass);
//         mean_f = fp32(mean), rstd_f = fp32(1/√(var + ε)) with ε the fp32
//         value of 1e-5; y = fp32((x − mean_f)·rstd_f·w + b).
//       LayerNorm backward: xhat = (x − mean_f)·rstd_f, dxhat = dy·w,
//         dx = fp32(dx_residual + rstd_f·(dxhat − mean(dxhat) −
//         xhat·mean(dxhat·xhat))) (the residual gradient and this term are
//         summed in double, rounded once); dw = fp32(Σ_t dy·xhat),
//         db = fp32(Σ_t dy).
//       RoPE: cos/sin of the angle in double; (a, b) → fp32(a cos − b sin),
//         fp32(b cos + a sin); backward rotates by −angle.
//       Attention: score = fp32(q·k) (the bf16 product), softmax in double of
//         score·(1/√HS) over s ≤ t: p = fp32(exp(·−max)/Σ); backward
//         dS = fp32(p·(dP − Σ_u p·dP)·(1/√HS)) from the fp32 p and dP.
//       SwiGLU: a = fp32(silu(g)·u); dg = fp32(da·u·σ(g)(1 + g(1 − σ(g)))),
//         du = fp32(da·silu(g)).
//       Residual adds: fp32(x + y). Cross-entropy: lse in double,
//         r_t = fp32(lse − z[target]); dlogits = fp32((exp(z − lse) −
//         1[v = target]) / T).
//     tools/oracle/torch_oracle.py --precision bf16rule --elementwise_double
//     transcribes this rule in PyTorch and agrees to ~1e-7.
//   With `bf16_matmul_operands` false the operands stay fp32 (same
//   accumulation). A separate all-double path (ComputeLossAndGradientsDouble)
//   serves finite-difference gradient checks.
//
// Results do not depend on the thread count: every output element is reduced
// in a fixed order.
#ifndef COPPELIUS_TRAINER_REFERENCE_BACKEND_H_
#define COPPELIUS_TRAINER_REFERENCE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "trainer/backend.h"
#include "trainer/model_config.h"

namespace coppelius {

struct ReferenceOptions {
  // Round every matrix-product operand to bf16 (models the GPU). Default:
  // true.
  bool bf16_matmul_operands = true;
  // Worker threads; 0 means std::thread::hardware_concurrency().
  int num_threads = 0;
};

// fp32 → bf16 → fp32, round-to-nearest-even (NaN stays NaN, ±inf stays).
float RoundToBfloat16(float x);

// One forward and (if `gradients` is non-null) backward pass on one context.
//   params:     NumParameters(config) fp32, ParameterLayout order (P plane)
//   inputs:     T token ids; targets: T token ids (each < V)
//   row_losses: out, T fp32 (cross-entropy per row; may be null)
//   gradients:  out, NumParameters(config) fp32 gradient of the mean loss
//               (may be null: forward only)
//   logits:     out, T·V fp32 (may be null)
// Errors: InvalidArgument for an id >= V (naming the position), an invalid
// config or a null `params`.
absl::Status ComputeLossAndGradients(const ModelConfig& config,
                                     const ReferenceOptions& options,
                                     const float* params,
                                     const uint32_t* inputs,
                                     const uint32_t* targets,
                                     float* row_losses, float* gradients,
                                     float* logits = nullptr);

// The same model evaluated entirely in double (no bf16, no fp32 rounding),
// for finite-difference gradient checks. Same shapes; double buffers.
absl::Status ComputeLossAndGradientsDouble(const ModelConfig& config,
                                           int num_threads,
                                           const double* params,
                                           const uint32_t* inputs,
                                           const uint32_t* targets,
                                           double* row_losses,
                                           double* gradients);

// The reference Backend (trainer/backend.h); name() is "reference". Steps
// run synchronously inside EnqueueStep. Step s trains on context
// first_context + s (inputs ids [T·c, T·c + T), targets [T·c + 1, T·c + T]),
// AdamW update number update_count + s + 1 (trainer/adamw.h); PollStep
// returns that step's forward row losses (before the update).
std::unique_ptr<Backend> CreateReferenceBackend(const ModelConfig& config,
                                                ReferenceOptions options);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_REFERENCE_BACKEND_H_
