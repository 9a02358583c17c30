// reference_dump: runs the CPU reference for K steps and dumps losses, the
// first step's gradients and the final P/M/V for the PyTorch oracle
// (tools/oracle/torch_oracle.py). See trainer/reference_dump.h.
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "trainer/reference_dump.h"

ABSL_FLAG(std::string, config, "tiny", "model config: tiny or coppelius");
ABSL_FLAG(std::string, cache, "", "token cache (16-byte header + u32 ids)");
ABSL_FLAG(std::string, pmv, "", "raw P/M/V fp32 file; empty: fresh init");
ABSL_FLAG(uint64_t, first_context, 0, "context of step 0");
ABSL_FLAG(uint64_t, update_count, 0, "AdamW updates already taken (t0)");
ABSL_FLAG(int64_t, steps, 1, "steps K");
ABSL_FLAG(bool, bf16, true, "round matrix-product operands to bf16");
ABSL_FLAG(int, threads, 0, "worker threads (0: all cores)");
ABSL_FLAG(std::string, out_dir, ".", "existing output directory");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "reference_dump --cache=C.tok [--config=tiny] [--steps=K] --out_dir=D");
  absl::ParseCommandLine(argc, argv);
  coppelius::ReferenceDumpOptions options;
  options.config = absl::GetFlag(FLAGS_config);
  options.cache_path = absl::GetFlag(FLAGS_cache);
  options.pmv_path = absl::GetFlag(FLAGS_pmv);
  options.first_context = absl::GetFlag(FLAGS_first_context);
  options.update_count = absl::GetFlag(FLAGS_update_count);
  options.steps = absl::GetFlag(FLAGS_steps);
  options.bf16_matmul_operands = absl::GetFlag(FLAGS_bf16);
  options.num_threads = absl::GetFlag(FLAGS_threads);
  options.out_dir = absl::GetFlag(FLAGS_out_dir);
  const absl::Status status = coppelius::RunReferenceDump(options);
  if (!status.ok()) {
    std::cerr << "reference_dump: " << status << "\n";
    return 1;
  }
  return 0;
}
