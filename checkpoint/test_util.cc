#include "checkpoint/test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "checkpoint/identity.h"

namespace coppelius {
namespace checkpoint_testing {

std::string NewTempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(base != nullptr ? base : "/tmp", "/ckpt_test.XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  return pattern;
}

std::vector<float> TestPayload(uint64_t parameters, uint64_t seed) {
  std::vector<float> out(3 * parameters);
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (float& f : out) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = static_cast<float>(static_cast<int64_t>(x >> 11) % 2000001 - 1000000) *
        1e-6f;
  }
  return out;
}

CheckpointIdentity TestIdentity(uint64_t payload_bytes, uint64_t chunk_bytes) {
  CheckpointIdentity id;
  id.state = StateIdentity(payload_bytes);
  id.learner = LearnerIdentity(CoppeliusLearnerFractions());
  id.data = DataIdentity(256, 16, 16, 4);
  id.initialization = InitializationIdentity(20260925);
  id.model = "test-model";
  id.payload_bytes = payload_bytes;
  id.chunk_bytes = chunk_bytes;
  id.run_steps = 7;
  return id;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (struct dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      names.push_back(e->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) !=
                          bytes.size() ||
      std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

}  // namespace checkpoint_testing
}  // namespace coppelius
