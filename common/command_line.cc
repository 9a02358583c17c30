#include "common/command_line.h"

#include <algorithm>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace coppelius {

absl::Status CheckCommandLineFlags(int argc, char** argv) {
  // Abseil's built-in flags (absl/flags/internal/usage.cc, parse.cc): their
  // values and side effects are Abseil's business.
  static constexpr absl::string_view kAbseilFlags[] = {
      "help",   "helpfull",   "helpshort", "helppackage", "helpon",
      "helpmatch", "version", "only_check_args", "flagfile", "fromenv",
      "tryfromenv", "undefok"};
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-') continue;  // positional, or "-"
    a.remove_prefix(a[1] == '-' ? 2 : 1);
    const size_t eq = a.find('=');
    const absl::string_view name = a.substr(0, eq);
    const bool has_value = eq != absl::string_view::npos;
    if (std::find(std::begin(kAbseilFlags), std::end(kAbseilFlags), name) !=
        std::end(kAbseilFlags)) {
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) continue;
    }
    if (flag == nullptr || flag->IsRetired()) {
      return UsageError(absl::StrCat("unknown flag --", name, "; see --help"));
    }
    absl::string_view value;
    if (has_value) {
      value = a.substr(eq + 1);
    } else if (flag->IsOfType<bool>()) {
      continue;  // --flag: true
    } else if (i + 1 < argc) {
      value = argv[++i];  // --flag VALUE
    } else {
      return UsageError(
          absl::StrCat("--", name, ": missing a value; see --help"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return UsageError(absl::StrCat("--", name, "=", value, ": ", error));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<char*>> ParseFlags(
    NormalizedCommandLine& command_line) {
  RETURN_IF_ERROR(
      CheckCommandLineFlags(command_line.argc(), command_line.argv()));
  return absl::ParseCommandLine(command_line.argc(), command_line.argv());
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

}  // namespace coppelius
