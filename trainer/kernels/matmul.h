// File: trainer/kernels/matmul.h
//
// Row-major bf16 matrix products over cuBLASLt, fp32 accumulation and fp32
// results (SPEC §4 "halves": every operand of every product is bf16, the
// product accumulates and returns fp32):
//
//   D[M, N] = alpha · op(A)[M, K] · op(B)[K, N] + beta · C[M, N]
//
// op(X) is X or Xᵀ (trans_a / trans_b). A, B are bf16, C and D fp32, all
// row-major with leading dimensions lda, ldb, ldc (elements between rows of
// the STORED matrix: a non-transposed A is stored [M, K], a transposed one
// [K, M]). C and D share ldc; C may be D (in-place accumulation) or another
// buffer (e.g. the residual stream: x_out = x_in + h · Wᵀ). `batch` > 1 gives
// a strided batch (attention heads), strides in elements.
//
// Usage in the model (T rows, a Linear W [out, in]):
//   forward  Y[T, out] = X[T, in] · Wᵀ           (trans_b)
//   dX       dX[T, in] = dY[T, out] · W            (plain)
//   dW       dW[out, in] = dY[T, out]ᵀ · X[T, in]  (trans_a)
//
// A MatmulPlan holds the cuBLASLt descriptors and the algorithm (a fixed
// candidate of the heuristic's list, or a configuration named outright);
// it is built ONCE (outside graph capture) and Run() only enqueues
// cublasLtMatmul, which is graph-capturable. The algorithm is fixed, so the
// same inputs give bitwise identical results on the same GPU model.
#ifndef COPPELIUS_TRAINER_KERNELS_MATMUL_H_
#define COPPELIUS_TRAINER_KERNELS_MATMUL_H_

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace coppelius {

// One cuBLASLt algorithm configuration (cublasLtMatmulAlgoInit's algo_id,
// then the CUBLASLT_ALGO_CONFIG_* attributes of the same names: tile,
// stages, split_k, reduction scheme, CTA swizzling, custom option, cluster
// shape, inner shape — the cuBLASLt enums' values). algo_id < 0: none.
struct MatmulAlgoConfig {
  int algo_id = -1;
  int tile = 0;
  int stages = 0;
  int split_k = 1;
  int reduction = 0;
  int swizzle = 0;
  int custom = 0;
  int cluster = 0;
  int inner = 0;
};

// "id/tile/stages/split_k/reduction/swizzle/custom/cluster/inner".
std::string MatmulAlgoConfigString(const MatmulAlgoConfig& c);

struct MatmulShape {
  std::string name;  // names errors, e.g. "blocks.3.qkv forward"
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  // Every pointer given to Run() must be aligned to this many bytes.
  int alignment_bytes = 16;
  // D (and C) in bf16 instead of fp32: the fp32 result rounded to bf16 by
  // the product's epilogue (round to nearest even), for results that only
  // feed another product. Use RunBf16().
  bool d_bf16 = false;
  // Which entry of cuBLASLt's heuristic list (best first) to use: a fixed
  // index, chosen offline from step_bench's per-candidate timings, keeps the
  // algorithm — and so the results — the same from run to run (timing the
  // candidates at start-up would not). InvalidArgument outside [0, 16),
  // or, where the heuristic's list is used, if it has fewer candidates.
  int algo_index = 0;
  // With algo_config.algo_id ≥ 0, that configuration instead of the
  // heuristic's list (chosen offline by matmul_search), where cuBLASLt has
  // the algorithm, cublasLtMatmulAlgoCheck accepts the configuration for
  // the shape and it fits the workspace and the alignment; otherwise
  // (another GPU, another cuBLAS) the heuristic's candidate algo_index as
  // without it. MatmulPlan::configured() and refusal() say which and why.
  // InvalidArgument when a field is out of its attribute's range
  // (split_k ≥ 1, cluster and inner 0..65535, the others ≥ 0).
  MatmulAlgoConfig algo_config;
  // > 0: cuBLASLt's heuristic plans for this many SMs
  // (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET), for a product that runs beside
  // work on other streams; 0: the whole device. (A configuration taken
  // from algo_config is not the heuristic's choice for the target; the
  // target stays on the descriptor for cuBLASLt to read at run time.)
  int sm_count_target = 0;
};

// The three products of a Linear W [out, in] over `rows` rows (the table
// in the file comment), dense row-major operands: forward Y[rows, out] =
// X[rows, in] · Wᵀ (+ beta · Y: beta 1 adds into the residual), dX[rows,
// in] = dY[rows, out] · W, dW[out, in] = dY[rows, out]ᵀ · X[rows, in].
MatmulShape LinearForwardShape(std::string name, int64_t rows, int64_t out,
                               int64_t in, float beta = 0.0f);
MatmulShape LinearDxShape(std::string name, int64_t rows, int64_t out,
                          int64_t in);
MatmulShape LinearDwShape(std::string name, int64_t rows, int64_t out,
                          int64_t in);

class MatmulPlan {
 public:
  ~MatmulPlan();
  MatmulPlan(const MatmulPlan&) = delete;
  MatmulPlan& operator=(const MatmulPlan&) = delete;

  // Builds descriptors and picks the algorithm. `workspace_bytes` is the size
  // of the workspace every Run() will be given. Errors: InvalidArgument for
  // inconsistent shapes; Internal (naming the cuBLASLt call) otherwise, incl.
  // when the heuristic finds no algorithm.
  static absl::StatusOr<std::unique_ptr<MatmulPlan>> Create(
      cublasLtHandle_t handle, const MatmulShape& shape,
      size_t workspace_bytes);

  // Enqueues the product on `stream`. `c` may be nullptr when beta == 0 (then
  // d is used). Checks pointer alignment (InvalidArgument).
  absl::Status Run(const __nv_bfloat16* a, const __nv_bfloat16* b,
                   const float* c, float* d, void* workspace,
                   cudaStream_t stream) const;

  // For plans with d_bf16 (beta must be 0).
  absl::Status RunBf16(const __nv_bfloat16* a, const __nv_bfloat16* b,
                       __nv_bfloat16* d, void* workspace,
                       cudaStream_t stream) const;

  const MatmulShape& shape() const { return shape_; }
  // The configuration of the algorithm the plan runs (read back from it).
  MatmulAlgoConfig algo_config() const;
  // True if the plan runs shape().algo_config, false if the heuristic's
  // candidate (none given, or it was refused: refusal() says why, else
  // it is empty).
  bool configured() const { return configured_; }
  const std::string& refusal() const { return refusal_; }

 private:
  MatmulPlan() = default;
  absl::Status RunRaw(const void* a, const void* b, const void* c, void* d,
                      void* workspace, cudaStream_t stream) const;

  MatmulShape shape_;
  cublasLtHandle_t handle_ = nullptr;
  size_t workspace_bytes_ = 0;
  cublasLtMatmulDesc_t op_desc_ = nullptr;
  // cuBLASLt's column-major A is our B, its B our A (see matmul.cc).
  cublasLtMatrixLayout_t layout_a_ = nullptr;
  cublasLtMatrixLayout_t layout_b_ = nullptr;
  cublasLtMatrixLayout_t layout_c_ = nullptr;
  cublasLtMatmulAlgo_t algo_;
  bool configured_ = false;
  std::string refusal_;
};

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_KERNELS_MATMUL_H_
