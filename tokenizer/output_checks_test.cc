#include "tokenizer/output_checks.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

using ::testing::HasSubstr;

std::string TmpPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = TmpPath(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

TEST(CheckNotCoppeliusFile, RefusesACheckpoint) {
  const std::string path =
      Write("victim.ckpt", std::string("COPPCKPT\x01\0\0\0\x80\0\0\0", 16));
  absl::Status s = CheckNotCoppeliusFile(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("-o " + path + ": exists and is a Coppelius "
                        "checkpoint"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("choose another output"));
  EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos);
  // Exactly the 8 bytes of the magic are enough.
  EXPECT_EQ(CheckNotCoppeliusFile(Write("magic8", "COPPCKPT")).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CheckNotCoppeliusFile, RefusesAResultFileWithItsMarker) {
  const std::string path = Write(
      "result.bin", std::string("\xbe\xba\xfe\xca\xbe\xba\xfe\xca\0\0\0\0", 12));
  absl::Status s = CheckNotCoppeliusFile(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("-o " + path + ": exists and is a Coppelius result "
                        "file"));
}

TEST(CheckNotCoppeliusFile, AcceptsEverythingElse) {
  EXPECT_TRUE(CheckNotCoppeliusFile("-").ok());
  EXPECT_TRUE(CheckNotCoppeliusFile(TmpPath("does-not-exist")).ok());
  EXPECT_TRUE(CheckNotCoppeliusFile(Write("empty", "")).ok());
  EXPECT_TRUE(CheckNotCoppeliusFile(Write("short", "COPPCKP")).ok());
  EXPECT_TRUE(CheckNotCoppeliusFile(Write("near", "COPPCKPx and more")).ok());
  EXPECT_TRUE(CheckNotCoppeliusFile(Write("lower", "coppckpt")).ok());
  EXPECT_TRUE(CheckNotCoppeliusFile(
                  Write("near_marker",
                        std::string("\xbe\xba\xfe\xca\xbe\xba\xfe\xcb", 8)))
                  .ok());
  // The magic later in the file is not a signature.
  EXPECT_TRUE(CheckNotCoppeliusFile(Write("later", " COPPCKPT")).ok());
  // A previous encode output (u32 ids) and a vocabulary.
  EXPECT_TRUE(
      CheckNotCoppeliusFile(Write("ids.u32", std::string("\x05\0\0\0\x01\x01\0\0", 8)))
          .ok());
  EXPECT_TRUE(CheckNotCoppeliusFile(Write("v.tiktoken", "AA== 0\nAQ== 1\n")).ok());
  EXPECT_TRUE(CheckNotCoppeliusFile("/dev/null").ok());
}

}  // namespace
}  // namespace coppelius
