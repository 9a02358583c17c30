#include "common/command_line.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, test_count, 1, "an int flag for the tests below");
ABSL_FLAG(bool, test_switch, false, "a bool flag for the tests below");
ABSL_FLAG(std::string, test_path, "", "a string flag for the tests below");

namespace coppelius {
namespace {

absl::Status Check(std::vector<std::string> in) {
  std::vector<char*> argv;
  for (auto& s : in) argv.push_back(&s[0]);
  return CheckCommandLineFlags(static_cast<int>(argv.size()), argv.data());
}

// What Abseil's parser would refuse with "ERROR: ..." and exit 1 is a usage
// error (exit 2), one line naming the flag.
TEST(CheckCommandLineFlags, UnknownFlagsAndBadValuesAreUsageErrors) {
  EXPECT_TRUE(Check({"x", "--test_count=3", "--test_switch", "in.txt",
                     "--notest_switch", "--test_path", "-", "-test_count=4",
                     "--", "--not-a-flag"})
                  .ok());
  EXPECT_TRUE(Check({"x", "--help"}).ok());  // Abseil's own
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"x", "--test_cuont=3"}, "unknown flag --test_cuont; see --help"},
      {{"x", "in", "-bogus"}, "unknown flag --bogus; see --help"},
      {{"x", "--notest_count"}, "unknown flag --notest_count; see --help"},
      {{"x", "--test_count=abc"},
       "--test_count=abc: Illegal value 'abc' specified for flag "
       "'test_count'"},
      {{"x", "--test_switch=maybe"},
       "--test_switch=maybe: Illegal value 'maybe' specified for flag "
       "'test_switch'"},
      {{"x", "--test_count"}, "--test_count: missing a value; see --help"},
  };
  for (const auto& c : cases) {
    const absl::Status s = Check(c.args);
    EXPECT_TRUE(IsUsageError(s)) << s;
    EXPECT_EQ(s.message(), c.message);
  }
}

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
