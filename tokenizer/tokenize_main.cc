// tokenize: byte-level BPE with tiktoken semantics (SPEC §3).
//
//   tokenize encode --vocab=FILE [--allow-special] [--format=u32|text]
//                   [--threads=N] IN|- -o OUT|-
//   tokenize decode --vocab=FILE [--format=u32|text] IN|- -o OUT|-
//   tokenize train CORPUS -o vocab.tiktoken [--vocab-size=12288] [--threads=N]
//
// A flag given on the command line that the subcommand does not use (e.g.
// encode --vocab-size) gets a one-line warning and is ignored, as in inspect.
#include <algorithm>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/command_line.h"
#include "common/file_io.h"
#include "common/status_line.h"
#include "common/status_macros.h"
#include "common/threads.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/output_checks.h"
#include "tokenizer/tokenize.h"

ABSL_FLAG(std::string, vocab, "", "tiktoken rank file (encode, decode)");
ABSL_FLAG(bool, allow_special, false,
          "encode: <|endoftext|> becomes the special id V-1 (also "
          "--allow-special)");
ABSL_FLAG(std::string, format, "u32", "ids: u32 (little-endian) or text");
ABSL_FLAG(int, threads, 0,
          "worker threads (encode, train); 0 = all cores; at most 1024");
static_assert(coppelius::kMaxThreadCount == 1024, "update --threads help");
ABSL_FLAG(std::string, o, "", "output path; - = stdout");
ABSL_FLAG(int, vocab_size, 12288,
          "train: ids including <|endoftext|>, 257..4194304 (2^22) (also "
          "--vocab-size)");
ABSL_FLAG(bool, progress, true, "train: progress on stderr");

namespace {

constexpr char kUsage[] =
    "tokenize encode --vocab=FILE [--allow-special] [--format=u32|text] "
    "[--threads=N] IN|- -o OUT|-\n"
    "tokenize decode --vocab=FILE [--format=u32|text] IN|- -o OUT|-\n"
    "tokenize train CORPUS -o vocab.tiktoken [--vocab-size=12288] "
    "[--threads=N]";

// Which subcommands use each flag (-o: all of them).
struct FlagUse {
  const char* flag;  // Abseil's name
  bool encode, decode, train;
};
constexpr FlagUse kFlagUses[] = {
    {"vocab", true, true, false},
    {"allow_special", true, false, false},
    {"format", true, true, false},
    {"threads", true, false, true},
    {"vocab_size", false, false, true},
    {"progress", false, false, true},
};

// A one-line warning on stderr for each flag in `given` that `command` does
// not use (inspect does the same for its modes).
void WarnUnusedFlags(absl::string_view command,
                     const std::set<std::string>& given) {
  std::vector<const char*> unused;
  for (const FlagUse& use : kFlagUses) {
    const bool used = command == "encode"   ? use.encode
                      : command == "decode" ? use.decode
                                            : use.train;
    if (!used) unused.push_back(use.flag);
  }
  coppelius::WarnUnusedFlags("tokenize", command, given, unused, std::cerr);
}

absl::Status Run(const std::vector<char*>& args,
                 const std::set<std::string>& given_flags) {
  if (args.size() != 3) {
    return coppelius::UsageError(absl::StrCat(
        "expected a subcommand (encode, decode, train) and one input path, "
        "got ", coppelius::DescribePositionalArguments(
            std::vector<std::string>(args.begin() + 1, args.end())),
        "; see --help"));
  }
  const std::string command = args[1], input = args[2];
  if (command != "encode" && command != "decode" && command != "train") {
    return coppelius::UsageError(absl::StrCat(
        "unknown subcommand \"", command, "\"; expected encode, decode or train"));
  }
  // An empty argument ("$UNSET") names no file: a usage error, as
  // make-cache's and inspect verify's, not "opening : No such file".
  if (input.empty()) {
    return coppelius::UsageError(absl::StrCat(
        command, ": an empty input argument (\"\"); expected a path or -"));
  }
  WarnUnusedFlags(command, given_flags);
  // Only the flags the subcommand uses are checked (the others are ignored).
  if (command != "decode") {
    RETURN_IF_ERROR(coppelius::CheckThreadsFlag(absl::GetFlag(FLAGS_threads)));
  }
  const std::string output = absl::GetFlag(FLAGS_o);
  if (output.empty()) return coppelius::UsageError("-o OUT is required");
  RETURN_IF_ERROR(coppelius::CheckOutputPathUsable(output, "-o"));
  RETURN_IF_ERROR(coppelius::CheckNotAResultFile(output));
  absl::StatusOr<coppelius::IdFormat> format = coppelius::IdFormat::kU32;
  if (command == "encode" || command == "decode") {
    format = coppelius::ParseIdFormat(absl::GetFlag(FLAGS_format));
    if (!format.ok()) return format.status();
    if (absl::GetFlag(FLAGS_vocab).empty()) {
      return coppelius::UsageError("--vocab=FILE is required");
    }
  }
  if (command == "encode") {
    coppelius::EncodeOptions options;
    options.vocab_path = absl::GetFlag(FLAGS_vocab);
    options.input_path = input;
    options.output_path = output;
    options.allow_special = absl::GetFlag(FLAGS_allow_special);
    options.format = *format;
    options.threads = absl::GetFlag(FLAGS_threads);
    return coppelius::RunEncode(options);
  }
  if (command == "decode") {
    coppelius::DecodeOptions options;
    options.vocab_path = absl::GetFlag(FLAGS_vocab);
    options.input_path = input;
    options.output_path = output;
    options.format = *format;
    return coppelius::RunDecode(options);
  }
  if (command == "train") {
    const int vocab_size = absl::GetFlag(FLAGS_vocab_size);
    if (vocab_size < coppelius::kMinVocabSize ||
        vocab_size > coppelius::kMaxVocabSize) {
      return coppelius::UsageError(absl::StrCat(
          "--vocab-size=", vocab_size, ": expected ", coppelius::kMinVocabSize,
          "..", coppelius::kMaxVocabSize,
          " (the 256 bytes + <|endoftext|> at least; at most 2^22: memory for "
          "every rank is reserved before training)"));
    }
    coppelius::TrainVocabularyOptions options;
    options.corpus_path = input;
    options.output_path = output;
    options.vocab_size = absl::GetFlag(FLAGS_vocab_size);
    options.threads = absl::GetFlag(FLAGS_threads);
    options.progress = absl::GetFlag(FLAGS_progress);
    return coppelius::RunTrainVocabulary(options);
  }
  return coppelius::UsageError(absl::StrCat(
      "unknown subcommand \"", command, "\"; expected encode, decode or train"));
}

}  // namespace

int main(int argc, char** argv) {
  coppelius::ProtectStandardStreams();
  coppelius::InstallInterruptCleanup();
  coppelius::ExitOnOutOfMemory("tokenize");
  absl::SetProgramUsageMessage(kUsage);
  coppelius::NormalizedCommandLine command_line(argc, argv);
  const std::set<std::string> given_flags =
      coppelius::GivenFlagNames(command_line.argc(), command_line.argv());
  // Unknown flags and unparsable values: usage errors (exit 2), as ours.
  absl::StatusOr<coppelius::ParsedFlags> parsed =
      coppelius::ParseFlags("tokenize", command_line);
  if (!parsed.ok()) {
    std::cerr << coppelius::StatusLine("tokenize", parsed.status())
              << std::endl;
    return coppelius::ExitCodeOf(parsed.status());
  }
  if (parsed->usage_answered) return 0;  // usage on stdout
  const std::vector<char*>& args = parsed->args;
  absl::Status status = Run(args, given_flags);
  // A deferred write error of `-o -` surfaces at the close.
  if (status.ok()) status = coppelius::CloseStandardOutput();
  if (!status.ok()) {
    std::cerr << coppelius::StatusLine("tokenize", status) << std::endl;
    return coppelius::ExitCodeOf(status);
  }
  return 0;
}
