// File: trainer/run.h
//
// The run (SPEC §5), shared by every backend: one invocation takes the
// config's `run_steps` AdamW steps; step s trains on context c0 + s of the
// token cache, where c0 is the update count carried in band by the input
// checkpoint (0 for a 0-byte input, which selects fresh initialization,
// trainer/initialization.h). After every `checkpoint_interval` steps the
// P/M/V image is published atomically (checkpoint/publisher.h) on a host
// thread, overlapping the next steps; the run ends only after the last
// publication is durable. The result file (trainer/result_file.h, SPEC §7)
// receives the forward record before the first step, each step's per-row
// cross-entropy as it completes, and the tail at the end.
//
// Everything that can be checked is checked before any work or output:
// the config, the token cache (size, c0 + steps contexts available, every
// used id < V), the input checkpoint (missing path = NotFound; envelope
// identity equal to the run's, field by field; every chunk digest), and the
// outputs (an existing non-empty --checkpoint-out that is not the input
// file, or an existing non-empty result file, is refused unless
// `overwrite` and it holds another run's checkpoint or result file; any
// other file, or one that cannot be read, is refused whatever the flags;
// replaced, both are new files renamed over the old, which is never
// written: its hard links keep their bytes). Loss is telemetry: non-finite
// losses are counted in the result's error notifier, never a reason to
// stop; a run that had any returns DataLoss once it has completed and
// published everything.
#ifndef COPPELIUS_TRAINER_RUN_H_
#define COPPELIUS_TRAINER_RUN_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/backend.h"
#include "trainer/model_config.h"

namespace coppelius {

struct TrainOptions {
  std::string config = "coppelius";  // ModelConfigByName
  std::string tokens_path;           // token cache (tokencache/token_cache.h)
  std::string checkpoint_in;         // 0-byte file = fresh; must exist
  std::string checkpoint_out;        // published every interval
  std::string result_path;           // SPEC §7 result file
  std::string backend = "cuda";      // "cuda" or "reference" (never implicit)
  std::string checkpoint_history_dir;  // optional: DIR/update-NNNNNNNN.ckpt
  bool overwrite = false;  // allow replacing another run's outputs
  bool progress = true;    // progress lines on the progress stream
  int threads = 0;         // host threads (init, digests); 0 = all cores
  // Testing hook: SIGKILL this process right after the Nth publication of
  // the run is durable (0 = off). Used by the fresh-process resume test.
  int crash_after_publications = 0;
};

// Makes the backend `name` for `config`; FailedPrecondition when it cannot
// run here (e.g. no CUDA device), InvalidArgument for an unknown name.
using BackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<Backend>>(
        const std::string& name, const ModelConfig& config)>;

// Runs one invocation. Progress lines (step, loss, tokens/s, ETA) go to
// `progress`. Errors: InvalidArgument (flags, config), NotFound (missing
// input), DataLoss (corrupt cache or checkpoint), FailedPrecondition
// (identity mismatch, too few contexts, id out of range, outputs that would
// clobber another run, no device), and whatever the backend or the
// publisher returns. After an error nothing already published is damaged.
absl::Status RunTrain(const TrainOptions& options,
                      const BackendFactory& backend_factory,
                      std::ostream& progress);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_RUN_H_
