// File: common/as_nobody.h
//
// For tests of permission checks. Root reads and writes every file, so a
// test that a tool refuses a file it cannot read needs another user:
// RunAsNobody runs `body` in a forked child that, when the caller is root,
// first becomes nobody (uid and gid 65534; otherwise it stays the caller,
// whom a mode-000 file of its own refuses as well). The child's result, a
// string, comes back over a pipe. NobodyDirectory makes the directory such
// a test keeps its files in.
#ifndef COPPELIUS_COMMON_AS_NOBODY_H_
#define COPPELIUS_COMMON_AS_NOBODY_H_

#include <functional>
#include <string>

namespace coppelius {

// What `body` returned in the child; when the child could not change user,
// crashed or returned nothing, a string starting with "RunAsNobody: "
// saying so.
std::string RunAsNobody(const std::function<std::string()>& body);

// A new directory under /tmp (mkdtemp of "/tmp/<prefix>.XXXXXX") that every
// user may enter and write (mode 0777); "" if it cannot be made.
std::string NobodyDirectory(const std::string& prefix);

}  // namespace coppelius

#endif  // COPPELIUS_COMMON_AS_NOBODY_H_
