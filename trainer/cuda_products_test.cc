// File: trainer/cuda_products_test.cc
//
// The step's product shapes against what they must be independently of how
// they are written: every operand fits its leading dimension, the three
// products of each linear layer agree on its [out, in] matrix, and their
// FLOP add up to 6 · T · (matrix parameters of one block plus the tied
// embedding) — the 6·N·T rule of a forward and backward pass, with N
// counted from model_config's tensor layout.
#include "trainer/cuda_products.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/model_config.h"

namespace coppelius {
namespace {

TEST(CudaProductsTest, OperandsFitTheirLeadingDimensions) {
  for (const char* name : {"coppelius", "tiny"}) {
    auto config = ModelConfigByName(name);
    ASSERT_TRUE(config.ok()) << config.status();
    const std::vector<MatmulShape> shapes = CudaProductShapes(*config);
    ASSERT_EQ(shapes.size(), static_cast<size_t>(kNumCudaProducts));
    for (const MatmulShape& s : shapes) {
      SCOPED_TRACE(s.name);
      EXPECT_FALSE(s.name.empty());
      EXPECT_GT(s.m, 0);
      EXPECT_GT(s.n, 0);
      EXPECT_GT(s.k, 0);
      // Row-major: A is [m, k] (or [k, m] transposed), B is [k, n] (or [n, k]).
      EXPECT_GE(s.lda, s.trans_a ? s.m : s.k);
      EXPECT_GE(s.ldb, s.trans_b ? s.k : s.n);
      EXPECT_GE(s.ldc, s.n);
      EXPECT_EQ(s.batch, 1);
    }
  }
}

// Σ 2·m·n·k over the 15 products = 3 passes × 2 · T · Σ out·in over the five
// linear layers, whose matrices are read from the P plane's layout.
TEST(CudaProductsTest, FlopsAreSixTimesTokensTimesMatrixParameters) {
  auto config = ModelConfigByName("coppelius");
  ASSERT_TRUE(config.ok()) << config.status();
  int64_t matrix_parameters = 0;  // embedding + block 0's 2-D tensors
  for (const TensorInfo& t : ParameterLayout(*config)) {
    const bool block0 = t.name.rfind("blocks.0.", 0) == 0;
    if (t.shape.size() == 2 && (block0 || t.name == "embedding")) {
      matrix_parameters += t.num_elements();
    }
  }
  double flops = 0;
  for (const MatmulShape& s : CudaProductShapes(*config)) {
    flops += 2.0 * s.m * s.n * s.k;
  }
  EXPECT_EQ(flops, 6.0 * config->T * static_cast<double>(matrix_parameters));
}

TEST(CudaProductsTest, ResidualAndBf16ResultWhereTheBackendNeedsThem) {
  auto config = ModelConfigByName("coppelius");
  ASSERT_TRUE(config.ok()) << config.status();
  const std::vector<MatmulShape> shapes = CudaProductShapes(*config);
  for (int p = 0; p < kNumCudaProducts; ++p) {
    const bool residual = p == kOutputForward || p == kDownForward;
    EXPECT_EQ(shapes[p].beta, residual ? 1.0f : 0.0f) << shapes[p].name;
    EXPECT_EQ(shapes[p].d_bf16, p == kOutputDx) << shapes[p].name;
  }
}

}  // namespace
}  // namespace coppelius
