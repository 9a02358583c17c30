#include "common/as_nobody.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace coppelius {

std::string RunAsNobody(const std::function<std::string()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return "RunAsNobody: pipe failed";
  const pid_t child = fork();
  if (child < 0) {
    close(fds[0]);
    close(fds[1]);
    return "RunAsNobody: fork failed";
  }
  if (child == 0) {
    close(fds[0]);
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) {
      _exit(3);
    }
    const std::string result = body();
    size_t done = 0;
    while (done < result.size()) {
      const ssize_t n =
          write(fds[1], result.data() + done, result.size() - done);
      if (n <= 0) _exit(4);
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string result;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0) {
    result.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  if (waitpid(child, &status, 0) != child) return "RunAsNobody: waitpid failed";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return "RunAsNobody: the child ended with status " +
           std::to_string(status);
  }
  if (result.empty()) return "RunAsNobody: the child returned nothing";
  return result;
}

std::string NobodyDirectory(const std::string& prefix) {
  std::string path = "/tmp/" + prefix + ".XXXXXX";
  std::vector<char> buffer(path.begin(), path.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) return "";
  path = buffer.data();
  if (chmod(path.c_str(), 0777) != 0) return "";
  return path;
}

}  // namespace coppelius
