// File: common/command_line.h
//
// Command-line spelling shared by every Coppelius binary, applied before
// absl::ParseCommandLine: `--flag-name[=v]` is accepted for Abseil's
// `--flag_name[=v]` (the SPEC and README spell flags with dashes), and
// `-o PATH` for `--o=PATH` (so `-o -` names stdout without Abseil reading
// "-" as a flag), and `--NAME -` for `--NAME=-` for the path flags a binary
// names (`--safetensors -`: Abseil would otherwise warn that "-" looks like
// a flag).
#ifndef COPPELIUS_COMMON_COMMAND_LINE_H_
#define COPPELIUS_COMMON_COMMAND_LINE_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace coppelius {

// What absl::ParseCommandLine would refuse, as a usage error
// (common/status_macros.h UsageError: exit 2, one line) instead of Abseil's
// own "ERROR: ..." and exit 1: a flag no linked file defines ("unknown flag
// --NAME"), a non-bool flag without a value, a value the flag's type cannot
// parse ("--NAME=VALUE: Abseil's reason"). `argv` as NormalizedCommandLine
// leaves it; arguments after "--" are positional. Abseil's own flags
// (--help, --flagfile, ...) are left to it. A value checked here is also
// set (the parse sets it again, from the same arguments).
absl::Status CheckCommandLineFlags(int argc, char** argv);

class NormalizedCommandLine;

// What every binary's main does with its flags: CheckCommandLineFlags, then
// absl::ParseCommandLine (which sets them). The positional arguments,
// argv[0] first, or the usage error (exit 2) for the caller to print.
absl::StatusOr<std::vector<char*>> ParseFlags(
    NormalizedCommandLine& command_line);

// Holds the rewritten arguments; argv() points into them.
class NormalizedCommandLine {
 public:
  // `path_flags`: names (with underscores) of string flags whose value may
  // be "-" given as the next argument.
  NormalizedCommandLine(int argc, char** argv,
                        std::initializer_list<const char*> path_flags = {});
  int argc() const { return static_cast<int>(pointers_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> pointers_;
};

}  // namespace coppelius

#endif  // COPPELIUS_COMMON_COMMAND_LINE_H_
