// File: common/stdin_pipe.h (tests only)
//
// Runs a tool's library function with standard input a pipe that the test
// feeds, and makes a file appear at a path once the function is reading:
// the deterministic form of "a file appeared at the output while the tool
// ran" (make_cache_test, tokenize_test).
#ifndef COPPELIUS_COMMON_STDIN_PIPE_H_
#define COPPELIUS_COMMON_STDIN_PIPE_H_

#include <functional>
#include <string>

#include "absl/status/status.h"

namespace coppelius {

struct AppearingFileRun {
  absl::Status status;  // what `run` returned
  // Whether all of the input went in and the file was written: false when
  // `run` returned before reading it all (a start check failed), or after
  // 60 s, or writing the file failed (then `status` may say why).
  bool fed = false;
};

// Calls `run` on a thread with file descriptor 0 a pipe (restored after);
// writes the first `first_bytes` of `input` into the pipe (more than a
// pipe holds, 64 KiB on Linux, so that writing them ends only once `run`
// is reading its input, past the checks it makes first), then writes
// `contents` to `path` (WriteFileAtomically), then the rest of `input`,
// then closes the pipe and joins. Never blocks for good: the pipe's write
// end is non-blocking, and feeding stops when `run` returns or 60 s pass.
AppearingFileRun RunWithFileAppearing(const std::function<absl::Status()>& run,
                                      const std::string& input,
                                      size_t first_bytes,
                                      const std::string& path,
                                      const std::string& contents);

}  // namespace coppelius

#endif  // COPPELIUS_COMMON_STDIN_PIPE_H_
