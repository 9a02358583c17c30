// File: trainer/reference_dump.h
//
// Runs the reference backend's computation (trainer/reference_backend.h) for
// K steps on contexts of a token cache and dumps what the PyTorch oracle
// (tools/oracle/torch_oracle.py) compares. Test tooling, not part of the
// product's run.
//
// Output directory contents (all little-endian IEEE binary32, no header):
//   initial_pmv.f32   3·N floats: the P/M/V image the run started from
//                     (the input file's, or the fresh initialization)
//   losses.f32        K·T floats: row r of step s at [s·T + r] (the forward
//                     before step s's update)
//   gradients_step0.f32  N floats: the gradient of step 0's mean loss
//   final_pmv.f32     3·N floats: P/M/V after the K updates
//   manifest.txt      "key=value" lines: config, V, T, C, L, NH, HS, hidden,
//                     num_parameters, steps, first_context, update_count,
//                     bf16_matmul_operands, seconds_per_step
// N = NumParameters(config), T = config.T. Step s trains on context
// first_context + s with AdamW update number update_count + s + 1.
#ifndef COPPELIUS_TRAINER_REFERENCE_DUMP_H_
#define COPPELIUS_TRAINER_REFERENCE_DUMP_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace coppelius {

struct ReferenceDumpOptions {
  std::string config = "tiny";  // ModelConfigByName
  std::string cache_path;       // token cache (SPEC §2)
  // Raw P/M/V file (3·N fp32, no header); empty: fresh initialization.
  std::string pmv_path;
  uint64_t first_context = 0;
  uint64_t update_count = 0;    // t0: step s uses update number t0 + s + 1
  int64_t steps = 1;            // K >= 1
  bool bf16_matmul_operands = true;
  int num_threads = 0;          // 0: hardware concurrency
  std::string out_dir;          // must exist
};

// Errors: InvalidArgument (unknown config, K < 1, too few contexts in the
// cache, wrong P/M/V file size, an id >= V), NotFound / DataLoss from
// reading, Internal from writing; each names the file.
absl::Status RunReferenceDump(const ReferenceDumpOptions& options);

}  // namespace coppelius

#endif  // COPPELIUS_TRAINER_REFERENCE_DUMP_H_
