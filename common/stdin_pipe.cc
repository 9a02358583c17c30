// File: common/stdin_pipe.cc (tests only; see stdin_pipe.h).
#include "common/stdin_pipe.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

#include "absl/strings/string_view.h"
#include "common/file_io.h"

namespace coppelius {

AppearingFileRun RunWithFileAppearing(const std::function<absl::Status()>& run,
                                      const std::string& input,
                                      size_t first_bytes,
                                      const std::string& path,
                                      const std::string& contents) {
  AppearingFileRun r;
  int p[2];
  if (pipe(p) != 0 || fcntl(p[1], F_SETFL, O_NONBLOCK) != 0) {
    r.status = absl::InternalError("pipe");
    return r;
  }
  const int saved_stdin = dup(STDIN_FILENO);
  dup2(p[0], STDIN_FILENO);
  close(p[0]);
  std::atomic<bool> done{false};
  std::thread runner([&] {
    r.status = run();
    done = true;
  });
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const auto feed = [&](absl::string_view bytes) {
    while (!bytes.empty()) {
      if (done || std::chrono::steady_clock::now() > deadline) return false;
      const ssize_t n = write(p[1], bytes.data(), bytes.size());
      if (n > 0) {
        bytes.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
      pollfd pfd = {p[1], POLLOUT, 0};
      poll(&pfd, 1, 100);
    }
    return true;
  };
  const absl::string_view all(input);
  r.fed = feed(all.substr(0, first_bytes)) &&
          WriteFileAtomically(path, contents).ok() &&
          feed(all.substr(std::min(first_bytes, all.size())));
  close(p[1]);
  runner.join();
  dup2(saved_stdin, STDIN_FILENO);
  close(saved_stdin);
  return r;
}

}  // namespace coppelius
