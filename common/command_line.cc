#include "common/command_line.h"

#include <algorithm>

namespace coppelius {

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
