#include "common/as_nobody.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace coppelius {
namespace {

// The child cannot open a mode-000 file the parent made (as root, because
// it has become nobody; otherwise because the mode refuses its owner too),
// while the parent, as root, can; and the child's string comes back.
TEST(RunAsNobody, ChildIsRefusedAModeZeroFile) {
  const std::string dir = NobodyDirectory("as_nobody_test");
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/secret";
  std::ofstream(path) << "x";
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  const std::string result = RunAsNobody([&] {
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd >= 0) close(fd);
    return std::string(fd >= 0 ? "opened" : "refused");
  });
  EXPECT_EQ(result, "refused");
  EXPECT_EQ(RunAsNobody([] { return std::string(); }),
            "RunAsNobody: the child returned nothing");
  chmod(path.c_str(), 0600);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace coppelius
