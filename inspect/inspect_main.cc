// inspect: report on, verify, plot or export Coppelius files (SPEC §8).
//
//   inspect FILE [--json] [--source=SRC] [--vocab=VOCAB]
//                [--config=coppelius|tiny] [--kind=auto|cache|checkpoint|result]
//   inspect verify FILE... [--json] [--config=...] [--kind=...] [--source=SRC]
//                  [--vocab=VOCAB]
//   inspect plot RESULT... -o loss.svg [--config=...] [--smoothing=100]
//   inspect export --safetensors CKPT -o model.safetensors [--config=...]
//
// A FILE, RESULT or CKPT of "-" reads stdin (spooled to a temporary file;
// once per command). Without --config the config is inferred from each file;
// without --kind the kind is detected (inspect/inspect.h, DetectFile). A
// report of a corrupt or incomplete file (a cache: ids >= V of the config),
// of a cache that fails a --source check (stale, or its ids do not decode
// to the source), or of a checkpoint whose identity the --config named
// refuses, is printed, then exits 1. A checkpoint's identity is checked only against a named
// --config: without one, verify checks its integrity (digests) and the
// report shows the identity and any refusal.
//
// A thin flag layer over inspect/inspect.h. Errors: one line on stderr, exit
// status 2 for a usage error (common/status_macros.h UsageError: an unknown
// flag or subcommand, a flag value that does not parse or is out of range,
// such as --threads outside 0..1024 or --smoothing < 1, a missing FILE), 1
// for any other error (a bad input, a failed verify), as in every tool
// (README); -h and --help print the usage on stdout and exit 0. A flag
// the mode does not use gets a one-line warning (kFlagUses), but -o in the
// report or verify is a usage error: their output goes to standard output.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "common/threads.h"
#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/command_line.h"
#include "common/file_io.h"
#include "common/status_line.h"
#include "common/status_macros.h"
#include "inspect/inspect.h"
#include "tokenizer/output_checks.h"

ABSL_FLAG(bool, json, false, "one JSON object on stdout instead of text");
ABSL_FLAG(std::string, source, "",
          "token cache: the source text to check staleness against");
ABSL_FLAG(std::string, vocab, "",
          "result: a .tiktoken vocabulary to decode the predictions; token "
          "cache with --source: its ids are decoded against the source (a "
          "cache cut short or of another vocabulary fails)");
ABSL_FLAG(std::string, config, "",
          "model config: coppelius or tiny; empty infers it from the file "
          "(a checkpoint's identity is then reported, not checked)");
ABSL_FLAG(std::string, kind, "auto",
          "file kind: auto, cache, checkpoint or result");
ABSL_FLAG(std::string, o, "", "plot/export: output path (- for stdout)");
ABSL_FLAG(std::string, safetensors, "",
          "export: the checkpoint to export as safetensors");
ABSL_FLAG(int, smoothing, 100, "steps in the smoothed loss curve's window");
ABSL_FLAG(int, threads, 2, "threads for digest verification (0 = all cores)");

namespace {

constexpr char kUsage[] =
    "inspect FILE [--json] [--source=SRC] [--vocab=VOCAB] "
    "[--config=coppelius|tiny] [--kind=cache|checkpoint|result]\n"
    "  inspect verify FILE... [--json] [--config=coppelius|tiny] "
    "[--kind=...] [--source=SRC [--vocab=VOCAB]]\n"
    "  inspect plot RESULT... -o loss.svg [--smoothing=100] [--kind=result]\n"
    "  inspect export --safetensors CKPT -o model.safetensors "
    "[--kind=checkpoint]";

// Which modes use each flag (--config and --kind: all of them). -o in the
// report or verify is refused instead (main): the output goes to standard
// output there, and a file asked for would silently not be written.
struct FlagUse {
  const char* flag;  // Abseil's name
  bool report, verify, plot, export_;
};
constexpr FlagUse kFlagUses[] = {
    {"json", true, true, false, false},
    {"source", true, true, false, false},
    {"vocab", true, true, false, false},
    {"safetensors", false, false, false, true},
    {"smoothing", true, false, true, false},
    {"threads", true, true, false, true},
};

// A one-line warning for each flag of `given` that `mode` (the report,
// verify, plot or export) does not use.
void WarnUnusedFlags(absl::string_view mode,
                     const std::set<std::string>& given) {
  std::vector<const char*> unused;
  for (const FlagUse& use : kFlagUses) {
    const bool used = mode == "verify"   ? use.verify
                      : mode == "plot"   ? use.plot
                      : mode == "export" ? use.export_
                                         : use.report;
    if (!used) unused.push_back(use.flag);
  }
  coppelius::WarnUnusedFlags("inspect", mode, given, unused, std::cerr);
}

int Fail(const absl::Status& status) {
  std::cerr << coppelius::StatusLine("inspect", status) << std::endl;
  return coppelius::ExitCodeOf(status);
}

// The usage errors of `mode` (rest: the positional arguments, the mode
// word first when there is one) that no file or stream can change: export's
// extra arguments; the report's mistyped subcommand and its one FILE; -o
// for the report and verify, which write to standard output (-o - is
// accepted: it names where they write anyway). Plot's are RunPlot's.
absl::Status CheckModeUsage(const std::string& mode,
                            const std::vector<std::string>& rest) {
  const std::string output = absl::GetFlag(FLAGS_o);
  if (mode == "export") {
    if (rest.size() != 1) {
      return coppelius::UsageError(
          "export: unexpected arguments; usage: inspect export --safetensors "
          "CKPT -o OUT");
    }
    return absl::OkStatus();
  }
  if (mode == "plot") return absl::OkStatus();
  if (mode != "verify") {
    // A word that names no file, followed by more arguments or given plot's
    // or export's flags, is a mistyped subcommand ("inspect verfiy x.res").
    struct stat st;
    if (!rest.empty() && rest[0] != "-" &&
        rest[0].find_first_of("/.") == std::string::npos &&
        stat(rest[0].c_str(), &st) != 0 &&
        (rest.size() > 1 || !output.empty() ||
         !absl::GetFlag(FLAGS_safetensors).empty())) {
      return coppelius::UsageError(absl::StrCat(
          "unknown subcommand \"", rest[0],
          "\": expected verify, plot or export, or one FILE to report on "
          "(inspect --help lists the usage)"));
    }
    if (rest.size() != 1) {
      return coppelius::UsageError(absl::StrCat(
          "expected exactly one FILE, got ",
          coppelius::DescribePositionalArguments(rest),
          " (inspect --help lists the usage and the flags)"));
    }
  }
  if (!output.empty() && output != "-") {
    return coppelius::UsageError(absl::StrCat(
        "-o ", output, ": ",
        mode == "verify" ? "verify writes its report to standard output "
                           "(inspect verify ... > FILE)"
                         : "the report goes to standard output (inspect "
                           "FILE > FILE2)",
        "; -o names plot's and export's output"));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  coppelius::ProtectStandardStreams();
  coppelius::InstallInterruptCleanup();
  coppelius::ExitOnOutOfMemory("inspect");
  coppelius::ReportShrunkMappings("inspect");
  absl::SetProgramUsageMessage(kUsage);
  coppelius::NormalizedCommandLine command_line(
      argc, argv, {"safetensors", "source", "vocab"});
  const std::set<std::string> given_flags =
      coppelius::GivenFlagNames(command_line.argc(), command_line.argv());
  // Unknown flags and unparsable values: usage errors (exit 2), as ours.
  absl::StatusOr<coppelius::ParsedFlags> parsed =
      coppelius::ParseFlags("inspect", command_line);
  if (!parsed.ok()) return Fail(parsed.status());
  if (parsed->usage_answered) return 0;  // usage on stdout
  const std::vector<char*>& args = parsed->args;
  std::vector<std::string> rest(args.begin() + 1, args.end());
  auto kind = coppelius::ParseFileKind(absl::GetFlag(FLAGS_kind));
  if (!kind.ok()) return Fail(kind.status());
  const std::string mode = rest.empty() ? "" : rest[0];
  // 0 = all cores, at most kMaxThreadCount, as in the other tools.
  const int threads = absl::GetFlag(FLAGS_threads);
  if (absl::Status s = coppelius::CheckThreadsFlag(threads); !s.ok()) {
    return Fail(s);
  }
  if (threads == 0) {
    absl::SetFlag(&FLAGS_threads, coppelius::ResolveCappedThreadCount(0));
  }
  if (absl::GetFlag(FLAGS_smoothing) < 1) {
    return Fail(coppelius::UsageError(absl::StrCat(
        "--smoothing=", absl::GetFlag(FLAGS_smoothing),
        ": expected an integer >= 1")));
  }
  // The command line's own errors first (exit 2 whatever the files and
  // standard output).
  if (absl::Status s = CheckModeUsage(mode, rest); !s.ok()) return Fail(s);
  // Plot and export write where -o says; the report and verify write to
  // standard output.
  const bool to_dash_o = mode == "plot" || mode == "export";
  // Reports go to stdout, and plot / export with -o -: with stdout closed
  // they would go nowhere (ProtectStandardStreams reopened it on /dev/null).
  const bool writes_stdout = !to_dash_o || absl::GetFlag(FLAGS_o) == "-";
  const char* const stdout_use = to_dash_o ? "-o -" : "the report";
  if (writes_stdout && coppelius::StandardOutputWasClosed()) {
    return Fail(absl::FailedPreconditionError(
        absl::StrCat(stdout_use, ": standard output is closed; expected "
                                 "somewhere to write")));
  }
  // Nor an input (`inspect export --safetensors X -o - > X`: the shell
  // emptied X before the program started, which would then report a 0-byte
  // X, not the mistake).
  if (writes_stdout) {
    std::vector<std::string> inputs;
    if (mode == "export") {
      inputs.push_back(absl::GetFlag(FLAGS_safetensors));
    } else {
      inputs.assign(rest.begin() + (mode == "verify" || mode == "plot"),
                    rest.end());
    }
    if (!to_dash_o) {
      for (const std::string& in :
           {absl::GetFlag(FLAGS_source), absl::GetFlag(FLAGS_vocab)}) {
        if (!in.empty()) inputs.push_back(in);
      }
    }
    for (const std::string& in : inputs) {
      if (absl::Status s = coppelius::CheckOutputIsNotInput(
              "-", "input file", in,
              to_dash_o ? "standard output, -o -" : "standard output");
          !s.ok()) {
        return Fail(s);
      }
    }
    // Nor an existing checkpoint, result or cache (`>> run.ckpt`): what is
    // published is never damaged.
    if (absl::Status s =
            coppelius::CheckStandardOutputIsNotCoppeliusFile(stdout_use);
        !s.ok()) {
      return Fail(s);
    }
  }
  WarnUnusedFlags(to_dash_o || mode == "verify" ? absl::string_view(mode)
                                                : "the report",
                  given_flags);
  // Not std::cout: a write that fails (a full disk) is reported with its
  // reason (common/file_io.h).
  coppelius::FdOutputStream out(STDOUT_FILENO, "<stdout>");
  absl::Status status;
  if (mode == "verify") {
    coppelius::VerifyOptions o;
    o.paths.assign(rest.begin() + 1, rest.end());
    o.kind = *kind;
    o.config = absl::GetFlag(FLAGS_config);
    o.source = absl::GetFlag(FLAGS_source);
    o.vocab = absl::GetFlag(FLAGS_vocab);
    o.json = absl::GetFlag(FLAGS_json);
    o.threads = absl::GetFlag(FLAGS_threads);
    status = coppelius::RunVerify(o, out);
  } else if (mode == "plot") {
    coppelius::PlotOptions o;
    o.results.assign(rest.begin() + 1, rest.end());
    o.output = absl::GetFlag(FLAGS_o);
    o.kind = *kind;
    o.config = absl::GetFlag(FLAGS_config);
    o.smoothing_steps = absl::GetFlag(FLAGS_smoothing);
    status = coppelius::RunPlot(o, out);
  } else if (mode == "export") {
    coppelius::ExportOptions o;
    o.checkpoint = absl::GetFlag(FLAGS_safetensors);
    o.output = absl::GetFlag(FLAGS_o);
    o.kind = *kind;
    o.config = absl::GetFlag(FLAGS_config);
    o.threads = absl::GetFlag(FLAGS_threads);
    status = coppelius::RunExport(o, out);
  } else {
    coppelius::InspectOptions o;
    o.path = rest[0];
    o.kind = *kind;
    o.config = absl::GetFlag(FLAGS_config);
    o.source = absl::GetFlag(FLAGS_source);
    o.vocab = absl::GetFlag(FLAGS_vocab);
    o.json = absl::GetFlag(FLAGS_json);
    o.smoothing_steps = absl::GetFlag(FLAGS_smoothing);
    o.threads = absl::GetFlag(FLAGS_threads);
    status = coppelius::RunInspect(o, out);
  }
  out.flush();
  const absl::Status written = coppelius::StreamStatus(out, stdout_use);
  if (written.ok() && status.ok()) {
    // A deferred write error of the report surfaces at the close.
    const absl::Status closed = coppelius::CloseStandardOutput();
    return closed.ok() ? 0 : Fail(closed);
  }
  if (written.ok()) return Fail(status);
  if (status.ok()) return Fail(written);
  // Verify, plot and export return the failed write themselves.
  if (!out.status().ok() &&
      absl::EndsWith(status.message(), out.status().message())) {
    return Fail(status);
  }
  // The file's own failure, and that the report, which said more, was lost.
  return Fail(coppelius::WithMessage(
      status, absl::StrCat(status.message(), "; the report was not written: ",
                           out.status().ok() ? absl::string_view("failed")
                                             : out.status().message())));
}
