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

namespace coppelius {

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
