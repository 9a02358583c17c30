#include "common/command_line.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace coppelius {
namespace {

std::vector<std::string> Normalize(std::vector<std::string> in) {
  std::vector<char*> argv;
  for (auto& s : in) argv.push_back(&s[0]);
  NormalizedCommandLine cl(static_cast<int>(argv.size()), argv.data());
  return std::vector<std::string>(cl.argv(), cl.argv() + cl.argc());
}

TEST(NormalizedCommandLine, DashesInFlagNamesBecomeUnderscores) {
  EXPECT_EQ(Normalize({"train", "--checkpoint-in=a-b.ckpt", "--no-progress"}),
            (std::vector<std::string>{"train", "--checkpoint_in=a-b.ckpt",
                                      "--no_progress"}));
}

TEST(NormalizedCommandLine, DashOJoinsItsValueAndPositionalsStay) {
  EXPECT_EQ(Normalize({"x", "in-file.txt", "-o", "-", "-"}),
            (std::vector<std::string>{"x", "in-file.txt", "--o=-", "-"}));
}

TEST(NormalizedCommandLine, PathFlagJoinsAFollowingDashOnly) {
  std::vector<std::string> in = {"inspect", "export", "--safetensors", "-",
                                 "--json", "-", "--safe-tensors", "a.ckpt"};
  std::vector<char*> argv;
  for (auto& s : in) argv.push_back(&s[0]);
  NormalizedCommandLine cl(static_cast<int>(argv.size()), argv.data(),
                           {"safetensors"});
  EXPECT_EQ(std::vector<std::string>(cl.argv(), cl.argv() + cl.argc()),
            (std::vector<std::string>{"inspect", "export", "--safetensors=-",
                                      "--json", "-", "--safe_tensors",
                                      "a.ckpt"}));
}

TEST(NormalizedCommandLine, NothingChangesAfterDoubleDash) {
  EXPECT_EQ(Normalize({"x", "--", "--weird-name"}),
            (std::vector<std::string>{"x", "--", "--weird-name"}));
}

}  // namespace
}  // namespace coppelius
