// Checkpoint envelope throughput on the Coppelius payload (692,465,664
// bytes, 4 MiB chunks): chunk digesting from memory, Open + VerifyPayload of
// a published file (page cache), ReadPayload, and a full publication
// (write, fsync, rename, directory fsync) to a local temporary directory.
//
//   bazel run -c opt //checkpoint:checkpoint_benchmark
//
// Set CHECKPOINT_BENCHMARK_DIR to publish somewhere other than $TMPDIR/tmp.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "checkpoint/envelope.h"
#include "checkpoint/identity.h"
#include "checkpoint/publisher.h"
#include "checkpoint/reader.h"
#include "checkpoint/sha256.h"
#include "checkpoint/test_util.h"

namespace coppelius {
namespace {

constexpr uint64_t kPayloadBytes = 692465664;

const std::vector<float>& Payload() {
  static const auto* payload = new std::vector<float>(
      checkpoint_testing::TestPayload(kPayloadBytes / 12, 1));
  return *payload;
}

const std::string& Dir() {
  static const std::string* dir = [] {
    const char* env = std::getenv("CHECKPOINT_BENCHMARK_DIR");
    if (env != nullptr) return new std::string(env);
    return new std::string(checkpoint_testing::NewTempDir());
  }();
  return *dir;
}

// A published Coppelius-sized checkpoint (created once).
const std::string& PublishedPath() {
  static const std::string* path = [] {
    auto* p = new std::string(Dir() + "/bench.ckpt");
    const absl::Status s = PublishCheckpoint(*p, CoppeliusIdentity(), 1000,
                                             Payload().data(), kPayloadBytes,
                                             {});
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      std::abort();
    }
    return p;
  }();
  return *path;
}

void BM_ChunkDigests(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const std::vector<float>& payload = Payload();
  for (auto _ : state) {
    benchmark::DoNotOptimize(ChunkDigests(payload.data(), kPayloadBytes,
                                          kCoppeliusChunkBytes, threads));
  }
  state.SetBytesProcessed(state.iterations() * kPayloadBytes);
}
BENCHMARK(BM_ChunkDigests)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)
    ->UseRealTime()->MinTime(3);

void BM_OpenAndVerify(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const std::string& path = PublishedPath();
  for (auto _ : state) {
    absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(path);
    if (!r.ok() || !r->VerifyPayload(threads).ok()) {
      state.SkipWithError("verify failed");
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * kPayloadBytes);
}
BENCHMARK(BM_OpenAndVerify)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)
    ->UseRealTime()->MinTime(3);

void BM_ReadPayload(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  absl::StatusOr<CheckpointReader> r =
      CheckpointReader::Open(PublishedPath());
  std::vector<char> dst(kPayloadBytes);
  for (auto _ : state) {
    if (!r.ok() || !r->ReadPayload(dst.data(), dst.size(), threads).ok()) {
      state.SkipWithError("read failed");
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * kPayloadBytes);
}
BENCHMARK(BM_ReadPayload)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)
    ->UseRealTime()->MinTime(3);

void BM_Publish(benchmark::State& state) {
  const std::string path = Dir() + "/publish.ckpt";
  PublishOptions options;
  options.threads = static_cast<int>(state.range(0));
  // Seconds from the start of a publication to each stage, summed.
  std::chrono::steady_clock::time_point start;
  double written = 0, synced = 0;
  options.stage_hook = [&](PublishStage s) {
    const double t = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    if (s == PublishStage::kPrefixWritten) written += t;
    if (s == PublishStage::kSynced) synced += t;
  };
  uint64_t update = 0;
  for (auto _ : state) {
    start = std::chrono::steady_clock::now();
    const absl::Status s =
        PublishCheckpoint(path, CoppeliusIdentity(), ++update,
                          Payload().data(), kPayloadBytes, options);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * kPayloadBytes);
  state.counters["written_s"] = written / state.iterations();
  state.counters["synced_s"] = synced / state.iterations();
  unlink(path.c_str());
}
BENCHMARK(BM_Publish)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()
    ->Iterations(4);

}  // namespace
}  // namespace coppelius
