#include "common/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace coppelius {
namespace {

std::string TestDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

int CountEntries(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") ++n;
  }
  closedir(d);
  return n;
}

TEST(WriteFileAtomically, WritesAndReplacesLeavingNoTemporary) {
  std::string dir = TestDir() + "/atomic";
  mkdir(dir.c_str(), 0755);
  std::string path = dir + "/out.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "second, longer").ok());
  auto read = ReadFile(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, "second, longer");
  EXPECT_EQ(CountEntries(dir), 1);
}

TEST(ReadFile, MissingPathIsNotFoundNamingThePath) {
  auto read = ReadFile(TestDir() + "/no/such/file");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(read.status().message().find("no/such/file"), std::string::npos);
}

TEST(WriteFileAtomically, UnwritableDirectoryFailsAndLeavesOldFile) {
  EXPECT_FALSE(WriteFileAtomically(TestDir() + "/missing-dir/x", "a").ok());
}

TEST(PreadAll, ShortFileIsDataLossWithOffset) {
  std::string path = TestDir() + "/short.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "abc").ok());
  int fd = open(path.c_str(), O_RDONLY);
  char buf[8];
  absl::Status s = PreadAll(fd, buf, 8, 0, path);
  close(fd);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("offset 3"), std::string::npos) << s;
}

}  // namespace
}  // namespace coppelius
