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
#include <ostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coppelius {

// What absl::ParseCommandLine would refuse, as a usage error
// (common/status_macros.h UsageError: exit 2, one line) instead of Abseil's
// own "ERROR: ..." and exit 1: a flag no linked file defines ("unknown flag
// --NAME"), a non-bool flag without a value, a value the flag's type cannot
// parse ("--NAME=VALUE: Abseil's reason"), and Abseil's --flagfile,
// --fromenv and --tryfromenv, whatever their value ("--flagfile is not
// supported; give the flags on the command line"). `argv` as
// NormalizedCommandLine leaves it; arguments after "--" are positional.
// Abseil's other flags (--help, --undefok, ...) and -h are left to it and
// to FindUsageRequest.
// A value checked here is also set (the parse sets it again, from the same
// arguments).
absl::Status CheckCommandLineFlags(int argc, char** argv);

// A request for Abseil's usage output: `name` as Abseil spells it ("help"
// for -h), `value` what followed "=" ("" when nothing did).
struct UsageRequest {
  std::string name;
  std::string value;
};

// The first usage flag on the command line: -h, -help or --help (the
// usage and the binary's own flags), --help=SUBSTRING, --helpfull,
// --helpshort, --helppackage, --helpon=FILE, --helpmatch=SUBSTRING or
// --version (one or two dashes each), as a flag: not the value of the flag
// before it ("--vocab -h"), not after "--". None: std::nullopt.
std::optional<UsageRequest> FindUsageRequest(int argc, char** argv);

// What Abseil prints for `request` (absl/flags/internal/usage.h
// HandleUsageFlags: the program usage message, then the flags it selects),
// `argv0` naming the program.
std::string UsageText(const char* argv0, const UsageRequest& request);

// What --version prints: "<program> (Coppelius) — optimized build\n", or
// "debug build" when common/command_line.cc was compiled without NDEBUG
// (the tools and this file are built together; Abseil's own line, "Debug
// build (NDEBUG not #defined)", described Debian's prebuilt libabsl).
// No version number: the tools are not stamped with one.
std::string VersionText(absl::string_view program);

// The names in the flag arguments of a normalized command line (before
// "--"): "-name", "--name", either with "=value"; a bool flag's "--noname"
// gives "noname". (This Abseil keeps a flag's "specified on the command
// line" bit private.) A separate value argument ("--vocab V") may add a
// name that matches no flag, which is harmless.
std::set<std::string> GivenFlagNames(int argc, char** argv);

// A flag named as Abseil names it ("vocab_size", "o") spelled as the
// tools' usage and messages spell it: "-o", else "--" and the name with
// dashes ("--vocab-size"; NormalizedCommandLine maps either back).
std::string FlagSpelled(absl::string_view name);

// For each flag of `unused` (Abseil's names) that `given` (GivenFlagNames)
// holds, by its name or a bool's "no" form, the line "PROGRAM: warning:
// SPELLING is not used by MODE: ignored" on `err` (FlagSpelled), in
// `unused`'s order.
void WarnUnusedFlags(absl::string_view program, absl::string_view mode,
                     const std::set<std::string>& given,
                     const std::vector<const char*>& unused,
                     std::ostream& err);

class NormalizedCommandLine;

// For a usage error about positional arguments (ParsedFlags::args after
// argv[0], or a mode's rest): their count, then the arguments themselves,
// quoted and with control characters escaped (the first 6, then "..."),
// and, when one looks like a flag ("-o", "--vocab=V"; "-" is standard
// input), that every word after "--" is an argument. E.g. `3: "c.txt" "-o"
// "a.u32" (after "--" every word is an argument, flags too)`; `0`.
std::string DescribePositionalArguments(const std::vector<std::string>& args);

// What ParseFlags leaves a main: the positional arguments, argv[0] first;
// or, when the command line asked for usage (FindUsageRequest) and the text
// was written, `usage_answered` (the main then exits 0, args empty).
struct ParsedFlags {
  std::vector<char*> args;
  bool usage_answered = false;
};

// What every binary's main does with its flags: first the usage config,
// `usage` (a main's help filters; unset callbacks are Abseil's defaults)
// with version_string VersionText(program), set here for every tool. Then a
// usage request (FindUsageRequest) wins over everything else on the command
// line: its text goes to standard output (Abseil's parser exits 1 for
// --help and knows no -h), and `usage_answered` is set; when standard
// output cannot take it, the error "--help: writing <stdout>: REASON"
// (exit 1 by ExitCodeOf). Otherwise CheckCommandLineFlags, then
// absl::ParseCommandLine (which sets the flags) and the positional
// arguments, or the usage error (exit 2) for the caller to print. Nothing
// is printed here and the process never ends here.
absl::StatusOr<ParsedFlags> ParseFlags(absl::string_view program,
                                       NormalizedCommandLine& command_line,
                                       absl::FlagsUsageConfig usage = {});

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
