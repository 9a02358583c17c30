// train: one invocation of the Coppelius run (SPEC §5). See trainer/run.h.
//
//   train --config=coppelius --tokens=CACHE --checkpoint-in=IN
//         --checkpoint-out=OUT --result=RESULT [--backend=cuda|reference]
//         [--checkpoint-history=DIR] [--overwrite]
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "common/file_io.h"
#include "common/status_line.h"
#include "common/status_macros.h"
#include "trainer/backends.h"
#include "trainer/cuda_backend.h"
#include "trainer/run.h"

ABSL_FLAG(std::string, config, "coppelius", "model config: coppelius or tiny");
ABSL_FLAG(std::string, tokens, "", "token cache (make-cache output)");
ABSL_FLAG(std::string, checkpoint_in, "",
          "input checkpoint: a 0-byte file starts fresh; must exist (also "
          "--checkpoint-in)");
ABSL_FLAG(std::string, checkpoint_out, "",
          "checkpoint path, published atomically every interval (also "
          "--checkpoint-out)");
ABSL_FLAG(std::string, result, "", "result file (SPEC §7)");
ABSL_FLAG(std::string, backend, "cuda",
          "cuda (the production GPU backend) or reference (CPU, for checks)");
ABSL_FLAG(std::string, checkpoint_history, "",
          "also keep every publication as DIR/update-NNNNNNNN.ckpt (hard "
          "links; also --checkpoint-history)");
ABSL_FLAG(bool, overwrite, false,
          "allow replacing another run's existing checkpoint-out, history "
          "entries and result (never a file of another kind; not the input)");
ABSL_FLAG(bool, progress, true, "progress lines on stderr");
ABSL_FLAG(int, threads, 0, "host threads for initialization and digests (0 = all cores, at most 1024)");
ABSL_FLAG(int, crash_after_publications, 0,
          "testing only: SIGKILL the process after the Nth publication "
          "(0: never)");

int main(int argc, char** argv) {
  // Before any CUDA call (cuda_backend.h).
  coppelius::RequestCudaWorkQueues();
  coppelius::ProtectStandardStreams();
  // SIGINT, SIGTERM, SIGHUP: the publisher's temporary removed, then the
  // process ends by the signal (common/file_io.h).
  coppelius::InstallInterruptCleanup();
  coppelius::ExitOnOutOfMemory("train");
  coppelius::ReportShrunkMappings("train");
  absl::SetProgramUsageMessage(
      "train --config=coppelius --tokens=CACHE --checkpoint-in=IN "
      "--checkpoint-out=OUT --result=RESULT [--backend=cuda|reference] "
      "[--checkpoint-history=DIR] [--overwrite] [--threads=N] "
      "[--progress=false]\n"
      "One invocation: config.run_steps AdamW steps from the input "
      "checkpoint's update count (a 0-byte input starts fresh), publishing "
      "the checkpoint every interval.");
  coppelius::NormalizedCommandLine command_line(argc, argv);
  // Unknown flags and unparsable values: usage errors (exit 2), as ours.
  absl::StatusOr<coppelius::ParsedFlags> parsed =
      coppelius::ParseFlags("train", command_line);
  if (!parsed.ok()) {
    std::cerr << coppelius::StatusLine("train", parsed.status()) << std::endl;
    return coppelius::ExitCodeOf(parsed.status());
  }
  if (parsed->usage_answered) return 0;  // usage on stdout
  const std::vector<char*>& rest = parsed->args;
  if (rest.size() > 1) {
    const absl::Status status = coppelius::UsageError(
        absl::StrCat("unexpected argument ", rest[1],
                     " (train takes flags only; see --help)"));
    std::cerr << coppelius::StatusLine("train", status) << std::endl;
    return coppelius::ExitCodeOf(status);
  }
  coppelius::TrainOptions options;
  options.config = absl::GetFlag(FLAGS_config);
  options.tokens_path = absl::GetFlag(FLAGS_tokens);
  options.checkpoint_in = absl::GetFlag(FLAGS_checkpoint_in);
  options.checkpoint_out = absl::GetFlag(FLAGS_checkpoint_out);
  options.result_path = absl::GetFlag(FLAGS_result);
  options.backend = absl::GetFlag(FLAGS_backend);
  options.checkpoint_history_dir = absl::GetFlag(FLAGS_checkpoint_history);
  options.overwrite = absl::GetFlag(FLAGS_overwrite);
  options.progress = absl::GetFlag(FLAGS_progress);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.crash_after_publications = absl::GetFlag(FLAGS_crash_after_publications);
  absl::Status status =
      coppelius::RunTrain(options, coppelius::MakeBackend, std::cerr);
  if (!status.ok()) {
    std::cerr << coppelius::StatusLine("train", status) << std::endl;
    return coppelius::ExitCodeOf(status);
  }
  return 0;
}
