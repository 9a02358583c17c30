#include "common/command_line.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "common/status_line.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
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
  EXPECT_TRUE(Check({"x", "-h"}).ok());      // FindUsageRequest's
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      // Flags are named as help spells them, with dashes (the tools see
      // the command line normalized: --vocab-size as --vocab_size).
      {{"x", "--test_cuont=3"}, "unknown flag --test-cuont; see --help"},
      {{"x", "in", "-bogus"}, "unknown flag --bogus; see --help"},
      {{"x", "--notest_count"}, "unknown flag --notest-count; see --help"},
      {{"x", "--test_count=abc"},
       "--test-count=abc: Illegal value 'abc' specified for flag "
       "'test_count'"},
      {{"x", "--test_switch=maybe"},
       "--test-switch=maybe: Illegal value 'maybe' specified for flag "
       "'test_switch'"},
      {{"x", "--test_count"}, "--test-count: missing a value; see --help"},
      {{"x", "--o"}, "unknown flag -o; see --help"},
      // Abseil's flags that read flags from elsewhere: refused up front
      // (Abseil's parser ended a bad value with its own lines, exit 1).
      {{"x", "--flagfile=/no/such/file"},
       "--flagfile is not supported; give the flags on the command line"},
      {{"x", "-flagfile", "flags.txt"},
       "--flagfile is not supported; give the flags on the command line"},
      {{"x", "--fromenv=test_count"},
       "--fromenv is not supported; give the flags on the command line"},
      {{"x", "--tryfromenv=test_count"},
       "--tryfromenv is not supported; give the flags on the command line"},
      {{"x", "--undefok=foo", "--foo=1"},
       "--undefok is not supported; every flag must be one this tool knows "
       "(see --help)"},
  };
  for (const auto& c : cases) {
    const absl::Status s = Check(c.args);
    EXPECT_TRUE(IsUsageError(s)) << s;
    EXPECT_EQ(s.message(), c.message);
  }
}

std::optional<UsageRequest> Find(std::vector<std::string> in) {
  std::vector<char*> argv;
  for (auto& s : in) argv.push_back(&s[0]);
  return FindUsageRequest(static_cast<int>(argv.size()), argv.data());
}

// GivenFlagNames: one or two dashes, with or without "=value", "--noname"
// as given; positional arguments and anything after "--" are not flags.
// WarnUnusedFlags: one line per unused flag given (by name or "no" form),
// in the list's order, nothing for one not given.
TEST(GivenFlagNames, NamesAndWarnings) {
  std::vector<std::string> args = {"x",       "in.txt",  "-vocab=v",
                                   "--noprogress", "--threads", "4",
                                   "--",      "--json"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  const std::set<std::string> given =
      GivenFlagNames(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(given, (std::set<std::string>{"vocab", "noprogress", "threads"}));
  std::ostringstream err;
  WarnUnusedFlags("tool", "mode", given,
                  {"threads", "json", "progress"},
                  err);
  EXPECT_EQ(err.str(),
            "tool: warning: --threads is not used by mode: ignored\n"
            "tool: warning: --progress is not used by mode: ignored\n");
}

// -h, -help and --help ask for the usage, and so do Abseil's other usage
// flags; a flag's value ("--test_path -h") and what follows "--" do not.
TEST(FindUsageRequest, FlagsOnlyNotValuesNorAfterDoubleDash) {
  const struct {
    std::vector<std::string> args;
    std::string name, value;  // name "": no request
  } cases[] = {
      {{"x", "-h"}, "help", ""},
      {{"x", "--h"}, "help", ""},
      {{"x", "-help"}, "help", ""},
      {{"x", "in.txt", "--test_count=3", "--help"}, "help", ""},
      {{"x", "--bogus", "-h"}, "help", ""},  // help wins over errors
      {{"x", "--help=count"}, "help", "count"},
      {{"x", "--helpfull", "-h"}, "helpfull", ""},  // the first one
      {{"x", "--helpon=command_line_test"}, "helpon", "command_line_test"},
      {{"x", "--version"}, "version", ""},
      {{"x", "--test_path", "-h"}, "", ""},  // the value of --test_path
      {{"x", "--test_count", "-h"}, "", ""},
      {{"x", "--test_path=-h"}, "", ""},
      {{"x", "--test_switch", "-h"}, "help", ""},  // a bool takes no value
      {{"x", "--", "-h"}, "", ""},
      {{"x", "--only_check_args"}, "", ""},
      {{"x", "--hel"}, "", ""},
  };
  for (const auto& c : cases) {
    const std::optional<UsageRequest> r = Find(c.args);
    const std::string joined = ::testing::PrintToString(c.args);
    if (c.name.empty()) {
      EXPECT_FALSE(r.has_value()) << joined << ": " << r->name;
      continue;
    }
    ASSERT_TRUE(r.has_value()) << joined;
    EXPECT_EQ(r->name, c.name) << joined;
    EXPECT_EQ(r->value, c.value) << joined;
  }
}

void SetUsageOnce() {
  static const bool set = [] {
    absl::SetProgramUsageMessage("x IN -o OUT [--test-count=N]");
    return true;
  }();
  (void)set;
}

// --help: the usage message and this program's own flags (those defined in
// a file named like it, command_line_test.cc); --helpmatch: the matching
// flags only.
TEST(UsageText, AbseilsHelpOutput) {
  SetUsageOnce();
  const std::string help =
      UsageText("/some/dir/command_line_test", {"help", ""});
  EXPECT_THAT(help, ::testing::StartsWith(
                        "command_line_test: x IN -o OUT [--test-count=N]\n"));
  EXPECT_THAT(help, ::testing::HasSubstr("--test_count (an int flag"));
  EXPECT_THAT(help, ::testing::HasSubstr("--test_path (a string flag"));
  const std::string match =
      UsageText("/some/dir/command_line_test", {"helpmatch", "test_switch"});
  EXPECT_THAT(match, ::testing::HasSubstr("--test_switch (a bool flag"));
  EXPECT_THAT(match, ::testing::Not(::testing::HasSubstr("--test_count")));
}

// What every tool's main does with ParseFlags' outcome (tokenize_main.cc
// and the others): the error line and its exit code, 0 for answered usage,
// on the command line `in`.
int ParseAsMain(std::vector<std::string> in) {
  std::vector<char*> argv;
  for (auto& s : in) argv.push_back(&s[0]);
  NormalizedCommandLine cl(static_cast<int>(argv.size()), argv.data());
  const absl::StatusOr<ParsedFlags> parsed = ParseFlags("tool", cl);
  if (!parsed.ok()) {
    std::cerr << StatusLine("tool", parsed.status()) << std::endl;
    return ExitCodeOf(parsed.status());
  }
  return parsed->usage_answered ? 0 : 3;
}

// A usage request is answered: the text on stdout, exit 0 (Abseil's parser
// exits 1 for --help and calls -h an unknown flag).
TEST(ParseFlagsDeathTest, UsageRequestExitsZero) {
  SetUsageOnce();
  for (const char* h : {"-h", "-help", "--help", "--helpfull", "--version"}) {
    EXPECT_EXIT(
        {
          const int null_fd = open("/dev/null", O_WRONLY);
          dup2(null_fd, STDOUT_FILENO);
          std::exit(ParseAsMain({"x", "--bogus", h}));
        },
        testing::ExitedWithCode(0), "^$")
        << h;
  }
}

// --version: one line naming the tool, Coppelius and how command_line.cc
// (so the tool) was compiled, with NDEBUG or without (it printed "tool" and
// "Debug build (NDEBUG not #defined)", which describes Debian's prebuilt
// Abseil, not the -c opt tools).
TEST(ParseFlagsDeathTest, VersionNamesTheToolAndItsBuild) {
  SetUsageOnce();
  const std::string path = testing::TempDir() + "/version.out";
  EXPECT_EXIT(
      {
        const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, STDOUT_FILENO);
        std::exit(ParseAsMain({"x", "--version"}));
      },
      testing::ExitedWithCode(0), "^$");
  std::string text(4096, '\0');
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  text.resize(static_cast<size_t>(std::max<ssize_t>(0, read(fd, &text[0], text.size()))));
  close(fd);
#ifdef NDEBUG
  EXPECT_EQ(text, "tool (Coppelius) \u2014 optimized build\n");
#else
  EXPECT_EQ(text, "tool (Coppelius) \u2014 debug build\n");
#endif
}

// Usage that standard output cannot take: exit 1, one line with errno's
// reason (it went nowhere, with exit 1 and no word, under Abseil).
TEST(ParseFlagsDeathTest, UsageToAFullDeviceIsOneLineExitOne) {
  struct stat st;
  if (stat("/dev/full", &st) != 0) GTEST_SKIP() << "no /dev/full";
  SetUsageOnce();
  EXPECT_EXIT(
      {
        const int full_fd = open("/dev/full", O_WRONLY);
        dup2(full_fd, STDOUT_FILENO);
        std::exit(ParseAsMain({"x", "-h"}));
      },
      testing::ExitedWithCode(1),
      "^tool: RESOURCE_EXHAUSTED: --help: writing <stdout>: No space left on "
      "device\n$");
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

// The usage errors' description of positional arguments: the count, the
// arguments quoted and escaped, at most six, and the "--" note only when
// one looks like a flag ("-" is standard input, not a flag).
TEST(DescribePositionalArguments, CountsQuotesAndExplainsDoubleDash) {
  EXPECT_EQ(DescribePositionalArguments({}), "0");
  EXPECT_EQ(DescribePositionalArguments({"a.txt", "-"}), "2: \"a.txt\" \"-\"");
  EXPECT_EQ(DescribePositionalArguments({"encode", "c.txt", "-o", "a.u32"}),
            "4: \"encode\" \"c.txt\" \"-o\" \"a.u32\" (after \"--\" every "
            "word is an argument, flags too)");
  EXPECT_EQ(DescribePositionalArguments({"tab\there"}), "1: \"tab\\there\"");
  EXPECT_EQ(DescribePositionalArguments({"1", "2", "3", "4", "5", "6", "7", "8"}),
            "8: \"1\" \"2\" \"3\" \"4\" \"5\" \"6\" ...");
}

}  // namespace
}  // namespace coppelius
