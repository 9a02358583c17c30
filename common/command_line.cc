#include "common/command_line.h"

#include <unistd.h>

#include <algorithm>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "absl/flags/commandlineflag.h"
// Internal, for the usage output without Abseil's exit(1): the pinned
// Abseil (Debian's 20220623) has no public way to print it.
#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/file_io.h"
#include "common/status_line.h"
#include "common/status_macros.h"

namespace coppelius {

namespace {

// Abseil's usage flags (absl/flags/internal/usage.cc DeduceUsageFlags):
// not registered flags; its parser knows them by name.
constexpr absl::string_view kUsageFlags[] = {
    "help",   "helpfull",  "helpshort", "helppackage",
    "helpon", "helpmatch", "version"};
// Abseil's other built-in flags (parse.cc) that are left to it.
constexpr absl::string_view kOtherAbseilFlags[] = {"only_check_args"};
// Abseil's flags that read more flags from a file or the environment: not
// supported. What they read would bypass NormalizedCommandLine's spelling
// and the checks here, and a bad value (a missing file, an unknown flag
// inside) ends in Abseil's parser with its own lines and exit 1, which no
// caller can intercept.
constexpr absl::string_view kUnsupportedAbseilFlags[] = {
    "flagfile", "fromenv", "tryfromenv"};

template <size_t N>
bool OneOf(const absl::string_view (&names)[N], absl::string_view name) {
  return std::find(std::begin(names), std::end(names), name) !=
         std::end(names);
}

// A flag argument: "-name" or "--name", either with "=value".
struct FlagArgument {
  absl::string_view name;
  bool has_value = false;
  absl::string_view value;
};

// `a` as a flag argument; nullopt for a positional argument or "-".
std::optional<FlagArgument> SplitFlag(absl::string_view a) {
  if (a.size() < 2 || a[0] != '-') return std::nullopt;
  a.remove_prefix(a[1] == '-' ? 2 : 1);
  FlagArgument f;
  const size_t eq = a.find('=');
  f.name = a.substr(0, eq);
  f.has_value = eq != absl::string_view::npos;
  if (f.has_value) f.value = a.substr(eq + 1);
  return f;
}

// Whether `f` takes the next argument as its value, as Abseil's parser
// reads it: a flag of a type other than bool given without "=value".
bool TakesNextArgument(const FlagArgument& f) {
  if (f.has_value) return false;
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(f.name);
  return flag != nullptr && !flag->IsRetired() && !flag->IsOfType<bool>();
}

}  // namespace

absl::Status CheckCommandLineFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "--") break;
    const std::optional<FlagArgument> f = SplitFlag(argv[i]);
    if (!f) continue;  // positional, or "-"
    const absl::string_view name = f->name;
    if (name == "h" || OneOf(kUsageFlags, name) ||
        OneOf(kOtherAbseilFlags, name)) {
      continue;
    }
    if (OneOf(kUnsupportedAbseilFlags, name)) {
      return UsageError(absl::StrCat(
          FlagSpelled(name),
          " is not supported; give the flags on the command line"));
    }
    // Abseil's --undefok would have its parser skip unknown flags, but the
    // check below refuses them first: accepted, it did nothing (new-user
    // pass, session 23). Every flag must be the tool's own.
    if (name == "undefok") {
      return UsageError(
          "--undefok is not supported; every flag must be one this tool "
          "knows (see --help)");
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && !f->has_value && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) continue;
    }
    if (flag == nullptr || flag->IsRetired()) {
      return UsageError(
          absl::StrCat("unknown flag ", FlagSpelled(name), "; see --help"));
    }
    absl::string_view value;
    if (f->has_value) {
      value = f->value;
    } else if (flag->IsOfType<bool>()) {
      continue;  // --flag: true
    } else if (i + 1 < argc) {
      value = argv[++i];  // --flag VALUE
    } else {
      return UsageError(
          absl::StrCat(FlagSpelled(name), ": missing a value; see --help"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return UsageError(
          absl::StrCat(FlagSpelled(name), "=", value, ": ", error));
    }
  }
  return absl::OkStatus();
}

std::optional<UsageRequest> FindUsageRequest(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "--") break;
    const std::optional<FlagArgument> f = SplitFlag(argv[i]);
    if (!f) continue;
    if (f->name == "h" || OneOf(kUsageFlags, f->name)) {
      return UsageRequest{f->name == "h" ? "help" : std::string(f->name),
                          std::string(f->value)};
    }
    if (TakesNextArgument(*f)) ++i;  // its value, whatever it looks like
  }
  return std::nullopt;
}

std::string UsageText(const char* argv0, const UsageRequest& request) {
  absl::flags_internal::SetProgramInvocationName(argv0);
  absl::flags_internal::DeduceUsageFlags(request.name, request.value);
  std::ostringstream out;
  absl::flags_internal::HandleUsageFlags(out, absl::ProgramUsageMessage());
  absl::flags_internal::SetFlagsHelpMode(absl::flags_internal::HelpMode::kNone);
  return out.str();
}

std::string VersionText(absl::string_view program) {
#ifdef NDEBUG
  constexpr absl::string_view kBuild = "optimized build";
#else
  constexpr absl::string_view kBuild = "debug build";
#endif
  return absl::StrCat(program, " (Coppelius) \u2014 ", kBuild, "\n");
}

absl::StatusOr<ParsedFlags> ParseFlags(absl::string_view program,
                                       NormalizedCommandLine& command_line,
                                       absl::FlagsUsageConfig usage) {
  usage.version_string = [name = std::string(program)] {
    return VersionText(name);
  };
  absl::SetFlagsUsageConfig(std::move(usage));
  const int argc = command_line.argc();
  char** argv = command_line.argv();
  if (const std::optional<UsageRequest> request =
          FindUsageRequest(argc, argv)) {
    const std::string text = UsageText(argv[0], *request);
    RETURN_IF_ERROR(Annotate(
        WriteAll(STDOUT_FILENO, text.data(), text.size(), "<stdout>"),
        absl::StrCat("--", request->name)));
    return ParsedFlags{{}, /*usage_answered=*/true};
  }
  RETURN_IF_ERROR(CheckCommandLineFlags(argc, argv));
  return ParsedFlags{absl::ParseCommandLine(argc, argv), false};
}

NormalizedCommandLine::NormalizedCommandLine(
    int argc, char** argv, std::initializer_list<const char*> path_flags) {
  bool only_positional = false;  // after "--"
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i == 0 || only_positional) {
      args_.push_back(a);
      continue;
    }
    if (a == "--") {
      only_positional = true;
      args_.push_back(a);
      continue;
    }
    if ((a == "-o" || a == "--o") && i + 1 < argc) {
      args_.push_back("--o=" + std::string(argv[++i]));
      continue;
    }
    if (a.size() > 2 && a[0] == '-' && a[1] == '-') {
      size_t end = std::min(a.find('='), a.size());
      std::replace(a.begin() + 2, a.begin() + end, '-', '_');
      if (end == a.size() && i + 1 < argc && std::string(argv[i + 1]) == "-" &&
          std::any_of(path_flags.begin(), path_flags.end(),
                      [&](const char* name) { return a.substr(2) == name; })) {
        args_.push_back(a + "=-");
        ++i;
        continue;
      }
    }
    args_.push_back(a);
  }
  for (std::string& a : args_) pointers_.push_back(&a[0]);
}

std::string FlagSpelled(absl::string_view name) {
  if (name == "o") return "-o";
  std::string spelled = absl::StrCat("--", name);
  std::replace(spelled.begin() + 2, spelled.end(), '_', '-');
  return spelled;
}

std::set<std::string> GivenFlagNames(int argc, char** argv) {
  std::set<std::string> names;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-') continue;
    a.remove_prefix(a[1] == '-' ? 2 : 1);
    names.insert(std::string(a.substr(0, a.find('='))));
  }
  return names;
}

void WarnUnusedFlags(absl::string_view program, absl::string_view mode,
                     const std::set<std::string>& given,
                     const std::vector<const char*>& unused,
                     std::ostream& err) {
  for (const char* name : unused) {
    if (given.count(name) != 0 || given.count(absl::StrCat("no", name)) != 0) {
      err << program << ": warning: " << FlagSpelled(name)
          << " is not used by " << mode << ": ignored" << std::endl;
    }
  }
}

std::string DescribePositionalArguments(const std::vector<std::string>& args) {
  constexpr size_t kShown = 6;
  std::string out = absl::StrCat(args.size());
  bool flag_like = false;
  for (size_t i = 0; i < args.size(); ++i) {
    flag_like |= args[i].size() > 1 && args[i][0] == '-';
    if (i < kShown) {
      absl::StrAppend(&out, i == 0 ? ": " : " ", "\"",
                      EscapeControlCharacters(args[i]), "\"");
    } else if (i == kShown) {
      absl::StrAppend(&out, " ...");
    }
  }
  if (flag_like) {
    absl::StrAppend(&out,
                    " (after \"--\" every word is an argument, flags too)");
  }
  return out;
}

}  // namespace coppelius
