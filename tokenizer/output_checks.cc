#include "tokenizer/output_checks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "tokencache/token_cache.h"
#include "trainer/result_file.h"

namespace coppelius {
namespace {

// The checkpoint magic "COPPCKPT" (docs/FORMATS.md "Checkpoint envelope",
// offset 0), defined here so that the tokenizer does not depend on
// checkpoint/ (and its protobuf). The result marker is result_file.h's.
constexpr char kCheckpointMagic[8] = {'C', 'O', 'P', 'P', 'C', 'K', 'P', 'T'};

// The file the checks read for `output`: itself, or for "-" the file
// standard output writes to when that is a non-empty regular file
// (`-o - >> FILE` appends to FILE, which must be refused as `-o FILE`
// is); "" when there is nothing to examine.
std::string ExaminedPath(const std::string& output) {
  return output == "-" ? StandardOutputFileToExamine() : output;
}

// `output` as messages name it.
std::string OutputName(const std::string& output) {
  return output == "-" ? "- (standard output, an existing file)" : output;
}

}  // namespace

absl::Status CheckOutputReadable(const std::string& output) {
  const std::string path = ExaminedPath(output);
  if (path.empty()) return absl::OkStatus();
  const std::optional<UnreadableFile> unreadable = FindUnreadableFile(path);
  if (!unreadable) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "-o ", OutputName(output), ": exists (", unreadable->size,
      " bytes) and cannot be read to check that it is not a Coppelius file (",
      unreadable->reason, "); ",
      output == "-" ? "refusing to append to it (write the output elsewhere"
                    : "not replaced (choose another output path",
      ", or make it readable)"));
}

absl::Status CheckNotCoppeliusFile(const std::string& output) {
  const std::string path = ExaminedPath(output);
  if (path.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckOutputReadable(output));
  unsigned char head[8];
  if (!ReadFileHead(path, head, sizeof(head))) return absl::OkStatus();
  const char* kind = nullptr;
  if (std::memcmp(head, kCheckpointMagic, 8) == 0) {
    kind = "checkpoint (the magic \"COPPCKPT\" at offset 0)";
  } else if (std::memcmp(head, kResultMarker, kResultMarkerBytes) == 0) {
    kind =
        "result file (the result marker be ba fe ca be ba fe ca at offset "
        "0)";
  }
  if (kind == nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("-o ", OutputName(output), ": exists and is a Coppelius ",
                   kind,
                   "; never replaced, whatever the flags (choose another "
                   "output path)"));
}

absl::Status CheckNotAResultFile(const std::string& output) {
  const std::string path = ExaminedPath(output);
  if (path.empty()) return absl::OkStatus();
  const std::string found = ResultFileEvidence(path);
  if (found.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "-o ", OutputName(output), ": exists and is a Coppelius result file (",
      found,
      "); never replaced, whatever the flags (choose another output path)"));
}

absl::Status CheckOutputIsNotInput(const std::string& output,
                                   absl::string_view what,
                                   const std::string& input,
                                   absl::string_view stdout_name) {
  if (input == "-") {
    // Standard input redirected from the output file (`-o F < F`): F would
    // be replaced (or, for -o - into the same file, written) while it is
    // read. Only regular files compare (a terminal may be both ends).
    struct stat in_st, out_st;
    const bool same =
        fstat(STDIN_FILENO, &in_st) == 0 && S_ISREG(in_st.st_mode) &&
        (output == "-" ? fstat(STDOUT_FILENO, &out_st) == 0
                       : stat(output.c_str(), &out_st) == 0) &&
        in_st.st_dev == out_st.st_dev && in_st.st_ino == out_st.st_ino;
    if (!same) return absl::OkStatus();
    if (output == "-") {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " - (standard input) and the output (", stdout_name,
          ") are the same file; write the output to another file"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "-o ", output, ": names the ", what,
        " - (standard input is redirected from it); write the output to "
        "another file"));
  }
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
  // `>> input` opens standard output for appending and leaves the input
  // as it was; `> input` empties it first; `1<> input` leaves it as it
  // was, to be overwritten from offset 0.
  const int flags = fcntl(STDOUT_FILENO, F_GETFL);
  const bool appends = flags != -1 && (flags & O_APPEND) != 0;
  std::string how;
  if (appends) {
    how = absl::StrCat("a shell `>> ", input,
                       "` would append the output to it while it is read");
  } else if (out_st.st_size > 0 && lseek(STDOUT_FILENO, 0, SEEK_CUR) == 0) {
    // Bytes there, and none written through this descriptor yet (after
    // `{ echo x; tokenize ...; } > input` the offset is past the echo).
    how = absl::StrCat("standard output is open on it without emptying it "
                       "(a shell `1<> ", input,
                       "`) and would overwrite it while it is read");
  } else {
    how = absl::StrCat("a shell `> ", input,
                       "` empties it before the program starts");
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", input, " is also the output (", stdout_name,
                   "): ", how, "; write the output to another file"));
}

absl::Status CheckNotATokenCache(const std::string& output) {
  const std::string path = ExaminedPath(output);
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size == 0) {
    return absl::OkStatus();
  }
  // A cache's size and 16-byte header (nothing else is read).
  char h[kTokenCacheHeaderBytes];
  if (!ReadFileHead(path, h, sizeof(h))) return absl::OkStatus();
  // Without the vocabulary's bound: the cache may have been made with
  // another vocabulary than this run's.
  const std::optional<uint64_t> num_tokens =
      TokenCacheIdCount(absl::string_view(h, sizeof(h)),
                        static_cast<uint64_t>(st.st_size),
                        /*max_token_bytes=*/0);
  if (!num_tokens.has_value()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "-o ", OutputName(output), ": exists and is a Coppelius token cache (",
      *num_tokens, " ids); ",
      output == "-" ? "refusing to write into it (write the output elsewhere)"
                    : "refusing to replace it (choose another output path)"));
}

std::optional<uint64_t> TokenCacheIdCount(absl::string_view head,
                                          uint64_t size,
                                          uint64_t max_token_bytes) {
  if (head.size() < kTokenCacheHeaderBytes || size < kTokenCacheHeaderBytes ||
      (size - kTokenCacheHeaderBytes) % kTokenBytes != 0) {
    return std::nullopt;
  }
  const uint64_t n = (size - kTokenCacheHeaderBytes) / kTokenBytes;
  const SourceStat header = TokenCacheHeaderOf(head.data());
  if (!CacheHeaderProblem(header, n, max_token_bytes, absl::Now()).empty()) {
    return std::nullopt;
  }
  return n;
}

absl::Status CheckOutputBeforeReplacing(const std::string& output,
                                        bool token_caches_too) {
  absl::Status s = CheckNotCoppeliusFile(output);
  if (s.ok()) s = CheckNotAResultFile(output);
  if (s.ok() && token_caches_too) s = CheckNotATokenCache(output);
  return s.ok() ? s : FoundBeforeReplacing(s);
}

absl::Status FoundBeforeReplacing(const absl::Status& refusal) {
  return WithMessage(
      refusal,
      absl::StrCat(refusal.message(),
                   " (found there right before replacing it: it appeared "
                   "while the output was being written; nothing was written "
                   "there)"));
}

absl::Status WriteOutputCheckedAgain(const std::string& output,
                                     absl::string_view bytes,
                                     absl::string_view what) {
  absl::Status refused;
  const absl::Status written = WriteFileAtomically(
      output, bytes, [&refused](const std::string& target) {
        refused = CheckOutputBeforeReplacing(target, true);
        return refused;
      });
  if (!refused.ok()) return refused;
  return Annotate(written, absl::StrCat(what, output));
}

}  // namespace coppelius
