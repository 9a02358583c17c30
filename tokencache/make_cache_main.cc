// make-cache: encodes a text into a token cache (SPEC §2; make_cache.h).
//
//   make-cache --vocab=vocab.tiktoken SOURCE|- -o corpus.tok [--force]
//              [--threads=N]
#include <unistd.h>

#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "common/file_io.h"
#include "common/status_line.h"
#include "common/status_macros.h"
#include "tokencache/make_cache.h"

ABSL_FLAG(std::string, vocab, "", "tiktoken rank file (required)");
ABSL_FLAG(std::string, o, "", "output token cache; - = stdout (required)");
ABSL_FLAG(bool, force, false,
          "rebuild even when the cache is fresh; replace an output that is "
          "not a token cache (never a checkpoint or result file)");
ABSL_FLAG(int, threads, 0, "encoder threads; 0 = all cores; at most 1024");

namespace {

constexpr char kUsage[] =
    "make-cache --vocab=vocab.tiktoken SOURCE|- -o corpus.tok [--force] "
    "[--threads=N]\n"
    "Encodes SOURCE (with <|endoftext|> as the special id V-1) into a token "
    "cache: 16-byte header (source mtime ns, size) + u32 LE ids.\n"
    "A cache whose header matches SOURCE is kept (fresh) unless the "
    "vocabulary file is newer than it (a vocabulary from a pipe always "
    "counts as newer), or its ids, decoded with the "
    "vocabulary, are not exactly SOURCE's bytes (a cache cut short, or of "
    "another vocabulary). Not caught: another vocabulary, older than the "
    "cache, under which every id decodes the same (one that only adds "
    "merges): use --force after such a change.";

}  // namespace

int main(int argc, char** argv) {
  coppelius::ProtectStandardStreams();
  coppelius::InstallInterruptCleanup();
  coppelius::ExitOnOutOfMemory("make-cache");
  coppelius::ReportShrunkMappings("make-cache");
  absl::SetProgramUsageMessage(kUsage);
  // --help lists the flags of files whose name matches the program's; the
  // binary is "make-cache" (also "make_cache"), its flags are in
  // make_cache_main.cc.
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "make_cache_main");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  coppelius::NormalizedCommandLine command_line(argc, argv);
  // Unknown flags and unparsable values: usage errors (exit 2), as ours.
  // ParseFlags sets `usage` (and --version's line).
  absl::StatusOr<coppelius::ParsedFlags> parsed =
      coppelius::ParseFlags("make-cache", command_line, std::move(usage));
  if (!parsed.ok()) {
    std::cerr << coppelius::StatusLine("make-cache", parsed.status())
              << std::endl;
    return coppelius::ExitCodeOf(parsed.status());
  }
  if (parsed->usage_answered) return 0;  // usage on stdout
  const std::vector<char*>& args = parsed->args;
  absl::Status status;
  // (--threads is checked by RunMakeCache, as every tool checks it:
  // common/threads.h CheckThreadsFlag.)
  if (args.size() != 2) {
    status = coppelius::UsageError(absl::StrCat(
        "expected exactly one SOURCE path (or -), got ",
        coppelius::DescribePositionalArguments(
            std::vector<std::string>(args.begin() + 1, args.end())), "; see --help"));
  } else {
    coppelius::MakeCacheOptions options;
    options.vocab_path = absl::GetFlag(FLAGS_vocab);
    options.source_path = args[1];
    options.output_path = absl::GetFlag(FLAGS_o);
    options.force = absl::GetFlag(FLAGS_force);
    options.threads = absl::GetFlag(FLAGS_threads);
    options.progress = isatty(STDERR_FILENO) == 1;
    status = coppelius::RunMakeCache(options);
  }
  // A deferred write error of `-o -` surfaces at the close.
  if (status.ok()) status = coppelius::CloseStandardOutput();
  if (!status.ok()) {
    std::cerr << coppelius::StatusLine("make-cache", status) << std::endl;
    return coppelius::ExitCodeOf(status);
  }
  return 0;
}
