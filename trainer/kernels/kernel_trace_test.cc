// Host-only tests of kernel_trace.h: the CSV writer's exact output and the
// errors of misuse. Starting a trace needs CUPTI and a device; it is
// exercised by step_bench --trace on the GPU machine (tools/gpu_checks.sh
// TRACE=1).
#include "trainer/kernels/kernel_trace.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace coppelius {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(KernelTraceTest, WritesOneCsvLinePerRecord) {
  KernelRecord a;
  a.name = "_ZN9coppelius11AdamWKernelEv";
  a.start = 1000;
  a.end = 3500;
  a.stream = 13;
  a.channel = 2;
  a.graph_node = 77;
  a.grid[0] = 26;
  a.grid[1] = 1;
  a.grid[2] = 1;
  a.block[0] = 1024;
  a.block[1] = 1;
  a.block[2] = 1;
  KernelRecord b;
  b.name = "nvjet_sm90_tss_64x64";
  b.start = 18446744073709551000ull;  // u64 beyond int64
  b.end = 18446744073709551615ull;
  b.dynamic_shared = 98304;
  const std::string path = testing::TempDir() + "/trace.csv";
  ASSERT_TRUE(WriteKernelTrace({a, b}, path).ok());
  EXPECT_EQ(ReadFile(path),
            "name,start_ns,end_ns,stream,channel,graph_node,grid_x,grid_y,"
            "grid_z,block_x,block_y,block_z,dynamic_shared\n"
            "_ZN9coppelius11AdamWKernelEv,1000,3500,13,2,77,26,1,1,1024,1,1,0\n"
            "nvjet_sm90_tss_64x64,18446744073709551000,18446744073709551615,"
            "0,0,0,0,0,0,0,0,0,98304\n");
  std::remove(path.c_str());
}

TEST(KernelTraceTest, UnwritablePathIsInvalidArgumentNamingIt) {
  const std::string path = testing::TempDir() + "/no/such/dir/trace.csv";
  const absl::Status s = WriteKernelTrace({}, path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find(path), std::string::npos)
      << s.message();
}

TEST(KernelTraceTest, StopWithoutStartIsFailedPrecondition) {
  const auto records = StopKernelTrace();
  EXPECT_EQ(records.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace coppelius
