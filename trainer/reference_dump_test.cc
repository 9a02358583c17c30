#include "trainer/reference_dump.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/adamw.h"
#include "trainer/initialization.h"
#include "trainer/model_config.h"
#include "trainer/reference_backend.h"

namespace coppelius {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

// A SPEC §2 token cache: 16-byte header (mtime, size), then u32 LE ids.
std::vector<uint32_t> WriteCache(const std::string& path, int64_t n) {
  std::mt19937_64 rng(99);
  std::vector<uint32_t> ids(n);
  for (uint32_t& id : ids) id = static_cast<uint32_t>(rng() % 512);
  std::string bytes(16, '\0');
  bytes.append(reinterpret_cast<const char*>(ids.data()), 4 * ids.size());
  EXPECT_TRUE(WriteFileAtomically(path, bytes).ok());
  return ids;
}

std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = ReadFile(path).value();
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST(RunReferenceDump, WritesWhatTheOracleReads) {
  const ModelConfig config = ModelConfigByName("tiny").value();
  const int64_t n = NumParameters(config), T = config.T;
  const std::string dir = TempDir();
  const std::vector<uint32_t> ids = WriteCache(dir + "/c.tok", 5 * T + 1);
  ReferenceDumpOptions options;
  options.config = "tiny";
  options.cache_path = dir + "/c.tok";
  options.first_context = 2;
  options.steps = 2;
  options.num_threads = 2;
  options.out_dir = dir;
  const absl::Status status = RunReferenceDump(options);
  ASSERT_TRUE(status.ok()) << status;

  // The initial image is the fresh initialization.
  std::vector<float> want(3 * n);
  ASSERT_TRUE(InitializeImage(config, 1, want.data()).ok());
  EXPECT_EQ(ReadFloats(dir + "/initial_pmv.f32"), want);
  // Steps 0 and 1 by hand: contexts 2 and 3, updates 1 and 2.
  std::vector<float> losses(2 * T), grads(n), grads0;
  for (int s = 0; s < 2; ++s) {
    const uint32_t* in = ids.data() + (2 + s) * T;
    ASSERT_TRUE(ComputeLossAndGradients(config, ReferenceOptions(), want.data(),
                                        in, in + 1, losses.data() + s * T,
                                        grads.data())
                    .ok());
    if (s == 0) grads0 = grads;
    ASSERT_TRUE(AdamWUpdate(config, AdamWHyperparameters(), s + 1,
                            grads.data(), 1, want.data())
                    .ok());
  }
  EXPECT_EQ(ReadFloats(dir + "/losses.f32"), losses);
  EXPECT_EQ(ReadFloats(dir + "/gradients_step0.f32"), grads0);
  EXPECT_EQ(ReadFloats(dir + "/final_pmv.f32"), want);
  const std::string manifest = ReadFile(dir + "/manifest.txt").value();
  for (const char* line : {"config=tiny\n", "V=512\n", "T=64\n", "steps=2\n",
                           "first_context=2\n", "update_count=0\n",
                           "bf16_matmul_operands=1\n",
                           "num_parameters=133760\n"}) {
    EXPECT_THAT(manifest, HasSubstr(line));
  }
}

TEST(RunReferenceDump, RefusesTooFewContexts) {
  const std::string dir = TempDir();
  WriteCache(dir + "/short.tok", 3 * 64 + 1);  // 3 contexts
  ReferenceDumpOptions options;
  options.cache_path = dir + "/short.tok";
  options.first_context = 1;
  options.steps = 3;
  options.out_dir = dir;
  const absl::Status status = RunReferenceDump(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("holds 3 contexts"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("needs 4"));
}

TEST(RunReferenceDump, RefusesWrongSizedImage) {
  const std::string dir = TempDir();
  WriteCache(dir + "/c2.tok", 2 * 64 + 1);
  ASSERT_TRUE(WriteFileAtomically(dir + "/bad.pmv", std::string(12, '\0')).ok());
  ReferenceDumpOptions options;
  options.cache_path = dir + "/c2.tok";
  options.pmv_path = dir + "/bad.pmv";
  options.out_dir = dir;
  const absl::Status status = RunReferenceDump(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("12 bytes, expected 1605120"));
}

TEST(RunReferenceDump, RefusesUnknownConfig) {
  ReferenceDumpOptions options;
  options.config = "huge";
  EXPECT_EQ(RunReferenceDump(options).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace coppelius
