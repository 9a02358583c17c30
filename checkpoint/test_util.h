// File: checkpoint/test_util.h
//
// Fixtures for the checkpoint tests and benchmark (testonly).
#ifndef COPPELIUS_CHECKPOINT_TEST_UTIL_H_
#define COPPELIUS_CHECKPOINT_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/envelope.h"

namespace coppelius {
namespace checkpoint_testing {

// A new empty directory under $TEST_TMPDIR (or /tmp), unique per call.
std::string NewTempDir();

// 3 * parameters pseudo-random floats (a P/M/V image), deterministic in
// `seed` (a 64-bit LCG; not a model initialization).
std::vector<float> TestPayload(uint64_t parameters, uint64_t seed);

// A test identity: Coppelius-like strings (model identity "test-model"),
// the given payload and chunk size, 7 run steps.
CheckpointIdentity TestIdentity(uint64_t payload_bytes, uint64_t chunk_bytes);

// Names of the entries of `dir` (without "." and ".."), sorted.
std::vector<std::string> ListDir(const std::string& dir);

// Overwrites (or creates) `path` with `bytes` (no atomicity).
void WriteBytes(const std::string& path, const std::string& bytes);

}  // namespace checkpoint_testing
}  // namespace coppelius

#endif  // COPPELIUS_CHECKPOINT_TEST_UTIL_H_
