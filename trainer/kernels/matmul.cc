// File: trainer/kernels/matmul.cc
//
// Row-major to column-major: a row-major [R, S] matrix with leading dimension
// ld is the column-major [S, R] matrix with the same ld. So the row-major
// D = op(A) · op(B) is the column-major Dᵀ = op(B)ᵀ · op(A)ᵀ: cuBLASLt's
// first operand is our B (transposed iff trans_b), its second our A
// (transposed iff trans_a), m = N, n = M.
#include "trainer/kernels/matmul.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "trainer/kernels/cuda_status.h"

namespace coppelius {
namespace {

// Longest heuristic list a plan may index (MatmulShape::algo_index).
constexpr int kMaxCandidates = 16;

absl::Status MakeLayout(cudaDataType_t type, int64_t rows, int64_t cols,
                        int64_t ld, int batch, int64_t stride,
                        cublasLtMatrixLayout_t* layout,
                        const std::string& what) {
  CUBLAS_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(layout, type, rows, cols, ld),
      absl::StrCat(what, ": cublasLtMatrixLayoutCreate"));
  if (batch > 1) {
    int32_t count = batch;
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatrixLayoutSetAttribute(*layout,
                                         CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                         &count, sizeof(count)),
        absl::StrCat(what, ": cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)"));
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatrixLayoutSetAttribute(
            *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
            sizeof(stride)),
        absl::StrCat(what,
                     ": cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)"));
  }
  return absl::OkStatus();
}

// The configuration's fields and their cuBLASLt attributes, with the
// attribute's storage size (4: int32_t or uint32_t, 2: uint16_t; the
// fields' values are in range for either, MatmulShape::algo_config).
// CUBLASLT_ALGO_CONFIG_ID is read only (cublasLtMatmulAlgoInit sets it).
struct ConfigField {
  cublasLtMatmulAlgoConfigAttributes_t attr;
  int MatmulAlgoConfig::*field;
  size_t bytes;
};
constexpr ConfigField kConfigFields[] = {
    {CUBLASLT_ALGO_CONFIG_ID, &MatmulAlgoConfig::algo_id, 4},
    {CUBLASLT_ALGO_CONFIG_TILE_ID, &MatmulAlgoConfig::tile, 4},
    {CUBLASLT_ALGO_CONFIG_STAGES_ID, &MatmulAlgoConfig::stages, 4},
    {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &MatmulAlgoConfig::split_k, 4},
    {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &MatmulAlgoConfig::reduction, 4},
    {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &MatmulAlgoConfig::swizzle, 4},
    {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &MatmulAlgoConfig::custom, 4},
    {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &MatmulAlgoConfig::cluster, 2},
    {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &MatmulAlgoConfig::inner, 2},
};

// cuBLASLt's answers that mean "not this configuration here" (another GPU
// or cuBLAS), as against a failure.
bool IsRefusal(cublasStatus_t st) {
  return st == CUBLAS_STATUS_NOT_SUPPORTED ||
         st == CUBLAS_STATUS_INVALID_VALUE ||
         st == CUBLAS_STATUS_ARCH_MISMATCH;
}

// Sets *algo to configuration `c` (MatmulShape::algo_config, its fields in
// range) for the plan's descriptors. OK with *refusal empty when cuBLASLt
// takes it; OK with *refusal saying why when it does not (no such
// algorithm, cublasLtMatmulAlgoCheck's refusal, more workspace or operand
// alignment than the plan has); Internal, naming the call and the status,
// for another cuBLAS failure or an attribute cuBLASLt would not store.
absl::Status InitConfiguredAlgo(cublasLtHandle_t handle,
                                const MatmulAlgoConfig& c, bool d_bf16,
                                int alignment_bytes, size_t workspace_bytes,
                                cublasLtMatmulDesc_t op,
                                cublasLtMatrixLayout_t a,
                                cublasLtMatrixLayout_t b,
                                cublasLtMatrixLayout_t cd,
                                cublasLtMatmulAlgo_t* algo,
                                const std::string& what,
                                std::string* refusal) {
  refusal->clear();
  const cudaDataType_t out = d_bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const std::string config = MatmulAlgoConfigString(c);
  cublasStatus_t st =
      cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F,
                             CUDA_R_16BF, CUDA_R_16BF, out, out, c.algo_id,
                             algo);
  if (IsRefusal(st)) {
    *refusal = absl::StrCat("configuration ", config, ": no algorithm ",
                            c.algo_id, " here");
    return absl::OkStatus();
  }
  CUBLAS_RETURN_IF_ERROR(
      st, absl::StrCat(what, ": cublasLtMatmulAlgoInit(", config, ")"));
  for (const ConfigField& f : kConfigFields) {
    if (f.attr == CUBLASLT_ALGO_CONFIG_ID) continue;
    const uint32_t wide = static_cast<uint32_t>(c.*f.field);
    const uint16_t narrow = static_cast<uint16_t>(c.*f.field);
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulAlgoConfigSetAttribute(
            algo, f.attr, f.bytes == 2 ? static_cast<const void*>(&narrow)
                                       : static_cast<const void*>(&wide),
            f.bytes),
        absl::StrCat(what, ": cublasLtMatmulAlgoConfigSetAttribute(",
                     static_cast<int>(f.attr), ") of ", config));
  }
  cublasLtMatmulHeuristicResult_t result = {};
  st = cublasLtMatmulAlgoCheck(handle, op, a, b, cd, cd, algo, &result);
  if (IsRefusal(st)) {
    *refusal = absl::StrCat("configuration ", config,
                            ": cublasLtMatmulAlgoCheck refuses it (status ",
                            static_cast<int>(st), ")");
    return absl::OkStatus();
  }
  CUBLAS_RETURN_IF_ERROR(
      st, absl::StrCat(what, ": cublasLtMatmulAlgoCheck(", config, ")"));
  if (result.workspaceSize > workspace_bytes) {
    *refusal = absl::StrCat("configuration ", config, " needs ",
                            result.workspaceSize,
                            " bytes of workspace, the plan has ",
                            workspace_bytes);
    return absl::OkStatus();
  }
  for (const cublasLtMatmulAlgoCapAttributes_t cap :
       {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES,
        CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES,
        CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES}) {
    uint32_t need = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(algo, cap, &need, sizeof(need),
                                          &written) == CUBLAS_STATUS_SUCCESS &&
        written == sizeof(need) &&
        need > static_cast<uint32_t>(alignment_bytes)) {
      *refusal = absl::StrCat("configuration ", config, " needs ", need,
                              "-byte aligned operands, the plan guarantees ",
                              alignment_bytes);
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

}  // namespace

MatmulShape LinearForwardShape(std::string name, int64_t rows, int64_t out,
                               int64_t in, float beta) {
  MatmulShape s;
  s.name = std::move(name);
  s.trans_b = true;
  s.m = rows;
  s.n = out;
  s.k = in;
  s.lda = in;
  s.ldb = in;
  s.ldc = out;
  s.beta = beta;
  return s;
}

MatmulShape LinearDxShape(std::string name, int64_t rows, int64_t out,
                          int64_t in) {
  MatmulShape s;
  s.name = std::move(name);
  s.m = rows;
  s.n = in;
  s.k = out;
  s.lda = out;
  s.ldb = in;
  s.ldc = in;
  return s;
}

MatmulShape LinearDwShape(std::string name, int64_t rows, int64_t out,
                          int64_t in) {
  MatmulShape s;
  s.name = std::move(name);
  s.trans_a = true;
  s.m = out;
  s.n = in;
  s.k = rows;
  s.lda = out;
  s.ldb = in;
  s.ldc = in;
  return s;
}

std::string MatmulAlgoConfigString(const MatmulAlgoConfig& c) {
  return absl::StrCat(c.algo_id, "/", c.tile, "/", c.stages, "/", c.split_k,
                      "/", c.reduction, "/", c.swizzle, "/", c.custom, "/",
                      c.cluster, "/", c.inner);
}

MatmulAlgoConfig MatmulPlan::algo_config() const {
  MatmulAlgoConfig c;  // a field cuBLASLt does not report keeps its default
  for (const ConfigField& f : kConfigFields) {
    size_t written = 0;
    if (f.bytes == 2) {
      uint16_t v = 0;
      if (cublasLtMatmulAlgoConfigGetAttribute(&algo_, f.attr, &v, 2,
                                               &written) ==
          CUBLAS_STATUS_SUCCESS) {
        c.*f.field = v;
      }
    } else {
      int32_t v = 0;  // every 4-byte field's value fits int32 and uint32
      if (cublasLtMatmulAlgoConfigGetAttribute(&algo_, f.attr, &v, 4,
                                               &written) ==
          CUBLAS_STATUS_SUCCESS) {
        c.*f.field = v;
      }
    }
  }
  return c;
}

MatmulPlan::~MatmulPlan() {
  if (layout_c_ != nullptr) cublasLtMatrixLayoutDestroy(layout_c_);
  if (layout_b_ != nullptr) cublasLtMatrixLayoutDestroy(layout_b_);
  if (layout_a_ != nullptr) cublasLtMatrixLayoutDestroy(layout_a_);
  if (op_desc_ != nullptr) cublasLtMatmulDescDestroy(op_desc_);
}

absl::StatusOr<std::unique_ptr<MatmulPlan>> MatmulPlan::Create(
    cublasLtHandle_t handle, const MatmulShape& s, size_t workspace_bytes) {
  const std::string what = absl::StrCat("matmul ", s.name);
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": sizes must be positive (m=", s.m, " n=", s.n,
                     " k=", s.k, " batch=", s.batch, ")"));
  }
  const int64_t a_cols = s.trans_a ? s.m : s.k;
  const int64_t b_cols = s.trans_b ? s.k : s.n;
  if (s.lda < a_cols || s.ldb < b_cols || s.ldc < s.n) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": leading dimensions too small (lda=", s.lda, " needs ", a_cols,
        ", ldb=", s.ldb, " needs ", b_cols, ", ldc=", s.ldc, " needs ", s.n,
        ")"));
  }
  if (s.d_bf16 && s.beta != 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a bf16 result takes no accumulator (beta 0)"));
  }
  if (s.alignment_bytes < 4 || (s.alignment_bytes & (s.alignment_bytes - 1))) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": alignment_bytes must be a power of two >= 4"));
  }
  if (s.algo_index < 0 || s.algo_index >= kMaxCandidates) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": algo_index ", s.algo_index, " outside [0, ", kMaxCandidates,
        ")"));
  }
  // The configuration's fields within their cuBLASLt attributes' types.
  for (const ConfigField& f : kConfigFields) {
    const MatmulAlgoConfig& c = s.algo_config;
    if (c.algo_id < 0 || f.attr == CUBLASLT_ALGO_CONFIG_ID) continue;
    const int v = c.*f.field;
    const int least = f.field == &MatmulAlgoConfig::split_k ? 1 : 0;
    if (v < least || (f.bytes == 2 && v > 65535)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": algo_config ", MatmulAlgoConfigString(c),
          " has a field out of range (split_k >= 1; cluster and inner "
          "0..65535; the others >= 0)"));
    }
  }
  std::unique_ptr<MatmulPlan> plan(new MatmulPlan());
  plan->shape_ = s;
  plan->handle_ = handle;
  plan->workspace_bytes_ = workspace_bytes;

  CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescCreate(&plan->op_desc_, CUBLAS_COMPUTE_32F,
                               CUDA_R_32F),
      absl::StrCat(what, ": cublasLtMatmulDescCreate"));
  // cuBLASLt's A is our B, its B our A.
  const cublasOperation_t op_a = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(plan->op_desc_, CUBLASLT_MATMUL_DESC_TRANSA,
                                     &op_a, sizeof(op_a)),
      absl::StrCat(what, ": cublasLtMatmulDescSetAttribute(TRANSA)"));
  CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(plan->op_desc_, CUBLASLT_MATMUL_DESC_TRANSB,
                                     &op_b, sizeof(op_b)),
      absl::StrCat(what, ": cublasLtMatmulDescSetAttribute(TRANSB)"));
  if (s.sm_count_target > 0) {
    const int32_t sms = s.sm_count_target;
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan->op_desc_,
                                       CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
                                       &sms, sizeof(sms)),
        absl::StrCat(what, ": cublasLtMatmulDescSetAttribute(SM_COUNT_TARGET)"));
  }

  // Column-major shapes of the stored matrices.
  // Our B stored row-major: [K, N] (plain) or [N, K] (trans_b), i.e.
  // column-major [N, K] or [K, N].
  const int64_t la_rows = s.trans_b ? s.k : s.n;
  const int64_t la_cols = s.trans_b ? s.n : s.k;
  // Our A stored row-major: [M, K] (plain) or [K, M] (trans_a).
  const int64_t lb_rows = s.trans_a ? s.m : s.k;
  const int64_t lb_cols = s.trans_a ? s.k : s.m;
  {
    absl::Status st = MakeLayout(CUDA_R_16BF, la_rows, la_cols, s.ldb, s.batch,
                                 s.stride_b, &plan->layout_a_, what);
    if (!st.ok()) return st;
    st = MakeLayout(CUDA_R_16BF, lb_rows, lb_cols, s.lda, s.batch, s.stride_a,
                    &plan->layout_b_, what);
    if (!st.ok()) return st;
    st = MakeLayout(s.d_bf16 ? CUDA_R_16BF : CUDA_R_32F, s.n, s.m, s.ldc,
                    s.batch, s.stride_c, &plan->layout_c_, what);
    if (!st.ok()) return st;
  }

  if (s.algo_config.algo_id >= 0) {
    // Refused: the heuristic's candidate below instead.
    const absl::Status st = InitConfiguredAlgo(
        handle, s.algo_config, s.d_bf16, s.alignment_bytes, workspace_bytes,
        plan->op_desc_, plan->layout_a_, plan->layout_b_, plan->layout_c_,
        &plan->algo_, what, &plan->refusal_);
    if (!st.ok()) return st;
    if (plan->refusal_.empty()) {
      plan->configured_ = true;
      return plan;
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref),
                         absl::StrCat(what, ": cublasLtMatmulPreferenceCreate"));
  uint64_t ws = workspace_bytes;
  uint32_t align = static_cast<uint32_t>(s.alignment_bytes);
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  const cublasLtMatmulPreferenceAttributes_t align_attrs[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (auto attr : align_attrs) {
    if (st != CUBLAS_STATUS_SUCCESS) break;
    st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align,
                                              sizeof(align));
  }
  cublasLtMatmulHeuristicResult_t results[kMaxCandidates] = {};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(
        handle, plan->op_desc_, plan->layout_a_, plan->layout_b_,
        plan->layout_c_, plan->layout_c_, pref, s.algo_index + 1, results,
        &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  CUBLAS_RETURN_IF_ERROR(
      st, absl::StrCat(what, ": cublasLtMatmulAlgoGetHeuristic"));
  if (found < 1) {
    return absl::InternalError(absl::StrCat(
        what, ": cublasLtMatmulAlgoGetHeuristic found no algorithm (m=", s.m,
        " n=", s.n, " k=", s.k, " batch=", s.batch, ")"));
  }
  if (found <= s.algo_index) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": algo_index ", s.algo_index, " but the heuristic offers only ",
        found, " candidates"));
  }
  plan->algo_ = results[s.algo_index].algo;
  return plan;
}

absl::Status MatmulPlan::Run(const __nv_bfloat16* a, const __nv_bfloat16* b,
                             const float* c, float* d, void* workspace,
                             cudaStream_t stream) const {
  if (shape_.d_bf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "matmul ", shape_.name, ": plan has a bf16 result, use RunBf16"));
  }
  return RunRaw(a, b, c, d, workspace, stream);
}

absl::Status MatmulPlan::RunBf16(const __nv_bfloat16* a,
                                 const __nv_bfloat16* b, __nv_bfloat16* d,
                                 void* workspace, cudaStream_t stream) const {
  if (!shape_.d_bf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "matmul ", shape_.name, ": plan has an fp32 result, use Run"));
  }
  return RunRaw(a, b, nullptr, d, workspace, stream);
}

absl::Status MatmulPlan::RunRaw(const void* a, const void* b, const void* c,
                                void* d, void* workspace,
                                cudaStream_t stream) const {
  const uintptr_t mask = static_cast<uintptr_t>(shape_.alignment_bytes) - 1;
  if ((reinterpret_cast<uintptr_t>(a) & mask) ||
      (reinterpret_cast<uintptr_t>(b) & mask) ||
      (reinterpret_cast<uintptr_t>(d) & mask) ||
      (c != nullptr && (reinterpret_cast<uintptr_t>(c) & mask))) {
    return absl::InvalidArgumentError(
        absl::StrCat("matmul ", shape_.name, ": a pointer is not aligned to ",
                     shape_.alignment_bytes, " bytes"));
  }
  if (c == nullptr) c = d;
  const float alpha = shape_.alpha;
  const float beta = shape_.beta;
  CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmul(handle_, op_desc_, &alpha, b, layout_a_, a, layout_b_,
                     &beta, c, layout_c_, d, layout_c_, &algo_, workspace,
                     workspace_bytes_, stream),
      absl::StrCat("matmul ", shape_.name, ": cublasLtMatmul"));
  return absl::OkStatus();
}

}  // namespace coppelius
