#include "tokenizer/output_checks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "common/file_io.h"
#include "tokencache/token_cache.h"

namespace coppelius {
namespace {

// The two 8-byte signatures of docs/FORMATS.md, defined here so that the
// tokenizer does not depend on checkpoint/ or trainer/.
// "Checkpoint envelope": the magic at offset 0.
constexpr char kCheckpointMagic[8] = {'C', 'O', 'P', 'P', 'C', 'K', 'P', 'T'};
// "Result file", lifecycle step 1: the marker `Create` writes at offset 0.
constexpr unsigned char kResultMarker[8] = {0xbe, 0xba, 0xfe, 0xca,
                                            0xbe, 0xba, 0xfe, 0xca};

// Reads the first 8 bytes of `path` into `head`; false when `path` is not a
// regular file of at least 8 bytes that can be opened for reading.
bool ReadHead8(const std::string& path, unsigned char head[8]) {
  struct stat st;
  // stat first: opening a FIFO for reading would block.
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 8) {
    return false;
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  size_t got = 0;
  while (got < 8) {
    const ssize_t n = pread(fd, head + got, 8 - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  return got == 8;
}

}  // namespace

absl::Status CheckNotCoppeliusFile(const std::string& output) {
  if (output == "-") return absl::OkStatus();
  unsigned char head[8];
  if (!ReadHead8(output, head)) return absl::OkStatus();
  const char* kind = nullptr;
  if (std::memcmp(head, kCheckpointMagic, 8) == 0) {
    kind = "checkpoint (starts with the magic \"COPPCKPT\")";
  } else if (std::memcmp(head, kResultMarker, 8) == 0) {
    kind =
        "result file (starts with the result marker be ba fe ca be ba fe "
        "ca)";
  }
  if (kind == nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("-o ", output, ": exists and is a Coppelius ", kind,
                   "; refusing to replace it (choose another output path)"));
}

absl::Status CheckOutputIsNotInput(const std::string& output,
                                   absl::string_view what,
                                   const std::string& input) {
  if (input == "-") return absl::OkStatus();
  if (output != "-") {
    if (!SameFile(output, input)) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("-o ", output, ": names the ", what, " ", input));
  }
  struct stat in_st, out_st;
  if (stat(input.c_str(), &in_st) != 0 || !S_ISREG(in_st.st_mode) ||
      fstat(STDOUT_FILENO, &out_st) != 0 || in_st.st_dev != out_st.st_dev ||
      in_st.st_ino != out_st.st_ino) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, " ", input, " is also the output (standard output, -o -): a ",
      "shell `> ", input, "` empties it before tokenize starts; write the ",
      "output to another file"));
}

absl::Status CheckNotATokenCache(const std::string& output,
                                 uint64_t max_token_bytes) {
  struct stat st;
  if (output == "-" || stat(output.c_str(), &st) != 0 ||
      !S_ISREG(st.st_mode) || st.st_size == 0) {
    return absl::OkStatus();
  }
  absl::StatusOr<TokenCache> cache = TokenCache::Open(output);
  if (!cache.ok()) return absl::OkStatus();
  if (!CacheHeaderProblem(cache->header(), cache->num_tokens(),
                          max_token_bytes, absl::Now())
           .empty()) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "-o ", output, ": exists and is a Coppelius token cache (",
      cache->num_tokens(),
      " ids); refusing to replace it (choose another output path)"));
}

}  // namespace coppelius
